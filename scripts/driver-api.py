#!/usr/bin/env python3
"""What the CUDA toolkit's headers say about the driver API, for the shim's
followed submissions (docs/design.md#followed-submissions).

  scripts/driver-api.py rows  [INCLUDE_DIR]   the api_table.def rows of the
                                             functions that put work on a stream
  scripts/driver-api.py names [INCLUDE_DIR]   shim/cuda/driver_names.inc
  scripts/driver-api.py check [INCLUDE_DIR] [REPO]
                                             whether the table and the name
                                             list match the headers (exit 1 if not)

INCLUDE_DIR defaults to /usr/local/cuda/include. Every driver function with a
CUstream parameter is taken to put work on that stream unless it is in
NOT_SUBMISSIONS below, with the reason it cannot touch a block of the pool: a
new such function in a newer cuda.h is followed, or named here, before the
check passes.
"""
import pathlib
import re
import sys

# Functions with a CUstream parameter whose work on it cannot touch a block
# of the pool, so a free need not wait for them.
NOT_SUBMISSIONS = {
    # Stream management and queries: no work on the stream.
    "cuStreamGetPriority": "a query",
    "cuStreamGetId": "a query",
    "cuStreamGetFlags": "a query",
    "cuStreamGetDevice": "a query",
    "cuStreamGetCtx": "a query",
    "cuStreamGetCtx_v2": "a query",
    "cuStreamGetGreenCtx": "a query",
    "cuStreamGetDevResource": "a query",
    "cuStreamQuery": "a query",
    "cuStreamSynchronize": "waits on the host",
    "cuStreamDestroy": "followed as a destruction",
    "cuStreamCopyAttributes": "attributes",
    "cuStreamGetAttribute": "attributes",
    "cuStreamSetAttribute": "attributes",
    # Ordering between streams: they order work, they run none.
    "cuStreamWaitEvent": "an ordering, no work",
    "cuEventRecord": "an ordering, no work",
    "cuEventRecordWithFlags": "an ordering, no work",
    # Capture: followed as captures; the captured work runs when its graph
    # is launched, and the launch is followed.
    "cuStreamBeginCapture": "followed as a capture",
    "cuStreamBeginCaptureToGraph": "followed as a capture",
    "cuStreamEndCapture": "followed as a capture",
    "cuStreamIsCapturing": "a query",
    "cuStreamGetCaptureInfo": "a query",
    "cuStreamUpdateCaptureDependencies": "edits a capture's graph",
    # Stream-ordered allocation from the program's own pools.
    "cuMemAllocAsync": "allocates, touches no memory",
    "cuMemAllocFromPoolAsync": "allocates, touches no memory",
    "cuMemFreeAsync": "frees, touches no memory",
    # Mappings of memory that is not the pool's.
    "cuGraphicsMapResources": "graphics resources",
    "cuGraphicsUnmapResources": "graphics resources",
    "cuMemMapArrayAsync": "sparse arrays",
}

INCLUDE = pathlib.Path("/usr/local/cuda/include")
DECLARATION = re.compile(r"CUresult\s+CUDAAPI\s+(cu\w+)\s*\(([^;{]*?)\)\s*;", re.S)
TYPEDEF = re.compile(r"typedef\s+CUresult\s+\(CUDAAPI\s+\*PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\)\s*\(([^;]*?)\)\s*;", re.S)
MACRO = re.compile(r"^\s*#\s*define\s+(cu\w+)\s+(?:__CUDA_API_(PTSZ|PTDS)\((cu\w+)\)|(cu\w+))\s*$", re.M)
# Headers whose function names a runtime may look up (the interop ones are
# read as text: they need graphics headers to compile).
NAME_HEADERS = ["cuda.h", "cudaProfiler.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def cuda_version(include):
    found = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", (include / "cuda.h").read_text())
    return int(found.group(1))


def parameters(text):
    """[(type, name)] of a parameter list."""
    text = " ".join(text.split())
    if text in ("", "void"):
        return []
    result = []
    for p in text.split(","):
        p = p.strip()
        name = re.search(r"(\w+)\s*(\[\s*\])?$", p).group(1)
        result.append((p[: p.rfind(name)].strip(), name))
    return result


def current_macros(text):
    """cuda.h's name -> (ABI symbol, whether it has a _ptsz twin)."""
    macros = {}
    for name, kind, wrapped, plain in MACRO.findall(text):
        if kind:
            macros.setdefault(name, (wrapped, kind == "PTSZ"))
        elif not plain.startswith("__"):
            macros.setdefault(name, (plain, False))
    return macros


def internal_section(text):
    """(start, end) of the last `#if defined(__CUDA_API_VERSION_INTERNAL)`
    block (the old ABIs), to its matching #endif; (len, len) if none."""
    starts = [m.start() for m in re.finditer(r"#if defined\(__CUDA_API_VERSION_INTERNAL\)\s*\n", text)]
    if not starts:
        return len(text), len(text)
    depth = 0
    for m in re.finditer(r"^\s*#\s*(if|ifdef|ifndef|endif)\b", text[starts[-1]:], flags=re.M):
        depth += -1 if m.group(1) == "endif" else 1
        if depth == 0:
            return starts[-1], starts[-1] + m.end()
    return starts[-1], len(text)


def submissions(include):
    """The functions that put work on a stream, one row per ABI a lookup can
    find (each version cudaTypedefs.h types outside its internal section, in
    its legacy and its _ptsz form): dicts with the row's lookups kind, ABI
    version, exported symbol, lookup name, PFN type, parameters and the
    stream parameter's name (None where a structure holds it)."""
    text = strip_comments((include / "cuda.h").read_text())
    # Only the current declarations (the internal section declares old ABIs).
    start, end = internal_section(text)
    current = text[:start] + text[end:]
    macros = current_macros(text)
    typedef_text = strip_comments((include / "cudaTypedefs.h").read_text())
    internal_start, internal_end = internal_section(typedef_text)
    typedefs = {}
    for m in TYPEDEF.finditer(typedef_text):
        base, version, suffix, params = m.groups()
        public = not internal_start <= m.start() < internal_end
        typedefs.setdefault((base, suffix or ""), []).append((int(version), params, public))
    rows = []
    for name, params in DECLARATION.findall(current):
        params = parameters(params)
        has_stream = any(t == "CUstream" for t, _ in params)
        in_structure = name in ("cuLaunchKernelEx", "cuLaunchCooperativeKernelMultiDevice")
        if (not has_stream and not in_structure) or name in NOT_SUBMISSIONS:
            continue
        symbol, has_ptsz = macros.get(name, (name, False))
        base = re.sub(r"_v\d+$", "", symbol)
        # The ABIs in order, oldest first: base, base_v2, base_v3, ... (the
        # last is the current one, cuda.h's macro says which).
        legacy = sorted(typedefs.get((base, ""), []))
        if not legacy:
            raise SystemExit(f"driver-api.py: no PFN_{base}_v* in cudaTypedefs.h for {name}")
        symbols = [base] + [f"{base}_v{i}" for i in range(2, len(legacy) + 1)]
        if symbols[-1] != symbol:  # numbered otherwise: only the current ABI is known
            legacy, symbols = legacy[-1:], [symbol]
        forms = [(symbols[i], legacy[i], "") for i in range(len(legacy))]
        if has_ptsz:
            ptsz = sorted(typedefs.get((base, "_ptsz"), []))
            if not ptsz:
                raise SystemExit(f"driver-api.py: no PFN_{base}_v*_ptsz in cudaTypedefs.h for {name}")
            # The newest per-thread ABI is the newest legacy one's twin, and so on back.
            forms += [(symbols[len(symbols) - len(ptsz) + i] + "_ptsz", ptsz[i], "_ptsz") for i in range(len(ptsz))]
        if not any(public for _, (_, _, public), _ in forms):
            raise SystemExit(f"driver-api.py: {name} puts work on a stream but has no public ABI in cudaTypedefs.h")
        for form_symbol, (version, typedef_params, public), suffix in forms:
            if not public:
                continue  # an internal ABI (CUDA 2's 32-bit sizes): no runtime this shim serves asks for it
            typed = parameters(typedef_params)
            stream = [n for t, n in typed if t == "CUstream"]
            kind = "per_thread_stream" if suffix else "legacy_stream" if has_ptsz else "every_stream"
            rows.append({
                "lookups": kind, "version": version, "symbol": form_symbol, "name": name,
                "pfn": f"PFN_{base}_v{version}{suffix}", "params": typed,
                "stream": stream[0] if stream else None,
            })
    return rows


def field_of(symbol):
    """The table's field for an ABI symbol: cuLaunchKernel_ptsz -> submit_cuLaunchKernel_ptsz."""
    return "submit_" + symbol


def row_lines(rows):
    lines = []
    for r in rows:
        params = "(" + ", ".join(f"{t} {n}" for t, n in r["params"]) + ")"
        args = "(" + ", ".join(n for _, n in r["params"]) + ")"
        lines.append(
            f'ASYNCSHIM_DRIVER_SUBMISSION({r["lookups"]}, {r["version"]}, {field_of(r["symbol"])}, {r["symbol"]}, '
            f'"{r["name"]}", {r["pfn"]}, {r["stream"] or "none"}, {params}, {args})'
        )
    return lines


def macro_symbols(include, rows):
    """The rows' symbols that cuda.h also defines as macros (the older ABIs of
    a function whose name now means its newest): the table hides them while
    its rows are read, or the preprocessor would rename them."""
    defined = set(re.findall(r"^\s*#\s*define\s+(cu\w+)", (include / "cuda.h").read_text(), flags=re.M))
    return sorted({r["symbol"] for r in rows if r["symbol"] in defined})


def table_block(include):
    rows = submissions(include)
    hidden = macro_symbols(include, rows)
    out = ["#if defined(__cplusplus)  // cuda.h's macros for these names would rename the older ABIs' symbols"]
    for name in hidden:
        out += [f'#pragma push_macro("{name}")', f"#undef {name}"]
    out.append("#endif")
    out += row_lines(rows)
    out.append("#if defined(__cplusplus)")
    out += [f'#pragma pop_macro("{name}")' for name in hidden]
    out.append("#endif")
    return out


def all_names(include):
    names = set()
    for header in NAME_HEADERS:
        path = include / header
        if not path.exists():
            continue
        text = strip_comments(path.read_text())
        names.update(n for n, _ in DECLARATION.findall(text))
        for name, _, wrapped, plain in MACRO.findall(text):
            # Both the name and what it stands for (cuGraphInstantiate means
            # cuGraphInstantiateWithFlags, which a runtime looks up by that name).
            names.update(n for n in (name, wrapped, plain) if n)
    # The _vN and _ptsz/_ptds spellings are ABI symbols, not lookup names.
    return sorted(n for n in names if not re.search(r"_(ptsz|ptds)$", n))


def names_file(include):
    names = all_names(include)
    out = [
        "// Generated by scripts/driver-api.py names from the CUDA "
        f"{cuda_version(include) // 1000}.{cuda_version(include) % 1000 // 10} headers: every driver function",
        "// name a runtime may look up (core/lookup_redirect.cpp). A lookup of a name not",
        "// listed here ends followed submissions for the process. Sorted.",
        f"#define ASYNCSHIM_DRIVER_NAMES_CUDA_VERSION {cuda_version(include)}",
    ]
    out += [f'"{n}",' for n in names]
    return "\n".join(out) + "\n"


def table_rows(repo):
    text = (repo / "shim/cuda/api_table.def").read_text()
    found = re.findall(r"^ASYNCSHIM_DRIVER_SUBMISSION\((.*?)\)\)\s*$", text, flags=re.M | re.S)
    return [compact("ASYNCSHIM_DRIVER_SUBMISSION(" + f + "))") for f in found]


def compact(row):
    """A row without its spacing (the formatter's line breaks and pointer spacing)."""
    return "".join(row.split())


def check(include, repo):
    failures = []
    wanted = [compact(line) for line in row_lines(submissions(include))]
    have = table_rows(repo)
    table_text = (repo / "shim/cuda/api_table.def").read_text()
    for name in macro_symbols(include, submissions(include)):
        if f"#undef {name}\n" not in table_text or f'#pragma pop_macro("{name}")' not in table_text:
            failures.append(f"shim/cuda/api_table.def does not hide cuda.h's macro {name} while its rows are read")
    for line in wanted:
        if line not in have:
            failures.append(f"missing from shim/cuda/api_table.def: {line}")
    for line in have:
        if line not in wanted:
            failures.append(f"in shim/cuda/api_table.def but not a submission of these headers: {line}")
    names_path = repo / "shim/cuda/driver_names.inc"
    if names_path.read_text() != names_file(include):
        failures.append(
            f"shim/cuda/driver_names.inc differs from the headers in {include} "
            "(scripts/driver-api.py names > shim/cuda/driver_names.inc)"
        )
    for f in failures:
        print(f)
    rows = len(wanted)
    print(f"{rows} submission rows and {len(all_names(include))} names from {include} (CUDA {cuda_version(include)}): "
          + ("match" if not failures else f"{len(failures)} differences"))
    return 1 if failures else 0


def main(argv):
    if len(argv) < 2 or argv[1] not in ("rows", "names", "check"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    include = pathlib.Path(argv[2]) if len(argv) > 2 else INCLUDE
    if argv[1] == "rows":
        print("\n".join(table_block(include)))
    elif argv[1] == "names":
        sys.stdout.write(names_file(include))
    else:
        repo = pathlib.Path(argv[3]) if len(argv) > 3 else pathlib.Path(__file__).resolve().parent.parent
        return check(include, repo)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
