"""Mixture-of-experts layers: where the experts live, what their GEMMs, router and token
permutation cost, what they store. One copy of each MoE formula; :mod:`step`, :mod:`memory` and
:mod:`evaluate` call these (the token dispatch and combine are in :mod:`dispatch`).

Layout (Megatron-Core "parallel folding", Liu et al. 2025, arXiv 2504.14960): the ``tp*cp*dp``
GPUs of a pipeline stage run attention as ``tp x cp x dp`` and the expert MLPs as
``etp x ep x edp``. A MoE layer of a stage therefore

- keeps its attention, norms, router and shared experts as a dense layer does (tensor-parallel
  over ``tp``; Megatron shards the shared experts like a dense MLP);
- holds ``num_experts / ep`` routed experts, each split over ``etp`` GPUs: ``E * mlp_params /
  (ep * etp)`` parameters per GPU (:func:`models.counting.mlp_params`), their gradients reduced and
  optimizer states sharded over the ``edp = tp*cp*dp / (etp*ep)`` replicas of each expert.

Tokens (per GPU, one micro-batch): the ``T = mb * s / cp`` tokens of a rank enter the MoE layer
sequence-parallel, ``T_loc = T / tp`` per GPU (Megatron requires sequence parallelism with expert
and tensor parallelism, ``arguments.py``). Each token goes to ``k`` experts; the ``etp`` GPUs of an
expert all see its tokens, so one GPU's grouped GEMMs process ``M = etp * T_loc * k`` token rows,
``M / (E/ep)`` per local expert, the same FLOPs per GPU as the dense count ``2 T_loc k h f_e``.
The busiest expert rank receives ``moe_imbalance`` times the mean (1.0 under the benchmarks'
force-balanced routing; the Megatron-MoE ModelZoo measures real routing 4-20% slower): with
``ep > 1`` the whole layer waits for it.

Grouped GEMMs: the dense GEMM roofline of :mod:`compute` (peak x the calibrated efficiency curve,
never faster than streaming weights and activations from HBM) with the efficiency curve taken at
the smaller weight dimension (``h``, ``f_e / etp``: narrow experts lose efficiency) and
``grouped_gemm_eff`` of it, times :func:`rows_efficiency` of the token rows per expert
(``1 - exp(-rows / grouped_gemm_rows_scale)``: short per-expert GEMMs, one cuBLAS GEMM per local
expert in Transformer Engine's grouped linear) -- the rows counted there once, not also in the
dense curve -- plus each local expert's call time (:data:`GROUPED_GEMM_CALL_NOTE`). The HBM term carries all local experts'
weights, so few tokens per expert make the layer memory-bound, as measured for fine-grained MoE.
Low-precision recipes quantize every routed row's GEMM operands (:func:`expert_cast_bytes`: ``k``
times the rows a dense MLP quantizes), at HBM rate as the dense casts.

Router (``h x E`` GEMM, then softmax or sigmoid, top-k, fp32: ~16 B per token and expert) and
permutation / un-permutation (gather ``T_loc`` rows into ``T_loc * k`` expert-ordered rows and
sum them back per token, the routing weights being applied in the experts' activation; read + write
``h`` bf16 each way: :data:`PERMUTE_BYTES`, :data:`UNPERMUTE_BYTES`) are memory-bound,
priced at ``hbm_eff * moe_membound_eff``; the backward moves 2x the forward bytes, as for the
other element-wise work. The ``alltoall`` dispatcher adds a second permutation and its inverse (the
received rows re-sorted by local expert, the outputs un-sorted before the combine:
:data:`SORT_CHUNKS_BYTES`), at the same rate. Under a low-precision recipe the ``alltoall`` and
``allgather`` dispatchers leave Transformer Engine to pad each expert's rows to the quantization
alignment and un-pad the output: two more copies per routed row (:data:`FP8_PAD_BYTES`).

Selective recomputation of a MoE or MLA model is Megatron-Core's fine-grained set for MoE
(``--recompute-modules mla_up_proj layernorm moe_act``: Megatron-LM megatron/core/transformer/moe/
README.md@d98e8a64, "Fine-grained Recomputation"; the Megatron-MoE ModelZoo's "selective: norm,
act"; Megatron-Bridge's DeepSeek/GPT-OSS perf recipes use subsets of it, bench/moe_recipes.yaml;
DeepSeek-V3 report Sec. 3.2.3 recomputes the norms and MLA up-projections): the expert activation
function (its output, the fc2 input ``M x f_e/etp``, is recomputed from the stored fc1 output),
the two norms (their outputs, ``2h`` per token) and, with MLA, the Q/K/V up-projections (the
decompressed ``q, k, v`` are recomputed from the stored latents) are discarded after the forward
and redone in the backward: :func:`selective_saved_bytes_per_token` and
:func:`selective_recompute_fwd_s`. The attention core is not in the set (``core_attn`` is
Megatron's default only when no module is named): with FlashAttention it is not re-run (without
it, its softmax and scores are, as for a dense model). Dense models keep the attention-core-only
meaning.

Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): the attention GEMMs are the five MLA
projections (Q down ``h x q_lora`` and KV down ``h x (kv_lora + rope)``, replicated over tensor
parallelism as in Megatron-Core's ``MLASelfAttention``; Q up, KV up and output split over ``tp``),
replacing the ``QKV + proj`` of :func:`compute.layer_gemm_fwd_s`; the attention core uses
``head_dim`` for ``QK^T`` and ``v_head_dim`` for ``A V``.
"""

from __future__ import annotations

import functools

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models import counting
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel import recompute
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.plan import max_imbalance

#: Router bytes per token and expert, forward: fp32 logits written, read by the score function
#: and written back, read by top-k (4 x 4 B); Megatron-Core keeps router logits in fp32
#: (``--moe-router-dtype fp32`` is its recommended setting for DeepSeek-style routers).
ROUTER_BYTES_PER_SCORE = 16.0
#: Permutation bytes per routed row per hidden element, forward: each expert-ordered row is read
#: from its token (bf16) and written (bf16).
PERMUTE_BYTES = 2.0 + 2.0
#: The ``alltoall`` dispatcher's second permutation, per routed row per hidden element, forward: the
#: rows an EP rank receives arrive grouped by source rank and are re-sorted by local expert before the
#: grouped GEMMs ("Permutation 2: Sort tokens by local expert", ``sort_chunks_by_idxs``), and the
#: expert outputs un-sorted before the combine all-to-all ("Unpermutation 2"): read + write ``h`` bf16
#: each way, 2 x (2 + 2) B, whenever a rank holds more than one expert
#: (``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` / ``combine_preprocess``,
#: megatron/core/transformer/moe/token_dispatcher.py@d98e8a64). The ``flex`` dispatcher (DeepEP /
#: HybridEP) writes the received rows in expert order (HybridEP: "permute tokens for communication,
#: perform all-to-all communication, and permute tokens for experts in single step", same file) and
#: the ``allgather`` dispatcher permutes the gathered rows once: neither has this pass.
SORT_CHUNKS_BYTES = 2.0 * (2.0 + 2.0)
#: Transformer Engine's row padding for low-precision grouped GEMMs, bytes per routed row per hidden
#: element, forward and backward alike: Megatron-Core's ``TEGroupedMLP`` pads each local expert's rows
#: to the quantization alignment (``Fp8Padding`` before fc1, ``Fp8Unpadding`` after fc2,
#: megatron/core/transformer/moe/experts.py@core_v0.16.0 ``quantization_padding``, the same through
#: core_v0.18.0; named ``fp8_padding`` at core_v0.14.0 and core_v0.15.0). TE copies every row into a new tensor whenever any expert's count is not
#: a multiple of 16 (32 for MXFP8) (transformer_engine/pytorch/module/fp8_padding.py@v2.9
#: ``fused_multi_row_padding``; its backward ``fused_multi_row_unpadding``): the fc1 input and the
#: fc2 output, ``h`` bf16 read + written each, 2 x (2 + 2) B; the backward copies the two gradients
#: the same way. Only the ``flex`` dispatcher's HybridEP backend pads the rows in its own dispatch
#: (``pad_multiple``, megatron/core/transformer/moe/token_dispatcher.py@core_v0.16.0); the ``alltoall``
#: and ``allgather`` dispatchers leave the counts as routed (aligning them needs
#: ``moe_router_padding_for_quantization``, which the calibrated alltoall recipes do not set:
#: Megatron-Bridge src/megatron/bridge/perf_recipes/qwen/*/qwen3_moe.py@067f987d), and routed counts,
#: real or from ``moe_router_force_load_balancing``'s random logits, are almost never all aligned.
#: A dedicated copy kernel: priced at the achievable HBM rate (``hbm_eff``), as the clamp passes.
FP8_PAD_BYTES = 2.0 * (2.0 + 2.0)
#: Un-permutation bytes per routed row per hidden element: each row is read (bf16) and summed into its
#: token, written once per token (``2/k`` more per routed row, added where ``k`` is known). No routing
#: weights here: Megatron-Core applies them inside the experts' activation (``permuted_probs`` into
#: ``weighted_bias_swiglu_impl``, moe/experts.py@d98e8a64) and un-permutes without probs
#: (moe/token_dispatcher.py@d98e8a64 ``unpermute(...)`` in the alltoall and flex dispatchers).
UNPERMUTE_BYTES = 2.0
#: What ``EfficiencySpec.grouped_gemm_call_s`` stands for: a grouped expert GEMM is not one kernel.
#: Transformer Engine's ``GroupedLinear`` (what Megatron-Core's ``TEGroupedMLP`` runs) issues one cuBLAS
#: GEMM per local expert, spread over a few CUDA streams, and under a low-precision recipe one
#: quantize kernel per expert's rows (NVIDIA/TransformerEngine@v2.8
#: ``transformer_engine/common/gemm/cublaslt_gemm.cu`` ``nvte_multi_stream_cublas_gemm``, the same through
#: v2.18; ``pytorch/csrc/extensions/cast.cpp`` split quantize); a single grouped kernel runs only behind
#: opt-in switches (``NVTE_USE_CUTLASS_GROUPED_GEMM`` from v2.8, ``NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM``
#: from v2.17) that no calibrated recipe sets. Each local expert's GEMM therefore carries a fixed time
#: (launch, per-stream synchronisation, the host's per-expert work) on top of its FLOPs: a forward
#: fc1 + fc2 is ``2 x E/ep`` calls, the backward's data and weight gradients ``4 x E/ep``. Without it the
#: fit put the cost of many local experts (HGX rows, 16-32 per GPU) on a GEMM efficiency per board
#: (an HGX/NVL72 ratio of 0.66, no physical reading) and on a rows efficiency that fell at 900 rows.
#: The time adds because a dropless dispatcher syncs the host once per MoE layer (its token counts); padded
#: to capacity there is no sync and it overlaps the GEMMs (:func:`expert_gemms_fwd_s`). Refit with that
#: (``python bench/moe_fidelity.py --refit``, 2026-12-02, with the ModelZoo cross-node rows force-balanced as
#: their script runs, bench/moe_recipes.yaml): all-rows median 9.5 -> 9.1%, p90 32.5 -> 30.9%;
#: NeMo 25.09's eight padded token-drop rows median 13.8%, signed mean +7.3 -> +0.1%. Tried and left out
#: (2026-12-02): hiding the padded launches behind the whole MoE layer's other GPU work (attention, dense
#: GEMMs, memory-bound passes: the host runs ahead of all of it), not only the expert GEMMs: refit median
#: 9.1 -> 9.8%, p90 31.1 -> 25.3%, rows over 20% 10 -> 10 -- Qwen3-30B on 8 B200 (1058) +37.6 -> -0.9%, but
#: DeepSeek-V3 on 256 B200 (1057, 32 local experts) -17.3 -> -20.8% and Qwen3-235B on 64 B200 (1059) -> -16%:
#: the padded rows disagree on how much the launches hide, and the median moves toward its 10% floor, so the
#: narrower claim is kept.
GROUPED_GEMM_CALL_NOTE = "one cuBLAS GEMM per local expert (TE GroupedLinear)"
#: Rows of one tile of a grouped expert GEMM: each expert's token rows are computed in whole tiles
#: (DeepGEMM's contiguous-layout grouped GEMM aligns every expert's rows to its M block of 128,
#: deepseek-ai/DeepGEMM README "get_m_alignment_for_contiguous_layout"; CUTLASS grouped GEMMs run
#: 128-row tiles on Hopper and Blackwell): few tokens per expert waste up to a tile each.
GROUPED_GEMM_TILE_M = 128.0


def _last_call(fn):
    """Keep ``fn(model, x)``'s last answer and give it back when called again with the same model
    and the same :class:`PlanArrays` object (by identity; both held, so neither can be another
    object at the same address; candidates' columns are never written in place). The cost model asks
    for these per stage and per term: ~15 times on one chunk of candidates of a MoE model."""
    last: list = []

    @functools.wraps(fn)
    def wrapper(model, x):
        if last and last[0] is model and last[1] is x:
            return last[2]
        out = fn(model, x)
        last[:] = [model, x, out]
        return out

    return wrapper


# ------------------------------------------------------------------ where the MoE layers are
def _moe_prefix(model: ModelSpec) -> np.ndarray:
    """``c[i]``: MoE layers among the first ``i`` layers (``c[0] = 0``)."""
    l = model.num_layers
    if not model.is_moe:
        return np.zeros(l + 1, dtype=np.int64)
    i = np.arange(l)
    f = model.first_dense_layers
    is_moe = (i >= f) & ((i - f) % model.moe_layer_freq == 0)
    return np.concatenate([[0], np.cumsum(is_moe)])


@_last_call
def stage_moe_layers(model: ModelSpec, x: PlanArrays) -> dict:
    """MoE layers of the ``first`` stage, of the fullest ``middle`` stage (the last middle one:
    the leading dense layers sit on the early stages) and of the ``last`` stage."""
    if not model.is_moe:  # none (the same zeros, without indexing every candidate: search speed)
        return {st: np.zeros(len(x)) for st in ("first", "middle", "last")}
    c = _moe_prefix(model)
    l = model.num_layers
    first = c[np.minimum(x.first, l)]
    last = c[l] - c[np.maximum(l - x.last, 0)]
    lo = np.maximum(l - x.last - x.mid, 0)
    mid = c[np.maximum(l - x.last, 0)] - c[lo]
    single = x.pp == 1
    first = np.where(single, c[l], first)
    last = np.where(single, c[l], last)
    mid = np.where(x.pp > 2, mid, first)
    return {"first": first.astype(float), "middle": mid.astype(float), "last": last.astype(float)}


def routed_expert_params(model: ModelSpec) -> int:
    """Routed-expert parameters of one MoE layer (every expert), :func:`counting.mlp_params` each."""
    if not model.is_moe:
        return 0
    return model.num_experts * counting.mlp_params(model, model.expert_ffn_hidden_size)


def logits_stage(x: PlanArrays, stage: str):
    """Where the output layer (and the multi-token-prediction depths) run: the last stage, the only
    one when ``pp == 1`` (:mod:`step` prices it on ``first`` then)."""
    if stage == "last":
        return x.pp > 1
    if stage == "first":
        return x.pp == 1
    return np.zeros(len(x), dtype=bool)


def stage_expert_params(model: ModelSpec, x: PlanArrays, stage: str):
    """Routed-expert parameters one GPU of a stage holds: ``moe layers x E x mlp / (ep*etp)``, plus
    the routed experts of the MTP blocks (:func:`counting.mtp_block_params`) on the logits stage."""
    if not model.is_moe:
        return np.zeros(len(x))
    n = stage_moe_layers(model, x)[stage]
    mtp = np.where(logits_stage(x, stage), model.mtp_num_layers, 0)
    return (n + mtp) * routed_expert_params(model) / (x.ep * x.etp)


def mtp_nonexpert_params_local(model: ModelSpec, x: PlanArrays, stage: str):
    """The multi-token-prediction depths' other parameters (norms, ``2h -> h`` projection, the block's
    attention, router, shared experts; :func:`counting.mtp_params`; the output head shared) and, with
    ``pp > 1``, the logits stage's copy of the input embedding, on one GPU of that stage (``/tp``);
    zero elsewhere and without MTP."""
    d = model.mtp_num_layers
    if not d:
        return np.zeros(len(x))
    own = counting.mtp_params(model) - (d * routed_expert_params(model) if model.is_moe else 0)
    # with pp > 1 the MTP stage builds its own copy of the input embedding (vocabulary-parallel) for the
    # shifted tokens (Megatron-Core gpt_model.py: ``if self.pre_process or self.mtp_process``) (issue 13).
    # Not under DualPipe: the GPU of the last stage also holds the first (the shallowest layers with the
    # embedding and the deepest with the output head on one PP rank), and the MTP module shares that
    # embedding and output head physically, parameters and gradients (DeepSeek-V3 report, arXiv
    # 2412.19437 Sec. 3.2.3, "Shared Embedding and Output Head for Multi-Token Prediction").
    emb = np.where((x.pp > 1) & (x.pp_sched != 1), model.vocab_size * model.hidden_size, 0.0)
    return np.where(logits_stage(x, stage), (own + emb) / x.tp, 0.0)


def nonexpert_layer_params(model: ModelSpec) -> float:
    """Mean parameters of one block without its routed experts (tensor-parallel over ``tp``)."""
    return counting.mean_layer_params(model) - model.num_moe_layers * routed_expert_params(model) / model.num_layers


def layer_params_local(model: ModelSpec, x: PlanArrays):
    """Mean parameters of one block on one GPU (dense part ``/tp``; experts of a MoE layer
    ``/(ep*etp)``, weighted by the share of MoE layers)."""
    if not model.is_moe:  # the same figure: the expert term is zero
        return nonexpert_layer_params(model) / x.tp
    share = model.num_moe_layers / model.num_layers
    return nonexpert_layer_params(model) / x.tp + share * routed_expert_params(model) / (x.ep * x.etp)


# ------------------------------------------------------------------ tokens
def moe_tokens(x: PlanArrays):
    """``T_loc``: tokens of one micro-batch entering a MoE layer on one GPU (sequence parallel)."""
    return compute.tokens_per_gpu(x) / x.tp


def imbalance(model: ModelSpec, x: PlanArrays):
    """Load factor of the busiest expert rank (1 without expert parallelism: one rank has all, and under
    round-robin routing, ``Plan.moe_routing``, which gives every expert the same rows), at most what the
    ``ep`` ranks can hold (:func:`plan.max_imbalance`: ``min(ep, E/k)``; the default 1.1 on a model whose
    tokens use every expert is 1)."""
    held = max_imbalance(model.num_experts, max(model.experts_per_token, 1), x.ep)
    return np.where((x.ep > 1) & ~x.moe_rr, np.minimum(x.moe_imb, held), 1.0)


def load_factor(model: ModelSpec, x: PlanArrays):
    """Rows of the busiest expert rank / the balanced share ``T_loc * k / E`` per expert. Dropless:
    :func:`imbalance`. With the model's ``moe_capacity_factor`` an expert takes at most that many
    times the balanced share (the rest dropped: GShard/Switch capacity, Megatron-Core
    ``--moe-expert-capacity-factor``), and padded to capacity (Plan ``moe_pad_to_capacity``,
    ``--moe-pad-expert-input-to-capacity``) exactly that many: its padding rows are dispatched and
    computed as the others (token_dispatcher.py ``drop_and_pad``, the capacity of ``get_capacity``)."""
    imb = imbalance(model, x)
    cf = model.moe_capacity_factor
    if cf is None:
        return imb
    return np.where(x.moe_pad, cf, np.minimum(imb, cf))


def routed_rows(model: ModelSpec, x: PlanArrays):
    """Token rows one GPU's grouped GEMMs process per MoE layer and micro-batch (busiest rank)."""
    return x.etp * moe_tokens(x) * model.experts_per_token * load_factor(model, x)


def fp8_pad_bytes(model: ModelSpec, x: PlanArrays):
    """Bytes of Transformer Engine's row padding and un-padding around the grouped expert GEMMs, one
    MoE layer and micro-batch, one GPU, forward (the backward moves the same): :data:`FP8_PAD_BYTES`
    per routed row and hidden element in the low-precision layers with the ``alltoall`` or
    ``allgather`` dispatcher; zero in bf16 and with ``flex`` (HybridEP pads in its dispatch)."""
    lowp = compute.lowp_share(x)  # 0 in bf16
    return np.where(x.moe_disp != 2, lowp * FP8_PAD_BYTES * routed_rows(model, x) * model.hidden_size, 0.0)


def sort_chunks_bytes(model: ModelSpec, x: PlanArrays):
    """Bytes of the ``alltoall`` dispatcher's second permutation and its inverse, one MoE layer and
    micro-batch forward, one GPU (:data:`SORT_CHUNKS_BYTES` per received row and hidden element; zero
    for the other dispatchers and where a rank holds a single expert)."""
    on = (x.moe_disp == 0) & (model.num_experts > x.ep)
    return np.where(on, SORT_CHUNKS_BYTES * routed_rows(model, x) * model.hidden_size, 0.0)


# ------------------------------------------------------------------ compute
def rows_efficiency(per, cluster: ClusterSpec):
    """Fraction of its efficiency a grouped expert GEMM keeps with ``per`` token rows per expert:
    ``1 - exp(-per / grouped_gemm_rows_scale)`` (1 where the scale is 0). Few rows per expert make
    each expert's GEMM a short one: its tiles fill one partial wave of the SMs (the fixed time of each
    expert's separate GEMM is ``grouped_gemm_call_s``, :data:`GROUPED_GEMM_CALL_NOTE`). The dense curve of
    :func:`compute.gemm_efficiency` (``gemm_dim_scale``, fitted on dense GEMMs whose token dimension
    is in the thousands) does not see this; the scale is fitted on the MoE rows
    (bench/moe_fidelity.py, rows named in hardware/efficiency_profiles.yaml)."""
    s = cluster.efficiency.grouped_gemm_rows_scale
    if s <= 0:
        return 1.0
    return 1.0 - np.exp(-np.asarray(per, dtype=float) / s)


def _grouped_gemm_s(rows, groups, k, n, cluster: ClusterSpec, fp8, balanced=True, fused=False) -> tuple:
    """``groups`` GEMMs sharing ``rows`` token rows, each ``(rows/groups) x k`` by ``k x n``, in the
    precision recipe ``fp8`` (a ``PlanArrays.fp8`` code: peaks and operand bytes of
    :data:`compute.RECIPES`, as :func:`compute._gemm_s` prices a dense GEMM). Each expert's rows run
    in whole tiles of :data:`GROUPED_GEMM_TILE_M` rows: ``ceil(per / tile) * tile`` with ``balanced``
    routing (every expert gets the same count), half a tile more than ``per`` on average otherwise.
    Each of the ``groups`` GEMMs also costs ``grouped_gemm_call_s`` (:data:`GROUPED_GEMM_CALL_NOTE`);
    ``fused`` (Plan ``moe_grouped_gemm``): one kernel runs every expert's GEMM, one call in all.
    Returns ``(roofline_s, launch_s)``: how they combine is :func:`expert_gemms_fwd_s`'s."""
    gpu, e = cluster.gpu, cluster.efficiency
    per = rows / groups
    tile = GROUPED_GEMM_TILE_M
    per_run = np.where(balanced, np.ceil(per / tile) * tile, per + tile / 2.0)
    flops = 2.0 * groups * per_run * k * n
    eff = compute.gemm_efficiency(np.minimum(k, n), cluster) * e.grouped_gemm_eff * rows_efficiency(
        per, cluster)
    peak_bf16 = gpu.peak("bf16") * 1e12
    peaks = np.array([peak_bf16] + [gpu.peak_tflops.get(compute.RECIPES[c]["peak"], gpu.peak("bf16")) * 1e12
                                    for c in range(1, len(compute.RECIPES))])
    code = np.clip(np.asarray(fp8), 0, len(compute.RECIPES) - 1)
    rate = np.where(code > 0, peaks[code] * e.fp8_gemm_eff_ratio, peak_bf16) * eff
    qbytes = compute._recipe_table("elem_bytes", code)
    traffic = groups * k * n * qbytes + rows * (k * qbytes + n * compute.BF16_BYTES)
    hbm = gpu.hbm_bandwidth_gbps * 1e9 * e.hbm_eff
    calls = np.where(fused, 1.0, groups)
    return np.maximum(flops / np.maximum(rate, 1e-30), traffic / hbm), calls * e.grouped_gemm_call_s


def expert_gemms_fwd_s(roofline_s, launch_s, x: PlanArrays):
    """The routed experts' grouped GEMMs of one MoE layer forward, from their roofline and their calls'
    fixed time (:func:`_grouped_gemm_s`). A dropless dispatcher learns its token counts on the host (the
    all-to-all's split sizes, GroupedLinear's per-expert rows): one device-to-host sync per MoE layer
    forward, after which the host issues the experts' GEMMs to a drained GPU, so their fixed time adds
    to the GEMMs'. Padded to capacity (Plan ``moe_pad_to_capacity``) every count is known on the host
    beforehand: Megatron-Core's alltoall dispatcher keeps ``cuda_sync_point = "no_sync"`` for
    ``drop_and_pad`` (NVIDIA/Megatron-LM@0014f137 megatron/core/transformer/moe/token_dispatcher.py,
    ``MoEAlltoAllTokenDispatcher.preprocess``), the host runs ahead and the fixed time overlaps the GEMMs:
    the longer of the two."""
    return np.where(x.moe_pad, np.maximum(roofline_s, launch_s), roofline_s + launch_s)


def _mlp_fwd_s(model: ModelSpec, cluster: ClusterSpec, tokens, ffn_local, fp8):
    """A dense MLP's two (gated: three) GEMMs, the :func:`compute._gemm_s` roofline."""
    up = (2 if model.gated else 1) * ffn_local
    return compute._gemm_s(tokens, model.hidden_size, up, cluster, fp8) + compute._gemm_s(
        tokens, ffn_local, model.hidden_size, cluster, fp8)


def expert_cast_bytes(model: ModelSpec, x: PlanArrays):
    """Bytes a low-precision recipe spends quantizing the MoE layer's MLP GEMM operands beyond what
    :func:`compute.lowp_cast_bytes` counts for the dense MLP it replaces, one MoE layer, one
    micro-batch, one GPU, forward share (the backward's is the 2x backward rule, as there).

    Transformer Engine quantizes every input of a grouped GEMM per routed row: ``te.GroupedLinear``
    (Megatron-Core ``TEGroupedMLP``, megatron/core/transformer/moe/experts.py@d98e8a64, through
    ``TEColumnParallelGroupedLinear`` / ``TERowParallelGroupedLinear``,
    megatron/core/extensions/transformer_engine.py) splits its input by ``m_splits`` and quantizes
    each expert's rows (TE ``module/grouped_linear.py``, ``tex.split_quantize``), forward the fc1
    input (``h`` per routed row) and the fc2 input (``f_e/etp``), backward their output gradients
    (``h`` for fc2, ``(2 if gated) f_e/etp`` for fc1), at the recipe's ``cast_fwd`` / ``cast_bwd``
    bytes per element (:data:`compute.RECIPES`). A routed row is a token times ``k``: the routed
    experts quantize ``k`` times the rows of the dense MLP whose casts :func:`compute.lowp_cast_bytes`
    counts (``h + f`` forward, ``h + (2 if gated) f`` backward per token, ``/tp``); the shared experts
    quantize their own inputs as a dense MLP of their width does. Zero for bf16 and for a dense model."""
    m = model
    if not m.is_moe or not np.any(x.fp8):
        return np.zeros(len(x))
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    h = m.hidden_size
    g = 2 if m.gated else 1
    fe = m.expert_ffn_hidden_size / x.etp
    rows = routed_rows(m, x)
    sw = m.num_shared_experts * (m.shared_expert_ffn_hidden_size or 0)
    f = m.ffn_hidden_size
    fwd = rows * (h + fe) + T * ((h + sw) / t if sw else 0.0) - T * (h + f) / t
    bwd = rows * (h + g * fe) + T * ((h + g * sw) / t if sw else 0.0) - T * (h + g * f) / t
    c_f, c_b = compute._recipe_table("cast_fwd", x.fp8), compute._recipe_table("cast_bwd", x.fp8)
    lowp = compute.lowp_share(x)
    return lowp * (c_f * fwd + c_b * bwd) / 3.0


#: Bytes per routed row and expert-FFN column (``fe``) that a clamped gated activation
#: (``activation_clamp``, GPT-OSS ``swiglu_limit``) adds, bf16 (2 B), forward / backward.
#: Megatron-Core's ``weighted_bias_quick_geglu_impl`` (megatron/core/fusions/fused_bias_geglu.py,
#: identical at core_r0.15.0, core_r0.16.0, core_r0.17.0 and core_r0.18.0: NeMo 25.11-26.06) clamps in
#: eager PyTorch *before* its ``jit_fuser`` kernel: ``chunk`` into gate and linear halves, one
#: ``clamp`` on each (read fe, write fe), ``torch.cat`` back (read 2fe, write 2fe): 8 fe elements,
#: 16 B. Its autograd backward: each ``clamp`` reads the gradient and its saved input and writes
#: the gradient (3 fe each half), and ``chunk``'s backward concatenates the two halves (read 2fe,
#: write 2fe): 10 fe elements, 20 B. GPT-OSS runs this path in Megatron-Bridge's gpt_oss
#: provider/bridge (``bias_activation_fusion=True``, ``activation_func=quick_gelu``,
#: ``activation_func_clamp_value=7.0``, ``use_te_activation_func`` unset; Megatron-Bridge r0.2.0
#: models/gpt_oss/gpt_oss_provider.py, r0.3.0-r0.5.0 gpt_oss_bridge.py), moe/experts.py
#: ``TEGroupedMLP.bias_act_func``. Selective ``moe_act`` recomputation re-runs the forward part.
#: Other GPT-OSS mechanisms read and left as they are: attention with sinks runs fused (TE
#: >= 2.8 passes ``softmax_type`` to cuDNN, Megatron-LM core_r0.15.0+ extensions/transformer_engine.py;
#: TransformerEngine v2.9 common/fused_attn/fused_attn.cpp accepts learnable softmax with sliding
#: window (left, 0) from cuDNN 9.13.1, and NeMo 25.11-26.06 ship TE 2.9-2.16 with cuDNN 9.13.1-9.21:
#: F16_arbitrary_seqlen, no unfused s x s fallback); whether cuDNN skips the masked blocks of the
#: window is not in any source read (closed kernel), so attention stays window-aware as counted.
CLAMP_FWD_BYTES = 16.0
CLAMP_BWD_BYTES = 20.0
#: Bytes per routed row and ``fe`` column the clamps keep for their backward (``clamp`` saves its
#: input: the two bf16 halves of the fc1 output), unless ``moe_act`` recomputation drops them.
CLAMP_SAVED_BYTES = 2.0 * 2.0


#: Bytes per routed row and hidden column (``h``) that the routed experts' down-projection bias
#: adds, forward / backward. Megatron-Core builds the grouped fc2 with ``skip_bias_add=True`` and
#: adds its bias in eager PyTorch, ``TEGroupedMLP._apply_bias`` (moe/experts.py, the same at
#: core_r0.15.0-core_r0.18.0): per local expert ``t + b * p`` over ``torch.split`` of the fc2
#: output, then ``torch.cat``. With the routing weights in the router's bf16 (``moe_router_dtype``
#: unset in Megatron-Bridge's gpt_oss recipes r0.2.0-r0.5.0; ``topk_softmax_with_capacity`` casts
#: the probabilities ``type_as(logits)``, moe_utils.py), forward: ``b * p`` writes 2 B, the add
#: reads 2 + 2 and writes 2, ``cat`` reads 2 and writes 2 (12 B; ``.to`` is a no-op). Backward:
#: the bias gradient materialises ``grad * p`` (read 2, write 2) and sums it over the rows (read 2),
#: the routing weights' gradient materialises ``grad * b`` and sums it over ``h`` (6 B likewise),
#: and ``split``'s backward concatenates the per-expert gradients (read 2, write 2): 16 B. NeMo AutoModel's DeepEP experts add both biases in the same eager way
#: (Automodel@34f73e9 components/moe/layers.py ``GroupedExpertsDeepEP._apply_bias``; its fc1 bias
#: is not priced here). Only models with expert biases (``bias`` on a MoE model: GPT-OSS).
EXPERT_BIAS_FWD_BYTES = 12.0
EXPERT_BIAS_BWD_BYTES = 16.0


def expert_bias_bytes(model: ModelSpec, rows) -> tuple:
    """(forward, backward) bytes of the routed experts' eager down-projection bias over ``rows``
    routed rows (:data:`EXPERT_BIAS_FWD_BYTES`, :data:`EXPERT_BIAS_BWD_BYTES` per row and ``h``);
    zero for experts without biases."""
    if not (model.is_moe and model.bias):
        return 0.0, 0.0
    return EXPERT_BIAS_FWD_BYTES * model.hidden_size * rows, EXPERT_BIAS_BWD_BYTES * model.hidden_size * rows


def clamp_bytes(model: ModelSpec, x: PlanArrays, rows, width) -> tuple:
    """(forward, backward) bytes the activation clamp adds over ``rows`` routed rows of ``width``
    expert-FFN columns (:data:`CLAMP_FWD_BYTES`, :data:`CLAMP_BWD_BYTES`); zero without a clamp or
    where the plan fuses it (``act_clamp_fused``: NeMo AutoModel@34f73e9
    nemo_automodel/components/moe/layers.py ``quick_geglu_deepep``, clamp and activation in one
    ``@torch.compile`` function)."""
    if model.activation_clamp is None:
        return 0.0, 0.0
    on = np.where(x.clamp_fused, 0.0, 1.0) * width * rows
    return CLAMP_FWD_BYTES * on, CLAMP_BWD_BYTES * on


def _act_bytes(model: ModelSpec, rows, width):
    """Activation function bytes (read, write; gated reads two inputs), as in :mod:`compute`."""
    return (6 if model.gated else 4) * width * rows


def mla_attention_fwd_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    """MLA's attention GEMMs minus the ``QKV + proj`` that :func:`compute.layer_gemm_fwd_s`
    prices, one layer forward (zero for other attention)."""
    m = model
    if getattr(m, "kv_lora_rank", None) is None:
        return np.zeros(len(x))
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    a, hd, vd, h = m.num_heads, m.head_dim, m.v_head_dim or m.head_dim, m.hidden_size
    rope, kvr, qr = m.qk_rope_head_dim, m.kv_lora_rank, m.q_lora_rank
    nope = m.qk_nope_head_dim
    if qr:
        q = compute._gemm_s(T, h, qr, cluster, x.fp8) + compute._gemm_s(T, qr, a * hd / t, cluster, x.fp8)
    else:
        q = compute._gemm_s(T, h, a * hd / t, cluster, x.fp8)
    kv = compute._gemm_s(T, h, kvr + rope, cluster, x.fp8) + compute._gemm_s(T, kvr, a * (nope + vd) / t, cluster, x.fp8)
    o = compute._gemm_s(T, a * vd / t, h, cluster, x.fp8)
    qd, kvd = a * hd, m.num_kv_heads * hd
    dense = compute._gemm_s(T, h, (qd + 2 * kvd) / t, cluster, x.fp8) + compute._gemm_s(T, qd / t, h, cluster, x.fp8)
    # DeepSeek Sparse Attention's lightning indexer projections (counting.indexer_gemm_weights): its query
    # heads split over tp with the attention heads, its shared key and head weights replicated
    if m.is_sparse_attention:
        hi, di = m.index_n_heads, m.index_head_dim
        q = q + compute._gemm_s(T, qr or h, hi * di / t, cluster, x.fp8)
        kv = kv + compute._gemm_s(T, h, di + hi, cluster, x.fp8)
    # the attention core (A V at v_head_dim) is compute.attention_fwd_s's (counting's a*(hd+vd))
    return q + kv + o - dense


def moe_layer_times(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """What one MoE layer costs *beyond* a dense layer of :func:`compute.layer_times`, one
    micro-batch: its dense MLP removed, the router, routed experts (grouped GEMMs), shared
    experts, permutation and un-permutation added. Seconds, forward and backward."""
    m = model
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    h = m.hidden_size
    E, k = m.num_experts, m.experts_per_token
    fe = m.expert_ffn_hidden_size / x.etp
    up = (2 if m.gated else 1) * fe
    rows = routed_rows(m, x)
    groups = (E / x.ep).astype(float)
    bal = (imbalance(model, x) <= 1.0) | x.moe_pad  # every expert the same rows
    roof1, launch1 = _grouped_gemm_s(rows, groups, h, up, cluster, x.fp8, bal, x.gemm_fused)
    roof2, launch2 = _grouped_gemm_s(rows, groups, fe, h, cluster, x.fp8, bal, x.gemm_fused)
    routed = expert_gemms_fwd_s(roof1 + roof2, launch1 + launch2, x)
    shared_w = m.num_shared_experts * (m.shared_expert_ffn_hidden_size or 0)
    shared = _mlp_fwd_s(m, cluster, T, shared_w / t, x.fp8) if shared_w else 0.0
    dense_mlp = _mlp_fwd_s(m, cluster, T, m.ffn_hidden_size / t, x.fp8)
    Tl = moe_tokens(x)
    router = compute._gemm_s(Tl, h, E, cluster, np.zeros_like(x.fp8))
    eff = cluster.efficiency.moe_membound_eff
    mem = (ROUTER_BYTES_PER_SCORE * Tl * E
           + (PERMUTE_BYTES + UNPERMUTE_BYTES + 2.0 / k) * Tl * k * load_factor(m, x) * h
           + sort_chunks_bytes(model, x)) / eff
    mem = mem + _act_bytes(m, rows, fe) + (_act_bytes(m, T, shared_w / t) if shared_w else 0.0)
    mem = mem - _act_bytes(m, T, m.ffn_hidden_size / t) + expert_cast_bytes(m, x)
    comp_f = routed + shared + router - dense_mlp
    clamp_f, clamp_b = clamp_bytes(m, x, rows, fe)
    bias_f, bias_b = expert_bias_bytes(m, rows)
    mem_f = compute.hbm_s(mem, cluster)
    pad = fp8_pad_bytes(m, x)  # the same bytes forward and backward
    return {"compute_fwd_s": comp_f, "compute_bwd_s": 2.0 * comp_f,
            "membound_fwd_s": mem_f + compute.hbm_s(clamp_f + bias_f + pad, cluster),
            "membound_bwd_s": 2.0 * mem_f + compute.hbm_s(clamp_b + bias_b + pad, cluster)}


# ------------------------------------------------------------------ activation memory
#: Bytes per element of an activation input kept as FP8 for the backward: Megatron-Core casts the
#: SwiGLU input to ``torch.float8_e4m3fn`` (megatron/core/fusions/fused_bias_swiglu.py@d98e8a64,
#: ``input.to(torch.float8_e4m3fn) if fp8_input_store``: 1 B, no scale kept). DeepSeek-V3 stores the
#: same inputs in FP8 with its 1x128 fine-grained scales (arXiv 2412.19437 Sec. 3.3.3, "Inputs of the
#: SwiGLU operator in MoE"): + 4 B per 128 elements, 3% of the 1 B, left out.
FP8_ACT_INPUT_BYTES = 1.0


def activation_input_bytes(model: ModelSpec, x: PlanArrays):
    """Bytes per element of an MLP's hidden width (``f``, ``f_e/etp`` or the shared experts') that the
    MLP keeps as its activation function's inputs for the backward: two inputs (gate and up) of 2 B
    for a gated MLP, 1 B each under ``act_fp8_input_store`` (Megatron-Core
    ``activation_func_fp8_input_store``, which it allows for SwiGLU only, transformer_config.py@d98e8a64;
    the dense, shared-expert and routed-expert MLPs alike: mlp.py, moe/shared_experts.py,
    moe/experts.py); one bf16 input (2 B) for an ungated MLP."""
    if not model.gated:
        return np.full(len(x), 2.0)
    return 2.0 * np.where(x.act_fp8, FP8_ACT_INPUT_BYTES, 2.0)


@_last_call
def moe_activation_delta_per_layer(model: ModelSpec, x: PlanArrays):
    """Bytes a MoE layer stores beyond a dense layer (:func:`memory.layer_activation_bytes`), one
    micro-batch, one GPU: minus the dense MLP's stored inputs; plus the router input and fp32
    probabilities, the permuted expert inputs (``M x h``), the expert activation inputs
    (``M x f_e/etp``, two for gated MLPs) and down-projection inputs, the fp32 routing weight of each
    routed row (applied in the activation, whose backward needs it; its output's gradient gives the
    weight's), and the shared experts' MLP inputs as a dense MLP stores them. The un-permutation
    stores nothing (it has no routing weights to differentiate: :data:`UNPERMUTE_BYTES`)."""
    m = model
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    gemm_in = np.where(x.fp8 > 0, 1.0, 2.0)
    act_in = activation_input_bytes(m, x)  # the activation's stored inputs (FP8 with act_fp8_input_store)
    f = m.ffn_hidden_size
    dense = T * (act_in * f + f * gemm_in) / t
    rows = routed_rows(m, x)
    fe = m.expert_ffn_hidden_size / x.etp
    Tl = moe_tokens(x)
    rcf = recompute.flags(m, x)
    keep_act_out = np.where(rcf["moe_act"], 0.0, 1.0)  # moe_act recomputed under selective
    routed = rows * (m.hidden_size * gemm_in + act_in * fe + fe * gemm_in * keep_act_out)
    if m.activation_clamp is not None:  # the eager clamps keep their input, the bf16 fc1 output (2 x fe x 2 B),
        # beside the fused activation's saved (clamped, concatenated) input: CLAMP_FWD_BYTES' passes
        routed = routed + rows * CLAMP_SAVED_BYTES * fe * keep_act_out * np.where(x.clamp_fused, 0.0, 1.0)
    router = Tl * m.num_experts * 4.0 * 2  # fp32 scores and probabilities
    weights = 4.0 * rows  # fp32 routing weight per routed row
    sw = m.num_shared_experts * (m.shared_expert_ffn_hidden_size or 0)
    shared = T * (act_in * sw + sw * gemm_in) / t
    shared = np.where(rcf["shared_experts"] & ~rcf["moe"], 0.0, shared)  # --recompute-modules shared_experts
    # --recompute-modules moe: the MoE layer keeps only its input (recompute.py): none of its own, nor the
    # dense MLP's a dense layer would keep
    return np.where(rcf["moe"], -dense, routed + router + weights + shared - dense)


def mlp_saved_bytes_per_token(model: ModelSpec, x: PlanArrays):
    """Bytes per token a dense layer's MLP stores beyond its input (its activation inputs and the down
    projection's input, on one GPU: ``/tp``): what ``--recompute-modules mlp`` frees (recompute.py)."""
    f = model.ffn_hidden_size or 4 * model.hidden_size
    return (activation_input_bytes(model, x) * f + f * compute.gemm_input_bytes(x)) / x.tp


def dense_mlp_rerun_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    """Seconds a dense layer's MLP forward takes again under ``--recompute-modules mlp``, one micro-batch:
    its GEMMs (:func:`_mlp_fwd_s`) and the activation's memory-bound pass (read the up projection's
    output, write the activation's: ``2 up + 2 f`` bytes per token)."""
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    f = model.ffn_hidden_size or 4 * model.hidden_size
    up = (2 if model.gated else 1) * f
    return _mlp_fwd_s(model, cluster, T, f / t, x.fp8) + compute.hbm_s(T * (2.0 * up + 2.0 * f) / t, cluster)


def has_moe_selective_set(model: ModelSpec) -> bool:
    """Whether the model's selective recomputation is the MoE/MLA module set (see the module
    docstring) rather than the dense attention core: a MoE or MLA model."""
    return model.is_moe or model.is_mla


def moe_selective(model: ModelSpec, x: PlanArrays):
    """Rows whose selective recomputation is the MoE/MLA module set."""
    return (x.recompute == 1) & has_moe_selective_set(model)


def selective_saved_bytes_per_token(model: ModelSpec, x: PlanArrays) -> tuple:
    """(replicated, tensor-parallel region) bytes per token per layer that the MoE/MLA selective set
    does not store (before ``/tp``; zero where it does not apply): the two norm outputs
    (``layernorm``) and, with MLA, the decompressed Q, K and V (``mla_up_proj``: ``2 a hd`` for Q,
    ``2 a hd`` for K, ``2 a v_hd`` for V). The expert activation (``moe_act``) is per MoE layer:
    :func:`moe_activation_delta_per_layer`."""
    m = model
    rcf = recompute.flags(m, x)
    gemm_in = np.where(x.fp8 > 0, 1.0, 2.0)
    norms = 2.0 * m.hidden_size * gemm_in
    qkv = 0.0
    if m.is_mla:
        vd = m.v_head_dim or m.head_dim
        qkv = 2.0 * m.num_heads * (2 * m.head_dim + vd)
    return np.where(rcf["layernorm"], norms, 0.0), np.where(rcf["mla_up_proj"], qkv, 0.0)


def selective_recompute_fwd_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> tuple:
    """(per layer, per MoE layer) seconds the MoE/MLA selective set redoes in the backward, one
    micro-batch: the two norms (read h, write h, bf16, ``/tp`` with sequence parallelism) and the
    MLA up-projections (Q up, KV up GEMMs); per MoE layer the expert activation function. Per layer
    it also takes back the attention-core re-run that the dense meaning of selective prices
    (:func:`compute.layer_times` ``selective_extra_s``) where FlashAttention runs: ``core_attn`` is
    not in the set (module docstring)."""
    m = model
    rcf = recompute.flags(m, x)
    sel = moe_selective(m, x) & ~rcf["explicit"]  # the default set (a named set prices each module it names)
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    norm_bytes = 2.0 * 4.0 * m.hidden_size * T * np.where(x.sp, 1.0 / t, 1.0)
    per_layer = np.where(rcf["layernorm"], compute.hbm_s(norm_bytes, cluster), 0.0)
    if m.is_mla:
        a, hd, vd = m.num_heads, m.head_dim, m.v_head_dim or m.head_dim
        up = compute._gemm_s(T, m.kv_lora_rank, a * (m.qk_nope_head_dim + vd) / t, cluster, x.fp8)
        if m.q_lora_rank:
            up = up + compute._gemm_s(T, m.q_lora_rank, a * hd / t, cluster, x.fp8)
        per_layer = per_layer + np.where(rcf["mla_up_proj"], up, 0.0)
    per_layer = per_layer - np.where(sel & x.fa, compute.attention_fwd_s(m, cluster, x), 0.0)
    per_moe = 0.0
    if m.is_moe:
        fe = m.expert_ffn_hidden_size / x.etp
        rows = routed_rows(m, x)
        per_moe = np.where(rcf["moe_act"] & ~rcf["moe"], compute.hbm_s(
            _act_bytes(m, rows, fe) + clamp_bytes(m, x, rows, fe)[0], cluster), 0.0)
        sw = m.num_shared_experts * (m.shared_expert_ffn_hidden_size or 0)
        if sw:  # --recompute-modules shared_experts: their GEMMs again
            shared = _mlp_fwd_s(m, cluster, T, sw / t, x.fp8)
            per_moe = per_moe + np.where(rcf["shared_experts"] & ~rcf["moe"], shared, 0.0)
    return np.where(x.recompute == 1, per_layer, 0.0), np.where(x.recompute == 1, per_moe, 0.0)


def mla_activation_delta_per_token(model: ModelSpec, x: PlanArrays):
    """Bytes per token per layer (tensor-parallel region, before ``/tp``) MLA stores beyond the
    ``2q + 4kv + q`` of :func:`memory.activation_bytes_per_token`: values at ``v_head_dim``;
    plus the compressed latents, replicated over tp (``q_lora`` and ``kv_lora + rope``: the
    inputs of the up-projections and of their norms, 2 x 2 B each). Zero without MLA."""
    m = model
    if getattr(m, "kv_lora_rank", None) is None:
        saved_rep, saved_tp = selective_saved_bytes_per_token(model, x)  # norms of a MoE model
        return -saved_tp, -saved_rep
    gemm_in = np.where(x.fp8 > 0, 1.0, 2.0)
    a, hd, vd = m.num_heads, m.head_dim, m.v_head_dim or m.head_dim
    tp_region = 2.0 * a * (vd - hd) + a * (vd - hd) * gemm_in + np.zeros(len(x))
    latent = 4.0 * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim) + np.zeros(len(x))
    if m.is_sparse_attention:  # DSA: the indexer's queries (tp region), its key, head weights and the top-k indices
        tp_region = tp_region + 2.0 * m.index_n_heads * m.index_head_dim
        latent = latent + 2.0 * m.index_head_dim + 4.0 * m.index_n_heads + 4.0 * m.index_topk
    saved_rep, saved_tp = selective_saved_bytes_per_token(model, x)
    return tp_region - saved_tp, latent - saved_rep
