"""The PEP 517 build backend of `pip install .`: builds libasyncshim.so and
asyncshim-settings with CMake, installs them (stripped) with the launcher
scripts into the package's prefix/ folder, and writes the wheel. Standard
library only, so that pip needs nothing from a package index to build it.

    pip install .                                    # configures and builds in a temporary folder
    pip wheel . --config-settings=build-dir=build    # packages an existing, built tree

The wheel holds no CUDA library (the shim finds the program's at run time),
but the build needs the CUDA headers, as any build of the project does.
"""
import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "asyncshim"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
# What goes from the install tree into the wheel, by its place in the
# package (the install tree's bin/, lib/ and libexec/ may be named otherwise
# there, as lib64/): the preload library, the
# launcher scripts, the settings tool and the event log's replay (whose
# replayer needs the CUDA runtime, libcudart.so.13, only when it runs); not
# the C++ resource, headers or CMake/pkg-config files, which a C++ build takes
# from a system install.
PACKAGED = ("lib/libasyncshim.so", "bin/asyncshim", "bin/asyncshim-ab", "bin/asyncshim-replay",
            "libexec/asyncshim/asyncshim-settings", "libexec/asyncshim/asyncshim-replayer")


def _version():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        found = re.search(r"project\(asyncshim VERSION ([0-9.]+)", f.read())
    if not found:
        raise RuntimeError("the project's version was not found: is this an asyncshim checkout?")
    return found.group(1)


def _run(command):
    print("asyncshim wheel: " + " ".join(command), flush=True)
    subprocess.run(command, check=True)


def _install_tree(build_dir, prefix):
    """Installs build_dir (built already) into prefix; without one, configures
    and builds a fresh tree first."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake is needed to build asyncshim (scripts/install-deps.sh installs it)")
    temporary = None
    if build_dir is None:
        temporary = tempfile.mkdtemp(prefix="asyncshim-wheel-build-")
        build_dir = temporary
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        # The package's own layout (bin/, lib/, libexec/), also where GNUInstallDirs would say lib64/.
        _run([cmake, "-S", SOURCE, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
              "-DASYNCSHIM_BUILD_TESTS=OFF", "-DCMAKE_INSTALL_BINDIR=bin", "-DCMAKE_INSTALL_LIBDIR=lib",
              "-DCMAKE_INSTALL_LIBEXECDIR=libexec"])
    try:
        if temporary is not None:  # a tree of the caller's is used as it is built
            _run([cmake, "--build", build_dir, "--parallel"])
        _run([cmake, "--install", build_dir, "--prefix", prefix, "--strip"])
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _install_dirs(build_dir):
    """Where the install tree of build_dir puts each part (its CMake cache's
    GNUInstallDirs values, which are lib64/... on some systems)."""
    dirs = {"BINDIR": "bin", "LIBDIR": "lib", "LIBEXECDIR": "libexec"}
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                found = re.match(r"CMAKE_INSTALL_(BINDIR|LIBDIR|LIBEXECDIR):\w+=(.*)$", line.strip())
                if found:
                    dirs[found.group(1)] = found.group(2)
    except OSError:
        pass
    return dirs


def _platform_tag():
    return re.sub(r"[^a-zA-Z0-9]", "_", sysconfig.get_platform())


def _metadata(version):
    with open(os.path.join(SOURCE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: Preloadable stream-ordered CUDA allocator: unmodified programs' cudaMalloc/cudaFree "
            "served by a pool\n"
            "License: Apache-2.0\n"
            "Classifier: License :: OSI Approved :: Apache Software License\n"
            "Classifier: Operating System :: POSIX :: Linux\n"
            "Requires-Python: >=3.8\n"
            "Description-Content-Type: text/markdown\n"
            "\n%s" % (NAME, version, readme))


def _dist_info_files(version, tag):
    entry_points = ("[console_scripts]\n"
                    "asyncshim = asyncshim._run:launcher\n"
                    "asyncshim-ab = asyncshim._run:ab\n"
                    "asyncshim-replay = asyncshim._run:replay\n")
    wheel = "Wheel-Version: 1.0\nGenerator: asyncshim build_backend\nRoot-Is-Purelib: false\nTag: %s\n" % tag
    with open(os.path.join(SOURCE, "LICENSE"), encoding="utf-8") as f:
        licence = f.read()
    return {"METADATA": _metadata(version), "WHEEL": wheel, "entry_points.txt": entry_points, "LICENSE": licence}


class _wheel_writer:
    """A zip with a RECORD (each file's sha256 and size), as wheels are."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, name, data, executable=False):
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
        info.create_system = 3  # Unix: pip takes the mode from the entry (a regular file's, with its x bits)
        info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append("%s,sha256=%s,%d" % (name, digest, len(data)))

    def close(self, record_name):
        self.records.append("%s,," % record_name)
        self.zip.writestr(zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0)),
                          "\n".join(self.records) + "\n")
        self.zip.close()


# ---- PEP 517 hooks -------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    tag = "py3-none-" + _platform_tag()
    build_dir = (config_settings or {}).get("build-dir")
    if build_dir is not None:
        build_dir = os.path.abspath(build_dir)
    stage = tempfile.mkdtemp(prefix="asyncshim-wheel-stage-")
    try:
        _install_tree(build_dir, stage)
        dirs = _install_dirs(build_dir) if build_dir is not None else {"BINDIR": "bin", "LIBDIR": "lib",
                                                                        "LIBEXECDIR": "libexec"}
        name = "%s-%s-%s.whl" % (NAME, version, tag)
        writer = _wheel_writer(os.path.join(wheel_directory, name))
        package = os.path.join(HERE, NAME)
        for file in sorted(os.listdir(package)):
            if file.endswith(".py"):
                with open(os.path.join(package, file), "rb") as f:
                    writer.add("%s/%s" % (NAME, file), f.read())
        for relative in PACKAGED:
            top, rest = relative.split("/", 1)
            installed = {"bin": dirs["BINDIR"], "lib": dirs["LIBDIR"], "libexec": dirs["LIBEXECDIR"]}[top]
            path = os.path.join(stage, installed, rest)
            if not os.path.isfile(path):
                raise RuntimeError("the install tree has no %s" % os.path.join(installed, rest))
            with open(path, "rb") as f:
                writer.add("%s/prefix/%s" % (NAME, relative), f.read(), executable=os.access(path, os.X_OK))
        dist_info = "%s-%s.dist-info" % (NAME, version)
        for file, text in _dist_info_files(version, tag).items():
            writer.add("%s/%s" % (dist_info, file), text.encode("utf-8"))
        writer.close("%s/RECORD" % dist_info)
        return name
    finally:
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":  # python3 build_backend.py OUT_DIR [BUILD_DIR]: a wheel without pip
    settings = {"build-dir": sys.argv[2]} if len(sys.argv) > 2 else None
    print(build_wheel(sys.argv[1] if len(sys.argv) > 1 else ".", settings))
