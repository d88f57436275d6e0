"""Token dispatch and combine of the MoE layers, and the expert-data-parallel gradient traffic.

Per MoE layer and micro-batch, forward: a *dispatch* sends each of the ``T_loc`` tokens of a GPU
(:func:`experts.moe_tokens`) to the ranks holding its ``k`` experts and a *combine* brings the
expert outputs back; the backward does both again with the gradients (4 exchanges per layer,
plus 2 more per fully recomputed layer). Three dispatchers (Megatron-Core
``--moe-token-dispatcher-type``, ``transformer/moe/token_dispatcher.py``):

- ``alltoall``: an all-to-all over the ``ep`` ranks; each GPU sends ``S = T_loc * k * h * 2``
  bytes (bf16 rows; the busiest rank receives ``experts.load_factor`` times that: ``moe_imbalance``, or the
  capacity when padded to it), ``(ep-1)/ep`` of it
  to other ranks. The ``ep`` group strides ``etp`` ranks (expert grid ``etp x ep x edp``,
  innermost first), so ``k_d = min(ep, D / etp)`` of its members share an NVLink domain of ``D``
  GPUs (:func:`comm.members_per_domain`, ``node.intra_domain_size``: 8 on HGX, 72 on an NVL72
  rack): ``(k_d - 1)/ep`` of ``S`` crosses NVLink, ``(ep - k_d)/ep`` the NIC; the two run at once
  (time = the slower) at ``a2a_bw_eff`` of each link, plus one latency per level.
  With ``etp > 1`` the received rows are then all-gathered over the ``etp`` group (combine:
  reduce-scattered), priced as :func:`comm.collective_s`.
- ``flex`` (DeepEP / HybridEP): tokens, not routed rows, are exchanged. A token goes once to each
  *distinct rank* holding any of its ``k`` experts and is expanded into expert rows on arrival; the
  combine sums a rank's expert outputs per token before sending one row back (Megatron-Core
  ``_DeepepManager``: ``fused_dispatch`` returns the received tokens with their top-k indices, then
  ``get_permuted_hidden_states_by_experts`` permutes them by local expert and
  ``get_restored_hidden_states_by_experts`` un-permutes to the received tokens before
  ``fused_combine``; ``_HybridEPManager`` does the same permutations inside its dispatch and combine
  kernels: megatron/core/transformer/moe/token_dispatcher.py@d98e8a64). NVLink bytes per token
  ``h * 2`` times the distinct ranks it reaches (:func:`ranks_per_token`), where the all-to-all
  sends ``k`` rows. Across domains a token crosses the NIC once per *distinct remote domain* and is
  forwarded inside it over NVLink (:func:`remote_domains_per_token`: ``(G - 1)(1 - (1 - 1/G)^k)``
  for ``G = ep / k_d`` domains and uniform routing; fewer under group-limited routing, DeepSeek-V3
  Sec. 3.2.2, and far fewer under round-robin routing, :func:`round_robin_hit`).
- ``allgather``: every GPU all-gathers the ``T_loc`` rows of the ``ep * etp`` expert group and
  reduce-scatters the outputs back (:func:`comm.collective_s` ring costs).

Overlap: the exchanges of one micro-batch can run under the compute of another (a forward chunk
paired with a backward chunk), so at most the layer's own compute, forward + backward
(``window_s``), hides them. With ``moe_overlap`` (Megatron-Core's ``--overlap-moe-expert-parallel-comm``,
the "1F1B A2A overlap" of ``pipeline_parallel/combined_1f1b.py``) ``ep_overlap`` of
``min(traffic, window)`` is hidden; under DualPipe (``pp_schedule``; DeepSeek-V3 report, arXiv
2412.19437 Sec. 3.2.1-3.2.2: "both all-to-all and PP communication can be fully hidden") all of
``min(traffic, window)`` is, at the price of the SMs the communication kernels take from the
compute while it runs: 20 of the H800's 132 SMs (Sec. 3.2.2), so ``(1 - 20/132)`` of it is a net
gain (:data:`DUALPIPE_COMM_SM_SHARE`). Otherwise the traffic is exposed.

Expert data parallelism: the expert gradients are reduced (and the parameters gathered) over the
``edp`` replicas of each expert, by the same ZeRO-stage formulas as the dense data parallelism
(:func:`comm.dp_step_s`, applied to the expert grid: stride ``etp * ep``, group ``edp``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel import comm
from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel import experts
from plan_search.planner.costmodel.arrays import PlanArrays

DISPATCH_BYTES = 2.0  # bf16 rows
#: FP8 dispatch (DeepSeek-V3 report Sec. 3.3.2: activations quantised to FP8 before the dispatch, the
#: combine kept in BF16; DeepEP's dispatch takes FP8 rows with one fp32 scale per 128 values): with the
#: ``flex`` dispatcher and an FP8 recipe the forward dispatch moves 1 + 4/128 bytes per element, the
#: combine and the backward exchanges 2; averaged over the four exchanges of a layer.
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0
#: Share of the GPU's SMs that DualPipe's dispatch/combine kernels occupy while they overlap compute:
#: 20 of the H800's 132 (DeepSeek-V3 report, arXiv 2412.19437 Sec. 3.2.2); the hidden communication
#: slows the compute it runs under by this share.
DUALPIPE_COMM_SM_SHARE = 20.0 / 132.0


def ep_members_per_domain(x: PlanArrays, cluster: ClusterSpec):
    """Members of the ``ep`` group per NVLink domain (the group strides ``etp`` ranks)."""
    return comm.members_per_domain(x.etp, x.ep, cluster)


def ep_crosses_domain(x: PlanArrays, cluster: ClusterSpec):
    """True where the expert-parallel group leaves the NVLink domain (all-to-all on the NICs)."""
    return (x.ep > 1) & (ep_members_per_domain(x, cluster) < x.ep)


def _a2a_s(intra_bytes, inter_bytes, crosses, cluster: ClusterSpec):
    node, e = cluster.node, cluster.efficiency
    b_in = node.intra_node_gbps * 1e9 * e.a2a_bw_eff
    b_out = node.inter_node_gbps * 1e9 * e.a2a_bw_eff
    lat = node.intra_latency_us * 1e-6 + np.where(crosses, node.inter_latency_us * 1e-6, 0.0)
    return np.maximum(intra_bytes / b_in, inter_bytes / b_out) + lat


def _distinct_hit(model: ModelSpec, G):
    """Expected distinct units, of ``G`` equal units holding the experts evenly, that one token's
    ``k`` experts sit in under uniform routing: ``D (1 - (1 - 1/D)^k)``, where group-limited routing
    (``router_num_groups`` groups, ``router_group_topk`` chosen per token) confines the picks to
    ``D = min(G, topk_group x max(1, G / groups))`` units."""
    k = model.experts_per_token
    G = np.asarray(G, dtype=float)
    D = G
    if getattr(model, "router_num_groups", 0) and getattr(model, "router_group_topk", 0):
        D = np.minimum(G, model.router_group_topk * np.maximum(1.0, G / model.router_num_groups))
    D = np.maximum(D, 1.0)
    return D * (1.0 - (1.0 - 1.0 / D) ** k)


def round_robin_hit(model: ModelSpec, units):
    """Mean distinct units, of ``units`` equal blocks of consecutive experts (expert-parallel ranks, or
    the NVLink domains they fill), that one token's ``k`` experts sit in under round-robin routing
    (``Plan.moe_routing``): token ``i`` takes experts ``(i k + j) mod E``, ``j < k`` (NVIDIA-NeMo/Automodel@34f73e9
    nemo_automodel/components/moe/layers.py ``FakeBalancedGate.forward``; pytorch/torchtitan@b5bcd76
    torchtitan/models/common/moe.py ``_debug_force_load_balance_routing``), so its first expert runs over
    the multiples of ``gcd(k, E)``, each as often, and a run of ``k`` consecutive experts crosses few
    block boundaries: Qwen3-30B-A3B (128 experts, top-8) on ep 8 reaches 1 rank where uniform routing
    reaches 5.25; DeepSeek-V3 (256, top-8) on ep 64 2 ranks in 1 of 8 nodes (uniform: 7.2 ranks).
    A count of units that does not divide the experts into whole blocks keeps the uniform figure
    (:func:`_distinct_hit`)."""
    E, k = model.num_experts, model.experts_per_token
    units = np.asarray(units, dtype=float)
    out = np.array(_distinct_hit(model, units), dtype=float, copy=True).reshape(units.shape)
    if not model.is_moe or E < 1 or k < 1:
        return out
    starts = np.arange(0, E, math.gcd(k, E))
    run = (starts[:, None] + np.arange(k)[None, :]) % E
    for u in np.unique(units):
        if u != int(u) or E % int(u):
            continue
        blocks = run // (E // int(u))
        hit = 1 + np.sum(np.diff(np.sort(blocks, axis=1), axis=1) > 0, axis=1)
        out[units == u] = hit.mean()
    return out


def _units_hit(model: ModelSpec, units, round_robin=False):
    """Distinct units of ``units`` one token's ``k`` experts sit in: :func:`round_robin_hit` where
    ``round_robin`` (``PlanArrays.moe_rr``, a bool or an array of them), else :func:`_distinct_hit`."""
    uniform = _distinct_hit(model, units)
    if not np.any(round_robin):
        return uniform
    return np.where(round_robin, round_robin_hit(model, units), uniform)


def ranks_per_token(model: ModelSpec, ep, round_robin=False):
    """Expected distinct expert-parallel ranks (of ``ep``, own rank included) one token's ``k``
    experts sit in: what the ``flex`` dispatcher sends per token where the all-to-all sends ``k``
    rows. DeepSeek-V3 (256 experts, top-8 in 4 of 8 groups) on ep 8: 3.6 ranks, not 8 rows.
    ``round_robin`` (``PlanArrays.moe_rr``): :func:`round_robin_hit` where set."""
    return _units_hit(model, ep, round_robin)


def remote_domains_per_token(model: ModelSpec, G, round_robin=False):
    """Expected NVLink domains other than its own that one token's ``k`` experts sit in, with the
    experts spread evenly over ``G`` domains and routing uniform. Group-limited routing
    (``router_num_groups`` groups, ``router_group_topk`` of them per token; DeepSeek-V3 Sec. 2.1.2
    "node-limited routing": 8 groups, 4 chosen, so at most 4 nodes when the groups are the nodes, as
    Megatron-Core sets them for node-limited routing) confines the ``k`` picks to the domains of the
    chosen groups: :func:`_distinct_hit` of the ``G`` domains, ``(G - 1)/G`` of those remote
    (:func:`round_robin_hit`'s where ``round_robin``, ``PlanArrays.moe_rr``)."""
    G = np.asarray(G, dtype=float)
    return _units_hit(model, G, round_robin) * (G - 1.0) / G


def exchange_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    """One dispatch (= one combine) of one MoE layer and micro-batch, seconds."""
    h, k = model.hidden_size, model.experts_per_token
    Tl = experts.moe_tokens(x)
    ep = x.ep.astype(float)
    kd = ep_members_per_domain(x, cluster).astype(float)
    crosses = ep_crosses_domain(x, cluster)
    fp8_flex = (x.fp8 > 0) & (x.moe_disp == 2)
    per_elem = np.where(fp8_flex, (FP8_DISPATCH_BYTES + 3.0 * DISPATCH_BYTES) / 4.0, DISPATCH_BYTES)
    row = Tl * h * per_elem * experts.load_factor(model, x)  # one copy of every local token, busiest rank
    S = row * k
    intra = S * (kd - 1) / ep
    inter_a2a = S * (ep - kd) / ep
    # round-robin routing (Plan.moe_routing, x.moe_rr): k consecutive experts per token
    inter_flex = row * remote_domains_per_token(model, ep / kd, x.moe_rr)
    # one token per distinct rank: to the others of the own domain, and forwarded inside each remote
    # domain from the rank its NIC copy lands on to the other ranks it reaches there
    intra_flex = row * ranks_per_token(model, ep, x.moe_rr) * ((kd - 1) / ep + (ep - kd) / ep * (kd - 1) / kd)
    a2a = _a2a_s(intra, inter_a2a, crosses, cluster)
    flex = _a2a_s(intra_flex, inter_flex, crosses, cluster)
    # etp > 1: the rows an ep rank receives are gathered over its etp group (combine: scattered)
    rows_bytes = experts.routed_rows(model, x) * h * DISPATCH_BYTES
    k_etp = comm.members_per_domain(1, x.etp, cluster)
    etp_s = comm.collective_s(comm.ALL_GATHER, rows_bytes, x.etp, k_etp, cluster)
    group = x.ep * x.etp
    ag = comm.collective_s(comm.ALL_GATHER, Tl * h * DISPATCH_BYTES * group, group,
                           comm.members_per_domain(1, group, cluster), cluster)
    out = np.select([x.moe_disp == 1, x.moe_disp == 2], [ag, flex + etp_s], a2a + etp_s)
    return np.where((x.ep > 1) | (x.etp > 1), out, 0.0)


def ep_layer_comm(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, window_s=np.inf) -> dict:
    """Per MoE layer and micro-batch: raw and exposed dispatch+combine seconds, forward+backward
    (``raw``, ``exposed``) and forward alone (``raw_fwd``, ``exposed_fwd``: what full recomputation
    repeats).
    ``window_s``: the layer's compute, forward + backward, under which another micro-batch's
    exchanges can run (module docstring)."""
    one = exchange_s(model, cluster, x)
    fwd = 2.0 * one
    raw = 2.0 * fwd
    share = np.where(x.pp_sched == 1, 1.0 - DUALPIPE_COMM_SM_SHARE,
                     np.where(x.moe_ovl, cluster.efficiency.ep_overlap, 0.0))
    hidden = share * np.minimum(raw, window_s)
    keep = np.where(raw > 0, (raw - hidden) / np.maximum(raw, 1e-30), 1.0)
    return {"raw": raw, "exposed": raw * keep, "raw_fwd": fwd, "exposed_fwd": fwd * keep}


def expert_grid(x: PlanArrays) -> PlanArrays:
    """``x`` seen from the expert layers: ``tp`` -> ``etp*ep`` (the stride), ``cp`` -> 1,
    ``dp`` -> ``edp``, with the same micro-batches per step."""
    edp = x.tp * x.cp * x.dp // (x.ep * x.etp)
    return dataclasses.replace(x, tp=x.etp * x.ep, cp=np.ones_like(x.cp), dp=edp, gb=x.m * edp * x.mb)


def expert_dp_step_s(expert_params_local, x: PlanArrays, cluster: ClusterSpec) -> dict:
    """Expert gradients / parameters over the expert-data-parallel group, per step (nothing, not even
    a collective's latency, where a stage holds no routed experts: dense models, dense-only stages)."""
    out = comm.dp_step_s(expert_params_local, expert_grid(x), cluster)
    has = np.asarray(expert_params_local) > 0
    return {**out, "grad_s": np.where(has, out["grad_s"], 0.0), "param_s": np.where(has, out["param_s"], 0.0)}


def expert_optimizer_s(expert_params_local, x: PlanArrays, cluster: ClusterSpec):
    """Adam over the local expert shard (sharded over ``edp`` with the distributed optimizer)."""
    return compute.optimizer_s(expert_params_local, cluster, expert_grid(x))
