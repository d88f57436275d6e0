"""Speed of plan-search (issues 4 and 13): the default GPT-3 175B front on A100-80GB and
DeepSeek-V3 on H100 over every node multiple up to 4,096 GPUs, full default space, each as a
median and as a ratio to the bare import floor measured in the same run
(``python -c "import numpy, pydantic, yaml, click; from ortools.sat.python import cp_model"``).
Targets (issue 13): warm search() of GPT-3 <= 0.5x the floor, DeepSeek-V3 <= 1.5x; the CLI end
to end <= 2x for GPT-3, <= 3x for DeepSeek-V3. Issue 23 (the recipes' knobs searched by default): the unbounded
``plan-search --model deepseek-v3 --gpu h100`` CLI <= 4x the floor, and every case's CLI peak memory < 1 GiB.

    python bench/search_speed.py              # main figures + growth tables
    python bench/search_speed.py --runs 7     # more repetitions (medians)
    python bench/search_speed.py --published  # + best plan found vs each published plan

Prints the median of several runs of (a) the CLI end to end (a subprocess: interpreter start,
imports, catalogs, search, JSON output; the floor and the CLI both run with Python's bytecode
cache on, as an installed package does, unless ``--no-bytecode-cache``), (b) :func:`planner.search.search` in-process (warm;
the first, cold call is printed apart), (c) the exhaustive oracle on the same space, with the
phase times; then how the search time grows with the GPU range, the number of GPU types and the
model depth (megatron-gpt-1t). Targets (issue 4, 2-core machine): CLI <= 2 s, search <= 1 s.
Next to the wall-clock medians (the targets' figures), the CPU seconds (user + system) of the same
runs and their ratio to the floor's: on a shared machine the CPU ratio moves less with the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import resource
except ImportError:  # not on Windows: no CPU figures
    resource = None

ROOT = Path(__file__).resolve().parents[1]

from plan_search.planner.search.request import NoFeasiblePlan, SearchRequest  # noqa: E402
from plan_search.planner.search.front import search  # noqa: E402

MAIN = dict(model="gpt3-175b", gpu=["a100-80gb"], max_gpus=16384)
CLI_ARGS = ["--model", "gpt3-175b", "--gpu", "a100", "--max-gpus", "16384", "--format", "json"]


def _median_time(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _cli_cmd() -> list[str]:
    exe = shutil.which("plan-search", path=str(Path(sys.executable).parent)) or shutil.which("plan-search")
    return [exe] if exe else [sys.executable, "-m", "plan_search.cli.search"]


def cli_time(runs: int) -> float:
    cmd = _cli_cmd() + CLI_ARGS
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def row(label: str, req: dict, runs: int, exhaustive: bool = True) -> None:
    r = SearchRequest(**req)
    t_cp, res = _median_time(lambda: search(r), runs)
    t_ex = _median_time(lambda: search(r.model_copy(update={"solver": "exhaustive"})), max(1, runs // 2))[0] \
        if exhaustive else float("nan")
    st = res.stats
    print(f"{label:<28} {st.candidates:>10,} {st.feasible:>9,} {st.solver_candidates:>6,} {st.solves:>6} "
          f"{len(res.front):>5} {st.evaluate_s:>6.2f} {st.solve_s:>6.3f} {t_cp:>7.2f} {t_ex:>7.2f}")


def header(title: str) -> None:
    print(f"\n{title}")
    print(f"{'':<28} {'candidates':>10} {'feasible':>9} {'cp-sat':>6} {'solves':>6} {'front':>5} "
          f"{'eval s':>6} {'solve s':>6} {'search':>7} {'exhaus.':>7}")


def published(runs_path: str | None = None) -> None:
    """Best plan the search finds at each published run's GPU count, batch and sequence length,
    against the published plan (as the calibration reads it), both priced by the cost model."""
    from plan_search.hardware.catalog import get_cluster
    from plan_search.planner.calibration import load_runs, predict

    print("\npublished runs: the published plan vs the best plan found at its GPU count/batch/seq")
    print(f"{'run':<34} {'published plan':<24} {'step s':>7} {'found plan':<24} {'step s':>7} ok")
    n = worse = 0
    for rec in load_runs(runs_path):
        c = get_cluster(rec.gpu)
        pub = predict(rec, c)
        p = pub.plan
        req = SearchRequest(model=rec.model.name, gpu=[rec.gpu], gpus=[p.num_gpus], global_batch=[p.global_batch],
                            seq_len=p.seq_len, precision=p.precision, fp32_grads=p.fp32_grads,
                            overlap_tp_comm=p.overlap_tp_comm, memory_headroom=0.0)
        try:
            res = search(req, model=rec.model)
            best = res.recommended
            found, step = best.plan.label, best.step_time_s
        except NoFeasiblePlan:
            found, step = "(nothing fits)", float("inf")
        ok = step <= pub.predicted_step_s * (1 + 1e-9) or not pub.feasible
        n += 1
        worse += not ok
        flag = "yes" if ok else "NO"
        if not pub.feasible:
            flag += " (published plan over memory in the model)"
        print(f"{rec.label[:34]:<34} {p.label:<24} {pub.predicted_step_s:7.2f} {found:<24} {step:7.2f} {flag}")
    print(f"{n - worse}/{n} runs: the best plan found is predicted at least as fast as the published one")




FLOOR = [sys.executable, "-c", "import numpy, pydantic, yaml, click; from ortools.sat.python import cp_model"]
CASES = {
    "gpt3-175b on a100 (default front)": (dict(model="gpt3-175b", gpu=["a100-80gb"]),
                                          ["--model", "gpt3-175b", "--gpu", "a100", "--format", "json"], 0.5, 2.0),
    "deepseek-v3 on h100 (<= 4,096 GPUs)": (dict(model="deepseek-v3", gpu=["h100-sxm"], max_gpus=4096),
                                            ["--model", "deepseek-v3", "--gpu", "h100-sxm", "--max-gpus", "4096",
                                             "--format", "json"], 1.5, 3.0),
    # issue 23: the unbounded default question (the default GPU range doubles until it stops paying), with the
    # recipes' knobs searched: CLI <= 4x the floor and its peak memory < 1 GiB (MAX_RSS_BYTES); no search() target
    "deepseek-v3 on h100 (default range)": (dict(model="deepseek-v3", gpu=["h100-sxm"]),
                                            ["--model", "deepseek-v3", "--gpu", "h100", "--format", "json"],
                                            None, 4.0),
}
#: Peak resident memory the CLI of each case may reach (issue 23: < 1 GiB for the unbounded DeepSeek-V3 question).
MAX_RSS_BYTES = 1 << 30
#: Peak resident bytes of each case's CLI runs (a wrapper process reports its one child's ru_maxrss).
RSS: dict[str, list[int]] = {}
_RSS_WRAPPER = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_rss(cmd: list[str]) -> int:
    """Peak resident bytes of ``cmd`` (Linux ru_maxrss is in KiB), run once under a wrapper whose only child it is."""
    out = subprocess.run([sys.executable, "-c", _RSS_WRAPPER, *cmd], check=True, capture_output=True, text=True,
                         cwd=ROOT, env=ENV)
    return int(out.stdout.strip().splitlines()[-1]) * 1024


#: Environment of the timed processes (floor and CLI alike), set by main(): bytecode caching on, in a
#: private cache directory (PYTHONPYCACHEPREFIX), unless --no-bytecode-cache.
ENV: dict | None = None


#: CPU seconds (user + system) of each timed run, by ``"floor"``, ``"<case> search"`` (this process) and
#: ``"<case> cli"`` (a child process): printed next to the wall-clock medians, as the CPU ratio moves
#: less with the machine's load than the wall-clock one (the targets are the wall-clock ratios).
CPU: dict[str, list[float]] = {}


def _process_time(cmd: list[str], key: str | None = None) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN) if resource else None
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    wall = time.perf_counter() - t
    if key is not None and resource:
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        CPU.setdefault(key, []).append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return wall


def _bytecode_env(cache_dir: str) -> dict:
    """The environment with Python's bytecode cache on, written under ``cache_dir``: an installed
    package starts from its cached bytecode (pip compiles a wheel's modules; an editable install
    writes ``__pycache__`` on first import), while ``PYTHONDONTWRITEBYTECODE=1`` -- set in some
    shared workplaces to keep ``__pycache__`` out of the tree -- makes every start compile the
    package's ~40 modules again (the floor's numpy/pydantic/pandas keep their site-packages
    bytecode either way). The prefix applies to the floor and the CLI alike; one warm-up run of
    each fills it."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = cache_dir
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="repetitions per figure (medians)")
    ap.add_argument("--published", action="store_true", help="compare with the published runs")
    ap.add_argument("--no-growth", action="store_true", help="main figures only")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="time the processes in this environment as it is (with PYTHONDONTWRITEBYTECODE=1 the "
                         "package is compiled again at every start); default: bytecode cached, as installed")
    args = ap.parse_args()
    global ENV
    cache = None
    if not args.no_bytecode_cache:
        cache = tempfile.TemporaryDirectory(prefix="plan-search-pyc-")
        ENV = _bytecode_env(cache.name)
    load = ", load average %.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    print(f"plan-search speed, {os.cpu_count()} CPU(s){load}, python {sys.version.split()[0]}, processes "
          + ("with bytecode cached (as installed)" if cache else "in this environment as it is"))
    if cache:  # warm-up: fills the bytecode cache of the floor's modules and the CLI's
        _process_time(FLOOR)
        for _req, cli, _a, _b in CASES.values():
            _process_time(_cli_cmd() + cli)
    floors, figures = [], {name: {"search": [], "cli": []} for name in CASES}
    last = {}
    for name, (req, _cli, _a, _b) in CASES.items():  # warm-up: first (cold) call apart
        t = time.perf_counter()
        last[name] = search(SearchRequest(**req))
        print(f"  {name}: first call (cold) {time.perf_counter() - t:.2f} s")
    for _ in range(args.runs):  # interleaved, so a noisy stretch hits every figure alike
        floors.append(_process_time(FLOOR, "floor"))
        for name, (req, cli, _a, _b) in CASES.items():
            t, c = time.perf_counter(), time.process_time()
            last[name] = search(SearchRequest(**req))
            figures[name]["search"].append(time.perf_counter() - t)
            CPU.setdefault(name + " search", []).append(time.process_time() - c)
            figures[name]["cli"].append(_process_time(_cli_cmd() + cli, name + " cli"))
    floor = statistics.median(floors)
    print(f"  import floor (numpy, pydantic, yaml, click, ortools cp_model): median {floor:.3f} s"
          + (f", CPU {statistics.median(CPU['floor']):.3f} s" if CPU.get("floor") else ""))
    cpu_floor = statistics.median(CPU["floor"]) if CPU.get("floor") else float("nan")
    print(f"\n{'case':38} {'figure':16} {'median s':>9} {'x floor':>8} {'target':>7} {'':7}  "
          f"{'CPU s':>6} {'x floor CPU':>11}")
    met = True
    for name, (_req, _cli, t_search, t_cli) in CASES.items():
        for fig, target in (("search() warm", t_search), ("CLI end to end", t_cli)):
            key = "search" if fig.startswith("search") else "cli"
            med = statistics.median(figures[name][key])
            if target is None:
                print(f"{name:38} {fig:16} {med:9.3f} {med / floor:8.2f} {'-':>7} {'':7}")
                continue
            ok = med / floor <= target
            met &= ok
            cpu = statistics.median(CPU[f"{name} {key}"]) if CPU.get(f"{name} {key}") else float("nan")
            print(f"{name:38} {fig:16} {med:9.3f} {med / floor:8.2f} {target:6.1f}x {'MET' if ok else 'NOT MET':7}  "
                  f"{cpu:6.3f} {cpu / cpu_floor:11.2f}")
        rss = peak_rss(_cli_cmd() + _cli)
        ok = rss < MAX_RSS_BYTES
        met &= ok
        print(f"{name:38} {'CLI peak memory':16} {rss / 2**20:7.0f} MiB {'':8} {'< 1 GiB':>7} {'MET' if ok else 'NOT MET':7}")
        st = last[name].stats
        print(f"{'':38} candidates {st.candidates:,}, {st.memory_rejected:,} over memory (not timed), "
              f"{st.feasible:,} feasible, front {len(last[name].front)}; enumerate {st.enumerate_s:.3f} s, "
              f"evaluate {st.evaluate_s:.3f} s, solve {st.solve_s:.3f} s")
    print(f"targets: {'all MET' if met else 'NOT all met'}")
    if hasattr(os, "getloadavg"):
        print(f"load average at the end: {os.getloadavg()[0]:.1f} (ratios move with the machine's load)")

    if not args.no_growth:
        main_req = dict(model="gpt3-175b", gpu=["a100-80gb"], max_gpus=16384)
        runs = max(1, args.runs // 2)
        header("growth with the GPU range (gpt3-175b, a100-80gb)")
        for hi in (1024, 4096, 16384, 65536):
            row(f"up to {hi:,} GPUs", dict(main_req, max_gpus=hi), runs)
        header("growth with the GPU types (gpt3-175b, up to 16,384)")
        for gpus in (["a100-80gb"], ["a100-80gb", "h100-sxm"], ["a100-80gb", "h100-sxm", "h200"]):
            row(",".join(gpus), dict(main_req, gpu=gpus), runs)
        header("growth with model depth (a100-80gb, up to 16,384)")
        for m in ("gpt3-175b", "megatron-gpt-1t", "llama3.1-405b"):
            row(m, dict(main_req, model=m), runs)
    if args.published:
        published()
    return 0


if __name__ == "__main__":
    sys.exit(main())
