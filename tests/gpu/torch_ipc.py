#!/usr/bin/env python3
"""CUDA tensors shared between processes by torch.multiprocessing, natively and
under the shim.

    torch_ipc.py --shim LIB [--arms native,shim] [--timeout 120] [--log-dir DIR] [--extra-env NAME=VALUE ...]

PyTorch shares a CUDA tensor through legacy CUDA IPC (cudaIpcGetMemHandle,
cudaIpcOpenMemHandle), which native pool memory does not support: the shim has
to make it work, or every program passing CUDA tensors on a torch.multiprocessing
queue breaks under it. For each arm (native; shim: LD_PRELOAD=LIB) and each
allocator (default-allocator: PyTorch's caching allocator, whose tensors lie at
an offset in a larger cudaMalloc; no-caching: PYTORCH_NO_CUDA_MEMORY_CACHING=1)
a fresh Python process spawns ("spawn" start method):
  1 child     that gets a tensor and a view of it at a storage offset, reports
              their sums (which must be the parent's) and adds 1 to both in
              place: the parent must see the additions (shared, not copied)
  4 children  that get the same tensor, report the sums of their own quarters
              and add 1 to them: the parent checks every quarter
Prints "torch ipc <arm> <allocator>: ok (...)" or "...: FAIL (...)" per run, then
"torch ipc: PASSED" or "torch ipc: FAILED": exits 0 only when every shim run is
ok or fails exactly as the native run does (pytorch/pytorch#114534: with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 PyTorch 2.11 cannot share a CUDA tensor at all,
"invalid device pointer"; addresses aside, the same message counts as the
same failure). Prints "SKIP: ..." and exits 0 without torch or a CUDA device.
--extra-env is for the shim arm only; the caller's ASYNCSHIM_* are not passed on.
"""
import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import time

ELEMENTS = 1 << 20
VIEW = slice(1000, 5000)
CHILDREN = 4


class Failure(Exception):
    pass


def part(tensor, index, parts):
    """The index-th of parts equal slices of tensor (the whole of it when parts is 1)."""
    size = tensor.numel() // parts
    return tensor[index * size:(index + 1) * size]


def total(tensor):
    import torch
    return tensor.sum(dtype=torch.float64).item()  # exact: the values are integers below 2**21


def child(inbox, outbox, done, count, index, parts, timeout):
    """A consumer: answers the sums of its part of each tensor and adds 1 to those parts."""
    try:
        outbox.put((index, "ok", consume(inbox, count, index, parts, timeout)))
    except queue.Empty:
        outbox.put((index, "fail", f"no tensor from the parent within {timeout} s"))
    except Exception as e:
        outbox.put((index, "fail", f"{type(e).__name__}: {e}"))
    done.wait(timeout)  # for the parent to have read the answer


def consume(inbox, count, index, parts, timeout):
    import torch
    mine = [part(inbox.get(timeout=timeout), index, parts) for _ in range(count)]
    sums = [total(m) for m in mine]  # every sum before any addition: the view lies inside the tensor
    for m in mine:
        m.add_(1)
    torch.cuda.synchronize()
    return sums  # the tensors are released on return, before the parent hears of it


def share(ctx, tensors, children, parts, timeout):
    """Spawns children consumers and puts the tensors on each one's queue; {index: sums} of their answers.
    The caller keeps the tensors until the children are gone, as torch.multiprocessing requires."""
    done, outbox, errors, inboxes, procs = ctx.Event(), ctx.Queue(), [], [], []
    try:
        for index in range(children):
            inboxes.append(ctx.Queue())
            # put() pickles, and so shares the CUDA memory, in a feeder thread that only prints its errors.
            inboxes[-1]._on_queue_feeder_error = lambda e, obj: errors.append(f"{type(e).__name__}: {e}")
            procs.append(ctx.Process(target=child, args=(inboxes[-1], outbox, done, len(tensors), index, parts,
                                                         timeout)))
            procs[-1].start()
            for t in tensors:
                inboxes[-1].put(t)
        answers, deadline = {}, time.monotonic() + timeout
        while len(answers) < children:
            try:
                index, status, value = outbox.get(timeout=1)
            except queue.Empty:
                dead = [f"child {i} exited with code {p.exitcode} without answering" for i, p in enumerate(procs)
                        if i not in answers and p.exitcode is not None]
                if errors or dead or time.monotonic() > deadline:
                    raise Failure(f"sharing a tensor failed in the parent: {errors[0]}" if errors else
                                  dead[0] if dead else f"child did not answer within {timeout} s") from None
                continue
            if status != "ok":
                raise Failure(f"child {index}: {value}")
            answers[index] = value
        done.set()
        for i, p in enumerate(procs):
            p.join(timeout)
            if p.exitcode != 0:
                raise Failure(f"child {i} after answering: exit code {p.exitcode} (None: still running)")
        return answers
    finally:
        done.set()
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)


def scenario(timeout):
    """The parent: prints one line, RESULT ok <details> or RESULT fail <why>."""
    try:
        import torch
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        big = torch.arange(ELEMENTS, dtype=torch.float32, device="cuda")
        view = big[VIEW]  # PyTorch sends the base of the allocation and the view's offset in it
        before = [total(big), total(view)]
        expected = big + 1
        expected[VIEW] += 1  # the child adds 1 to big and 1 to the view, which lies inside big
        torch.cuda.synchronize()
        sums = share(ctx, [big, view], 1, 1, timeout)[0]
        if sums != before:
            raise Failure(f"the child's sums of the tensor and its view {sums} are not the parent's {before}")
        after = [total(big), total(view)]
        wanted = [before[0] + big.numel() + view.numel(), before[1] + 2 * view.numel()]
        if after != wanted or not torch.equal(big, expected):
            raise Failure(f"after the child's additions the parent's sums are {after}, not {wanted}: not shared")
        details = [f"1 child: sums {before[0]:.0f} and {before[1]:.0f} (view at offset {view.storage_offset()}) "
                   "as in the parent, its additions seen by the parent"]
        del big, view, expected
        whole = torch.arange(ELEMENTS, dtype=torch.float32, device="cuda")
        before = [total(part(whole, i, CHILDREN)) for i in range(CHILDREN)]
        torch.cuda.synchronize()
        answers = share(ctx, [whole], CHILDREN, CHILDREN, timeout)
        wrong = [i for i in range(CHILDREN) if answers[i] != [before[i]]]
        if wrong:
            raise Failure(f"children {wrong} report other sums of their quarters than the parent's")
        wrong = [i for i in range(CHILDREN) if total(part(whole, i, CHILDREN)) != before[i] + ELEMENTS // CHILDREN]
        if wrong or not torch.equal(whole, torch.arange(ELEMENTS, dtype=torch.float32, device="cuda") + 1):
            raise Failure(f"the parent does not see the additions of children {wrong or 'all'} in their quarters")
        details.append(f"{CHILDREN} children: each quarter as in the parent, each child's addition seen by the parent")
        print("RESULT ok " + "; ".join(details), flush=True)
        return 0
    except Exception as e:
        why = str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"
        print("RESULT fail " + " ".join(why.split()), flush=True)
        return 1


def torch_missing():
    """Why the scenario cannot run here (no torch, no CUDA device), or None."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        probe = "import torch; print(torch.__version__, torch.cuda.is_available())"
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "import torch and torch.cuda.is_available() did not finish within 300 s"
    words = (out.stdout.strip().splitlines() or [""])[-1].split()
    if out.returncode != 0 or len(words) != 2:
        return f"import torch fails: {(out.stderr.strip().splitlines() or [f'exit code {out.returncode}'])[-1]}"
    return None if words[1] == "True" else f"torch {words[0]} sees no CUDA device (torch.cuda.is_available() is False)"


def run_scenario(arm, allocator, args):
    """(ok, details) of the scenario in a fresh process: the environment is there before Python starts."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ASYNCSHIM_") and k not in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    settings = ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"} if allocator == "no-caching" else {}) | (
        {"LD_PRELOAD": args.shim, **args.extra_env} if arm == "shim" else {})
    env.update(settings)
    limit = 3 * args.timeout + 60
    command = [sys.executable, os.path.abspath(__file__), "--scenario", "--timeout", str(args.timeout)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # a process group: its children go with it on a timeout
    try:
        out, err = proc.communicate(timeout=limit)
        late = None
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        late = f"the scenario did not finish within {limit} s"
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        with open(os.path.join(args.log_dir, f"torch-ipc-{arm}-{allocator}.log"), "w") as f:
            f.write(f"# {arm} {allocator} {settings}: exit code {proc.returncode}\n{out}{err}")
    results = [line.split(" ", 2) + [""] for line in out.splitlines() if line.startswith("RESULT ")]
    if late or not results:
        last = (err.strip().splitlines() or ["no stderr"])[-1]
        ok, why = False, late or f"no RESULT line, exit code {proc.returncode}: {last}"
    else:
        ok, why = results[-1][1] == "ok" and proc.returncode == 0, results[-1][2]
        if results[-1][1] == "ok" and proc.returncode != 0:
            why += f"; but the scenario exited with code {proc.returncode}"
    shim_lines = [line.strip() for line in (out + err).splitlines() if "asyncshim" in line]
    return ok, why + (f"; last shim message: {shim_lines[-1]}" if shim_lines and not ok else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shim", help="libasyncshim.so (needed for the shim arm)")
    parser.add_argument("--arms", default="native,shim", help="comma-separated: native, shim")
    parser.add_argument("--timeout", type=int, default=120, help="seconds to wait for a child's answer")
    parser.add_argument("--log-dir", help="write each run's stdout and stderr to DIR/torch-ipc-<arm>-<allocator>.log")
    parser.add_argument("--extra-env", action="append", default=[], metavar="NAME=VALUE", help="for the shim arm")
    parser.add_argument("--scenario", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:
        return scenario(args.timeout)
    arms = [arm for arm in ("native", "shim") if arm in args.arms.split(",")]
    if not arms or set(args.arms.split(",")) - {"native", "shim"}:
        parser.error(f"--arms {args.arms}: a comma-separated list of native and shim")
    if any("=" not in item or item.startswith("=") for item in args.extra_env):
        parser.error("--extra-env takes NAME=VALUE")
    args.extra_env = dict(item.split("=", 1) for item in args.extra_env)
    if "shim" in arms and not args.shim:
        parser.error("the shim arm needs --shim LIB")
    why = torch_missing()
    if why:
        print(f"SKIP: {why}")
        return 0
    if "shim" in arms and not os.path.isfile(args.shim):
        parser.error(f"--shim {args.shim}: no such file")
    args.shim = args.shim and os.path.abspath(args.shim)
    ok = {}
    whys = {}
    for allocator in ("default-allocator", "no-caching"):
        for arm in arms:
            ok[arm, allocator], whys[arm, allocator] = run_scenario(arm, allocator, args)
            print(f"torch ipc {arm} {allocator}: {'ok' if ok[arm, allocator] else 'FAIL'} ({whys[arm, allocator]})",
                  flush=True)
        if not ok.get(("native", allocator), True):
            same = (not ok.get(("shim", allocator), True)
                    and without_addresses(whys["shim", allocator]) == without_addresses(whys["native", allocator]))
            print(f"torch ipc {allocator}: native fails{' the same way' if same else ''}: not a shim problem",
                  flush=True)
            if same:
                ok["shim", allocator] = ok["native", allocator] = True  # as native
    print(f"torch ipc: {'PASSED' if all(ok.values()) else 'FAILED'}")
    return 0 if all(ok.values()) else 1


def without_addresses(text):
    """The message with its hexadecimal addresses (which differ between runs) blanked."""
    return re.sub(r"0x[0-9a-fA-F]+", "0x?", text.split("; last shim message")[0])


if __name__ == "__main__":
    sys.exit(main())
