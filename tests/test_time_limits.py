"""Every phase of a search honours the time limit (issue 11-13 leftovers): checked deterministically with
a clock the search module reads, moved past any limit at a chosen phase, so no assertion depends on
how fast this machine is. Wall-clock figures of the whole commands: ``python bench/time_limits.py``."""

from __future__ import annotations

import sys
import time

import pytest
from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.search import main as search_cli
from plan_search.planner.search.request import NoFeasiblePlan

FRONT = "plan_search.planner.search.front"
SEARCH = "plan_search.planner.search."
CLOCK = "plan_search.planner.search.clock"
GPT = dict(model="megatron-gpt-1.7b", gpu=["a100-80gb"], gpus=[8, 16, 32, 64], global_batch=[512], tokens=1e11)


def _expire_at(monkeypatch, name: str, module: str = FRONT, after_calls: int = 0, offset_s: float = 1e9) -> dict:
    """From the ``after_calls + 1``-th call of ``module.name`` on, the search's clock reads ``offset_s`` later
    than the real one (by default past any limit). Returns the counter of calls. ``name`` is replaced in every
    module of the search that holds the same function (a function is called from several of them)."""
    state = {"offset": 0.0, "calls": 0}

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            return time.perf_counter() + state["offset"]

    monkeypatch.setattr(sys.modules[CLOCK], "time", Clock)
    real = _find(module, name)

    def expiring(*args, **kwargs):
        state["calls"] += 1
        if state["calls"] > after_calls:
            state["offset"] = offset_s
        return real(*args, **kwargs)

    _replace(monkeypatch, module, name, real, expiring)
    return state


def _find(module: str, name: str):
    """``module.name``, or (for the search) the function of that name in whichever of its modules defines it."""
    if module != FRONT:
        return getattr(sys.modules[module], name)
    return next(getattr(m, name) for k, m in sorted(sys.modules.items())
                if k.startswith(SEARCH) and m is not None and hasattr(m, name))


def _replace(monkeypatch, module: str, name: str, real, fake) -> None:
    mods = [sys.modules[module]] if module != FRONT else \
        [m for k, m in sorted(sys.modules.items()) if k.startswith(SEARCH) and getattr(m, name, None) is real]
    for m in mods:
        monkeypatch.setattr(m, name, fake)


@pytest.mark.parametrize("solver", ["cpsat", "exhaustive"])
def test_a_limit_already_past_returns_at_once_with_the_time_limit_reason(solver):
    t = time.perf_counter()
    with pytest.raises(NoFeasiblePlan) as info:
        ps.search(model="deepseek-v3", gpu=["h100"], solver=solver, time_limit_s=1e-9)
    assert info.value.reason == "time_limit"
    assert "passed before the first candidate was enumerated" in str(info.value)
    assert time.perf_counter() - t < 30  # nothing enumerated (a hang guard, not a timing)
    # the command: exit 3 (valid input, nothing found: README's exit codes), one line, no traceback
    r = CliRunner().invoke(search_cli, ["--model", "deepseek-v3", "--gpu", "h100", "--solver", solver,
                                        "--time-limit", "1e-9"])
    assert r.exit_code == 3 and r.output.count("\n") == 1
    assert r.output.startswith("infeasible: no feasible plan found within the time limit of 1e-09 s"), r.output


def test_with_a_framework_nothing_feasible_is_refused_for_its_cause_not_the_framework():
    """--framework with nothing feasible before its rules are checked: the time limit's (or memory's)
    refusal, as without a framework (it was 'framework: none of the 0 feasible plans is one megatron
    can run')."""
    with pytest.raises(NoFeasiblePlan) as info:
        ps.search(model="deepseek-v3", gpu=["h100", "b200"], framework="megatron", time_limit_s=1e-9)
    assert info.value.reason == "time_limit" and "passed before the first candidate" in str(info.value)
    r = CliRunner().invoke(search_cli, ["--model", "deepseek-v3", "--gpu", "h100", "--framework", "megatron",
                                        "--time-limit", "1e-9"])
    assert r.exit_code == 3 and r.output.startswith("infeasible: no feasible plan found within the time limit")
    with pytest.raises(NoFeasiblePlan) as info:
        ps.search(model="deepseek-v3", gpu=["h100"], gpus=[8], framework="megatron")
    assert info.value.reason == "memory" and "no plan fits in memory" in str(info.value)


def test_exhaustive_front_stops_between_gpu_counts_with_the_counts_compared(monkeypatch):
    full = ps.search(**GPT, solver="exhaustive")
    assert sorted({p.num_gpus for p in full.front}) == [8, 16, 32, 64] and full.stats.proven_optimal
    _expire_at(monkeypatch, "exhaustive_front")
    res = ps.search(**GPT, solver="exhaustive")
    # the front of the first count compared: exactly the full front's points at 8 GPUs (a larger
    # count never dominates a smaller one's point), and the cut says from which count it stopped
    assert [(p.num_gpus, p.plan) for p in res.front] == [(p.num_gpus, p.plan) for p in full.front if p.num_gpus == 8]
    assert "front: GPU counts from 16 up not compared (time limit)" in res.stats.cut
    assert not res.stats.proven_optimal
    # the recommendation is the rule applied to every candidate evaluated: unchanged
    assert res.recommended == full.recommended


def test_cpsat_is_not_started_past_the_phases_share_and_the_answer_is_the_oracles(monkeypatch):
    full = ps.search(**GPT, solver="exhaustive")
    # the phases ended; before the solve the clock passes their share of the limit (70 of 100 s), not the limit
    state = _expire_at(monkeypatch, "build_table", offset_s=80.0)
    res = ps.search(**GPT, solver="cpsat", time_limit_s=100)
    assert state["calls"] == 1 and res.stats.solves == 0 and res.stats.solver == "exhaustive"
    assert any(c.startswith("solve: CP-SAT not started (time limit)") for c in res.stats.cut)
    assert [(p.gpu, p.num_gpus, p.plan) for p in res.front] == [(p.gpu, p.num_gpus, p.plan) for p in full.front]
    assert res.recommended == full.recommended


def test_the_default_gpu_range_does_not_start_a_doubling_it_cannot_finish(monkeypatch):
    # without --gpus the range doubles from 8 nodes; the limit passes during the first piece's evaluation
    state = _expire_at(monkeypatch, "evaluate_columns")  # framework-free: no rule check re-prices a plan after it
    res = ps.search(model="gpt3", gpu=["h100"], solver="exhaustive", time_limit_s=5, framework="none")
    assert state["calls"] == 1  # no second piece was enumerated or evaluated
    assert "default GPU range: stopped by time limit" in res.stats.cut
    assert max(res.inputs.gpu_counts["h100-sxm"]) == 64 and not res.stats.proven_optimal


def test_framework_rule_checks_stop_at_the_limit(monkeypatch):
    kw = dict(model="llama3.1-8b", gpu=["h100"], gpus=[8, 16, 32, 64], tokens=1e11, framework="megatron")
    full = ps.search(**kw)
    assert sorted({p.num_gpus for p in full.front}) == [8, 16, 32, 64]
    # the limit passes at the first plan checked against Megatron's rules: the first count keeps what its
    # first chunk found, no later count is checked, and the result says so
    _expire_at(monkeypatch, "runnable", module="plan_search.planner.frameworks.rules")
    res = ps.search(**kw)
    assert {p.num_gpus for p in res.front} == {8}
    assert any("megatron rules checked below 16 GPUs (time limit)" in c for c in res.stats.cut)
    assert not res.stats.proven_optimal


def test_framework_rule_checks_past_the_limit_with_nothing_runnable_name_the_time_limit(monkeypatch):
    rules = sys.modules["plan_search.planner.frameworks.rules"]
    monkeypatch.setattr(rules, "runnable", lambda *a, **k: None)  # nothing runnable: checks would go on
    _expire_at(monkeypatch, "runnable", module="plan_search.planner.frameworks.rules", after_calls=40)
    with pytest.raises(NoFeasiblePlan) as info:
        ps.search(model="llama3.1-8b", gpu=["h100"], gpus=[8, 16], tokens=1e11, framework="megatron")
    assert info.value.reason == "time_limit" and "megatron can run" in str(info.value)


def test_each_systems_own_front_stops_at_the_limit_and_says_so(monkeypatch):
    kw = dict(GPT, gpu=["a100-80gb", "h100-sxm"], solver="exhaustive")
    full = ps.search(**kw)
    # the first call is the front over both systems; the limit passes as the first system's own front starts
    _expire_at(monkeypatch, "exhaustive_front", after_calls=1)
    res = ps.search(**kw)
    assert [(p.gpu, p.num_gpus, p.plan) for p in res.front] == [(p.gpu, p.num_gpus, p.plan) for p in full.front]
    assert "a100-80gb front: GPU counts from 16 up not compared (time limit)" in res.stats.cut
    assert not res.stats.proven_optimal
