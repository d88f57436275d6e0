"""Step time of a plan: the pure combination of compute, communication, pipeline and optimizer.

One function, :func:`step_time`, evaluates every candidate at once; ``plan-estimate``, the
search and the exhaustive oracle all call it. The returned breakdown sums exactly to
``step_s``:

``step = m * (stage compute + memory-bound + recompute + exposed TP/CP/PP comm of the slowest
stage) + bubble + exposed DP comm + optimizer + fixed overhead``.

Overlap: with ``overlap_tp_comm`` a fraction ``tp_overlap`` of TP communication is hidden
(Transformer Engine user-buffer overlap); the CP ring hides behind attention compute up to
``cp_overlap`` of it; pipeline sends hide ``pp_overlap`` of their time; the gradient
reduce-scatter / all-reduce hides behind the backward of the last micro-batch and the parameter
all-gather behind the forward of the first (Megatron ``--overlap-grad-reduce``,
``--overlap-param-gather``), each at most ``dp_overlap`` of that compute; ZeRO-2/3 collectives
repeat per micro-batch and hide per micro-batch.
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel import comm
from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel import context_parallel
from plan_search.planner.costmodel import dispatch
from plan_search.planner.costmodel import experts
from plan_search.planner.costmodel import memory
from plan_search.planner.costmodel import muon
from plan_search.planner.costmodel import offload
from plan_search.planner.costmodel import pipeline
from plan_search.planner.costmodel import recompute
from plan_search.planner.costmodel.arrays import PlanArrays

TIME_KEYS = (
    "compute_s",
    "memory_bound_s",
    "recompute_s",
    "tp_comm_s",
    "cp_comm_s",
    "pp_comm_s",
    "ep_comm_s",
    "bubble_s",
    "dp_comm_s",
    "optimizer_s",
    "overhead_s",
)


def _stage_components(model, cluster, x, layers, lt, comm_layer, with_embed, with_logits, lg, em, pp_s):
    """Per micro-batch seconds of one stage, by component."""
    n_rc = np.minimum(x.rc_layers, layers).astype(float)
    comp = layers * (lt["compute_fwd_s"] + lt["compute_bwd_s"])
    mem = layers * (lt["membound_fwd_s"] + lt["membound_bwd_s"])
    rc_full = n_rc * (lt["compute_fwd_s"] + lt["membound_fwd_s"])
    rc_sel = np.where(x.recompute == 1, layers * lt["selective_rerun_s"], 0.0)
    tp = layers * comm_layer["tp_exposed"] + n_rc * comm_layer["tp_exposed_fwd"]
    cp = layers * comm_layer["cp_exposed"] + n_rc * comm_layer["cp_exposed_fwd"]
    comp = comp + np.where(with_embed, em["compute_s"], 0.0) + np.where(with_logits, lg["compute_s"], 0.0)
    mem = mem + np.where(with_embed, em["membound_s"], 0.0) + np.where(with_logits, lg["membound_s"], 0.0)
    return {
        "compute_s": comp,
        "memory_bound_s": mem,
        "recompute_s": rc_full + rc_sel,
        "tp_comm_s": tp,
        "cp_comm_s": cp,
        "pp_comm_s": pp_s,
    }


def _moe_stage_terms(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, lt) -> dict:
    """Per stage and micro-batch, what its MoE layers add to a dense stage
    (:func:`experts.moe_layer_times`), the token dispatch and combine (:mod:`dispatch`, the
    ``ep_comm_s`` entry) and, for MLA, the attention GEMMs' difference; zeros for a dense model."""
    zero = np.zeros(len(x))
    if not model.is_moe and getattr(model, "kv_lora_rank", None) is None and not model.mtp_num_layers:
        terms = {"ep_comm_s": zero}
        return {**{st: terms for st in memory.STAGES}, "ep_raw": {st: zero for st in memory.STAGES}}
    mla_f = experts.mla_attention_fwd_s(model, cluster, x)
    per_stage_layers = {"first": x.first, "middle": x.mid, "last": x.last}
    n_moe = experts.stage_moe_layers(model, x)
    if model.is_moe:
        mt = experts.moe_layer_times(model, cluster, x)
        window = (lt["compute_fwd_s"] + lt["compute_bwd_s"] + mt["compute_fwd_s"] + mt["compute_bwd_s"]
                  + 3.0 * mla_f)  # the MoE layer's compute: what another micro-batch's exchanges run under
        ec = dispatch.ep_layer_comm(model, cluster, x, window)
    else:
        mt = {k: zero for k in ("compute_fwd_s", "compute_bwd_s", "membound_fwd_s", "membound_bwd_s")}
        ec = {"raw": zero, "exposed": zero, "raw_fwd": zero, "exposed_fwd": zero}
    # multi-token prediction (DeepSeek-V3 Sec. 2.2): per depth, one more block (a MoE block in a MoE
    # model), the 2h -> h projection of [norm(h); norm(emb)] and the shared output layer + loss,
    # on the stage that holds the output layer
    d = float(model.mtp_num_layers)
    if d:
        lg = compute.logits_times(model, cluster, x)
        T = compute.tokens_per_gpu(x)
        proj = 3.0 * compute._gemm_s(T, 2 * model.hidden_size, model.hidden_size / x.tp, cluster, x.fp8)
        mtp_comp = d * (lt["compute_fwd_s"] + lt["compute_bwd_s"] + 3.0 * mla_f + proj + lg["compute_s"]
                        + (mt["compute_fwd_s"] + mt["compute_bwd_s"] if model.is_moe else 0.0))
        mtp_mem = d * (lt["membound_fwd_s"] + lt["membound_bwd_s"] + lg["membound_s"]
                       + (mt["membound_fwd_s"] + mt["membound_bwd_s"] if model.is_moe else 0.0))
        mtp_ep = d * ec["exposed"] if model.is_moe else zero
        mtp_ep_raw = d * ec["raw"] if model.is_moe else zero
        # full recomputation of every layer redoes the MTP block's forward too (Megatron recomputes the
        # MTP layer under --recompute-method uniform, not under block: memory.mtp_activation_bytes)
        mtp_rc = np.where(x.rc_layers >= model.num_layers, d * (
            lt["compute_fwd_s"] + lt["membound_fwd_s"] + mla_f
            + (mt["compute_fwd_s"] + mt["membound_fwd_s"] if model.is_moe else 0.0)), 0.0)
    sel_layer, sel_moe = experts.selective_recompute_fwd_s(model, cluster, x)  # MoE/MLA selective set
    rc_mod_moe = recompute.flags(model, x)["moe"] if model.is_moe else np.zeros(len(x), dtype=bool)
    out = {"ep_raw": {}}  # the dispatches each stage's ep_comm_s prices, before overlap: hidden_comm_s's
    for st in memory.STAGES:
        layers, nm = per_stage_layers[st].astype(float), n_moe[st]
        n_rc = np.minimum(x.rc_layers, layers)
        rc_moe = np.minimum(n_rc, nm)  # recomputed MoE layers (at most all of them)
        rc_moe = rc_moe + np.where(rc_mod_moe, nm, 0.0)  # --recompute-modules moe: every MoE layer's forward again
        out[st] = {
            "compute_s": nm * (mt["compute_fwd_s"] + mt["compute_bwd_s"]) + layers * 3.0 * mla_f,
            "memory_bound_s": nm * (mt["membound_fwd_s"] + mt["membound_bwd_s"]),
            "recompute_s": rc_moe * (mt["compute_fwd_s"] + mt["membound_fwd_s"]) + n_rc * mla_f
            + layers * sel_layer + nm * sel_moe,
            "ep_comm_s": nm * ec["exposed"] + rc_moe * ec["exposed_fwd"],
        }
        out["ep_raw"][st] = nm * ec["raw"] + rc_moe * ec["raw_fwd"]
        if d:
            on = experts.logits_stage(x, st)
            out[st]["compute_s"] = out[st]["compute_s"] + np.where(on, mtp_comp, 0.0)
            out[st]["memory_bound_s"] = out[st]["memory_bound_s"] + np.where(on, mtp_mem, 0.0)
            out[st]["ep_comm_s"] = out[st]["ep_comm_s"] + np.where(on, mtp_ep, 0.0)
            out["ep_raw"][st] = out["ep_raw"][st] + np.where(on, mtp_ep_raw, 0.0)
            out[st]["recompute_s"] = out[st]["recompute_s"] + np.where(on, mtp_rc, 0.0)
    return out


def _layer_comm(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, lt) -> dict:
    """Exposed TP and CP seconds per layer per micro-batch (forward+backward, and forward alone
    for what full recomputation repeats), plus the raw volumes for the report."""
    eff = cluster.efficiency
    T = compute.tokens_per_gpu(x)
    tp_dir = comm.tp_layer_s(model.hidden_size, T, x, cluster)  # one direction
    tp_keep = np.where(x.ovl_tp, 1.0 - eff.tp_overlap, 1.0)
    attn_f = lt["attn_fwd_s"]
    attn_b = lt["compute_bwd_s"] - 2.0 * (lt["compute_fwd_s"] - attn_f)
    cpc = context_parallel.cp_layer_comm(model, cluster, x, T, attn_f, attn_b)  # by Plan.cp_comm_type
    cp_f, cp_b, cp_exp_f, cp_exp_b = cpc["raw_f"], cpc["raw_b"], cpc["exposed_f"], cpc["exposed_b"]
    return {
        "tp_exposed": 2.0 * tp_dir * tp_keep,
        "tp_exposed_fwd": tp_dir * tp_keep,
        "tp_raw": 2.0 * tp_dir,
        "cp_exposed": cp_exp_f + cp_exp_b,
        "cp_exposed_fwd": cp_exp_f,
        "cp_raw": cp_f + cp_b,
    }


def layout_key_extra(cluster: ClusterSpec, x: PlanArrays) -> tuple:
    """What :func:`layout_terms` reads of the :data:`arrays.LAYOUT_FREE` columns, as key arrays for
    :meth:`PlanArrays.groups`: whether a pipeline send leaves the NVLink domain (it depends on
    ``tp x cp x dp``) and, on a multi-host domain (NVL72), the job's GPUs per domain
    (:func:`comm.domain_share`: tensor- and context-parallel groups are placed in it)."""
    share = comm.domain_share(x.num_gpus, cluster)
    crosses = x.tp * x.cp * x.dp >= share
    return (crosses,) if np.ndim(share) == 0 else (crosses, share)


def layout_terms(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """The terms of :func:`step_time` that read no column of :data:`arrays.LAYOUT_FREE` beyond
    :func:`layout_key_extra`: per micro-batch, the slowest stage's components (compute,
    memory-bound, recomputation, TP/CP/PP/EP communication), the slowest and mean stage times, the
    bubble, the parameters the data-parallel step reduces, the overlap windows, the exposed
    activation-offload copy and the raw volumes per micro-batch. The search prices them once per
    group of candidates that differ only in their data-parallel degree."""
    lt = compute.layer_times(model, cluster, x)
    # what recompute selective re-runs: the default set, a named --recompute-modules set, or op-level SAC
    mlp_rerun = experts.dense_mlp_rerun_s(model, cluster, x) if np.any(recompute.flags(model, x)["mlp"]) else None
    lt = {**lt, "selective_rerun_s": recompute.selective_extra_s(model, cluster, x, lt, mlp_rerun)}
    lg = compute.logits_times(model, cluster, x)
    em = compute.embedding_times(model, cluster, x)
    cl = _layer_comm(model, cluster, x, lt)
    T = compute.tokens_per_gpu(x)
    pp_raw = comm.pp_microbatch_s(model.hidden_size, T, x, cluster)
    pp_s = np.where(x.pp_sched == 1, 0.0, pp_raw * (1.0 - cluster.efficiency.pp_overlap))  # DualPipe hides PP sends (pipeline.py)
    single = x.pp == 1
    first = _stage_components(model, cluster, x, x.first, lt, cl, True, single, lg, em, pp_s)
    mid = _stage_components(model, cluster, x, x.mid, lt, cl, False, False, lg, em, pp_s)
    last = _stage_components(model, cluster, x, x.last, lt, cl, single, True, lg, em, pp_s)
    moe = _moe_stage_terms(model, cluster, x, lt)
    for st, comps in zip(memory.STAGES, (first, mid, last)):
        for k, v in moe[st].items():
            comps[k] = comps.get(k, 0.0) + v
    tot = lambda c: sum(c[k] for k in c)  # noqa: E731
    t_first, t_mid, t_last = tot(first), tot(mid), tot(last)
    slow, mean = pipeline.stage_mix(x, t_first, t_mid, t_last, model.num_layers)
    bubble = pipeline.bubble_s(x, mean)  # (the steady part is per row: m x slow)
    # Components of the slowest stage make up the steady state.
    is_last = (t_last >= t_first) & ((x.pp <= 2) | (t_last >= t_mid))
    is_mid = (~is_last) & (x.pp > 2) & (t_mid > t_first)
    # DualPipe: the first GPU runs the first and the last stage, half the micro-batches each (pipeline.py)
    dual_ends = (x.pp_sched == 1) & ((x.pp <= 2) | (0.5 * (t_first + t_last) >= t_mid))
    dual_mid = (x.pp_sched == 1) & ~dual_ends

    def slowest(f, md, la):
        """The slowest stage's figure of per-stage figures (first, middle, last)."""
        one_f1b = np.where(is_last, la, np.where(is_mid, md, f))
        return np.where(dual_ends, 0.5 * (f + la), np.where(dual_mid, md, one_f1b))

    pick = {k: slowest(first[k], mid[k], last[k]) for k in first}

    # Data parallelism and optimizer on the larger of the first/last stage.
    psi_e = {st: experts.stage_expert_params(model, x, st) for st in memory.STAGES}
    psi = np.maximum(memory.stage_params(model, x, "first") - psi_e["first"],
                     memory.stage_params(model, x, "last") - psi_e["last"])
    psi_e_ends = psi_e["first"] + psi_e["last"]
    psi_e = np.maximum(np.maximum(psi_e["first"], psi_e["last"]), np.where(x.pp > 2, psi_e["middle"], 0.0))
    # DualPipe: the first GPU also holds the last stage (pipeline.py): both stages' gradients and states
    psi = np.where(x.pp_sched == 1, memory.stage_params(model, x, "first") + memory.stage_params(model, x, "last")
                   - psi_e_ends, psi)
    psi_e = np.where(x.pp_sched == 1, np.maximum(psi_e_ends, 2.0 * psi_e), psi_e)
    layers_slow = np.where(is_last, x.last, np.where(is_mid, x.mid, x.first))
    # Overlap window: the compute of the stage with the most layers (whose gradients are the
    # largest and whose reduction ends the step), not of the slowest stage (which can be a
    # short last stage made slow by the logits: a window that would shrink as HBM got faster).
    layers_most = np.maximum(np.maximum(x.first, x.last), np.where(x.pp > 2, x.mid, 0))
    stored, recomputed = memory.layer_activation_bytes(model, x)
    kept = np.where(x.rc_layers > 0, recomputed, stored) * layers_slow
    n_rc_slow = np.minimum(x.rc_layers, layers_slow)
    return {
        "pick": pick, "slow": slow, "bubble": bubble, "psi": psi, "psi_e": psi_e,
        "fwd_mb": layers_most * lt["compute_fwd_s"], "bwd_mb": layers_most * lt["compute_bwd_s"],
        # issue 11: host offload of the activations, exposed per micro-batch
        "act_offload_s": offload.activation_offload_exposed_s(kept, pick["compute_s"], x, cluster)
        + offload.module_offload_exposed_s(layers_slow * compute.tokens_per_gpu(x)
                                           * offload.offloaded_bytes_per_token(model, x), pick["compute_s"], x, cluster),
        "tp_raw": layers_slow * cl["tp_raw"] + n_rc_slow * cl["tp_raw"] / 2.0,
        "cp_raw": layers_slow * cl["cp_raw"] + n_rc_slow * cl["cp_raw"] / 3.0,
        "pp_raw": pp_raw, "ep_raw": slowest(*(moe["ep_raw"][st] for st in memory.STAGES)),
    }


def step_time(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, _terms: dict | None = None) -> dict:
    """Seconds of one optimizer step for every candidate, with its breakdown (``TIME_KEYS``).
    ``_terms``: :func:`layout_terms` of ``x`` when the caller has them (the search: priced once
    per group of candidates that differ only in their data-parallel degree)."""
    eff = cluster.efficiency
    t = _terms if _terms is not None else layout_terms(model, cluster, x)
    m = x.m.astype(float)
    out = {k: m * v for k, v in t["pick"].items()}
    out["bubble_s"] = t["bubble"]
    steady = m * t["slow"]
    bubble_fraction = pipeline.bubble_fraction(t["bubble"], steady)

    psi, psi_e = t["psi"], t["psi_e"]
    dp = dp_dense = comm.dp_step_s(psi, x, cluster)
    experts_held = np.any(psi_e)  # none (dense models): the expert terms are zeros, not computed
    edp = dispatch.expert_dp_step_s(psi_e, x, cluster) if experts_held else {"grad_s": np.zeros(len(x)),
                                                                            "param_s": np.zeros(len(x))}
    dp = {"grad_s": dp["grad_s"] + edp["grad_s"], "param_s": dp["param_s"] + edp["param_s"]}
    extra = {k: dp[k] - dp_dense[k] for k in ("grad_s", "param_s")}  # the expert layers' (MoE), if any
    exposed = comm.dp_exposed_s(dp_dense, x, t["fwd_mb"], t["bwd_mb"], eff.dp_overlap, extra)
    out["dp_comm_s"] = exposed["grad_s"] + exposed["param_s"]
    if eff.fsdp2 and np.any(x.zero == 3):  # FSDP2's copies on the compute stream, its unprefetchable collectives
        emb, outl = memory._end_params(model)
        root = (emb + outl) / x.tp  # the larger end stage's root under pp (first: embedding, last: output)
        root = np.where(x.pp > 1, np.maximum(emb, outl) / x.tp, root)
        f2 = comm.fsdp2_step_terms(psi + psi_e, root, experts.layer_params_local(model, x), x, cluster, dp_dense)
        out["memory_bound_s"] = out["memory_bound_s"] + f2["copy_s"]
        out["dp_comm_s"] = np.maximum(out["dp_comm_s"], f2["edge_s"])
    out["optimizer_s"] = compute.optimizer_s(psi, cluster, x) + (
        dispatch.expert_optimizer_s(psi_e, cluster=cluster, x=x) if experts_held else 0.0)
    out["optimizer_s"] = out["optimizer_s"] + compute.weight_cast_s(psi + psi_e, cluster, x)  # issue 12
    # Muon: the Newton-Schulz iterations of the step (muon.py); its momentum update's HBM traffic is
    # priced as Adam's (one moment fewer: at most 8 of ~40 B per parameter of a step under 1% of it)
    if np.any(x.muon):
        rate = cluster.gpu.peak("bf16") * 1e12 * compute.gemm_efficiency(model.hidden_size / x.tp, cluster)
        out["optimizer_s"] = out["optimizer_s"] + muon.orthogonalization_s(
            model, x, experts.stage_moe_layers(model, x), rate)
    # issue 11: host offload of the optimizer (replaces the GPU step) and of the activations
    shard = np.where(x.zero >= 1, psi / memory.shard_degree(x), psi)
    out["optimizer_s"] = np.where(x.opt_offload, offload.optimizer_offload_s(shard, x, cluster), out["optimizer_s"])
    if np.any(x.act_offload) or np.any(x.off_mod):  # (without offload the term is 0: nothing to add)
        out["memory_bound_s"] = out["memory_bound_s"] + m * t["act_offload_s"]
    out["overhead_s"] = np.full(len(x), eff.step_overhead_s)
    step = sum(out[k] for k in TIME_KEYS)
    raw = {
        "tp_comm_raw_s": m * t["tp_raw"],
        "cp_comm_raw_s": m * t["cp_raw"],
        "pp_comm_raw_s": m * t["pp_raw"],
        "ep_comm_raw_s": m * t["ep_raw"],
        "dp_comm_raw_s": dp["grad_s"] + dp["param_s"],
    }
    return {"step_s": step, "breakdown": out, "raw": raw, "bubble_fraction": bubble_fraction}
