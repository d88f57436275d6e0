"""Whole commands under ``--time-limit``: wall time against the limit plus the command's fixed cost.

    python bench/time_limits.py [-n RUNS] [--quick]

Each case runs as a whole process (``plan-search``, ``plan-allocate``), interleaved and repeated. The
*fixed cost* of a command is measured in the same run: the same command with a limit that has already
passed (``--time-limit 1e-9``: interpreter start, imports, catalogs, request parsing, the time-limit
line and the interpreter's exit; nothing is searched). A case honours its limit when its median wall
time is at most that fixed cost's median plus the limit; the table prints both and the excess
(negative: within). Machines here are shared and noisy: quote medians, and the load next to them. A
timing is never a test: tests/test_time_limits.py checks each deadline deterministically.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
LIMITS_S = (0.01, 0.3, 1.0)


def _search(model: str, *extra: str):
    return lambda limit_s: [str(BIN / "plan-search"), "--model", model, "--gpu", "h100", *extra, "--time-limit",
                            f"{limit_s:g}"]


def _allocate(limit_s: float) -> list[str]:
    ex = ROOT / "docs" / "examples"
    return [str(BIN / "plan-allocate"), "--pool", str(ex / "pool.yaml"), "--jobs", str(ex / "jobs.yaml"),
            "--time-limit", f"{limit_s:g}"]


CASES = {
    "plan-search gpt3 (cpsat)": _search("gpt3"),
    "plan-search gpt3 --solver exhaustive": _search("gpt3", "--solver", "exhaustive"),
    "plan-search deepseek-v3 (cpsat)": _search("deepseek-v3"),
    "plan-search deepseek-v3 --solver exhaustive": _search("deepseek-v3", "--solver", "exhaustive"),
    "plan-search deepseek-v3 --framework megatron": _search("deepseek-v3", "--framework", "megatron"),
    "plan-search gpt3 --framework torchtitan": _search("gpt3", "--framework", "torchtitan"),
    # a big front: 32,768 explicit GPU counts, ~1,000 front points (the skyline and the points' report)
    "plan-search gpt3 --gpus 8..262144:8 (1k-point front)": _search(
        "gpt3", "--gpus", "8..262144:8", "--global-batch", "65536~20%", "--tp", "8", "--pp", "8", "--zero", "1",
        "--recompute", "selective", "--micro-batch", "1"),
    "plan-allocate docs/examples pool+jobs": _allocate,
}


def _run(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, exit code) of one run."""
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t, r.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="runs of each case (after one warm-up)")
    ap.add_argument("--quick", action="store_true", help="the first two cases and the allocator only")
    args = ap.parse_args()
    cases = {k: v for i, (k, v) in enumerate(CASES.items()) if not args.quick or i < 2 or "allocate" in k}
    limits = (1e-9,) + LIMITS_S
    times = {(c, lim): [] for c in cases for lim in limits}
    codes = {}
    load = []
    for i in range(args.n + 1):
        for c, make in cases.items():
            for lim in limits:
                dt, rc = _run(make(lim))
                if i:  # the first round warms the page cache
                    times[(c, lim)].append(dt)
                    codes[(c, lim)] = rc
        load.append(os.getloadavg()[0])
    print(f"median wall time over {args.n} runs, seconds (load average {min(load):.1f}-{max(load):.1f}, "
          f"{os.cpu_count()} CPUs); fixed = the same command with --time-limit 1e-9; excess = wall - fixed - limit")
    print(f"{'case':46s} {'fixed':>6s}" + "".join(f" {f'limit {lim:g}':>22s}" for lim in LIMITS_S))
    worst = -1e9
    for c in cases:
        fixed = statistics.median(times[(c, 1e-9)])
        row = f"{c:46s} {fixed:6.2f}"
        for lim in LIMITS_S:
            w = statistics.median(times[(c, lim)])
            worst = max(worst, w - fixed - lim)
            row += f"  {w:5.2f} (exit {codes[(c, lim)]}, {w - fixed - lim:+.2f})"
        print(row)
    print(f"largest excess over fixed + limit: {worst:+.2f} s")


if __name__ == "__main__":
    main()
