"""plan-search: the candidate space, CP-SAT against the exhaustive oracle, the front's figures
against plan-estimate, constraints, determinism, infeasibility and the CLI."""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from dataclasses import fields

import numpy as np
import pytest
from click.testing import CliRunner

from plan_search.cli.search import main, parse_global_batch, parse_gpus, parse_int_set
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.search.request import Knobs, NoFeasiblePlan, SearchRequest, SearchResult
from plan_search.planner.search.front import OBJECTIVE_KEYS, resolve_objective, search
from plan_search.planner.search.space import enumerate_space
from space_oracle import brute_force

TINY = ModelSpec(name="tiny-gqa", num_layers=10, hidden_size=512, num_heads=8, num_kv_heads=2,
                 ffn_hidden_size=1536, vocab_size=1000, seq_len=1024, global_batch=48,
                 activation="swiglu", position="rotary", norm="rmsnorm", bias=False, dropout=False)

# ------------------------------------------------------------------ the space


def _rows_equal(space, i, plan, num_layers):
    y = PlanArrays.from_plans([plan], num_layers)
    for f in fields(PlanArrays):
        a, b = getattr(space.x, f.name)[i], getattr(y, f.name)[0]
        assert a == b, (f.name, a, b, plan)


@pytest.mark.parametrize("model,gpu,counts,gbs,seq,knobs", [
    ("gpt3-175b", "a100-80gb", range(8, 4097, 8), [1536], 2048, Knobs()),
    ("llama3.1-8b", "h100-sxm", [8, 16, 24, 64], [256, 384], 8192,
     Knobs(sequence_parallel=[True, False], recompute_layers=[1, 3])),
    ("llama2-70b", "gb200-nvl72", [72, 144, 288], [1152], 4096, Knobs(allow_cross_node_tp=True, max_cp=4)),
    ("megatron-gpt-1.7b", "a100-40gb", [4, 12, 40], [480], 2048, Knobs(tp=[2, 4], pp=[1, 5, 7], zero=[1, 3])),
])
def test_space_rows_rebuild_as_valid_plans(model, gpu, counts, gbs, seq, knobs):
    m, c = get_model(model), get_cluster(gpu)
    sp = enumerate_space(m, c, counts, gbs, seq, knobs)
    assert len(sp) > 0
    rng = np.random.default_rng(0)
    for i in sorted(set(rng.choice(len(sp), min(len(sp), 400), replace=False).tolist()) | {0, len(sp) - 1}):
        p = sp.plan(i)
        p.check_against(m)
        _rows_equal(sp, i, p, m.num_layers)
    x = sp.x
    assert np.all(x.tp * x.pp * x.dp * x.cp == x.num_gpus)
    assert np.all(x.gb % (x.dp * x.mb) == 0)
    assert set(np.unique(x.num_gpus)) <= set(counts)
    dom = c.node.intra_domain_size
    ok_tp = (dom % x.tp == 0) | ((x.tp % dom == 0) if knobs.allow_cross_node_tp else False)
    assert np.all(ok_tp)
    for name, col in (("tp", x.tp), ("pp", x.pp), ("zero", x.zero)):
        bound = getattr(knobs, name)
        if bound is not None:
            assert set(np.unique(col)) <= set(bound)


def test_space_is_complete_against_plan_validation():
    c = get_cluster("a100-80gb")
    counts, gb, seq = [8, 12, 16, 24], 48, 8192  # cp 1 and 2 in the default domain
    sp = enumerate_space(TINY, c, counts, [gb], seq, Knobs())
    got = [sp.plan(i) for i in range(len(sp))]
    assert len(set(got)) == len(got), "duplicate candidates"
    # the default domains, spelled out for the oracle
    every = Knobs(zero=[0, 1, 2, 3], recompute=["none", "selective", "full", "partial"], sequence_parallel=[True])
    assert set(got) == brute_force(TINY, c, counts, gb, seq, every)
    assert any(p.first_stage_layers or p.account_for_embedding_in_pipeline_split for p in got)  # uneven splits
    assert any(p.recompute_layers for p in got)
    assert any(p.vpp > 1 for p in got) and any(p.cp > 1 for p in got)


def test_space_rejects_impossible_bounds():
    m, c = get_model("gpt3-175b"), get_cluster("a100-80gb")
    with pytest.raises(InputError, match="tp:"):
        enumerate_space(m, c, [64], [1536], 2048, Knobs(tp=[7]))
    with pytest.raises(InputError, match="pp:"):
        enumerate_space(m, c, [64], [1536], 2048, Knobs(pp=[95]))
    with pytest.raises(InputError, match="ep:"):
        enumerate_space(get_model("mixtral-8x7b"), c, [64], [256], 4096, Knobs(ep=[3]))
    with pytest.raises(InputError, match="FP8"):
        enumerate_space(m, c, [64], [1536], 2048, Knobs(precision=["fp8"]))


# ------------------------------------------------------------------ CP-SAT vs the oracle
CASES = {
    "gpt-dense-2gpus": dict(model="megatron-gpt-1.7b", gpu=["a100-80gb", "h100-sxm"], max_gpus=64),
    "llama-gqa-batches": dict(model="llama3.1-8b", gpu=["a100-40gb", "h200"], gpus=[8, 16, 32, 64],
                              global_batch=[256, 512], seq_len=4096, knobs=Knobs(max_micro_batch=4)),
    "deadline-budget": dict(model="llama2-7b", gpu=["h100-sxm"], max_gpus=128, objective="cheapest"),
    "comm-energy": dict(model="llama2-7b", gpu=["a100-40gb", "l40s"], max_gpus=64, max_comm_ratio=0.1,
                        objective="least-energy"),
    "power-mfu": dict(model="megatron-gpt-1.7b", gpu=["a100-80gb", "h100-sxm", "mi300x"], max_gpus=96,
                      max_power_kw=60, objective="best-mfu", memory_headroom=0.3),
    "gqa-70b-fewest": dict(model="llama2-70b", gpu=["h200", "a100-80gb"], min_gpus=64, max_gpus=256,
                           knobs=Knobs(tp=[4, 8], max_micro_batch=2), objective="fewest-gpus", tokens=2e12),
}


@functools.lru_cache(maxsize=None)
def _limits(case: str) -> dict:
    """Deadline and budget that cut a loose front in the middle (the cost model's numbers move)."""
    if case != "deadline-budget":
        return {}
    loose = search(SearchRequest(**CASES[case], solver="exhaustive")).front
    deadline = float(np.median([p.days for p in loose]))
    ok = [p.cost_usd for p in loose if p.days <= deadline]
    return {"deadline_days": deadline, "budget_usd": 1.05 * min(ok)}


@functools.lru_cache(maxsize=None)
def _run(case: str, solver: str, workers: int = 1) -> SearchResult:
    return search(SearchRequest(**CASES[case], **_limits(case), solver=solver, workers=workers, time_limit_s=120))


def _front_key(res: SearchResult):
    return [(p.gpu, p.num_gpus, p.plan) for p in res.front]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpsat_front_equals_exhaustive(case):
    a, b = _run(case, "cpsat"), _run(case, "exhaustive")
    assert a.front and _front_key(a) == _front_key(b)
    assert [(p.days, p.cost_usd) for p in a.front] == [(p.days, p.cost_usd) for p in b.front]
    assert a.recommended == b.recommended
    assert a.stats.proven_optimal and b.stats.proven_optimal
    assert a.stats.solver_candidates < b.stats.solver_candidates == b.stats.feasible
    # the recommended plan (two solves for the balanced rule: the cheapest, then the fastest under its cost
    # cap), one per point, the last infeasible
    rec_solves = 2 if resolve_objective(a.request)[0] == "efficiency" else 1
    assert a.stats.solves == len(a.front) + rec_solves + 1


@pytest.mark.parametrize("objective", sorted(OBJECTIVE_KEYS))
def test_every_objective_agrees_with_the_oracle(objective):
    base = dict(CASES["gpt-dense-2gpus"], objective=objective)
    a = search(SearchRequest(**base, solver="cpsat"))
    b = search(SearchRequest(**base, solver="exhaustive"))
    assert a.recommended == b.recommended
    if objective in ("fastest", "cheapest", "fewest-gpus"):
        assert a.recommended_index is not None
        fp = a.front[a.recommended_index]
        pick = {"fastest": min(a.front, key=lambda p: (p.days, p.cost_usd, p.num_gpus)),
                "cheapest": min(a.front, key=lambda p: (p.cost_usd, p.days, p.num_gpus)),
                "fewest-gpus": min(a.front, key=lambda p: (p.num_gpus, p.days, p.cost_usd))}[objective]
        assert fp == pick


@pytest.mark.parametrize("case", sorted(CASES))
def test_front_points_reproduce_plan_estimate(case):
    res = _run(case, "cpsat")
    req = res.request
    for fp in res.front:  # priced with the profile of the framework that runs it
        e = estimate(req.model, fp.gpu, fp.plan, memory_headroom=req.memory_headroom, tokens=req.tokens,
                     framework=fp.framework[0] if fp.framework else None)
        assert e.feasible
        for mine, theirs in ((fp.step_time_s, e.step_time_s), (fp.memory_gib, e.memory.peak_gib),
                             (fp.days, e.run.days), (fp.cost_usd, e.run.cost_usd),
                             (fp.energy_kwh, e.run.energy_kwh), (fp.mfu, e.mfu), (fp.comm_ratio, e.comm_ratio)):
            assert mine == pytest.approx(theirs, rel=1e-9)
        assert fp.bottleneck == e.bottleneck
    r = res.recommended
    e = estimate(req.model, r.cluster, r.plan, memory_headroom=req.memory_headroom, tokens=req.tokens,
                 framework=res.recommended_framework[0] if res.recommended_framework else None)
    assert r.step_time_s == pytest.approx(e.step_time_s, rel=1e-9)
    assert r.memory.peak_gib == pytest.approx(e.memory.peak_gib, rel=1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_front_is_non_dominated_and_sorted(case):
    front = _run(case, "cpsat").front
    pts = [(p.num_gpus, p.days, p.cost_usd) for p in front]
    for i, a in enumerate(pts):
        for j, b in enumerate(pts):
            if i != j:
                assert not (b[0] <= a[0] and b[1] <= a[1] and b[2] <= a[2]), (a, b)
    assert pts == sorted(pts, key=lambda t: (t[0], t[1]))
    for p in front:
        assert p.scaling_efficiency > 0
    # efficiency against the GPU type's most efficient plan on its own front (its cheapest), not the smallest count
    res = _run(case, "cpsat")
    for p in front:
        own = [q for q in res.front + res.other_fronts if q.gpu == p.gpu]
        assert p.scaling_efficiency == pytest.approx(min(q.gpu_hours for q in own) / p.gpu_hours)
        assert p.scaling_efficiency <= 1 + 1e-12


def _plans(res):
    return [(p.gpu, p.days, p.cost_usd, p.power_kw, p.comm_ratio, p.memory_gib, p.memory_usable_gib)
            for p in res.front] + [(res.recommended.cluster, res.recommended.run.days, res.recommended.run.cost_usd,
                                    res.recommended.power_kw, res.recommended.comm_ratio,
                                    res.recommended.memory.peak_gib, res.recommended.memory.usable_gib)]


def test_constraints_are_honoured_and_bind():
    base = dict(model="llama2-7b", gpu=["h100-sxm", "a100-40gb"], max_gpus=128, memory_headroom=0.0)
    loose = search(SearchRequest(**base))
    med = lambda vals: float(np.median(vals))  # noqa: E731
    deadline = med([p.days for p in loose.front])
    budget = med([p.cost_usd for p in loose.front])
    cap = med([p.power_kw for p in loose.front])
    comm = 0.5 * max(p.comm_ratio for p in loose.front)
    headroom = 1.0 - med([p.memory_gib / p.memory_usable_gib for p in loose.front])
    assert comm > 0 and 0 < headroom < 1
    for kw in (dict(deadline_days=deadline), dict(budget_usd=budget), dict(max_power_kw=cap),
               dict(max_comm_ratio=comm), dict(memory_headroom=headroom),
               dict(deadline_days=deadline * 1.5, budget_usd=budget * 1.2, max_power_kw=cap * 1.5)):
        req = SearchRequest(**{**base, **kw})
        a, b = search(req), search(req.model_copy(update={"solver": "exhaustive"}))
        assert _front_key(a) == _front_key(b) and a.recommended == b.recommended
        for gpu, d, c, pw, cr, mem, usable in _plans(a):
            assert d <= kw.get("deadline_days", math.inf)
            assert c <= kw.get("budget_usd", math.inf)
            assert pw <= kw.get("max_power_kw", math.inf)
            assert cr <= kw.get("max_comm_ratio", math.inf)
            assert mem <= usable
            assert usable == pytest.approx(get_cluster(gpu).gpu.memory_gib * (1 - req.memory_headroom))
        assert _front_key(a) != _front_key(loose), kw  # the limit changed the answer


def test_deterministic_across_workers_and_runs():
    def strip(res: SearchResult) -> dict:
        d = json.loads(res.model_dump_json())
        for k in list(d["stats"]):
            if k.endswith("_s") or k == "solver_threads":
                d["stats"].pop(k)
        d["request"].pop("solver_threads")
        return d

    base = CASES["gpt-dense-2gpus"]
    one = search(SearchRequest(**base, solver_threads=1))
    two = search(SearchRequest(**base, solver_threads=2))
    again = search(SearchRequest(**base, solver_threads=2, seed=7))
    assert strip(one) == strip(two)
    d = strip(again)
    d["request"].pop("seed")
    e = strip(one)
    e["request"].pop("seed")
    assert d == e


def test_time_limit_flags_the_front_as_not_proven(monkeypatch):
    # the limit passes as the first chunk of the first GPU type is priced (the search's clock moved: a limit
    # of 1 ms passed before the first candidate when resolving the inputs took longer, which now ends the
    # search at once); what it stops is then the evaluation's next chunk or the second GPU type
    import sys
    import time as _time

    mod = sys.modules["plan_search.planner.search.pricing"]  # where the candidates' memory is priced
    late = {"s": 0.0}
    clock = sys.modules["plan_search.planner.search.clock"]
    monkeypatch.setattr(clock, "time", type("Clock", (), {"perf_counter": staticmethod(
        lambda: _time.perf_counter() + late["s"])}))
    real = mod.memory_fit
    monkeypatch.setattr(mod, "memory_fit", lambda *a, **k: (late.update(s=1e9), real(*a, **k))[1])
    res = search(SearchRequest(**dict(CASES["gpt-dense-2gpus"], max_gpus=256), time_limit_s=5))
    assert not res.stats.proven_optimal
    # the limit stopped the enumeration (larger GPU counts, issue 15) or the evaluation, and says so
    assert res.stats.evaluated < res.stats.candidates or any("not enumerated" in c or "not searched" in c
                                                             for c in res.stats.cut)
    assert res.stats.cut


def test_walk_stopped_by_the_limit_keeps_the_points_found(monkeypatch):
    import sys

    mod = sys.modules["plan_search.planner.search.cpsat"]
    real = mod._solve
    calls = {"n": 0}

    def limited(model, request, deadline):  # the 5th solve "runs out of time"
        calls["n"] += 1
        return ("unknown", None) if calls["n"] >= 5 else real(model, request, deadline)

    monkeypatch.setattr(mod, "_solve", limited)
    res = search(SearchRequest(**CASES["gpt-dense-2gpus"], objective="fastest"))  # one solve for the pick
    full = _run("gpt-dense-2gpus", "exhaustive")
    assert not res.stats.proven_optimal
    walk_order = sorted(full.front, key=lambda p: (p.days, p.cost_usd, p.num_gpus))
    assert set(_front_key(res)) == {(p.gpu, p.num_gpus, p.plan) for p in walk_order[:3]} and len(res.front) == 3


def test_huge_model_on_a_million_gpus_does_not_overflow(tmp_path):
    f = tmp_path / "ten-t.yaml"
    f.write_text("base: megatron-gpt-1t\nname: ten-t\nnum_layers: 500\nhidden_size: 40960\nnum_heads: 320\n"
                 "ffn_hidden_size: 163840\n")
    req = SearchRequest(model=str(f), gpu=["gb300-nvl72", "b200"], gpus=[2**19, 2**20], global_batch=[2**14],
                        tokens=1e15, knobs=Knobs(tp=[8], max_micro_batch=1, max_vpp=1, max_cp=2))
    a = search(req)
    b = search(req.model_copy(update={"solver": "exhaustive"}))
    assert a.front and _front_key(a) == _front_key(b)
    assert a.inputs.params > 9e12
    for p in a.front:
        assert math.isfinite(p.cost_usd) and p.cost_usd > 1e8


def test_default_gpu_range_doubles_until_it_stops_paying():
    res = search(SearchRequest(model="megatron-gpt-1.7b", gpu=["a100-80gb"], solver="exhaustive"))
    counts = res.inputs.gpu_counts["a100-80gb"]
    cap = counts[-1]
    assert counts == list(range(8, cap + 1, 8))
    nodes = cap // 8
    assert nodes >= 16 and nodes & (nodes - 1) == 0
    best = lambda hi: min(p.days for p in res.front if p.num_gpus <= hi)  # noqa: E731
    assert best(cap) > (2 / 3) * best(cap // 2)
    assert best(cap // 2) <= (2 / 3) * best(cap // 4)


def test_default_gpu_range_answers_as_its_counts_given_explicitly():
    """The default range's pieces are priced one doubling at a time and read as one space without
    joining their columns up front (candidates._JoinedArrays); the same counts given as a list are one
    space joined up front: the same front (plans, figures, what binds), recommendation and counts (every
    candidate, framework-free); spanning the frameworks, the same front and recommendation (the plans their
    rules keep may differ among candidates of equal run time: the stable order of the two spaces differs)."""
    for fw in ("none", None):
        a = search(SearchRequest(model="gpt3-175b", gpu=["a100-80gb"], framework=fw))
        counts = a.inputs.gpu_counts["a100-80gb"]
        assert len(counts) > 64  # several doublings, and more counts than the explicit list's pieces
        b = search(SearchRequest(model="gpt3-175b", gpu=["a100-80gb"], gpus=counts, framework=fw))
        assert a.front and [p.model_dump() for p in a.front] == [p.model_dump() for p in b.front]
        assert a.recommended == b.recommended and a.recommended_index == b.recommended_index
        if fw == "none":
            assert (a.stats.candidates, a.stats.feasible, a.stats.memory_rejected) == \
                (b.stats.candidates, b.stats.feasible, b.stats.memory_rejected)


# ------------------------------------------------------------------ nothing feasible
def test_nothing_fits_explains_and_suggests_checked_changes():
    req = SearchRequest(model="gpt3-175b", gpu=["a100-40gb"], gpus=[64], knobs=Knobs(zero=[0, 1], recompute=["none"]))
    with pytest.raises(NoFeasiblePlan) as info:
        search(req)
    e = info.value
    assert e.reason == "memory" and e.smallest_gib > e.usable_gib and e.system == "a100-40gb"
    assert e.smallest_plan is not None and e.smallest_plan.num_gpus == 64
    msg = str(e)
    assert "\n" not in msg and "GiB" in msg and "64 GPUs" in msg
    for start in ("ZeRO-3 with --zero 3", "full recomputation", "a larger-memory GPU"):
        assert any(a.change.startswith(start) for a in e.alternatives), start
    assert any(re.fullmatch(r"[0-9,]+ a100-40gb GPUs|more GPUs, up to [0-9,]+", a.change) for a in e.alternatives)
    depth = top = 0
    for ch in msg:  # one level of brackets at most
        depth += {"(": 1, ")": -1}.get(ch, 0)
        top = max(top, depth)
    assert top <= 1
    for a in e.alternatives:  # each suggestion was evaluated: re-check the plans it names
        if a.fits and a.plan is not None:
            gpu = a.change.split(", ")[1].split(" ")[0] if a.change.startswith("a larger") else "a100-40gb"
            est = estimate("gpt3-175b", gpu, a.plan, memory_headroom=req.memory_headroom, tokens=req.tokens)
            assert est.feasible and est.memory.peak_gib == pytest.approx(a.peak_gib, rel=1e-9)


@pytest.mark.parametrize("kw,word", [
    (dict(deadline_days=1.0), "deadline"),
    (dict(budget_usd=10.0), "budget"),
    (dict(max_power_kw=1.0), "power"),
    (dict(max_comm_ratio=1e-6, knobs=Knobs(tp=[8])), "comm ratio"),
])
def test_other_limits_name_themselves(kw, word):
    with pytest.raises(NoFeasiblePlan, match=word) as info:
        search(SearchRequest(model="llama2-7b", gpu=["h100-sxm"], max_gpus=32, **kw))
    assert info.value.reason == word.replace(" ", "_")


# ------------------------------------------------------------------ CLI
def _cli(*args):
    return CliRunner().invoke(main, list(args))


SMALL = ["--model", "megatron-gpt-1.7b", "--gpu", "a100-80gb,h100-sxm", "--gpus", "8..64"]


def test_cli_table_fits_80_columns_and_shows_the_recommended_breakdown():
    r = _cli(*SMALL)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(x) for x in lines) <= 80
    rec = next(i for i, x in enumerate(lines) if x.startswith("recommended: "))
    assert lines[rec].endswith("(balanced)") and rec < next(i for i, x in enumerate(lines) if x.startswith("front of"))
    assert any("time per step" in x and "memory/GPU" in x for x in lines)
    assert sum(bool(re.search(r"% \*[a-z]", x)) for x in lines) == 1  # the recommended row, marked once


def test_cli_json_is_the_result_document():
    r = _cli(*SMALL, "--format", "json", "--objective", "cheapest")
    assert r.exit_code == 0, r.output
    res = SearchResult.model_validate_json(r.output)
    api = search(SearchRequest(model="megatron-gpt-1.7b", gpu=["a100-80gb", "h100-sxm"], min_gpus=8, max_gpus=64,
                               objective="cheapest"))
    assert _front_key(res) == _front_key(api) and res.recommended == api.recommended
    assert res.inputs.gpu_counts["h100-sxm"] == list(range(8, 65, 8))


def test_cli_csv_one_row_per_front_point():
    r = _cli(*SMALL, "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    res = SearchResult.model_validate_json(_cli(*SMALL, "--format", "json").output)
    assert len(rows) == len(res.front)
    assert [int(x["num_gpus"]) for x in rows] == [p.num_gpus for p in res.front]
    assert sum(x["recommended"] == "True" for x in rows) == 1


@pytest.mark.parametrize("which", ["request", "result"])
def test_cli_schema(which):
    r = _cli("--schema", which)
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["type"] == "object" and "properties" in doc
    assert ("front" if which == "result" else "deadline_days") in doc["properties"]


def test_cli_knob_bounds_and_request_file(tmp_path):
    r = _cli("--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "16,32", "--tp", "2", "--pp", "1..2",
             "--zero", "0,1", "--recompute", "selective", "--format", "json")
    assert r.exit_code == 0, r.output
    res = SearchResult.model_validate_json(r.output)
    for p in res.front:
        assert p.plan.tp == 2 and p.plan.pp <= 2 and p.plan.zero <= 1 and p.plan.recompute == "selective"
    f = tmp_path / "req.yaml"
    f.write_text("model: llama2-7b\ngpu: [h100-sxm]\ngpus: [16, 32]\nknobs: {tp: [2], pp: [1, 2], zero: [0, 1], "
                 "recompute: [selective]}\n")
    r2 = _cli("--request", str(f), "--format", "json")
    assert r2.exit_code == 0, r2.output
    assert _front_key(SearchResult.model_validate_json(r2.output)) == _front_key(res)


def test_cli_infeasible_exits_3_with_the_message():
    r = _cli("--model", "gpt3-175b", "--gpu", "a100-40gb", "--gpus", "64", "--zero", "0", "--recompute", "none")
    assert r.exit_code == 3
    assert "Traceback" not in r.output
    assert "infeasible: no plan fits in memory" in r.stderr
    assert "would fit:" in r.stderr and "GiB" in r.stderr


@pytest.mark.parametrize("args,word", [
    (["--model", "gpt3-175b", "--gpu", "nosuchgpu", "--gpus", "64"], "gpu"),
    (["--model", "gpt3-175b", "--gpu", "a100", "--gpus", "64..8"], "empty"),
    (["--model", "gpt3-175b", "--gpu", "a100", "--tp", "7", "--gpus", "64"], "tp"),
    (["--model", "gpt3-175b", "--gpu", "a100", "--gpus", "64", "--memory-headroom", "1.5"], "memory_headroom"),
    (["--gpu", "a100"], "--model"),
])
def test_cli_bad_input_exits_2(args, word):
    r = _cli(*args)
    assert r.exit_code == 2, r.output
    assert word in (r.stderr + r.output) and "Traceback" not in r.output


def test_max_nodes_and_what_if_overrides():
    base = dict(model="llama2-7b", gpu=["h100-sxm"], max_gpus=128, solver="exhaustive")
    capped = search(SearchRequest(**base, max_nodes=4))
    assert max(capped.inputs.gpu_counts["h100-sxm"]) == 32 and all(p.num_gpus <= 32 for p in capped.front)
    ref = search(SearchRequest(**base))
    dear = search(SearchRequest(**base, sets=["price_per_gpu_hour_usd=10"]))
    assert _front_key(dear) == _front_key(ref)
    for a, b in zip(ref.front, dear.front):
        assert b.cost_usd == pytest.approx(a.cost_usd * 10 / get_cluster("h100-sxm").price_per_gpu_hour_usd)


def test_value_parsers():
    assert parse_int_set("1..4,8", "x") == [1, 2, 3, 4, 8]
    assert parse_int_set("64..256:64", "x") == [64, 128, 192, 256]
    assert parse_gpus("256,512") == {"gpus": [256, 512]}
    assert parse_gpus("64..1024") == {"min_gpus": 64, "max_gpus": 1024, "gpus_step": None}
    assert parse_global_batch("1024..2048") == list(range(1024, 2049, 128))
    assert parse_global_batch("1536") == [1536]
