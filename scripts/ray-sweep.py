#!/usr/bin/env python3
"""Runs a lazybatch sweep as Ray tasks and merges it: `compare` or `capacity`, split into N
shards (`--shard I/N`), each shard one Ray task, on a Ray cluster (`--address`, or the
`RAY_ADDRESS` Ray reads) or on a local Ray this script starts and stops. Each task runs the
lazybatch binary in a scratch directory on its worker and returns the `shard.json` it wrote, so
the workers need the binary (at `--lazybatch`'s path) but no shared filesystem; the driver
writes the shards under OUT/shards/ and runs `lazybatch merge`, which writes into OUT exactly
what the unsharded command writes (docs/beyond-one-machine.md) and refuses shards of another
sweep, a shard missing or twice.

Usage: scripts/ray-sweep.py --shards N --out DIR [--address ADDR] [--lazybatch BIN]
                            [--cpus-per-task 1] [--json] -- compare|capacity ARGS...
  e.g. scripts/ray-sweep.py --shards 4 --out gnmt/ -- compare --model gnmt --rates 100,400 --seeds 5
ARGS must not hold --shard or --out (the driver sets them). A shard that fails stops the sweep
with its stderr's last lines; nothing is merged then. Exit status 3: Ray is not importable
(`pip install ray`).
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shard_task(binary, args, i, n):
    """One shard in a scratch directory: (i, exit status, shard.json's text, stderr's tail)."""
    # no progress lines from a task unless the sweep asks for them
    quiet = [] if any(x == "--progress" or x.startswith("--progress=") for x in args) else ["--progress", "off"]
    with tempfile.TemporaryDirectory(prefix=f"lazybatch-shard-{i}-") as d:
        p = subprocess.run([binary, *args, "--shard", f"{i}/{n}", "--out", d, *quiet],
                           capture_output=True, text=True)
        shard = os.path.join(d, "shard.json")
        text = open(shard).read() if p.returncode == 0 and os.path.exists(shard) else None
        return i, p.returncode, text, "\n".join(p.stderr.strip().splitlines()[-5:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, required=True, help="N: how many shards (tasks)")
    ap.add_argument("--out", required=True, help="where the merged sweep goes (shards in OUT/shards/)")
    ap.add_argument("--address", default=None, help="a Ray cluster's address (default: RAY_ADDRESS, else a local Ray)")
    ap.add_argument("--lazybatch", default=os.environ.get("LAZYBATCH", os.path.join(ROOT, "target/release/lazybatch")))
    ap.add_argument("--cpus-per-task", type=float, default=1.0)
    ap.add_argument("--json", action="store_true", help="print merge's JSON instead of its table")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- compare|capacity ARGS...")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd or cmd[0] not in ("compare", "capacity"):
        sys.exit("ray-sweep: give the sweep after --: compare ARGS... or capacity ARGS...")
    for flag in ("--shard", "--out"):
        if any(x == flag or x.startswith(flag + "=") for x in cmd):
            sys.exit(f"ray-sweep: the sweep's arguments hold {flag}; the driver sets it")
    if not 1 <= a.shards <= 10_000:
        sys.exit(f"ray-sweep: --shards {a.shards}: between 1 and 10000")
    if not a.cpus_per_task > 0:
        sys.exit(f"ray-sweep: --cpus-per-task {a.cpus_per_task}: more than 0")
    if not os.access(a.lazybatch, os.X_OK):
        sys.exit(f"ray-sweep: --lazybatch {a.lazybatch}: not an executable (cargo build --release)")
    try:
        import ray
    except ImportError as e:
        print(f"ray-sweep: {e} (pip install ray)", file=sys.stderr)
        sys.exit(3)

    address = a.address or os.environ.get("RAY_ADDRESS")
    # a local Ray when no cluster is named: started here, stopped below
    ray.init(address=address, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    results = []
    try:
        task = ray.remote(num_cpus=a.cpus_per_task)(shard_task)
        pending = {task.remote(a.lazybatch, cmd, i, a.shards): i for i in range(a.shards)}
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                r = ray.get(ref)
            except Exception as e:  # the task itself failed (no binary on the worker, say)
                r = (i, None, None, str(e).strip()[-500:])
            if r[2] is None:
                # the first failure stops the sweep: the shards still running are cancelled
                for other in pending:
                    ray.cancel(other, force=True)
                print(f"ray-sweep: shard {i}/{a.shards} failed (exit {r[1]}):\n{r[3]}", file=sys.stderr)
                sys.exit(1)
            results.append(r)
    finally:
        ray.shutdown()
    dirs = []
    for i, _, text, _ in sorted(results):
        d = os.path.join(a.out, "shards", str(i))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "shard.json"), "w") as f:
            f.write(text)
        dirs.append(d)
    merge = [a.lazybatch, "merge", *dirs, "--out", a.out] + (["--json"] if a.json else [])
    sys.exit(subprocess.run(merge).returncode)


if __name__ == "__main__":
    main()
