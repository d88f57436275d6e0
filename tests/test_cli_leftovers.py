"""Interface and robustness leftovers of issue 13, each through the CLI or the API:

- every degree knob's set (``--tp``, ``--cp``, ``--pp``, ``--ep``, ``--etp``) filters the space the same
  way: values that break a rule are dropped, the request refused only when none is left (space.given_degrees);
- ``plan-calibrate -o`` into a missing directory creates it, as plan-sweep and plan-search --plot do
  (models.output.check_output / atomic_output, the one writer of every output);
- an error about ``etp`` names ``etp`` (plan.expert_grid_problem, Plan.check_against), and plan-estimate
  names the model's rule a degree breaks (``--ep 7`` on 8 experts) before the GPU-grid arithmetic;
- a sweep's table, scenario list and CSV show a choice axis value in its canonical form (`` Flex `` is flex);
- the CP-SAT path's skyline honours the time limit (oracle.exhaustive_front with the deadline), and says so;
  so does the report of the front's points, and a limit that stops the enumeration of explicit GPU counts
  before a valid plan is the reason given (not "no valid plan at 8, 16, ... GPUs");
- a number knob out of its Plan range is the option's error in both commands (plan-search said
  "moe_imbalance.0: ..." of its one-value list);
- plan-allocate refuses a job's unknown model (naming the job) before importing CP-SAT or searching any job;
- a request's and a sweep's degree knob takes the option's text (``"1..8"``, ``"2,4"``: models.io.parse_int_set,
  the one parser), and plan-sweep prints an errored scenario's message whole;
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from cli_helpers import one_stderr_line
import plan_search
from plan_search.cli.search import main as search_main

MIXTRAL = ["--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64"]


_one_line = one_stderr_line


def _front(args) -> list[dict]:
    r = CliRunner().invoke(search_main, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    return [p["plan"] for p in json.loads(r.stdout)["front"]]


def test_ep_and_etp_ranges_filter_the_space_as_tp_ranges_do():
    # --ep 1..8 on Mixtral's 8 experts keeps 1, 2, 4, 8 (3, 5, 6, 7 divide no 8 experts): the same
    # front as the divisors alone, where --ep 1..8 was refused ("[3, 5, 6, 7] do not divide ...")
    ranged = _front(MIXTRAL + ["--ep", "1..8", "--tp", "1..8"])
    listed = _front(MIXTRAL + ["--ep", "1,2,4,8", "--tp", "1,2,4,8"])
    assert ranged == listed and ranged
    assert {p["ep"] for p in ranged} <= {1, 2, 4, 8} and max(p["ep"] for p in ranged) > 1
    # etp: Mixtral's 14336-wide experts; 3 divides no 14336, 2 does
    kept = _front(MIXTRAL + ["--ep", "8", "--etp", "2,3"])
    assert kept == _front(MIXTRAL + ["--ep", "8", "--etp", "2"]) and {p["etp"] for p in kept} == {2}
    # the same in a request (a list), as the CLI's set
    res = plan_search.search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep=[3, 8], etp=[2, 3])
    assert [p.plan.model_dump() for p in res.front] == kept


def test_a_degree_set_with_no_valid_value_is_refused_naming_its_knob():
    for args, says in ((["--ep", "3,5..7"], "ep: none of [3, 5, 6, 7] divides num_experts 8 of mixtral-8x7b; "
                                            "use divisors: 1, 2, 4, 8"),
                       (["--etp", "3"], "etp: none of [3] divides expert_ffn_hidden_size 14336 of mixtral-8x7b"),
                       (["--tp", "3,5"], "tp: 3 does not divide"),
                       (["--cp", "3"], "cp: none of [3]")):
        r = CliRunner().invoke(search_main, MIXTRAL + args)
        assert r.exit_code == 2, (args, r.output)
        assert _one_line(r).startswith(f"error: {says}"), r.stderr
    # the divisors offered reach one NVLink domain: 8 GPUs on an HGX H100, 72 in a GB200 NVL72 rack
    for gpu, hint in (("h100", "use divisors: 1, 2, 4, 7, 8"),
                      ("gb200", "use divisors: 1, 2, 4, 7, 8, 14, 16, 28, 32, 56, 64")):
        r = CliRunner().invoke(search_main, ["--model", "mixtral-8x7b", "--gpu", gpu, "--etp", "3"])
        assert r.exit_code == 2 and _one_line(r).endswith(hint), (gpu, r.stderr)
    # a dense model keeps ep = etp = 1 of a set, and names the knob when 1 is not in it
    res = plan_search.search(model="megatron-gpt-1.7b", gpu="h100", gpus=[8], ep=[1, 2], etp=[1, 4])
    assert {(p.plan.ep, p.plan.etp) for p in res.front} == {(1, 1)}
    r = CliRunner().invoke(search_main, ["--model", "megatron-gpt-1.7b", "--gpu", "h100", "--gpus", "8",
                                         "--etp", "2"])
    assert r.exit_code == 2
    assert _one_line(r) == "error: etp: megatron-gpt-1.7b is a dense model (no experts); etp must be 1"


def test_plan_calibrate_creates_the_output_directory_as_the_other_commands_do(tmp_path):
    from pathlib import Path

    import yaml

    from plan_search.cli.calibrate import main as calibrate_main
    from plan_search.hardware.resolve import resolve_cluster

    runs = Path(__file__).parent / "data" / "runs" / "small-runs.csv"
    out = tmp_path / "new" / "dir" / "my-a100.yaml"  # was refused: "the directory ... does not exist"
    r = CliRunner().invoke(calibrate_main, [str(runs), "--gpu", "a100", "-o", str(out), "--iters", "2"])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["base"] and resolve_cluster(str(out)).efficiency is not None
    assert [p.name for p in out.parent.iterdir()] == ["my-a100.yaml"]  # no temporary file left beside it


def test_errors_about_etp_name_etp_and_the_models_rule_comes_first():
    from plan_search.cli.estimate import main as estimate_main

    def line(*args, model="mixtral-8x7b", gpus="64"):
        r = CliRunner().invoke(estimate_main, ["--model", model, "--gpu", "h100", "--gpus", gpus, *args])
        assert r.exit_code == 2, r.output
        return _one_line(r)

    # etp alone breaks the grid (Mixtral's experts are 14336 = 2^11 x 7 wide: etp 7 divides them)
    assert line("--etp", "7").startswith("error: etp: etp*ep = 7*1 = 7 does not divide the 64 GPUs")  # was "ep:"
    assert line("--etp", "7", "--ep", "8").startswith("error: etp: etp*ep = 7*8 = 56")
    assert line("--ep", "8", "--etp", "16").startswith("error: ep: etp*ep = 16*8 = 128 exceeds")  # the product
    # a dense model names the knob given
    assert line("--etp", "2", model="megatron-gpt-1.7b", gpus="8") == \
        "error: etp: megatron-gpt-1.7b is a dense model (no experts); etp must be 1"
    assert line("--ep", "2", model="megatron-gpt-1.7b", gpus="8") == \
        "error: ep: megatron-gpt-1.7b is a dense model (no experts); ep must be 1"
    # a degree the model cannot take: its rule, not "make the GPUs a multiple of 7"
    assert line("--ep", "7") == "error: ep: 7 does not divide num_experts 8; use a divisor"
    assert line("--etp", "3", "--ep", "8") == "error: etp: 3 does not divide expert_ffn_hidden_size 14336; use a divisor"
    assert line("--tp", "3") == "error: tp: 3 does not divide num_heads 32; use a divisor"
    # the API says the same of the grid
    import pytest

    with pytest.raises(ValueError, match=r"Value error, etp: etp\*ep = 7\*1"):
        plan_search.Plan(num_gpus=64, global_batch=64, seq_len=1024, etp=7)


def test_sweep_shows_choice_values_in_their_canonical_form(tmp_path):
    import csv

    import yaml

    from plan_search.cli.sweep import main as sweep_main

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "base": {"model": "mixtral-8x7b", "gpu": "h100", "gpus": [64], "ep": 8, "knobs": {"recompute": ["full"]}},
        "sweep": {"knobs.moe_dispatcher": [" Flex ", "ALLGATHER"], "framework": [" MegaTron"]}}, sort_keys=False))
    r = CliRunner().invoke(sweep_main, [str(sweep), "--list"])
    assert r.exit_code == 0, r.output
    assert [ln.split(None, 2)[2] for ln in r.stdout.splitlines()] == [
        "knobs.moe_dispatcher=flex, framework=megatron", "knobs.moe_dispatcher=allgather, framework=megatron"]
    out = tmp_path / "out.csv"
    r = CliRunner().invoke(sweep_main, [str(sweep), "-o", str(out), "--workers", "1", "-q", "--summary"])
    assert r.exit_code == 0, r.output
    table = [ln.split()[:3] for ln in r.stdout.splitlines()[2:4]]
    assert table == [["0", "flex", "megatron"], ["1", "allgather", "megatron"]]  # was ' Flex ', ' MegaTron'
    rows = list(csv.DictReader(out.open()))
    assert [(r["knobs.moe_dispatcher"], r["framework"]) for r in rows] == [("flex", "megatron"),
                                                                           ("allgather", "megatron")]
    # the canonical value is the one priced: the same plan as the API's with it
    res = plan_search.search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep=8, recompute=["full"],
                             moe_dispatcher="flex", framework="megatron")
    assert float(rows[0]["step_time_s"]) == res.recommended.step_time_s


def test_the_cpsat_paths_skyline_stops_at_the_time_limit_and_says_so(monkeypatch):
    """Deterministic (tests/test_time_limits.py's way): the search's clock jumps past any limit as the
    skyline of the CP-SAT path starts; wall-clock figures are bench/time_limits.py's."""
    args = ["--model", "megatron-gpt-1.7b", "--gpu", "a100-80gb", "--gpus", "8,16,32,64", "--global-batch", "512",
            "--tokens", "1e11", "--format", "json"]
    full = CliRunner().invoke(search_main, args)
    assert full.exit_code == 0 and {p["num_gpus"] for p in json.loads(full.stdout)["front"]} == {8, 16, 32, 64}
    _clock_jumps_at(monkeypatch, "exhaustive_front")  # from its first call on
    r = CliRunner().invoke(search_main, args)  # --solver cpsat, the default
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # the skyline compared the first count only (it ran to the end, without the limit, before)
    assert "front: GPU counts from 16 up not compared (time limit)" in doc["stats"]["cut"]
    assert {p["num_gpus"] for p in doc["front"]} == {8} and not doc["stats"]["proven_optimal"]
    assert doc["stats"]["solver"] == "cpsat"


def test_plan_allocate_refuses_a_bad_model_before_importing_cp_sat_or_searching(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    pool = Path(__file__).resolve().parents[1] / "docs" / "examples" / "pool.yaml"
    jobs = tmp_path / "jobs.yaml"
    # the heavier job first in the search order; the typo in the lighter one was found only after searching it
    jobs.write_text(yaml.safe_dump({"jobs": [{"name": "big", "model": "llama3.1-8b", "tokens": "100B", "weight": 5},
                                             {"name": "typo", "model": "lama3.1-8b", "tokens": "100B"}]}))
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "plan_search.cli.allocate", "--pool", str(pool),
                        "--jobs", str(jobs)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if not ln.startswith("import time:")]
    assert len(errors) == 1 and errors[0].startswith("error: job typo: model: unknown 'lama3.1-8b'; closest: llama3.1-8b")
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    assert "ortools.sat.python.cp_model" not in imported and "pandas" not in imported
    assert "plan_search.planner.search.front" not in imported  # nothing was searched


def test_requests_and_sweeps_take_degree_sets_as_the_options_write_them(tmp_path):
    import csv

    import yaml

    from plan_search.cli.sweep import main as sweep_main

    listed = _front(MIXTRAL + ["--ep", "1..8", "--tp", "1,2"])
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"model": "mixtral-8x7b", "gpu": "h100", "gpus": [64],
                               "knobs": {"ep": "1..8", "tp": ["1", 2]}}))  # was "ep.0: Input should be a valid integer"
    r = CliRunner().invoke(search_main, ["--request", str(req), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert [p["plan"] for p in json.loads(r.stdout)["front"]] == listed
    assert [p.plan.model_dump() for p in plan_search.search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep="1..8",
                                                            tp="1,2").front] == listed
    req.write_text(json.dumps({"model": "mixtral-8x7b", "gpu": "h100", "gpus": [64], "ep": "9..1"}))
    r = CliRunner().invoke(search_main, ["--request", str(req)])
    assert r.exit_code == 2
    assert _one_line(r) == 'error: knobs: ep: range \'9..1\' is empty (low above high); e.g. 8, "1,2,4" or "1..16"'
    # a sweep: the same text; a scenario whose set keeps nothing is an error row, its message printed whole
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": {"model": "mixtral-8x7b", "gpu": "h100", "gpus": [64],
                                              "knobs": {"tp": "1,2"}},
                                     "sweep": {"knobs.ep": ["1..8", "3,5..7"]}}, sort_keys=False))
    out = tmp_path / "out.csv"
    r = CliRunner().invoke(sweep_main, [str(sweep), "-o", str(out), "--workers", "1", "-q"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert [(row["knobs.ep"], row["status"]) for row in rows if row["recommended"] == "True" or row["status"] != "ok"] == [
        ("1..8", "ok"), ("3,5..7", "error")]
    best = [p for p in listed if p["ep"] == int(rows[0]["ep"]) and p["tp"] == int(rows[0]["tp"])]
    assert best  # the sweep's scenario searched the same space
    assert "  scenario 1: error: ep: none of [3, 5, 6, 7] divides num_experts 8 of mixtral-8x7b; use divisors: " \
           "1, 2, 4, 8" in r.stderr.splitlines()  # was cut to "'ep: none of [3, 5, 6, 7] divid...8'"


def _clock_jumps_at(monkeypatch, name: str, after_calls: int = 0) -> dict:
    """From the ``after_calls + 1``-th call of the search's ``name`` on (replaced in every module of the search
    that holds it), the search's clock reads 1e9 s later (tests/test_time_limits.py's way: deterministic,
    whatever this machine's speed)."""
    import sys
    import time

    search_mods = [m for k, m in sorted(sys.modules.items()) if k.startswith("plan_search.planner.search.")]
    state = {"offset": 0.0, "calls": 0}

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            return time.perf_counter() + state["offset"]

    real = next(getattr(m, name) for m in search_mods if hasattr(m, name))

    def jumping(*a, **k):
        state["calls"] += 1
        if state["calls"] > after_calls:
            state["offset"] = 1e9
        return real(*a, **k)

    monkeypatch.setattr(sys.modules["plan_search.planner.search.clock"], "time", Clock)
    for m in search_mods:
        if getattr(m, name, None) is real:
            monkeypatch.setattr(m, name, jumping)
    return state


def test_the_fronts_points_are_reported_until_the_time_limit(monkeypatch):
    import sys

    args = ["--model", "megatron-gpt-1.7b", "--gpu", "a100-80gb", "--gpus", "8,16,32,64", "--global-batch", "512",
            "--tokens", "1e11", "--format", "json"]
    full = json.loads(CliRunner().invoke(search_main, args).stdout)["front"]
    assert len(full) > 2
    monkeypatch.setattr(sys.modules["plan_search.planner.search.points"], "POINTS_PER_CLOCK", 1)
    _clock_jumps_at(monkeypatch, "evaluate")  # the first evaluate() is the front points' figures
    r = CliRunner().invoke(search_main, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [p["plan"] for p in doc["front"]] == [full[0]["plan"]]  # the smallest count's first point
    assert f"front: {len(full) - 1:,} points from {full[1]['num_gpus']} GPUs up not reported (time limit)" \
        in doc["stats"]["cut"] and not doc["stats"]["proven_optimal"]


def test_a_limit_that_stops_the_enumeration_before_a_valid_plan_says_so(monkeypatch):
    # tp 8 x pp 8 needs 64 GPUs: the first piece of counts (8 GPUs) holds no valid plan; the limit passes then
    args = ["--model", "gpt3", "--gpu", "h100", "--gpus", "8..320:8", "--tp", "8", "--pp", "8"]
    state = _clock_jumps_at(monkeypatch, "_enumerate")
    r = CliRunner().invoke(search_main, args)
    assert state["calls"] == 1 and r.exit_code == 3
    assert _one_line(r).startswith("infeasible: no feasible plan found within the time limit of 10 s: the GPU "
                                   "counts enumerated before it passed hold no valid plan")  # was "no valid plan at 8, 16"


def test_a_number_knob_out_of_range_names_the_option_in_both_commands():
    from plan_search.cli.estimate import main as estimate_main

    for cmd in (search_main, estimate_main):
        for value, says in (("0.5", "Input should be greater than or equal to 1 (got 0.5)"),
                            ("nan", "Input should be a finite number (got nan)"),
                            ("1.05,200", "Input should be less than or equal to 100 (got 200.0)")):
            if cmd is estimate_main and "," in value:
                continue
            r = CliRunner().invoke(cmd, MIXTRAL + ["--ep", "8", "--moe-imbalance", value])
            assert r.exit_code == 2, r.output
            assert _one_line(r) == f"error: Invalid value for --moe-imbalance: {says}"
