"""planner.frameworks.recipes: each framework's current performance-recipe values, with sources, per GPU."""

import pytest

from plan_search.hardware.catalog import load_catalog
from plan_search.planner.costmodel.plan import Plan, choice_fields
from plan_search.planner.frameworks import recipes
from plan_search.planner.frameworks.rules import FRAMEWORKS, MEMORY_KNOBS, allowed


def test_every_value_is_a_plan_value_with_a_versioned_source():
    choices = choice_fields()
    for e in recipes.ENTRIES:
        assert e.framework in FRAMEWORKS
        assert e.knob in Plan.model_fields and e.knob in recipes.RECIPE_KNOBS
        if e.knob in choices:
            assert e.value in choices[e.knob], e
        else:
            assert isinstance(e.value, bool), e
        # a repository or paper, and a release or commit
        assert "@" in e.source or "arXiv" in e.source, e.source
    for fw, runs in recipes.RUNS.items():
        assert set(runs) == set(recipes.RECIPE_KNOBS), fw


def test_blackwell_mxfp8_moe_is_the_full_iteration_recipe():
    b300 = load_catalog()["b300"]
    d = recipes.recipe_defaults("megatron", b300, "mxfp8", moe=True)
    assert {k: v.value for k, v in d.items() if k in recipes.MOE_KNOBS} == {
        "moe_dispatcher": "flex", "moe_overlap": True, "moe_grouped_gemm": "fused", "fp8_attention": True}
    value, source = d["moe_grouped_gemm"]
    assert value == "fused" and "v0.6.0" in source and "NVTE_CUTEDSL_FUSED_GROUPED_MLP" in source
    # bf16 on the same GPU: no fused grouped MLP (block-scaled recipes only), no EP overlap
    d16 = recipes.recipe_defaults("megatron", b300, "bf16", moe=True)
    assert (d16["moe_grouped_gemm"].value, d16["moe_overlap"].value) == ("loop", False)


def test_hopper_and_ampere_defaults():
    h100 = load_catalog()["h100-sxm"]
    d = recipes.recipe_defaults("megatron", h100, "fp8-current", moe=True)
    assert (d["moe_dispatcher"].value, d["moe_overlap"].value, d["moe_grouped_gemm"].value) == ("flex", False, "loop")
    assert recipes.recipe_defaults("nemo", h100, "bf16", moe=False)["overlap_tp_comm"].value is True
    assert recipes.recipe_defaults("deepspeed", h100, moe=True)["moe_dispatcher"].value == "alltoall"
    assert recipes.recipe_defaults("torchtitan", h100, moe=True)["moe_grouped_gemm"].value == "fused"
    a100 = load_catalog()["a100-80gb"]
    assert recipes.recipe_defaults("megatron", a100, moe=True)["moe_dispatcher"].value == "alltoall"
    assert recipes.recipe_defaults(None, h100) == {}


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_searched_values_are_runnable_and_start_with_the_recipe(fw):
    cat = load_catalog()
    for gpu in ("a100-80gb", "h100-sxm", "b200", "b300"):
        c = cat[gpu]
        for precision in allowed(fw).precision:
            from plan_search.planner.costmodel.compute import supports_precision

            if not supports_precision(c, precision):
                continue
            for moe in (True, False):
                vals = recipes.searched_values(fw, c, precision, moe)
                d = recipes.recipe_defaults(fw, c, precision, moe)
                for knob, v in vals.items():
                    assert len(set(v)) == len(v) and v
                    assert set(v) <= set(recipes.RUNS[fw][knob])
                    if knob in MEMORY_KNOBS[fw]:
                        assert set(v) <= set(MEMORY_KNOBS[fw][knob]), (fw, knob, v)
                    if knob in d and d[knob].value in recipes.RUNS[fw][knob]:
                        if not (moe is False and knob in recipes.MOE_KNOBS):
                            assert v[0] == d[knob].value or d[knob].value not in v
                if "fused" in vals["moe_grouped_gemm"] and fw != "torchtitan":  # torchtitan: torch._grouped_mm
                    assert precision in recipes.BLOCK_SCALED and c.gpu.block_scaling
                if True in vals["fp8_attention"]:
                    assert precision != "bf16" and c.gpu.block_scaling
                assert vals["pp_schedule"] == ("1f1b",)  # no framework here runs DualPipe


def test_framework_free_what_if_spans_dualpipe_and_low_precision_line():
    cat = load_catalog()
    assert "dualpipe" in recipes.searched_values(None, cat["h800"], "fp8", True)["pp_schedule"]
    assert recipes.low_precision_recipe("megatron", cat["b200"]).value == "mxfp8"
    assert recipes.low_precision_recipe("megatron", cat["h100-sxm"]).value == "fp8-current"
    assert recipes.low_precision_recipe("nemo", cat["h100-sxm"]).value == "fp8"  # NeMo here: delayed scaling only
    assert recipes.low_precision_recipe("deepspeed", cat["h100-sxm"]) is None
    assert recipes.low_precision_recipe("megatron", cat["a100-80gb"]) is None


def _dsv3_space(framework, gpu="b300", precision="mxfp8", given=()):
    from plan_search.hardware.catalog import get_cluster
    from plan_search.hardware.profiles import for_framework
    from plan_search.models.catalog import get_model
    from plan_search.planner.search.request import Knobs
    from plan_search.planner.search.space import enumerate_space, recipe_knobs

    model, cluster = get_model("deepseek-v3"), for_framework(get_cluster(gpu), framework)
    knobs = Knobs(precision=[precision], **({"pp": [8]} if framework is None else {}))
    k, resolve = recipe_knobs(knobs, set(given), framework, cluster, model)
    sp = enumerate_space(model, cluster, [256], [4096], 4096, k, resolve=resolve, framework=framework)
    plain = enumerate_space(model, cluster, [256], [4096], 4096, k)
    return model, cluster, sp, plain, resolve


def test_resolved_knobs_take_the_preferred_value_wherever_the_framework_runs_it():
    """The recipe's knobs that never slow a plan (EP overlap, fused grouped MLP, TP overlap, FP8 attention) are
    resolved per row: one row per layout, the preferred value exactly where megatron's rules accept it."""
    import numpy as np

    from plan_search.planner.frameworks.rules import check

    model, cluster, sp, plain, resolve = _dsv3_space("megatron")
    assert set(resolve) == {"moe_overlap", "moe_grouped_gemm", "fp8_attention", "overlap_tp_comm", "moe_dispatcher"}
    assert len(sp) == len(plain)  # one row per layout: the values are not crossed
    assert {c["moe_dispatcher"] for c in sp.combos} == {"flex", "alltoall"}  # alltoall at ep 1 (nothing to send)
    assert np.array_equal(sp.x.tp, plain.x.tp) and np.array_equal(sp.x.ep, plain.x.ep)  # same order
    rng = np.random.default_rng(0)
    seen = set()
    for i in rng.choice(len(sp), 300, replace=False).tolist():
        p = sp.plan(i)
        seen.add((p.moe_overlap, p.moe_grouped_gemm))
        ids = {v.rule.id for v in check("megatron", p, model, cluster)}
        assert "megatron-moe-overlap" not in ids and "megatron-moe-fused-grouped-mlp" not in ids
        if not p.moe_overlap and p.ep > 1:  # the fallback only where the preferred value breaks the rule
            q = p.model_copy(update={"moe_overlap": True})
            assert "megatron-moe-overlap" in {v.rule.id for v in check("megatron", q, model, cluster)}
        assert p.moe_grouped_gemm == ("fused" if p.etp == 1 else "loop")
        assert p.fp8_attention  # 4,096 tokens per rank: FP8 attention is faster on Blackwell
        assert p.moe_dispatcher == ("flex" if p.ep > 1 else "alltoall")
    assert (True, "fused") in seen and (False, "fused") in seen
    # a knob the user gives pins it: not resolved, not spanned
    _, _, sp2, _, resolve2 = _dsv3_space("megatron", given={"moe_overlap", "moe_dispatcher"})
    assert "moe_overlap" not in resolve2 and {c["moe_overlap"] for c in sp2.combos} == {False}
    assert {c["moe_dispatcher"] for c in sp2.combos} == {"alltoall"}


def test_framework_free_space_crosses_dualpipe_and_rows_rebuild():
    from plan_search.planner.costmodel.arrays import PlanArrays

    model, cluster, sp, plain, resolve = _dsv3_space(None, gpu="h800", precision="fp8")
    assert {c["pp_schedule"] for c in sp.combos} == {"1f1b", "dualpipe"}
    assert "moe_grouped_gemm" not in resolve  # fp8 on Hopper: the fused grouped MLP is not spanned
    for i in range(0, len(sp), max(1, len(sp) // 50)):
        p = sp.plan(i)
        row = PlanArrays.from_plans([p], model.num_layers)
        for f in ("moe_ovl", "ovl_tp", "gemm_fused", "fp8_attn", "moe_disp", "pp_sched", "vpp", "ep"):
            assert getattr(row, f)[0] == getattr(sp.x, f)[i], (i, f)


def test_enumerate_with_recipes_pins_what_the_user_gave_through_the_framework_narrowing():
    """enumerate_space(recipes=True) spans the recipe knobs the knobs' user left unset; a knob the user gave stays
    pinned although the framework's narrowing (rules.Capabilities.knobs) sets more knobs on the copy."""
    from plan_search.hardware.catalog import get_cluster
    from plan_search.models.catalog import get_model
    from plan_search.planner.frameworks.rules import allowed
    from plan_search.planner.search.request import SearchRequest
    from plan_search.planner.search.space import enumerate_space

    model, cluster = get_model("deepseek-v3"), get_cluster("b300")

    def combos(**given):
        req = SearchRequest(model="deepseek-v3", gpu=["b300"], precision=["mxfp8"], **given)
        knobs = allowed("megatron").knobs(req.knobs)  # sets moe_grouped_gemm (a memory knob of the framework)
        assert "moe_grouped_gemm" in knobs.model_fields_set and knobs._user_given == frozenset(given) | {"precision"}
        sp = enumerate_space(model, cluster, [256], [4096], 4096, knobs, framework="megatron", recipes=True)
        return {(c["moe_dispatcher"], c["moe_overlap"], c["moe_grouped_gemm"]) for c in sp.combos}

    free = combos()
    assert {d for d, _, _ in free} == {"flex", "alltoall"} and (("flex", True, "fused") in free)
    assert combos(moe_grouped_gemm=["loop"], moe_overlap=[False], moe_dispatcher=["alltoall"]) == {
        ("alltoall", False, "loop")}


def test_dispatcher_preference_grouped_equals_row_by_row():
    """space._preferred_rows prices the exchange once per EXCHANGE_COLUMNS group: the same rows as pricing
    every row (a column exchange_s reads that the grouping missed would make them differ)."""
    import numpy as np

    from plan_search.hardware.catalog import get_cluster
    from plan_search.models.catalog import get_model
    from plan_search.planner.costmodel.dispatch import exchange_s
    from plan_search.planner.search import space
    from plan_search.planner.search.request import Knobs

    for name, gpu, prec in (("deepseek-v3", "h100-sxm", "bf16"), ("qwen3-235b-a22b", "b300", "mxfp8"),
                            ("mixtral-8x22b", "a100-80gb", "bf16")):
        model, cluster = get_model(name), get_cluster(gpu)
        sp = space.enumerate_space(model, cluster, [64, 512, 2048], [model.global_batch], model.seq_len,
                                   Knobs(precision=[prec]))
        x = sp.x
        got = space._preferred_rows(model, cluster, x, sp.rc_kind, sp.uneven, sp.combos[0], "moe_dispatcher",
                                    ("flex", "alltoall"), None)
        from dataclasses import fields

        def disp(code):
            return space.PlanArrays(**{f.name: (np.full(len(x), code) if f.name == "moe_disp" else getattr(x, f.name))
                                       for f in fields(space.PlanArrays)})
        want = (x.ep > 1) & (exchange_s(model, cluster, disp(2)) <= exchange_s(model, cluster, disp(0)))
        assert np.array_equal(got, want), name
        assert got.any()


def test_with_recipe_defaults_fills_what_the_user_left_and_the_framework_runs():
    from plan_search.hardware.catalog import get_cluster
    from plan_search.hardware.profiles import for_framework
    from plan_search.models.catalog import get_model
    from plan_search.planner.costmodel.arrays import PlanArrays
    from plan_search.planner.costmodel.evaluate import evaluate
    from plan_search.planner.frameworks.rules import as_run

    m, c = get_model("deepseek-v3"), for_framework(get_cluster("b300"), "megatron")
    shape = dict(num_gpus=256, tp=1, pp=8, ep=8, micro_batch=2, global_batch=4096, seq_len=4096, precision="mxfp8",
                 first_stage_layers=7, last_stage_layers=6, moe_imbalance=1.0)
    q, applied = recipes.with_recipe_defaults("megatron", Plan(**shape), m, c)
    # the full-iteration MXFP8 recipe's values, but not its EP overlap: pp 8 without virtual stages cannot run it
    assert [(k, v) for k, v, _ in applied] == [("moe_dispatcher", "flex"), ("moe_grouped_gemm", "fused"),
                                               ("fp8_attention", True)]
    assert not q.moe_overlap and all("v0.6.0" in s for _, _, s in applied)

    def step(p):
        return float(evaluate(m, c, PlanArrays.from_plans([as_run("megatron", p, m, c)], m.num_layers))["step_s"][0])

    assert step(q) < 0.8 * step(Plan(**shape))  # the recipe's knobs: 18.2 s where the library defaults give 24
    assert 18.0 < step(q) < 18.6
    # a knob the user gives stays; with virtual stages the recipe's EP overlap runs too
    q2, applied2 = recipes.with_recipe_defaults("megatron", Plan(**{**shape, "moe_grouped_gemm": "loop", "vpp": 2,
                                                                    "first_stage_layers": 7, "last_stage_layers": 6,
                                                                    "micro_batch": 1}), m, c)
    assert q2.moe_grouped_gemm == "loop" and [(k, v) for k, v, _ in applied2] == [
        ("moe_dispatcher", "flex"), ("moe_overlap", True), ("fp8_attention", True)]
