"""Turns what scripts/benchmarks.sh collected into the results page.

    python3 report.py --raw DIR --markdown PERFORMANCE.md --json results.json [--entry RESULTS-entry.md]

DIR holds, per run NAME, NAME.out (standard output: the JSON lines of
alloc_bench and torch_bench, the human lines, or a "SKIP: ..." line) and
NAME.err; runs.tsv (one line per run: name, exit status, seconds, the exact
command) and meta.tsv (key, value: date, GPU, driver, ...). Writes a Markdown
page of this run (targets first, then tables of ratios to the raw pool, then
every figure), one JSON document with everything, and, beside the page
(--entry, by default RESULTS-entry.md in the page's folder), a section ready to
paste into tests/bench/RESULTS.md: the run's date, machine, commit and command,
its before/after comparison with an earlier build (--baseline of
benchmarks.sh) and the runs log (every run's exact command), none of which is
on the page; prints a short summary.

Only the standard library; runs with the Python of any machine.
"""
import argparse
import json
import math
import os
import statistics
import sys

# ---- reading -----------------------------------------------------------------


def read_tsv(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    rows.append(line.rstrip("\n").split("\t"))
    return rows


def read_runs(raw):
    """The runs in order, each with its records and whether it skipped."""
    runs = []
    for row in read_tsv(os.path.join(raw, "runs.tsv")):
        name, status, seconds, command = (row + ["", "", "", ""])[:4]
        run = {"name": name, "exit": int(status) if status.lstrip("-").isdigit() else None,
               "seconds": float(seconds) if seconds else None, "command": command, "skip": None, "records": []}
        out = os.path.join(raw, name + ".out")
        if os.path.exists(out):
            with open(out, errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        try:
                            record = json.loads(line)
                        except ValueError:
                            continue
                        record["run"] = name
                        run["records"].append(record)
                    elif line.startswith("SKIP:") and run["skip"] is None:
                        run["skip"] = line
        # The event log says at exit when it lost records: a run that lost
        # some measured less than logging every event costs.
        run["event_log_warnings"] = []
        err = os.path.join(raw, name + ".err")
        if os.path.exists(err):
            with open(err, errors="replace") as f:
                run["event_log_warnings"] = [line.strip() for line in f if "ASYNCSHIM_EVENT_LOG:" in line]
        runs.append(run)
    return runs


# ---- formatting ----------------------------------------------------------------


def size_text(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def us(ns):
    """Nanoseconds as microseconds: three decimals below 10 µs, one below 100 µs,
    none from 100 µs on."""
    if ns is None:
        return "—"
    v = ns / 1e3
    if v >= 100:
        return f"{v:.0f} µs"
    if v >= 10:
        return f"{v:.1f} µs"
    return f"{v:.3f} µs"


def ratio(value, base):
    if value is None or not base:
        return None
    return value / base


def times(r):
    return "—" if r is None else f"{r:.2f}×"


def rate(v):
    if v is None:
        return "—"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M/s"
    if v >= 1e3:
        return f"{v / 1e3:.1f} k/s"
    return f"{v:.0f} /s"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---- configurations ---------------------------------------------------------------

ORDERINGS = ("device", "stream", "sync")
PATH_TEXT = {"runtime": "cudaMalloc (runtime path)", "static-runtime": "cudaMalloc of a static runtime (driver path)",
             "driver": "cuMemAlloc (driver path)", "pitched": "cudaMallocPitch (runtime path)",
             "pinned": "cudaMallocHost (pinned host memory)"}


# The observing settings a configuration name can carry (alloc_bench's allocator field).
OBSERVING_TEXT = (("leak-report", ", leak report (`ASYNCSHIM_LEAK_REPORT=1`)"),
                  ("stacks", ", 8 frames of each stack (`ASYNCSHIM_LEAK_STACK_DEPTH=8`)"),
                  ("event-log", ", event log (`ASYNCSHIM_EVENT_LOG`)"))
OBSERVING = (("shim:device+leak-report", "leak report"), ("shim:device+leak-report+stacks", "leak report, 8 frames"),
             ("shim:device+event-log", "event log"))
# The event log's cost on a pair, at most (the observing issue's target).
EVENT_LOG_LIMIT = 1.2


def config_name(allocator, path):
    if allocator == "pool":
        return "raw pool " + ("(cudaMallocFromPoolAsync)" if path == "runtime" else "(cuMemAllocFromPoolAsync)")
    if allocator == "native":
        return "native " + {"runtime": "cudaMalloc", "static-runtime": "cudaMalloc (static runtime)",
                            "driver": "cuMemAlloc", "pitched": "cudaMallocPitch",
                            "pinned": "cudaMallocHost"}.get(path, path)
    ordering, *extras = allocator.split(":", 1)[1].split("+")
    streams = " on per-thread streams (`ASYNCSHIM_STREAM=per-thread`)" if "per-thread" in extras else ""
    reuse = ", reuse cache off (`ASYNCSHIM_REUSE_CACHE=0`)" if "no-reuse" in extras else ""
    observing = "".join(text for extra, text in OBSERVING_TEXT if extra in extras)
    return f"shim, {ordering} ordering{streams}{reuse}{observing}, {PATH_TEXT.get(path, path)}"


def baseline_path(path):
    """The raw pool a path is compared with: the runtime path with the runtime's
    pool calls, the driver path with the driver's, pinned memory with a pool in host memory."""
    if path == "pinned":
        return "pinned"
    return "runtime" if path in ("runtime", "pitched") else "driver"


def collect(records, bench, key_fields, value_field, reduce=statistics.median):
    """{(allocator, path, *key): value}; repeated measurements (rounds): their median, or `reduce`."""
    groups = {}
    for r in records:
        if r.get("bench") != bench or value_field not in r:
            continue
        key = (r.get("allocator"), r.get("path")) + tuple(r.get(k) for k in key_fields)
        groups.setdefault(key, []).append(r[value_field])
    return {k: reduce(v) for k, v in groups.items()}


def collect_pairs(records):
    """{(allocator, path, size): ns}: the fastest round of each pair measurement. On the H200 a process's pair
    runs at one of two speeds whatever the allocator, the raw pool's too (tests/bench/RESULTS.md, 2026-12-01):
    the median of a few rounds would compare one configuration's fast process with another's slow one."""
    return collect(records, "pairs", ("size",), "median_ns", reduce=min)


def timed_torch(records):
    """The PyTorch runs made for their step times (not the memory runs, which have other settings)."""
    return [r for r in records if not (r.get("bench") == "torch" and r.get("purpose") == "memory")]


def torch_memory(records, field="reserved_high_water_bytes"):
    """{model: {"caching": bytes, config: bytes}}: PyTorch's caching allocator's max_memory_reserved, and the
    reserved high-water mark of the shim's pool in each uncached run made for it (--purpose memory, no initial
    pool), by configuration ("uncached+shim:device" for the defaults); medians over the runs. With
    field="device_used_bytes": the device's used memory (NVML) in the same runs."""
    found = {}
    for r in records:
        if r.get("bench") != "torch" or r.get(field) is None:
            continue
        if r.get("config") == "caching":
            found.setdefault(r["model"], {}).setdefault("caching", []).append(r[field])
        elif r.get("purpose") == "memory" and r.get("config", "").startswith("uncached+shim:"):
            found.setdefault(r["model"], {}).setdefault(r["config"], []).append(r[field])
    return {model: {k: statistics.median(v) for k, v in m.items()} for model, m in found.items()}


def torch_steps(records):
    """{model: {config: median step in ms over the runs (rounds) of that configuration}}."""
    steps = {}
    for (_, _, model, config), v in collect(timed_torch(records), "torch", ("model", "config"),
                                             "median_step_ms").items():
        steps.setdefault(model, {})[config] = v
    return steps


def pool_value(values, path, *key):
    v = values.get(("pool", baseline_path(path)) + key)
    return v if v is not None else values.get(("pool", "runtime") + key)


# ---- targets --------------------------------------------------------------------


def target(name, measured_text, value, limit, at_most, plus_minus=None):
    """One target: met or missed, and by how much (relative to the limit); with
    `plus_minus` (the measurement's uncertainty), neither while the limit lies
    within value ± plus_minus."""
    if value is None:
        return {"target": name, "measured": "not measured", "value": None, "limit": limit, "met": None,
                "result": "not measured"}
    if plus_minus is not None and value - plus_minus < limit < value + plus_minus:
        return {"target": name, "measured": measured_text, "value": value, "limit": limit, "met": None,
                "result": "not decided: the limit is inside the noise (more runs would decide it)"}
    met = value <= limit if at_most else value >= limit
    margin = abs(value / limit - 1) * 100
    if at_most and value <= 0:
        how = "no cost above the noise"
    elif at_most:
        how = f"{margin:.0f}% under the limit" if met else f"{margin:.0f}% over the limit"
    else:
        how = f"{margin:.0f}% above the limit" if met else f"{margin:.0f}% below the limit"
    return {"target": name, "measured": measured_text, "value": value, "limit": limit, "met": met,
            "result": ("met, " if met else "MISSED, ") + how}


SMALL_SIZES = (256, 4096, 65536)
# The one-free-path issue's goals: a pair at most this times the raw pool's, by
# path (a hit of the reuse cache makes no CUDA call), and 16 threads' pairs/s
# at least this times the raw pool's.
PAIR_LIMIT = {"runtime": 0.8, "static-runtime": 1.0}
THREADS_LIMIT = 1.5
# Within this much, a before/after change is the machine's noise (rounds of one
# run differ by up to about 10%).
NOISE = 1.10


def goal_targets(records, shim="shim:device", who="shim default (device ordering)"):
    """The performance issue's goals for one configuration of the shim (its
    allocator name in the records, e.g. "shim:device" for the defaults)
    against the raw pool and PyTorch's caching allocator."""
    out = []
    pairs = collect_pairs(records)
    for path in ("runtime", "static-runtime"):
        worst = None
        for size in sorted({k[2] for k in pairs if k[1] == path and k[0] == shim}):
            r = ratio(pairs.get((shim, path, size)), pool_value(pairs, path, size))
            if r is not None and (worst is None or r > worst[0]):
                worst = (r, size)
        text = f"worst {worst[0]:.2f}× (at {size_text(worst[1])})" if worst else ""
        limit = PAIR_LIMIT[path]
        out.append(target(f"pair, {who}, {PATH_TEXT[path]}, every size 256 B–256 MiB: "
                          f"≤ {limit:.1f}× the raw pool's pair", text, worst[0] if worst else None, limit, True))

    threads = collect(records, "threads", ("threads",), "pairs_per_s")
    for path in ("runtime", "static-runtime"):
        value, pool = threads.get((shim, path, 16)), pool_value(threads, path, 16)
        r = ratio(value, pool)
        text = f"{r:.2f}× ({rate(value)} vs {rate(pool)})" if r is not None else ""
        out.append(target(f"16 threads, {who}, {PATH_TEXT[path]}: aggregate pairs/s ≥ {THREADS_LIMIT:.1f}× the raw "
                          "pool's", text, r, THREADS_LIMIT, False))

    churn = collect(records, "churn", (), "wall_ns_per_step")
    for path in ("runtime", "static-runtime"):
        value, pool = churn.get((shim, path)), pool_value(churn, path)
        r = ratio(value, pool)
        text = f"{r:.2f}× ({us(value)} vs {us(pool)} a step, wall)" if r is not None else ""
        out.append(target(f"churn, {who}, {PATH_TEXT[path]}: ≤ 1.0× the raw pool's step", text, r, 1.0, True))

    def per_model(values, key, show, name, limit):
        """One target per model: values[model][key] against values[model]["caching"]."""
        for model in ("resnet18", "transformer", "mlp"):
            m = values.get(model, {})
            r = ratio(m.get(key), m.get("caching"))
            text = f"{r:.2f}× ({show(m[key])} vs {show(m['caching'])})" if r is not None else ""
            out.append(target(name(model), text, r, limit, True))

    per_model(torch_memory(records), "uncached+" + shim, lambda v: size_text(int(v)),
              lambda model: f"memory held, PyTorch {model}, uncached, {who}: pool reserved "
                            f"high-water ≤ 1.1× the caching allocator's max_memory_reserved", 1.1)
    per_model(torch_steps(records), "uncached+" + shim, lambda v: f"{v:.2f} ms",
              lambda model: f"PyTorch {model}, uncached, {who}: step ≤ 1.0× PyTorch's caching allocator's", 1.0)
    return out


def reuse_cache_targets(records):
    """The goals with the reuse cache off, where any run had it off: what the cache gives."""
    if not any("+no-reuse" in (r.get("allocator") or r.get("config") or "") for r in records):
        return []
    return goal_targets(records, "shim:device+no-reuse", "reuse cache off (`ASYNCSHIM_REUSE_CACHE=0`)")


def evaluate_targets(records, before=None):
    """The goals of the performance and observing issues, for the shim's defaults."""
    out = goal_targets(records)
    pairs = collect_pairs(records)
    for path in ("runtime", "static-runtime"):
        worst = None
        for size in sorted({k[2] for k in pairs if k[:2] == ("shim:device+event-log", path)}):
            r = ratio(pairs.get(("shim:device+event-log", path, size)), pairs.get(("shim:device", path, size)))
            if r is not None and (worst is None or r > worst[0]):
                worst = (r, size)
        text = f"worst {worst[0]:.2f}× (at {size_text(worst[1])})" if worst else ""
        out.append(target(f"event log (`ASYNCSHIM_EVENT_LOG`), {PATH_TEXT[path]}, 256 B–64 KiB: pair ≤ "
                          f"{EVENT_LOG_LIMIT:.1f}× the shim's default pair without it", text,
                          worst[0] if worst else None, EVENT_LOG_LIMIT, True))

    changes = before_after_changes(before or [], records)
    if changes:
        worst = max(changes, key=lambda c: c[1])
        regression = target(f"no regressions: every before/after measurement ≤ {NOISE:.2f}× the previous commit's "
                            f"(within the noise)", f"worst {worst[1]:.2f}× ({worst[0]})", worst[1], NOISE, True)
        # A comparison with the earlier build: in the RESULTS.md entry, not on the page.
        regression["before_after"] = True
        out.append(regression)

    for r in records:
        if r.get("bench") == "load-time":
            out.append(load_time_target(r))
    return out


def load_time_uncertainty_us(r):
    """Two standard errors of a load-time cost (the difference of two medians),
    from each arm's p10–p90 spread: a normal spread's sigma is (p90 - p10) / 2.56,
    a median's standard error 1.25 sigma / sqrt(runs). None without the fields."""
    try:
        spreads = [r["without_p90_us"] - r["without_p10_us"], r["with_p90_us"] - r["with_p10_us"]]
        runs = r["runs"]
    except KeyError:
        return None
    if runs <= 0:
        return None
    standard_error = 1.25 / 2.56 * math.sqrt(sum(x * x for x in spreads)) / math.sqrt(runs)
    return 2 * standard_error


LOAD_TIME_LIMIT_US = 1000.0


def load_time_target(r):
    """The load-time goal for one program, given or take two standard errors."""
    cost = r["cost_us"]
    plus_minus = load_time_uncertainty_us(r)
    measured = f"{cost:.0f} µs" + (f" ± {plus_minus:.0f} µs" if plus_minus is not None else "")
    return target(f"load-time cost, `{r.get('label') or r.get('program')}` (no CUDA): < 1 ms", measured, cost,
                  LOAD_TIME_LIMIT_US, True, plus_minus)


# ---- the page --------------------------------------------------------------------


def pairs_section(records):
    pairs = collect_pairs(records)
    sizes = sorted({k[2] for k in pairs})
    if not sizes:
        return ["No pair measurements (no GPU, or the runs failed: see the runs log)."]
    lines = []
    views = (
        ("Runtime path (`alloc_bench`, shared runtime): ratio of the median pair to the raw pool's "
         "`cudaMallocFromPoolAsync` + `cudaFreeAsync` pair",
         [("pool", "runtime")] + [(f"shim:{o}", "runtime") for o in ORDERINGS] + [("shim:device+no-reuse", "runtime")]
         + [("native", "runtime")]),
        ("Driver path: ratio to the raw pool's `cuMemAllocFromPoolAsync` + `cuMemFreeAsync` pair. "
         "`static` = `cudaMalloc` of `alloc_bench_static` (nvcc's default static runtime, which reaches the shim as "
         "`cuMemAlloc_v2`); `cuMemAlloc` = the program calls `cuMemAlloc_v2`/`cuMemFree_v2` itself",
         [("pool", "driver")] + [(f"shim:{o}", "static-runtime") for o in ORDERINGS]
         + [("shim:device+no-reuse", "static-runtime")]
         + [(f"shim:{o}", "driver") for o in ORDERINGS] + [("native", "driver")]),
        ("Pitched (`alloc_bench pairs --api pitched`: `cudaMallocPitch` of 4 rows of a quarter of the size, then "
         "`cudaFree`; each block is the size): ratio to the raw pool's `cudaMallocFromPoolAsync` + `cudaFreeAsync` "
         "pair of the same size",
         [("pool", "runtime"), ("shim:device", "pitched"), ("native", "pitched")]),
        ("Pinned host memory (`alloc_bench pairs --api pinned`: `cudaMallocHost` + `cudaFreeHost`; the shim with "
         "`ASYNCSHIM_HOST_POOL=1`, whose `cudaFreeHost` waits for the device as the native one does): ratio to the "
         "raw pool's pair on a pool in host memory (`--api pool-host`: `cudaMallocFromPoolAsync` + `cudaFreeAsync`, "
         "no wait)",
         [("pool", "pinned"), ("shim:device", "pinned"), ("native", "pinned")]),
    )
    for title, configs in views:
        configs = [c for c in configs if any((c + (s,)) in pairs for s in sizes)]
        if not configs:
            continue
        header = ["size"]
        for allocator, path in configs:
            if allocator == "pool":
                header.append("raw pool")
            else:
                who = "native" if allocator == "native" else "shim " + allocator.split(":")[1]
                header.append(who + {"runtime": "", "static-runtime": ", static", "driver": ", cuMemAlloc",
                                     "pitched": ", pitched", "pinned": ", pinned"}[path])
        rows = []
        for size in [s for s in sizes if any(c[0] != "pool" and (c + (s,)) in pairs for c in configs)]:
            row = [size_text(size)]
            for allocator, path in configs:
                v = pairs.get((allocator, path, size))
                if allocator == "pool":
                    row.append(us(v))
                else:
                    r = ratio(v, pool_value(pairs, path, size))
                    row.append(f"**{times(r)}** ({us(v)})" if r is not None else us(v))
            rows.append(row)
        lines += [title + ":", "", table(header, rows), ""]
    return lines


def observing_section(records, runs):
    """What the leak report, its call stacks and the event log cost on a pair, against the shim's default."""
    pairs = collect_pairs(records)
    lines = []
    for path in ("runtime", "static-runtime"):
        configs = [(allocator, text) for allocator, text in OBSERVING
                   if any(k[:2] == (allocator, path) for k in pairs)]
        if not configs:
            continue
        sizes = sorted({k[2] for k in pairs if k[1] == path and k[0] in dict(configs)})
        rows = []
        for size in sizes:
            base = pairs.get(("shim:device", path, size))
            row = [size_text(size), us(base)]
            for allocator, _ in configs:
                v = pairs.get((allocator, path, size))
                r = ratio(v, base)
                row.append(f"**{times(r)}** ({us(v)})" if r is not None else us(v))
            rows.append(row)
        lines += [f"{PATH_TEXT[path][0].upper()}{PATH_TEXT[path][1:]}:", "",
                  table(["size", "shim default (all off)"] + [text for _, text in configs], rows), ""]
    if not lines:
        return ["No observing measurements."]
    lost = [(run["name"], w) for run in runs for w in run.get("event_log_warnings", [])]
    notes = [f"- `{name}`: {w}" for name, w in lost] or ["- Every event-log run wrote every event (no loss reported)."]
    return (["The pair of the shim's default configuration with each observing setting on, against the same pair "
             "with all of them off (the default: one branch each on the hot path). In parentheses the median pair (the "
             "fastest round's, as above). The event log "
             "writes RMM's CSV from a background thread; the leak report keeps one record per live block; with call "
             "stacks it also records 8 return addresses per allocation (named only at exit).", ""]
            + lines + notes)


def median_records(records, key_fields, value_fields):
    """One record per key, each value the median over the records (rounds) with that key."""
    groups = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in key_fields), []).append(r)
    merged = []
    for group in groups.values():
        m = dict(group[0])
        for f in value_fields:
            values = [r[f] for r in group if r.get(f) is not None]
            m[f] = statistics.median(values) if values else None
        m["rounds"] = len(group)
        merged.append(m)
    return merged


def churn_section(records):
    churn = median_records([r for r in records if r.get("bench") == "churn"], ("allocator", "path"),
                           ("median_ns", "p10_ns", "p90_ns", "wall_ns_per_step", "final_sync_us"))
    if not churn:
        return ["No churn measurements."]
    by_config = {(r["allocator"], r["path"]): r for r in churn}
    rows = []
    for r in churn:
        b = pool_value(by_config, r["path"])
        rw = ratio(r["wall_ns_per_step"], b["wall_ns_per_step"]) if b else None
        rm = ratio(r["median_ns"], b["median_ns"]) if b else None
        rows.append([config_name(r["allocator"], r["path"]), us(r["median_ns"]), f"{us(r['p10_ns'])} – {us(r['p90_ns'])}",
                     us(r["wall_ns_per_step"]), f"{r['final_sync_us']:.0f} µs",
                     "—" if r["allocator"] == "pool" else f"**{times(rw)}** / {times(rm)}"])
    first = churn[0]
    return [f"{first['live']} live buffers of 256 B – 1 MiB (log-uniform, the same sequence for every configuration); "
            f"each step frees one, allocates one and launches a one-block kernel writing up to 4 KiB of it, "
            f"alternately on the legacy stream and on a non-blocking stream (the raw pool allocates and frees each "
            f"block on the stream that uses it); {first['steps']} timed steps.", "",
            table(["configuration", "median per step", "p10 – p90", "wall per step (incl. final sync)",
                   "final sync", "ratio to the raw pool: wall / median"], rows)]


def threads_section(records):
    threads = collect(records, "threads", ("threads",), "pairs_per_s")
    counts = sorted({k[2] for k in threads})
    if not counts:
        return ["No multi-thread measurements."]
    configs = []
    for allocator, path, _ in threads:
        if (allocator, path) not in configs:
            configs.append((allocator, path))
    order = {"pool": 0, "shim:device": 1, "shim:device+per-thread": 2, "shim:stream": 3, "shim:sync": 4, "native": 5}
    path_order = {"runtime": 0, "static-runtime": 1, "driver": 2}
    configs.sort(key=lambda c: (order.get(c[0], 9), path_order.get(c[1], 9)))
    size = next((r["size"] for r in records if r.get("bench") == "threads"), 0)
    rows = []
    for allocator, path in configs:
        row = [config_name(allocator, path)]
        for n in counts:
            v = threads.get((allocator, path, n))
            r = ratio(v, pool_value(threads, path, n))
            row.append(rate(v) if allocator == "pool" or r is None else f"{rate(v)} (**{times(r)}**)")
        rows.append(row)
    return [f"Aggregate alloc+free pairs per second of {size_text(size)}; each thread has its own non-blocking "
            f"stream (the raw pool allocates and frees on it; under the shim `cudaMalloc` allocates on the legacy "
            f"stream, or the thread's per-thread stream where named, and the streams never get work, so in device "
            f"ordering the frees go in the legacy stream's order: had one of them been given work since a block "
            f"was handed out, that block's free would be queued and fenced behind every live non-blocking stream). "
            f"In parentheses: the ratio to the raw pool at the same thread count (above 1 = more pairs per second).",
            "", table(["configuration"] + [f"{n} thread{'s' if n > 1 else ''}" for n in counts], rows)]


def load_section(records):
    rows = []
    for r in records:
        if r.get("bench") == "load-time":
            rows.append([f"`{r.get('label') or r['program']}`", f"{r['without_median_us']:.0f} µs "
                         f"({r['without_p10_us']:.0f} – {r['without_p90_us']:.0f})",
                         f"{r['with_median_us']:.0f} µs ({r['with_p10_us']:.0f} – {r['with_p90_us']:.0f})",
                         f"**{r['cost_us']:.0f} µs**", r["runs"]])
    if not rows:
        return ["No load-time measurements."]
    return ["Wall time of a whole process that never uses CUDA (`posix_spawn` to `waitpid`), with and without "
            "`LD_PRELOAD` of the shim, runs alternating; medians (p10 – p90); cost = difference of the medians (a "
            "negative one, or one well inside the p10 – p90 spread, is noise).", "",
            table(["program", "without the shim", "with the shim", "cost", "runs per arm"], rows)]


GROWTH_HEADER = ["configuration", "blocks", "first", "reserved after first", "growing, each", "growing, per GiB",
                 "steady state, each", "trim", "growing again, per GiB"]


def growth_row(r):
    return [r.get("label") or config_name(r["allocator"], r["path"]), f"{size_text(r['size'])} × {r['blocks']}",
            f"**{r['first_us'] / 1e3:.2f} ms**", size_text(r["reserved_after_first"]),
            f"{r['grow_median_us']:.1f} µs", f"{r['grow_us_per_gib'] / 1e3:.2f} ms",
            f"{r['reuse_median_us']:.1f} µs", f"{r['trim_us'] / 1e3:.1f} ms", f"{r['regrow_us_per_gib'] / 1e3:.2f} ms"]


def growth_section(records):
    """This build's growth runs (the earlier build's are in the RESULTS.md entry)."""
    growth = [r for r in records if r.get("bench") == "growth"]
    if not growth:
        return ["No growth measurements."]
    rows = [growth_row(r) for r in growth]
    return ["One process each. *First*: the process's first allocation of the size (the shim makes its pool then; "
            "the context exists already). *Growing*: blocks of that size until the total is live, each allocation "
            "followed by a synchronization, so a pool that must grow pays for it there. *Steady state*: the same "
            "blocks again once the pool holds them. *Trim*: `cuMemPoolTrimTo(pool, 0)` after all are freed, as the "
            "shim's idle release does; *growing again*: what the next burst then pays. Native `cudaMalloc` has no "
            "pool: every phase is its own allocation.", "",
            table(GROWTH_HEADER, rows)]


TORCH_CONFIGS = (("caching", "caching allocator"), ("cudaMallocAsync", "backend:cudaMallocAsync"),
                 ("uncached", "uncached, native"), ("uncached+shim:device", "uncached + shim (device)"),
                 ("uncached+shim:device+no-reuse", "uncached + shim (device, reuse cache off)"),
                 ("uncached+shim:stream", "uncached + shim (stream)"))


def torch_section(records):
    torch = median_records([r for r in timed_torch(records) if r.get("bench") == "torch"], ("model", "config"),
                           ("median_step_ms", "p10_step_ms", "p90_step_ms", "mean_step_ms"))
    if not torch:
        return ["No PyTorch measurements (no torch or no GPU there, or the runs failed: see the runs log)."]
    by_model = {}
    for r in torch:
        by_model.setdefault(r["model"], {})[r["config"]] = r
    shown = [(config, text) for config, text in TORCH_CONFIGS if any(config in c for c in by_model.values())]
    rows = []
    for model, configs in by_model.items():
        base = configs.get("caching")
        row = [next(iter(configs.values()))["description"]]
        for config, _ in shown:
            r = configs.get(config)
            if r is None:
                row.append("—")
            elif config == "caching":
                row.append(f"{r['median_step_ms']:.2f} ms")
            else:
                row.append(f"{r['median_step_ms']:.2f} ms (**{times(ratio(r['median_step_ms'], base and base['median_step_ms']))}**)")
        rows.append(row)
    first = torch[0]
    return [f"Median step time over {first['steps']} steps after {first['warmup']} warm-up steps (each step between "
            f"two `torch.cuda.synchronize()`); torch {first['torch']} (CUDA {first['torch_cuda']}) on "
            f"{first['gpu']}. In parentheses: the ratio to PyTorch's caching allocator. "
            f"\"uncached\" = `PYTORCH_NO_CUDA_MEMORY_CACHING=1` (one `cudaMalloc`/`cudaFree` per tensor); "
            f"`backend:cudaMallocAsync` = `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`.", "",
            table(["model"] + [text for _, text in shown], rows)] + torch_memory_lines(records)


MEMORY_CONFIGS = (("uncached+shim:device", "uncached + shim (defaults)"),
                  ("uncached+shim:device+no-reuse", "uncached + shim, reuse cache off (`ASYNCSHIM_REUSE_CACHE=0`)"))


def torch_memory_steps(records):
    """{model: {config: median step in ms}} of the memory runs (no initial pool), beside what they held."""
    steps = {}
    for r in records:
        if r.get("bench") == "torch" and r.get("purpose") == "memory" and r.get("median_step_ms") is not None:
            steps.setdefault(r["model"], {}).setdefault(r["config"], []).append(r["median_step_ms"])
    return {model: {k: statistics.median(v) for k, v in m.items()} for model, m in steps.items()}


def memory_rows(memory, configs, steps=None):
    """A row per model: the caching allocator's bytes, then each configuration's with its ratio to them."""
    rows = []
    for model, m in memory.items():
        row = [model, size_text(int(m["caching"])) if "caching" in m else "—"]
        for key, _ in configs:
            r = ratio(m.get(key), m.get("caching"))
            cell = (f"{size_text(int(m[key]))} (**{times(r)}**)" if r is not None
                    else size_text(int(m[key])) if key in m else "—")
            step = (steps or {}).get(model, {}).get(key)
            row.append(cell + (f", {step:.2f} ms a step" if step is not None else ""))
        rows.append(row)
    return rows


def torch_memory_lines(records):
    memory = torch_memory(records)
    configs = [(key, text) for key, text in MEMORY_CONFIGS if any(key in m for m in memory.values())]
    rows = memory_rows(memory, configs, torch_memory_steps(records))
    if not rows:
        return []
    lines = ["", "Memory held: PyTorch's caching allocator's `torch.cuda.max_memory_reserved()`, and the reserved "
             "high-water mark of the shim's pool (the reuse cache included) in uncached runs of their own, not timed, "
             "with the shim's default settings (no initial pool) and with the settings each column names. In "
             "parentheses: the ratio to the caching allocator; then the median step of that run (not the "
             "timed runs above: the pool starts empty).", "",
             table(["model", "caching allocator"] + [text for _, text in configs], rows)]
    used = torch_memory(records, "device_used_bytes")
    used_rows = memory_rows(used, configs)
    if used_rows:
        lines += ["", "Device memory used, the same runs: the device's used memory by NVML at its most after a step, "
                  "less what it was once the CUDA context was made — every allocator's memory alike, including what "
                  "PyTorch takes through `cudaMalloc` outside its cache, which `max_memory_reserved()` leaves out.",
                  "", table(["model", "caching allocator"] + [text for _, text in configs], used_rows)]
    return lines


def before_after_pairs(before, records):
    """(what, before, after, unit, lower is better, before's rounds, after's rounds) for each measurement run with
    the earlier build. Each side is its fastest round: a process runs at one of two speeds on the H200 whatever the
    build (collect_pairs), so a median of a few rounds would compare one build's fast processes with the other's slow
    ones and call the difference a change of the code."""
    out = []

    def rounds(records, bench, key_fields, value_field, key, reduce):
        values = collect(records, bench, key_fields, value_field, reduce=list).get(key) or []
        return (reduce(values) if values else None), values

    def row(what, bench, key_fields, value_field, key, unit, lower, pick=lambda rs: rs):
        best = min if lower else max
        old, old_rounds = rounds(pick(before), bench, key_fields, value_field, key, best)
        new, new_rounds = rounds(pick(records), bench, key_fields, value_field, key, best)
        out.append((what, old, new, unit, lower, old_rounds, new_rounds))

    old_pairs = collect_pairs(before)
    for path in ("runtime", "static-runtime"):
        for size in sorted({k[2] for k in old_pairs if k[1] == path}):
            row(f"pair, {PATH_TEXT[path]}, {size_text(size)}", "pairs", ("size",), "median_ns",
                ("shim:device", path, size), us, True)
    row("churn step (wall), cudaMalloc (runtime path)", "churn", (), "wall_ns_per_step", ("shim:device", "runtime"),
        us, True)
    old_threads = collect(before, "threads", ("threads",), "pairs_per_s")
    for n in sorted({k[2] for k in old_threads}):
        row(f"{n} thread{'s' if n > 1 else ''}, pairs/s", "threads", ("threads",), "pairs_per_s",
            ("shim:device", "runtime", n), rate, False)
    step = lambda v: f"{v:.2f} ms"  # noqa: E731
    for model in ("resnet18", "transformer", "mlp"):
        # The baseline's runs are its default configuration: uncached under the shim, device ordering.
        row(f"PyTorch {model}, uncached, median step", "torch", ("model", "config"), "median_step_ms",
            (None, None, model, "uncached+shim:device"), step, True, pick=timed_torch)
    return [r for r in out if r[1] is not None and r[2] is not None]


def before_after_changes(before, records):
    """(what, how many times worse) for each before/after measurement: above 1 = slower than before."""
    return [(what, new / old if lower else old / new)
            for what, old, new, _, lower, _, _ in before_after_pairs(before, records)]


def before_after_section(before, records, label, targets):
    """The shim's default configuration run with an earlier build (runs named
    before-*) next to the same measurement with this build: the no-regressions
    target, the table of changes, and the growth runs of both builds."""
    if not before:
        return []
    rows = []
    for what, old, new, unit, lower_is_better, old_rounds, new_rounds in before_after_pairs(before, records):
        change = new / old
        better = change < 1 if lower_is_better else change > 1
        rows.append([what, unit(old), unit(new), f"**{times(change)}**" + (" (better)" if better else ""),
                     ", ".join(map(unit, old_rounds)), ", ".join(map(unit, new_rounds))])
    growth = growth_before_after(before, records)
    if not rows and not growth:
        return []
    lines = ["### Before and after", "",
             f"The shim's default configuration (device ordering) with {label} and with this build, in this run "
             "(runs named `before-*` below). Change = after / before, each side its fastest round (a process runs at "
             "one of two speeds whatever the build, on the H200 (2026-12-04 in this file) and the H100: a median of a few rounds "
             "would compare one build's fast processes with the other's slow ones); every round is listed.", ""]
    verdicts = [t for t in targets if t.get("before_after")]
    if verdicts:
        lines += [table(["target", "measured", "result"],
                        [[t["target"], t["measured"], f"**{t['result']}**"] for t in verdicts]), ""]
    if rows:
        lines += [table(["measurement", "before", "after", "change", "rounds before", "rounds after"], rows), ""]
    if growth:
        lines += ["First allocation and growth of a pool that starts empty, each build's defaults (one process each; "
                  "the columns as on the page):", "", table(GROWTH_HEADER, growth), ""]
    return lines


def growth_before_after(before, records):
    """Rows of the growth table: each growth run of the earlier build (before-growth-SIZE) after this build's run
    with the same size and its defaults (growth-shim-SIZE)."""
    rows = []
    for old in (r for r in before if r.get("bench") == "growth"):
        name = old.get("run", "")
        twin = "growth-shim-" + name[len("before-growth-"):] if name.startswith("before-growth-") else None
        rows += [growth_row(r) for r in records if r.get("bench") == "growth" and twin and r.get("run") == twin]
        rows.append(growth_row(old))
    return rows


def details_section(records):
    rows = []
    for r in records:
        if r.get("bench") == "pairs":
            rows.append([config_name(r["allocator"], r["path"]), size_text(r["size"]), us(r["median_ns"]),
                         f"{us(r['p10_ns'])} – {us(r['p90_ns'])}", us(r["wall_ns_per_pair"]),
                         f"{r['final_sync_us']:.0f} µs", r["pairs"]])
    if not rows:
        return []
    return ["### Every pair measurement", "",
            "Median, p10 and p90 of per-batch averages (batches of 100 pairs); wall = the whole timed loop plus the "
            "final `cudaDeviceSynchronize`, per pair.", "",
            table(["configuration", "size", "median", "p10 – p90", "wall per pair", "final sync", "pairs"], rows),
            ""]


# What the RESULTS.md entry has and the page has not: how the run was made and what it was compared with.
ENTRY_ONLY_META = ("command", "baseline")
RESULTS_LINK = "[tests/bench/RESULTS.md](../tests/bench/RESULTS.md)"  # from docs/, where the page is committed


def page(meta, runs, records, targets, before):
    """This run's figures and targets: nothing of the earlier build, no runs log (results_entry has them)."""
    get = dict(meta)
    lines = ["# asyncshim performance", "",
             f"Generated by `scripts/benchmarks.sh` on {get.get('date', '?')}; do not edit by hand. "
             "Machines are noisy: compare only figures from one run (this page is one run).", ""]
    lines += [table(["", ""], [[k, v] for k, v in meta if k not in ENTRY_ONLY_META]), ""]
    if before:
        lines += [f"Before/after figures of this run, its command and every run's: see {RESULTS_LINK}.", ""]
    else:
        lines += [f"This run's command and every run's: see {RESULTS_LINK}.", ""]
    lines += ["Every run under the shim has `LD_PRELOAD=<build>/shim/libasyncshim.so` and "
              "`ASYNCSHIM_INITIAL_POOL_SIZE=1GiB` (plus `ASYNCSHIM_ORDERING` where named; the default is `device`), "
              "except the growth runs, which have the settings their label names; "
              "the raw pool of `alloc_bench` is primed with 1 GiB too and its release threshold is the maximum. "
              "Runs without the shim have no `LD_PRELOAD` and no `ASYNCSHIM_*` variable.", ""]

    lines += ["## Targets", ""]
    lines += [table(["target", "measured", "result"],
                    [[t["target"], t["measured"], f"**{t['result']}**"] for t in targets
                     if not t.get("before_after")]), ""]

    reuse = reuse_cache_targets(records)
    if reuse:
        lines += ["## The goals with the reuse cache off", "",
                  "The same goals for `ASYNCSHIM_REUSE_CACHE=0` (the reuse cache off: what it gives at the defaults; "
                  "the runs that have it).", "",
                  table(["target", "measured", "result"],
                        [[t["target"], t["measured"], f"**{t['result']}**"] for t in reuse]), ""]

    lines += ["## Allocation pair latency", "",
              "One `cudaMalloc` + `cudaFree` (or the API named) of the same size, back to back, single thread, on "
              "the legacy stream. Headline: the ratio of the median pair to the raw pool's median pair (below 1 = "
              "faster than the raw pool); in parentheses the median pair itself. Each figure is the fastest of the "
              "rounds (each round a process of its own): a process's pair runs at one of two speeds on the H200, "
              "the raw pool's too (about 0.8 or 1.4 µs there, `tests/bench/RESULTS.md`), so a median of a few "
              "rounds would compare one configuration's fast process with another's slow one. Every round is "
              "under Every pair measurement.", ""]
    lines += pairs_section(records)
    lines += ["", "## Observing: the leak report and the event log", ""] + observing_section(records, runs)
    lines += ["", "## Churn: a live set with kernels", ""] + churn_section(records)
    lines += ["", "## Threads", ""] + threads_section(records)
    lines += ["", "## First allocation and growth", ""] + growth_section(records)
    lines += ["", "## Load-time cost for a program without CUDA", ""] + load_section(records)
    lines += ["", "## PyTorch training loops", ""] + torch_section(records)
    lines += ["", "## Method", "",
              "- `alloc_bench` (tests/bench/alloc_bench.cu): warm-up first, then the timed loop in batches of 100 "
              "pairs or steps; each batch's time / 100 is one sample; median, p10, p90 over the samples "
              "(`std::chrono::steady_clock`).",
              "- Nothing in a timed loop synchronizes the device except what the API does itself (native `cudaFree` "
              "does; the raw pool's and the shim's frees do not). The work they leave queued is waited for once, "
              "after the loop, by one `cudaDeviceSynchronize`: its time is the *final sync*, and *wall* includes it, "
              "so a backlog on the device cannot hide.",
              "- Threads: each thread runs pairs for a fixed time; pairs/s = all pairs / (time from the common start "
              "until every thread's stream and then the device are synchronized).",
              "- The shim reads its settings once per process: every configuration is a process of its own.",
              "- The machine's speed drifts over minutes, so the allocator benchmarks run in rounds (each "
              "configuration once per round; the later rounds only the headline comparisons) and PyTorch's headline "
              "configurations twice: every figure above is the median over the rounds, the pairs' the fastest round "
              "(each round a run of its own, `-rN` = round N).",
              "- The driver-path measurement of an unmodified program is `alloc_bench_static`: the same source linked "
              "with the static CUDA runtime, whose `cudaMalloc` reaches the shim as `cuMemAlloc_v2` through "
              "`cuGetProcAddress`.", ""]
    lines += details_section(records)
    return "\n".join(lines) + "\n"


def runs_section(runs):
    """The runs log: every run, its result, time and exact command."""
    lines = ["### Runs", "", "Each run's exact command, run from the repository root (paths shown relative to it; "
             "raw output in the `raw/` logs).", ""]
    rows = []
    for run in runs:
        status = run["exit"]
        if status is None:  # never started: the command field says why
            rows.append([run["name"], run["command"], "—", "—"])
            continue
        result = ("timed out" if status in (124, 137) else f"exit {status}") if status else "ok"
        if run["skip"]:
            result += f" — {run['skip']}"
        seconds = f"{run['seconds']:.1f} s" if run["seconds"] is not None else "—"
        rows.append([run["name"], result, seconds, "`" + run["command"].replace("|", "\\|") + "`"])
    lines += [table(["run", "result", "time", "command"], rows), ""]
    return lines


def results_entry(meta, runs, records, targets, before):
    """A section for tests/bench/RESULTS.md, ready to paste: what the page leaves out (the run's command, the
    before/after comparison with an earlier build, the runs log), with the run's date, machine and commit."""
    get = dict(meta)
    day = get.get("date", "?").split(" ")[0]
    what = (f"before/after against {get.get('baseline', 'an earlier build')}, and the runs" if before
            else "the runs")
    machine = ", ".join(v for v in (get.get("GPU"), f"driver {get['driver']}" if get.get("driver") else None) if v)
    lines = [f"## {day} — the benchmark run of {get.get('commit', '?')}: {what}; {machine or 'machine unknown'}", "",
             f"`{get.get('command', 'scripts/benchmarks.sh')}`. Its tables and targets are the page it wrote, "
             "[docs/PERFORMANCE.md](../../docs/PERFORMANCE.md) when committed; this is what the page leaves out.",
             "", table(["", ""], [[k, v] for k, v in meta]), ""]
    lines += before_after_section(before, records, get.get("baseline", "an earlier build"), targets)
    lines += runs_section(runs)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description="Writes the benchmark results page")
    parser.add_argument("--raw", required=True, help="folder with NAME.out, runs.tsv and meta.tsv")
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--entry", help="the section for tests/bench/RESULTS.md (before/after, runs log); "
                        "default: RESULTS-entry.md beside the page")
    args = parser.parse_args()
    entry = args.entry or os.path.join(os.path.dirname(os.path.abspath(args.markdown)), "RESULTS-entry.md")

    meta = [tuple((row + [""])[:2]) for row in read_tsv(os.path.join(args.raw, "meta.tsv"))]
    runs = read_runs(args.raw)
    # Runs of an earlier build (--baseline) are kept apart: every table and
    # target is this build's.
    records = [r for run in runs if not run["name"].startswith("before-") for r in run["records"]]
    before = [r for run in runs if run["name"].startswith("before-") for r in run["records"]]
    targets = evaluate_targets(records, before)

    with open(args.markdown, "w") as f:
        f.write(page(meta, runs, records, targets, before))
    with open(entry, "w") as f:
        f.write(results_entry(meta, runs, records, targets, before))
    document = {"format": "asyncshim-bench", "format_version": 1, "meta": dict(meta), "targets": targets,
                "reuse_cache_targets": reuse_cache_targets(records),
                "runs": [{k: v for k, v in run.items() if k != "records"} for run in runs], "records": records,
                "before": before}
    with open(args.json, "w") as f:
        json.dump(document, f, indent=1)
        f.write("\n")

    print(f"for tests/bench/RESULTS.md (the command, before/after, the runs log): {entry}")
    failed = [run for run in runs if run["exit"] not in (0, None)]
    skipped = [run for run in runs if run["skip"]]
    not_run = [run for run in runs if run["exit"] is None]
    print(f"{len(records)} measurements from {len(runs)} runs ({len(skipped)} said SKIP, {len(failed)} failed, "
          f"{len(not_run)} not run for lack of time)")
    for run in failed:
        print(f"    failed: {run['name']} (exit {run['exit']})")
    # A baseline that did not load measured the native allocator: no before/after at all.
    unloaded = sorted({run["name"] for run in runs if run["name"].startswith("before-")
                       for r in run["records"] if r.get("shim") is False})
    if unloaded:
        print(f"    the baseline was not loaded in {len(unloaded)} run(s) (they measured the native allocator): "
              f"{', '.join(unloaded[:3])}{', ...' if len(unloaded) > 3 else ''}")
    for t in targets:
        print(f"{'met   ' if t['met'] else 'MISSED' if t['met'] is False else '—     '} {t['target']}: "
              f"{t['measured'] or 'not measured'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
