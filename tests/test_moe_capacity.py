"""Token dropping and padding to capacity (issue 13): the model's ``moe_capacity_factor`` bounds the
busiest expert's rows, and Plan ``moe_pad_to_capacity`` (Megatron --moe-pad-expert-input-to-capacity)
makes every expert compute exactly its capacity with no device-to-host sync, so the local experts'
GEMM launches overlap the GPU's work (experts.expert_gemms_fwd_s). Through ``plan_search.estimate``
and plan-estimate, with real numbers."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import experts

from cli_helpers import one_stderr_line
from plan_search.cli.estimate import main as estimate_main

B200 = "b200"
BASE = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=64, micro_batch=1, seq_len=4096, recompute="none",
            moe_dispatcher="alltoall", precision="bf16")


def _model(cf):
    return get_model("qwen3-30b-a3b").model_copy(update={"moe_capacity_factor": cf})


def _est(model, **kw):
    return ps.estimate(model, B200, **{**BASE, **kw}, memory_headroom=0.0)


def test_padding_hides_the_expert_gemm_launches():
    """Qwen3-30B-A3B on 8 B200, ep 8: 16 local experts of 2,048 rows each, one micro-batch of 4,096
    tokens, 8 micro-batches per step, 48 MoE layers. At capacity factor 1 with balanced routing the
    padded and the dropless runs compute the same rows; padded, the 2 x 16 GEMM launches of a forward
    overlap the GEMMs (the longer of the two), dropless they add (the dispatcher's host sync). The
    compute differs by exactly min(roofline, launches) per MoE layer pass, forward and 2x backward."""
    m = _model(1.0)
    drop = _est(m, moe_imbalance=1.0)
    pad = _est(m, moe_imbalance=1.0, moe_pad_to_capacity=True)
    c = get_cluster(B200)
    rows, groups = 8 * 4096.0, 16.0
    h, fe = m.hidden_size, m.expert_ffn_hidden_size
    roof1, launch1 = experts._grouped_gemm_s(rows, groups, h, 2 * fe, c, 0)
    roof2, launch2 = experts._grouped_gemm_s(rows, groups, fe, h, c, 0)
    roof, launch = float(roof1 + roof2), float(launch1 + launch2)
    assert launch == pytest.approx(32 * c.efficiency.grouped_gemm_call_s)
    hidden = min(roof, launch) * 3 * 48 * 8
    assert drop.time.compute_s - pad.time.compute_s == pytest.approx(hidden, rel=1e-9)
    assert hidden > 0.1  # a visible share: the run is launch-bound
    assert drop.time.ep_comm_s == pytest.approx(pad.time.ep_comm_s, rel=1e-12)  # the same rows sent


def test_capacity_bounds_the_busiest_expert():
    """Dropless, real routing sends the busiest rank 1.3x the balanced share; a capacity factor of 1.1
    drops what exceeds 1.1x: priced as an imbalance of 1.1. Padded to a capacity of 1.25, every expert
    computes and receives 1.25x its share whatever the routing: the dispatch moves the bytes of an
    imbalance of 1.25."""
    dropless = get_model("qwen3-30b-a3b")
    capped = _est(_model(1.1), moe_imbalance=1.3)
    assert capped.step_time_s == pytest.approx(_est(dropless, moe_imbalance=1.1).step_time_s, rel=1e-12)
    assert capped.step_time_s < _est(dropless, moe_imbalance=1.3).step_time_s
    padded = _est(_model(1.25), moe_imbalance=1.0, moe_pad_to_capacity=True)
    assert padded.time.ep_comm_s == pytest.approx(_est(dropless, moe_imbalance=1.25).time.ep_comm_s, rel=1e-12)
    assert padded.time.ep_comm_s > 1.2 * _est(dropless, moe_imbalance=1.0).time.ep_comm_s


def test_plan_estimate_pads_a_model_file_with_a_capacity(tmp_path):
    """plan-estimate --moe-pad-to-capacity on a model file giving a capacity factor: faster than the
    same run dropless (the launches hide), and the JSON plan says so; on the catalog's dropless model
    and with the flex dispatcher it is one line naming the knob and the fix, exit 2."""
    f = tmp_path / "q30-cf1.yaml"
    f.write_text("base: qwen3-30b-a3b\nmoe_capacity_factor: 1.0\n", encoding="utf-8")
    args = ["--model", str(f), "--gpu", "b200", "--num-gpus", "8",
            "--ep", "8", "--micro-batch", "1", "--global-batch", "64", "--recompute", "none", "--moe-imbalance", "1",
            "--format", "json"]
    outs = {}
    for flag in ("off", "on"):
        r = CliRunner().invoke(estimate_main, args + ["--moe-pad-to-capacity", flag])
        assert r.exit_code == 0, r.output
        outs[flag] = json.loads(r.stdout)
    assert outs["on"]["plan"]["moe_pad_to_capacity"] is True
    assert outs["on"]["step_time_s"] < 0.97 * outs["off"]["step_time_s"]
    for extra, words in ((["--model", "qwen3-30b-a3b"], "no moe_capacity_factor"),
                         (["--moe-dispatcher", "flex"], "flex dispatcher")):
        r = CliRunner().invoke(estimate_main, args + ["--moe-pad-to-capacity", "on"] + extra)
        assert r.exit_code == 2
        line = one_stderr_line(r)
        assert "moe_pad_to_capacity" in line and words in line


def test_search_refuses_padding_without_a_capacity_and_searches_it_with_one(tmp_path):
    """plan-search refuses moe_pad_to_capacity on a dropless MoE model before it enumerates (one line,
    exit 2; it used to search and price the hidden launches of a capacity that does not exist); on a
    dense model it changes nothing, as every MoE knob (the same front); on a model file with a capacity
    factor a search over on,off returns plans that pad, each priced as plan-estimate prices it."""
    from plan_search.cli.search import main as search_main

    r = CliRunner().invoke(search_main, ["--model", "qwen3-30b-a3b", "--gpu", "b200", "--moe-pad-to-capacity", "on",
                                         "--time-limit", "5"])
    assert r.exit_code == 2
    line = one_stderr_line(r)
    assert line.startswith("error: moe_pad_to_capacity:") and "routes dropless" in line
    dense = [ps.search(ps.SearchRequest(model="llama-3-8b", gpu=["b200"], gpus=[8, 16], time_limit_s=20, knobs=k))
             for k in ({}, {"moe_pad_to_capacity": [True]})]
    assert [(p.num_gpus, p.step_time_s) for p in dense[0].front] == [(p.num_gpus, p.step_time_s) for p in dense[1].front]
    f = tmp_path / "q30-cf125.yaml"
    f.write_text("base: qwen3-30b-a3b\nmoe_capacity_factor: 1.25\n", encoding="utf-8")
    # under the all-to-all dispatcher (the flex one, which the search spans by default, cannot pad: issue 23)
    req = ps.SearchRequest(model=str(f), gpu=["b200"], gpus=[8, 16], time_limit_s=20,
                           knobs={"moe_pad_to_capacity": [True, False], "moe_dispatcher": ["alltoall"]})
    res = ps.search(req)
    assert res.front and all(pt.plan.moe_pad_to_capacity for pt in res.front)
    for pt in res.front:
        e = ps.estimate(str(f), "b200", pt.plan, memory_headroom=req.memory_headroom)
        assert e.step_time_s == pytest.approx(pt.step_time_s, rel=1e-9)


def test_frameworks_and_model_files_on_capacity(tmp_path):
    """Megatron-LM's flags carry the padding and read back; torchtitan (dropless) refuses it with its
    rule; a non-finite capacity factor in a model file is one line naming the field."""
    from plan_search.planner.frameworks import emit

    m = _model(1.25)
    p = ps.Plan(**{**BASE, "moe_pad_to_capacity": True})
    args = emit.to_megatron_args(p, m)
    assert "--moe-pad-expert-input-to-capacity" in args
    assert args[args.index("--moe-expert-capacity-factor") + 1] == "1.25"
    assert emit.from_megatron_args(args, num_gpus=8).moe_pad_to_capacity is True
    f = tmp_path / "q30.yaml"
    f.write_text("base: qwen3-30b-a3b\nmoe_capacity_factor: 1.25\n", encoding="utf-8")
    base = ["--model", str(f), "--gpu", "b200", "--num-gpus", "8", "--ep", "8"]
    r = CliRunner().invoke(estimate_main, base + ["--framework", "torchtitan", "--moe-pad-to-capacity", "on"])
    assert r.exit_code == 2 and "torchtitan-moe-pad-to-capacity" in one_stderr_line(r)
    f.write_text("base: qwen3-30b-a3b\nmoe_capacity_factor: .nan\n", encoding="utf-8")
    r = CliRunner().invoke(estimate_main, base)
    assert r.exit_code == 2 and "moe_capacity_factor" in one_stderr_line(r) and "finite" in one_stderr_line(r)
