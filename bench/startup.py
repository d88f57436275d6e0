"""Startup of the commands against the bare import floor, measured in the same run (issue 10).

    python bench/startup.py [-n RUNS]

Runs each command as a whole process, interleaved (floor, then each command, repeated), and
prints the median wall time of each and its ratio to the floor's median. The floor is
``python -c "import numpy, pydantic, yaml, click"``; the target is ``plan-estimate --help`` and
``plan-search --help`` within 1.2x of it. A real ``plan-estimate`` run is printed for reference.
Machines here are shared and noisy: quote the medians and ratios, not single runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
FLOOR = [sys.executable, "-c", "import numpy, pydantic, yaml, click"]
COMMANDS = {
    "floor (import numpy, pydantic, yaml, click)": FLOOR,
    "plan-estimate --help": [str(BIN / "plan-estimate"), "--help"],
    "plan-search --help": [str(BIN / "plan-search"), "--help"],
    "plan-estimate --version": [str(BIN / "plan-estimate"), "--version"],
    "plan-estimate (gpt3, a100, 1536 GPUs)": [str(BIN / "plan-estimate"), "--model", "gpt3", "--gpu", "a100",
                                              "--gpus", "1536", "--tp", "8", "--pp", "12"],
}
TARGET = 1.2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=15, help="runs of each command (after one warm-up)")
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for i in range(args.n + 1):
        for name, cmd in COMMANDS.items():
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            if i:  # the first round warms the caches
                times[name].append(time.perf_counter() - t)
    floor = statistics.median(times[next(iter(COMMANDS))])
    print(f"{'command':48} {'median s':>9} {'x floor':>8}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:48} {med:9.3f} {med / floor:8.2f}")
    for name in ("plan-estimate --help", "plan-search --help"):
        ratio = statistics.median(times[name]) / floor
        print(f"target {name}: {ratio:.2f}x floor (<= {TARGET}x): {'MET' if ratio <= TARGET else 'NOT MET'}")


if __name__ == "__main__":
    main()
