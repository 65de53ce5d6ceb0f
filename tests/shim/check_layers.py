#!/usr/bin/env python3
"""Checks that the code's layers only reach down (docs/design.md, "Layout").

shim/ is in folders by layer, top to bottom: abi, core, state, cuda, support.
A file includes headers of its own folder and of the folders below it, always
as "folder/name.hpp"; no source file lies in shim/ itself. Across the
project, config/ includes nothing of resource/ or shim/, and resource/
nothing of shim/.
usage: check_layers.py <source root>
       check_layers.py --self-test   (shows that an upward include fails)
"""
import pathlib
import re
import sys

LAYERS = ["abi", "core", "state", "cuda", "support"]  # top to bottom
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCES = {".cpp", ".hpp", ".def", ".in"}


def includes(path):
    return INCLUDE.findall(path.read_text(encoding="utf-8"))


def main(root):
    root = pathlib.Path(root)
    problems = []
    shim = root / "shim"
    for path in sorted(p for p in shim.rglob("*") if p.is_file() and p.suffix in SOURCES):
        relative = path.relative_to(shim)
        if len(relative.parts) != 2 or relative.parts[0] not in LAYERS:
            problems.append(f"shim/{relative}: not in one of the layer folders {', '.join(LAYERS)}")
            continue
        level = LAYERS.index(relative.parts[0])
        for header in includes(path):
            folder = header.split("/")[0]
            if folder not in LAYERS:
                problems.append(f'shim/{relative}: includes "{header}", which names no layer folder')
            elif LAYERS.index(folder) < level:
                problems.append(f'shim/{relative}: includes "{header}", which is above {relative.parts[0]}/')
    for lower, upper in (("config", ("resource", "shim")), ("resource", ("shim",))):
        for path in sorted(p for p in (root / lower).rglob("*") if p.suffix in SOURCES):
            for header in includes(path):
                if header.split("/")[0] in upper or any(f"/{u}/" in header for u in upper):
                    problems.append(f'{path.relative_to(root)}: includes "{header}" from a layer above {lower}/')
    for problem in problems:
        print(f"FAIL: {problem}")
    checked = sum(1 for p in shim.rglob("*") if p.is_file() and p.suffix in SOURCES)
    if problems:
        return 1
    print(f"layers: OK ({checked} files in shim/, each including only its own layer and those below)")
    return 0


def self_test():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for folder in ("shim/state", "shim/core", "config", "resource"):
            (root / folder).mkdir(parents=True)
        (root / "shim/core/a.hpp").write_text('#include "state/b.hpp"\n')
        (root / "shim/state/b.hpp").write_text("// nothing\n")
        if main(root) != 0:
            print("self-test: a downward include was refused")
            return 1
        (root / "shim/state/b.hpp").write_text('#include "core/a.hpp"\n')
        if main(root) == 0:
            print("self-test: an upward include was not found")
            return 1
    print("self-test: OK (an upward include fails the check)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
