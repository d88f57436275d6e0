"""Context parallelism's exchanges, by how the attention shares the sequence (Plan.cp_comm_type,
Megatron-LM ``--cp-comm-type``, Megatron-Core TransformerConfig.cp_comm_type, run by Transformer
Engine's context-parallel attention, transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py):

- ``p2p`` (ring attention, AttnFuncWithCPAndKVP2P; Megatron's default): ``cp - 1`` ring steps, each
  passing this rank's K and V chunk, overlapped with the attention of the chunk in hand
  (``efficiency.cp_overlap``); the backward passes K, V and their gradients: twice the forward;
- ``allgather`` (AttnFuncWithCPAndKVAllGather): K and V all-gathered over the ``cp`` ranks before
  the local attention, the backward gathers them again and reduce-scatters their gradients; the
  gather precedes the attention that needs it: not overlapped;
- ``a2a`` (AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509):
  all-to-all of Q, K and V (sequence-sharded to head-sharded) before the attention and of its
  output after it; the backward the same four exchanges of the gradients; on the critical path:
  not overlapped. Each rank keeps ``1/cp`` of the heads, so the heads per tensor-parallel rank
  must divide by ``cp`` (K/V heads replicated up to ``cp`` where fewer: GQA).

Seconds per layer per micro-batch, forward and backward; the raw volumes and the exposed part.
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import comm
from plan_search.planner.costmodel.arrays import PlanArrays

#: Plan.cp_comm_type -> PlanArrays.cp_comm.
CP_COMM_CODES = {"p2p": 0, "a2a": 1, "allgather": 2}
BF16_BYTES = 2.0


def _a2a_s(nbytes, n, k, cluster: ClusterSpec):
    """One all-to-all in which each of ``n`` ranks (``k`` per NVLink domain) holds ``nbytes`` and
    keeps ``1/n`` of it: ``(k-1)/n`` of it crosses NVLink, ``(n-k)/n`` the NICs, concurrently."""
    node, e = cluster.node, cluster.efficiency
    n = np.asarray(n, dtype=float)
    k = np.minimum(np.asarray(k, dtype=float), n)
    b_in = node.intra_node_gbps * 1e9 * e.a2a_bw_eff
    b_out = node.inter_node_gbps * 1e9 * e.a2a_bw_eff
    lat = node.intra_latency_us * 1e-6 + np.where(k < n, node.inter_latency_us * 1e-6, 0.0)
    t = np.maximum(nbytes * (k - 1) / n / b_in, nbytes * (n - k) / n / b_out) + lat
    return np.where(n > 1, t, 0.0)


def cp_layer_comm(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, tokens, attn_fwd_s, attn_bwd_s) -> dict:
    """(``raw_f``, ``raw_b``, ``exposed_f``, ``exposed_b``) seconds of one layer's context-parallel
    exchanges for one micro-batch of ``tokens`` per GPU, by ``x.cp_comm``."""
    eff = cluster.efficiency
    hd, vd = model.head_dim, model.v_head_dim
    kv_heads = np.maximum(model.num_kv_heads, x.tp) / x.tp  # GQA heads replicated when tp exceeds them
    kv_width = kv_heads * hd
    if model.is_sparse_attention:  # DSA runs MLA in MQA mode: the ring passes the shared latent and indexer key
        kv_width = np.full(len(x), (model.kv_lora_rank + model.qk_rope_head_dim + model.index_head_dim) / 2.0)
    k = comm.members_per_domain(x.tp, x.cp, cluster, x.num_gpus)
    on = x.cp > 1

    ring_f = comm.cp_layer_fwd_s(kv_width, tokens, x, cluster)
    kv_local = 2.0 * BF16_BYTES * tokens * kv_width  # this rank's K and V chunk
    gather_f = comm.collective_s(comm.ALL_GATHER, x.cp * kv_local, x.cp, k, cluster)
    gather_b = gather_f + comm.collective_s(comm.REDUCE_SCATTER, x.cp * kv_local, x.cp, k, cluster)
    q_width = model.num_heads / x.tp * hd
    kv_a2a = np.maximum(kv_heads, x.cp) * hd  # K/V heads replicated up to cp (Ulysses with GQA)
    out_width = model.num_heads / x.tp * vd
    a2a_bytes = BF16_BYTES * tokens * (q_width + 2.0 * kv_a2a + out_width)
    a2a_f = _a2a_s(a2a_bytes, x.cp, k, cluster)

    code = x.cp_comm
    raw_f = np.select([code == 1, code == 2], [a2a_f, gather_f], ring_f)
    raw_b = np.select([code == 1, code == 2], [a2a_f, gather_b], 2.0 * ring_f)
    ring = code == 0
    exp_f = np.where(ring, np.maximum(0.0, raw_f - eff.cp_overlap * attn_fwd_s), raw_f)
    exp_b = np.where(ring, np.maximum(0.0, raw_b - eff.cp_overlap * attn_bwd_s), raw_b)
    zero = np.zeros(len(x))
    return {"raw_f": np.where(on, raw_f, zero), "raw_b": np.where(on, raw_b, zero),
            "exposed_f": np.where(on, exp_f, zero), "exposed_b": np.where(on, exp_b, zero)}


def a2a_heads_problem(num_heads: int, num_kv_heads: int, tp: int, cp: int) -> str | None:
    """Why Ulysses (a2a) cannot split this attention over ``cp`` ranks, or None: the query heads of a
    tensor-parallel rank must divide by cp, and so must its key/value heads (Transformer Engine's a2a
    asserts both: ``q.shape[-2] % cp_size == 0 and k.shape[-2] % cp_size == 0``)."""
    if cp <= 1:
        return None
    q = num_heads // tp
    if q % cp:
        return f"cp_comm_type a2a with {q} query heads per tensor-parallel rank (num_heads {num_heads} / tp {tp}), cp {cp}"
    kv = max(1, num_kv_heads // tp)
    if kv % cp:
        return (f"cp_comm_type a2a with {kv} key/value heads per tensor-parallel rank (num_kv_heads {num_kv_heads} / "
                f"tp {tp}), cp {cp}")
    return None
