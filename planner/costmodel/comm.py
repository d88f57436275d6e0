"""Collectives on a hierarchical topology, and the volumes each parallelism moves.

Ring collectives (NCCL; Thakur et al. 2005; ``../shared/reference/cost-model.md``), message of
``S`` bytes over ``n`` ranks, per-rank bus bandwidth ``B``, per-step latency ``alpha``:
all-reduce ``2 (n-1)/n S/B``, reduce-scatter and all-gather ``(n-1)/n S/B``, plus latency.

Hierarchy: a group whose ``n`` members sit ``k`` to an NVLink domain runs in two levels: a
reduce-scatter inside the domain (``(k-1)/k S`` per GPU at the NVLink bandwidth), a
reduce-scatter across the ``n/k`` domains of each GPU's ``S/k`` slice (``(n/k - 1)/(n/k) * S/k``
per GPU over its own NIC), then the all-gathers back in reverse order. Assumption, with its
source: NCCL prices this way in effect for rings and trees. Its topology search orders each
ring's GPUs so that those of one host/NVLink domain are consecutive and gives each channel its
own NIC, so a domain's ``k`` GPUs send ``(n-1)/n * S`` out of the domain in total, ``1/k`` of it
per NIC; its trees are intra-node chains joined by an inter-node tree; NVLS (NVLink SHARP)
reduces inside the NVSwitch domain first (Hu et al. 2025, "Demystifying NCCL", arXiv 2507.04786,
on NCCL 2.19's ring/tree channels and intra-/inter-node transports; NCCL_ALGO Ring/Tree/NVLS/
NVLSTree in the NCCL environment-variable docs). A framework that does not get this (DeepSpeed
ZeRO-3 as Narayanan et al. 2021 Table 2 measured it) is priced flat by :func:`dp_step_s` with
``efficiency.zero3_flat`` (``k = 1``: every GPU's ``(n-1)/n * S`` over its own NIC). Ranks are
laid out tp, cp, dp, pp (innermost first), so the members per domain of each group follow from
the GPUs of the job in one domain ``U``: tp ``min(tp, U)``, cp ``U/tp``, dp ``U/(tp*cp)``, pp
``U/(tp*cp*dp)``, each rounded down to a divisor of the group size (:func:`members_per_domain`).

NVLink domain vs host: ``node.intra_domain_size`` (``D``) is the NVLink domain, ``node.gpus_per_node``
the host (the unit a scheduler hands out). On HGX/DGX boards they coincide (8); a GB200/GB300
NVL72 rack is one 72-GPU domain made of 18 compute trays of 4 GPUs. A job larger than one rack
is placed in equal whole-tray shares per rack (Slurm's block/segment placement, as the
Megatron-MoE-ModelZoo GB200 scripts do with ``SEGMENT``): ``U`` is the largest multiple of the
tray size that divides the job and fits in ``D`` (64 of 72 GPUs per rack for 128 or 256 GPUs);
a job within one rack has ``U`` = its size. On single-host domains ``U = D`` as before.

Bus bandwidth is the link's per-direction figure times ``intra_bw_eff`` / ``inter_bw_eff``
(NCCL's achievable fraction). Latency: ring steps for reduce-scatter/all-gather; all-reduce at
scale uses trees, ``2 log2 n`` steps. Returned values are seconds (numpy arrays).
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec

ALL_REDUCE = 2.0
REDUCE_SCATTER = 1.0
ALL_GATHER = 1.0


def _largest_divisor_at_most(n, cap):
    """Elementwise: the largest divisor of ``n`` that is at most ``cap`` (both >= 1)."""
    n = np.asarray(n, dtype=np.int64)
    cap = np.minimum(np.maximum(np.asarray(cap, dtype=np.int64), 1), n)
    n, cap = np.broadcast_arrays(n, cap)
    out = cap.copy()
    slow = (n % np.maximum(cap, 1)) != 0
    if slow.any():
        pairs, inv = np.unique(np.stack([n[slow], cap[slow]], axis=1), axis=0, return_inverse=True)
        best = np.empty(len(pairs), dtype=np.int64)
        for i, (nn, cc) in enumerate(pairs):
            best[i] = next(d for d in range(int(cc), 0, -1) if nn % d == 0)
        out = out.copy()
        out[slow] = best[np.ravel(inv)]
    return out


def domain_share(num_gpus, cluster: ClusterSpec):
    """GPUs of a ``num_gpus`` job inside one NVLink domain (``U`` in the module docstring)."""
    node = cluster.node
    d, host = node.intra_domain_size, node.gpus_per_node
    if num_gpus is None or d <= host:
        return np.asarray(d, dtype=np.int64)
    n = np.asarray(num_gpus, dtype=np.int64)
    # largest multiple of the host size dividing the job and fitting in the domain
    trays = _largest_divisor_at_most(np.maximum(n // host, 1), d // host) * host
    fits_whole = (n % host) == 0
    return np.where(n <= d, n, np.where(fits_whole, trays, d))


def members_per_domain(stride, size, cluster: ClusterSpec, num_gpus=None):
    """How many members of a group of ``size`` ranks at rank ``stride`` share one NVLink domain:
    the largest divisor of ``size`` not above ``U // stride`` (``U`` = :func:`domain_share` of
    ``num_gpus``; the whole domain when ``num_gpus`` is not given)."""
    u = domain_share(num_gpus, cluster)
    size = np.maximum(np.asarray(size, dtype=np.int64), 1)
    return _largest_divisor_at_most(size, np.maximum(u // np.maximum(stride, 1), 1))


def crosses_domain(stride, size, cluster: ClusterSpec, num_gpus=None):
    """Does a group of ``size`` ranks at ``stride`` leave one NVLink domain (its link: the NICs)?"""
    return members_per_domain(stride, size, cluster, num_gpus) < np.asarray(size)


def collective_s(factor, nbytes, n, k, cluster: ClusterSpec):
    """A ring collective (``factor`` 2 all-reduce, 1 reduce-scatter/all-gather) of ``nbytes``
    over ``n`` ranks, ``k`` of them per NVLink domain."""
    node, eff = cluster.node, cluster.efficiency
    n = np.asarray(n, dtype=float)
    k = np.minimum(np.asarray(k, dtype=float), n)
    b_in = node.intra_node_gbps * 1e9 * eff.intra_bw_eff
    b_out = node.inter_node_gbps * 1e9 * eff.inter_bw_eff
    a_in = node.intra_latency_us * 1e-6
    a_out = node.inter_latency_us * 1e-6
    def steps(r):
        tree = np.minimum(r - 1, 2 * np.log2(np.maximum(r, 1)))
        return tree if factor == ALL_REDUCE else r - 1

    intra = factor * (k - 1) / k * nbytes / b_in + factor * np.maximum(steps(k), 0) * a_in
    nodes = n / k
    inter = factor * (nodes - 1) / nodes * (nbytes / k) / b_out + factor * np.maximum(steps(nodes), 0) * a_out
    out = np.where(n > 1, intra + np.where(nodes > 1, inter, 0.0), 0.0)
    return out


def p2p_s(nbytes, crosses_domain, cluster: ClusterSpec):
    """Point-to-point send of ``nbytes`` between neighbours (pipeline or context-parallel ring)."""
    node, eff = cluster.node, cluster.efficiency
    b_in = node.intra_node_gbps * 1e9 * eff.intra_bw_eff
    b_out = node.inter_node_gbps * 1e9 * eff.inter_bw_eff
    return np.where(
        crosses_domain,
        nbytes / b_out + node.inter_latency_us * 1e-6,
        nbytes / b_in + node.intra_latency_us * 1e-6,
    )


# ------------------------------------------------------------------ volumes per parallelism
def tp_layer_s(hidden: int, tokens, x, cluster: ClusterSpec):
    """Tensor parallelism, one layer, one micro-batch, one direction (forward or backward):
    two all-reduces of ``tokens * h`` bf16 elements (with sequence parallelism the same bytes as
    two reduce-scatter + all-gather pairs; Korthikanti et al. 2022 Sec. 4.2.2)."""
    nbytes = 2.0 * tokens * hidden
    k = members_per_domain(1, x.tp, cluster, x.num_gpus)
    return 2.0 * collective_s(ALL_REDUCE, nbytes, x.tp, k, cluster)


def cp_layer_fwd_s(kv_width: int, tokens, x, cluster: ClusterSpec):
    """Context parallelism, one layer forward: ``cp - 1`` ring steps, each passing this rank's
    K and V chunk (``2 * tokens * kv_width / tp`` bf16 elements, GQA heads replicated when tp
    exceeds them). The backward passes K, V and their gradients: twice this."""
    nbytes = 2.0 * 2.0 * tokens * kv_width
    k = members_per_domain(x.tp, x.cp, cluster, x.num_gpus)
    crosses = k < x.cp
    return np.where(x.cp > 1, (x.cp - 1) * p2p_s(nbytes, crosses, cluster), 0.0)


def pp_microbatch_s(hidden: int, tokens, x, cluster: ClusterSpec):
    """Pipeline parallelism, per micro-batch per stage: one activation send forward and one
    gradient send backward per model chunk (``vpp`` chunks), ``tokens * h / tp`` bf16 elements
    (Megatron's scatter-gather optimisation; with sequence parallelism the tensor is already
    split)."""
    nbytes = 2.0 * tokens * hidden / x.tp
    stride = x.tp * x.cp * x.dp
    crosses = stride >= domain_share(x.num_gpus, cluster)
    return np.where(x.pp > 1, 2.0 * x.vpp * p2p_s(nbytes, crosses, cluster), 0.0)


def dp_step_s(params_local, x, cluster: ClusterSpec) -> dict:
    """Data parallelism per step, by ZeRO stage (Rajbhandari et al. 2020):

    - 0: all-reduce of the gradients once per step;
    - 1 (and Megatron's distributed optimizer): reduce-scatter of gradients + all-gather of the
      updated bf16 parameters, once per step;
    - 2: reduce-scatter every micro-batch (the full gradient is never kept) + one all-gather;
    - 3: every micro-batch gathers the parameters for the forward and again for the backward
      (a recomputed forward gathers them for its backward too, so recomputation adds no
      gather), and reduce-scatters the gradients (1.5 x the all-reduce volume, per micro-batch).

    ZeRO-3 / FSDP collectives are issued per module over the whole data-parallel group, each
    rank holding a ``1/dp`` chunk: they are priced as flat rings, every GPU's traffic
    ``(n-1)/n * S`` over its own NIC once the group leaves the NVLink domain (no intra-node
    reduction first), at ``zero3_bw_eff`` of the bus bandwidth. Narayanan et al. 2021 Table 2
    (DeepSpeed ZeRO-3, 384-2240 A100s) measured this regime: their step time stays flat from 768
    to 1536 GPUs as this per-GPU volume does.

    Returns the seconds of the gradient side (``grad_s``, overlappable with backward) and the
    parameter side (``param_s``, overlappable with forward), each already summed over the step.
    """
    gbytes = np.where(x.fp32_grads, 4.0, 2.0)
    k = members_per_domain(x.tp * x.cp, x.dp, cluster, x.num_gpus)
    in_domain = k >= x.dp
    k_flat = np.where(in_domain, x.dp, 1)
    g = params_local * gbytes
    w = params_local * 2.0
    m = x.m.astype(float)
    ar = collective_s(ALL_REDUCE, g, x.dp, k, cluster)
    rs = collective_s(REDUCE_SCATTER, g, x.dp, k, cluster)
    ag = collective_s(ALL_GATHER, w, x.dp, k, cluster)
    slow = 1.0 / cluster.efficiency.zero3_bw_eff
    rs3 = collective_s(REDUCE_SCATTER, g, x.dp, k_flat, cluster) * slow
    ag3 = collective_s(ALL_GATHER, w, x.dp, k_flat, cluster) * slow
    z = x.zero
    grad_s = np.select([z == 0, z == 1, z == 2, z == 3], [ar, rs, m * rs, m * (rs3 + ag3)])
    param_s = np.select([z == 0, z == 1, z == 2, z == 3], [0.0 * ar, ag, ag, m * ag3])
    return {"grad_s": grad_s, "param_s": param_s, "per_microbatch": z >= 2}
