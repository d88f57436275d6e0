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
