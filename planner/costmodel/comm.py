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


_DIVISOR_CACHE: dict[tuple[int, int], int] = {}


def _largest_divisor_at_most(n, cap):
    """Elementwise: the largest divisor of ``n`` that is at most ``cap`` (both >= 1)."""
    n = np.asarray(n, dtype=np.int64)
    cap = np.minimum(np.maximum(np.asarray(cap, dtype=np.int64), 1), n)
    n, cap = np.broadcast_arrays(n, cap)
    slow = (n % cap) != 0
    if not slow.any():
        return cap.copy()
    out = cap.copy()
    ns, cs = n[slow], cap[slow]
    keys = ns * (int(cs.max()) + 1) + cs  # one int64 key per (n, cap) pair
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    best = np.empty(len(uniq), dtype=np.int64)
    for i, j in enumerate(first):
        nn, cc = int(ns[j]), int(cs[j])
        b = _DIVISOR_CACHE.get((nn, cc))
        if b is None:
            b = _DIVISOR_CACHE[(nn, cc)] = next(d for d in range(cc, 0, -1) if nn % d == 0)
        best[i] = b
    out[slow] = best[np.ravel(inv)]
    return out


def domain_share(num_gpus, cluster: ClusterSpec):
    """GPUs of a ``num_gpus`` job inside one NVLink domain (``U`` in the module docstring)."""
    node = cluster.node
    d, host = node.intra_domain_size, node.gpus_per_node
    if num_gpus is None or d <= host:
        return np.asarray(d, dtype=np.int64)
    n = np.asarray(num_gpus, dtype=np.int64)
    uniq, inv = np.unique(n, return_inverse=True)  # few GPU counts among many candidates
    # largest multiple of the host size dividing the job and fitting in the domain
    trays = _largest_divisor_at_most(np.maximum(uniq // host, 1), d // host) * host
    share = np.where(uniq <= d, uniq, np.where(uniq % host == 0, trays, d))
    return share[np.reshape(inv, n.shape)]


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
    """Data parallelism per step, by ZeRO stage (Rajbhandari et al. 2020) and as each framework
    runs it (the plan's ``dp_shard``, ``grad_reduce``, ``fp32_grads`` and, for ZeRO-3,
    ``reshard_after_forward``):

    - 0: all-reduce of the gradients (DDP, Megatron without the distributed optimizer);
    - 1 (Megatron's distributed optimizer, DeepSpeed ZeRO-1): reduce-scatter of the gradients
      over the shard group + all-gather of the updated bf16 parameters after the optimizer;
    - 2 (DeepSpeed ZeRO-2, Megatron-FSDP ``optim_grads``): the same collectives, the gradient
      reduction after every micro-batch by default (the full gradient is never kept);
    - 3 (FSDP2, DeepSpeed ZeRO-3, Megatron-FSDP ``optim_grads_params``): the bf16 parameters are
      gathered for each micro-batch's forward and, when they are resharded after the forward
      (FSDP2 ``reshard_after_forward=True``), again for its backward (a recomputed forward reuses
      the backward's gather); without resharding the backward reuses the forward's gather, and
      when gradients also sync only on the last micro-batch (torch pipelining) the parameters
      stay gathered for the whole step: one gather per step.

    Gradient reduction runs every micro-batch or once per step (``Plan.grad_reduce``, default by
    ZeRO stage: :func:`planner.costmodel.plan.grad_per_microbatch`), in fp32 or bf16
    (``fp32_grads``: Megatron ``--accumulate-allreduce-grads-in-fp32``, FSDP2
    ``MixedPrecisionPolicy.reduce_dtype``, DeepSpeed ``communication_data_type``).

    HSDP / partial sharding (``dp_shard`` < dp): ranks are laid out shard-innermost, so a shard
    group is ``dp_shard`` consecutive data-parallel ranks and its ``dp/dp_shard`` replicas stride
    over them. Gradients reduce-scatter inside the shard group, then the ``1/dp_shard`` shards are
    all-reduced across the replicas (torch FSDP2 HSDP: ``reduce_scatter`` then ``all_reduce`` on
    the replicate mesh; Megatron ``--num-distributed-optimizer-instances``); parameters are
    gathered inside the shard group only.

    ZeRO-3 / FSDP collectives are issued per module over the shard group, each rank holding a
    ``1/dp_shard`` chunk, at ``zero3_bw_eff`` of the bus bandwidth. NCCL runs them as rings (and
    trees) through every GPU of a node before crossing to the next, so a GPU's NIC carries
    ``1/k`` of the traffic when ``k`` group members share its NVLink domain (FSDP2, Megatron-FSDP:
    the hierarchical pricing of :func:`collective_s`). With ``efficiency.zero3_flat`` (the
    ``deepspeed`` profile) they are priced as flat rings instead, every GPU's traffic
    ``(n-1)/n * S`` over its own NIC once the group leaves the NVLink domain: Narayanan et al. 2021
    Table 2 (DeepSpeed ZeRO-3, 384-2240 A100s) measured that regime, their step time staying flat
    from 768 to 1536 GPUs as this per-GPU volume does.

    Returns the seconds of the gradient side (``grad_s``: reductions and backward gathers,
    overlappable with backward) and the parameter side (``param_s``: forward gathers), each summed
    over the step, and the pieces :func:`dp_exposed_s` needs (one reduction ``red_s``, one gather
    ``gather_s`` and how many of each a step issues).
    """
    gbytes = np.where(x.fp32_grads, 4.0, 2.0)
    g = params_local * gbytes
    w = params_local * 2.0
    m = x.m.astype(float)
    z = x.zero
    ds = np.where(x.dp_shard > 0, np.gcd(np.maximum(x.dp_shard, 1), x.dp), x.dp)
    reps = x.dp // ds
    k = members_per_domain(x.tp * x.cp, x.dp, cluster, x.num_gpus)
    k_s = members_per_domain(x.tp * x.cp, ds, cluster, x.num_gpus)
    k_r = members_per_domain(x.tp * x.cp * ds, reps, cluster, x.num_gpus)
    in_domain = k_s >= ds
    k_flat = np.where(in_domain, ds, 1) if cluster.efficiency.zero3_flat else k_s
    ar = collective_s(ALL_REDUCE, g, x.dp, k, cluster)
    rs = collective_s(REDUCE_SCATTER, g, ds, k_s, cluster)
    ag = collective_s(ALL_GATHER, w, ds, k_s, cluster)
    rep = collective_s(ALL_REDUCE, g / ds, reps, k_r, cluster)
    slow = 1.0 / cluster.efficiency.zero3_bw_eff
    rs3 = collective_s(REDUCE_SCATTER, g, ds, k_flat, cluster) * slow
    ag3 = collective_s(ALL_GATHER, w, ds, k_flat, cluster) * slow
    red = np.where(z == 0, ar, np.where(z == 3, rs3, rs) + rep)
    gat = np.where(z == 3, ag3, np.where(z >= 1, ag, 0.0))
    per_mb = x.grad_mb
    n_red = np.where(per_mb, m, 1.0)
    n_bwd = np.where((z == 3) & x.reshard, m, 0.0)
    n_fwd = np.where(z == 3, np.where(x.reshard | per_mb, m, 1.0), np.where(z >= 1, 1.0, 0.0))
    return {"grad_s": n_red * red + n_bwd * gat, "param_s": n_fwd * gat, "per_microbatch": per_mb,
            "red_s": red, "gather_s": gat, "n_red": n_red, "n_bwd_gather": n_bwd, "n_fwd_gather": n_fwd}


def dp_exposed_s(dp: dict, x, fwd_mb, bwd_mb, hide: float, extra: dict | None = None) -> dict:
    """Exposed seconds of the data-parallel collectives of :func:`dp_step_s` (``dp``).

    Each micro-batch's backward hides up to ``hide * bwd_mb`` of the collectives issued during it
    (its gradient reduction when that runs every micro-batch, its parameter gathers under
    ZeRO-3 with resharding; the last micro-batch also carries a once-per-step reduction: Megatron
    ``--overlap-grad-reduce``, DeepSpeed ``overlap_comm`` buckets, FSDP2's reduce-scatter stream);
    each forward gather hides behind up to ``hide * fwd_mb`` of a forward (FSDP2/DeepSpeed
    prefetch; Megatron ``--overlap-param-gather`` behind the next step's first forward). Without
    the overlap the whole collective is exposed. ``extra`` adds time reduced the same way and as
    often (the expert layers' data parallelism of a MoE model), spread over the same collectives.
    """
    m = x.m.astype(float)
    extra = extra or {"grad_s": 0.0, "param_s": 0.0}
    tiny = 1e-30
    has_g, has_p = dp["grad_s"] > tiny, dp["param_s"] > tiny
    sg = np.where(has_g, 1.0 + extra["grad_s"] / np.maximum(dp["grad_s"], tiny), 1.0)
    sp = np.where(has_p, 1.0 + extra["param_s"] / np.maximum(dp["param_s"], tiny), 1.0)
    red, gb, gf = dp["red_s"] * sg, dp["gather_s"] * sg * (dp["n_bwd_gather"] > 0), dp["gather_s"] * sp
    per_mb = dp["n_red"] > 1
    c_mb = np.where(per_mb, red, 0.0) + gb
    c_last = red + gb
    hidden_g = np.maximum(m - 1.0, 0.0) * np.maximum(0.0, c_mb - hide * bwd_mb) + np.maximum(0.0, c_last - hide * bwd_mb)
    lone_g = np.where(has_g, 0.0, np.maximum(0.0, extra["grad_s"] - hide * bwd_mb))  # only expert DP
    grad = np.where(x.ovl_grad, np.where(has_g, hidden_g, lone_g), dp["grad_s"] + extra["grad_s"])
    n_f = dp["n_fwd_gather"]
    hidden_p = np.where(has_p, n_f * np.maximum(0.0, gf - hide * fwd_mb),
                        np.maximum(0.0, extra["param_s"] - hide * fwd_mb))
    param = np.where(x.ovl_param, hidden_p, dp["param_s"] + extra["param_s"])
    return {"grad_s": grad, "param_s": param}


#: Bytes per unsharded parameter FSDP2 moves on the compute stream per all-gather: the copy-out of the
#: all-gather output into the unsharded parameters (``foreach_all_gather_copy_out``: the current stream waits
#: for the gather, then ``split_with_sizes_copy`` reads and writes the bf16 parameters, 2 + 2 B).
FSDP2_GATHER_COPY_BYTES = 4.0
#: ... and per reduce-scatter: the copy-in of the unsharded bf16 gradients into the reduce-scatter input in the
#: reduce dtype (``foreach_reduce``: ``chunk_cat`` on the current stream before ``reduce_scatter_stream.
#: wait_stream(current_stream)``), 2 B read + 2 or 4 B written (bf16 or fp32 ``reduce_dtype``).
FSDP2_REDUCE_COPY_READ_BYTES = 2.0


def fsdp2_step_terms(params_local, root_params, block_params, x, cluster: ClusterSpec, dp: dict) -> dict:
    """What FSDP2 (``efficiency.fsdp2``; torch ``fully_shard``, read at pytorch/pytorch@010ae4a8
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) adds to a ZeRO-3 step beyond its collectives'
    volume (:func:`dp_step_s`, ``dp``), in seconds per step:

    - ``copy_s``: memory-bound work on the compute stream, which no overlap hides -- every all-gather's
      copy-out (:data:`FSDP2_GATHER_COPY_BYTES` per unsharded parameter) and every reduce-scatter's
      copy-in (:data:`FSDP2_REDUCE_COPY_READ_BYTES` + the reduce dtype's bytes), for the GPU's
      ``params_local`` parameters, as often as ``dp`` gathers and reduces them;
    - ``edge_s``: the collectives no prefetch can hide. The root unit (the embedding, final norm and
      output layer, ``root_params``; torchtitan ``apply_fsdp`` wraps each block and then the whole model)
      is gathered as the forward begins -- nothing runs before it -- and kept to the backward (FSDP2 does
      not reshard the root after the forward); the last reduce-scatters, of the first block and the root
      (``block_params + root_params``), run after the last backward computation. Once per micro-batch
      whose gradients sync, once per step otherwise (pipeline parallelism: one gather, one reduction).
      The collectives are priced as :func:`dp_step_s` prices them (the shard group, ``zero3_bw_eff``).

    Zero where the plan does not shard (ZeRO < 3 or a shard group of one)."""
    eff = cluster.efficiency
    gbytes = np.where(x.fp32_grads, 4.0, 2.0)
    ds = np.where(x.dp_shard > 0, np.gcd(np.maximum(x.dp_shard, 1), x.dp), x.dp)
    on = (x.zero == 3) & (ds * x.cp > 1)
    n_g = dp["n_fwd_gather"] + dp["n_bwd_gather"]
    copy_bytes = params_local * (FSDP2_GATHER_COPY_BYTES * n_g + (FSDP2_REDUCE_COPY_READ_BYTES + gbytes) * dp["n_red"])
    hbm = cluster.gpu.hbm_bandwidth_gbps * 1e9 * eff.hbm_eff
    k_s = members_per_domain(x.tp * x.cp, ds, cluster, x.num_gpus)
    slow = 1.0 / eff.zero3_bw_eff
    first_gather = collective_s(ALL_GATHER, 2.0 * root_params, ds, k_s, cluster) * slow
    last_reduce = collective_s(REDUCE_SCATTER, gbytes * (root_params + block_params), ds, k_s, cluster) * slow
    n_first = np.where(x.pp > 1, 1.0, dp["n_fwd_gather"])
    edge = n_first * first_gather + dp["n_red"] * last_reduce
    return {"copy_s": np.where(on, copy_bytes / hbm, 0.0), "edge_s": np.where(on, edge, 0.0)}
