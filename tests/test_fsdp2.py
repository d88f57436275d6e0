"""FSDP2 as it runs (issue 29): the all-gather copy-out and the reduce-scatter copy-in on the compute
stream, and the root unit's gather and the last reduce-scatter that no prefetch hides
(comm.fsdp2_step_terms, the torchtitan profiles' ``fsdp2``)."""

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.profiles import for_framework
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import comm, experts, memory
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.plan import Plan

KW = dict(num_gpus=8, zero=3, micro_batch=2, global_batch=32, seq_len=8192, precision="bf16", recompute="full",
          reshard_after_forward=True, fp32_grads=True)


def test_copies_and_edges_are_priced_per_micro_batch():
    c = for_framework(get_cluster("h100-sxm"), "torchtitan")
    assert c.efficiency.fsdp2
    m = get_model("llama3.1-8b")
    x = PlanArrays.from_plans([Plan(**KW)], m.num_layers)
    psi = memory.stage_params(m, x, "first")
    dp = comm.dp_step_s(psi, x, c)
    assert dp["n_fwd_gather"][0] == dp["n_bwd_gather"][0] == dp["n_red"][0] == 2  # two micro-batches, resharded
    emb, out = memory._end_params(m)
    f2 = comm.fsdp2_step_terms(psi, emb + out, experts.layer_params_local(m, x), x, c, dp)
    hbm = c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff
    assert f2["copy_s"][0] == pytest.approx(float(psi[0]) * (4.0 * 4 + (2.0 + 4.0) * 2) / hbm)
    gather = comm.collective_s(comm.ALL_GATHER, 2.0 * (emb + out), 8, 8, c) / c.efficiency.zero3_bw_eff
    reduce = comm.collective_s(comm.REDUCE_SCATTER, 4.0 * (emb + out + float(experts.layer_params_local(m, x)[0])),
                               8, 8, c) / c.efficiency.zero3_bw_eff
    assert f2["edge_s"][0] == pytest.approx(2 * float(gather) + 2 * float(reduce))


def test_only_fsdp2_pays_them_and_the_step_carries_them():
    m, meg = get_model("llama3.1-8b"), get_cluster("h100-sxm")
    tt = for_framework(meg, "torchtitan")
    assert not meg.efficiency.fsdp2
    a = ps.estimate(m, tt, **KW)
    b = ps.estimate(m, tt.model_copy(update={"efficiency": tt.efficiency.model_copy(update={"fsdp2": False})}), **KW)
    x = PlanArrays.from_plans([Plan(**KW)], m.num_layers)
    psi = memory.stage_params(m, x, "first")
    f2 = comm.fsdp2_step_terms(psi, sum(memory._end_params(m)), experts.layer_params_local(m, x), x, tt,
                               comm.dp_step_s(psi, x, tt))
    assert a.time.memory_bound_s - b.time.memory_bound_s == pytest.approx(float(f2["copy_s"][0]))
    assert a.time.dp_comm_s >= float(f2["edge_s"][0]) - 1e-12
    assert a.step_time_s > b.step_time_s
    # no sharding, nothing: DDP (zero 0)
    ddp = dict(KW, zero=0)
    assert ps.estimate(m, tt, **ddp).step_time_s == pytest.approx(ps.estimate(
        m, tt.model_copy(update={"efficiency": tt.efficiency.model_copy(update={"fsdp2": False})}), **ddp).step_time_s)
