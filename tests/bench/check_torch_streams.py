"""torch_streams.py's count from a made-up profiler trace (no torch or GPU
needed): GPU work is counted per stream and per kind, everything else is
left out.

    python3 check_torch_streams.py TORCH_STREAMS_PY

Exit 0 when every check held; each failed check prints a line.
"""
import importlib.util
import json
import os
import sys
import tempfile

from checks import expect, finish  # beside this file


def main() -> int:
    spec = importlib.util.spec_from_file_location("torch_streams", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    events = ([{"cat": "kernel", "args": {"stream": 7}}] * 5 + [{"cat": "kernel", "args": {"stream": 13}}] * 2 +
              [{"cat": "gpu_memcpy", "args": {"stream": 7}}, {"cat": "gpu_memset", "args": {"stream": 13}},
               {"cat": "cpu_op", "args": {"stream": 7}},  # host-side: not GPU work
               {"cat": "kernel", "args": {}},  # no stream: left out
               {"cat": "cuda_runtime", "args": {"stream": 7}}])
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        counts = module.count_by_stream(path)
    expect(set(counts) == {7, 13}, f"streams 7 and 13, got {sorted(counts)}")
    expect(dict(counts.get(7, {})) == {"kernels": 5, "copies": 1}, f"stream 7: {dict(counts.get(7, {}))}")
    expect(dict(counts.get(13, {})) == {"kernels": 2, "sets": 1}, f"stream 13: {dict(counts.get(13, {}))}")
    return finish("check_torch_streams")


if __name__ == "__main__":
    sys.exit(main())
