"""Plans as columns of numpy arrays, so that one copy of every formula prices one plan
(``plan-estimate``) or a hundred thousand candidates (the search) alike.

Every cost-model function takes a :class:`PlanArrays` and returns arrays of the same length.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import Iterable

import numpy as np

from plan_search.planner.costmodel.plan import GRAD_REDUCE_CODES, grad_per_microbatch
from plan_search.planner.costmodel.plan import bf16_layers_of
from plan_search.planner.costmodel.plan import DISPATCHER_CODES, PRECISION_CODES, RECOMPUTE_CODES, Plan
from plan_search.planner.costmodel.plan import CROSS_ENTROPY_CODES, MASTER_WEIGHT_BYTES, MOMENT_BYTES
from plan_search.planner.costmodel.plan import PP_SCHEDULE_CODES
from plan_search.planner.costmodel.plan import CUDNN_SDPA_CODES, module_mask, offload_mask


@dataclass(frozen=True)
class PlanArrays:
    """Struct of arrays; field meanings as in :class:`planner.plan.Plan`.

    ``recompute`` is coded 0 none, 1 selective, 2 full; ``fp8`` is the GEMM precision recipe
    (``plan.PRECISION_CODES``: 0 bf16/fp16, 1 fp8 delayed, 2 fp8 current, 3 mxfp8, 4 nvfp4;
    nonzero = low-precision GEMMs), ``bf16_frac`` the share of layers kept in bf16;
    ``ep``/``etp`` the expert-parallel degrees, ``moe_disp`` the token dispatcher (0 alltoall,
    1 allgather, 2 flex), ``moe_ovl`` dispatch overlap on, ``moe_imb`` the routing imbalance;
    ``rc_layers`` caps the fully recomputed layers per stage (``num_layers`` when every layer is
    recomputed, 0 without full recomputation: a stage recomputes ``min(rc_layers, its layers)``); ``first/mid/last`` are stage layer counts.
    """

    num_gpus: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    vpp: np.ndarray
    zero: np.ndarray
    mb: np.ndarray
    gb: np.ndarray
    seq: np.ndarray
    recompute: np.ndarray
    rc_layers: np.ndarray
    rc_mod: np.ndarray  # Plan.recompute_modules as a bit mask (plan.module_mask); 0: the model's default set
    off_mod: np.ndarray  # Plan.offload_modules as a bit mask (plan.offload_mask); 0: none
    sp: np.ndarray
    fa: np.ndarray
    fp8: np.ndarray
    fp32_grads: np.ndarray
    ovl_grad: np.ndarray
    ovl_param: np.ndarray
    ovl_tp: np.ndarray
    dp_shard: np.ndarray  # ZeRO/FSDP shard group size; 0 = the whole dp group (flat)
    grad_red: np.ndarray  # Plan.grad_reduce coded as plan.GRAD_REDUCE_CODES (0 = the ZeRO-stage default)
    reshard: np.ndarray  # bool: ZeRO-3/FSDP parameters resharded after the forward (gathered again for the backward)
    grad_bf16: np.ndarray  # bool: Plan.grad_bf16_copy
    opt_offload: np.ndarray  # bool: Plan.optimizer_offload
    act_offload: np.ndarray  # bool: Plan.activation_offload
    first: np.ndarray
    mid: np.ndarray
    last: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    moe_disp: np.ndarray  # DISPATCHER_CODES
    moe_ovl: np.ndarray
    moe_imb: np.ndarray  # float
    moe_rr: np.ndarray  # bool: Plan.moe_routing == "round_robin" (contiguous, exactly balanced routing)
    moe_pad: np.ndarray  # bool: Plan.moe_pad_to_capacity (every expert padded to its capacity, no host sync)
    bf16_frac: np.ndarray  # float: share of transformer layers whose GEMMs stay bf16 (Plan.bf16_layers)
    lowp_params: np.ndarray  # bool: Plan.lowp_params
    pp_sched: np.ndarray  # Plan.pp_schedule coded as plan.PP_SCHEDULE_CODES (0 1F1B, 1 DualPipe)
    moment_bytes: np.ndarray  # float: bytes of each Adam moment (Plan.adam_moments_dtype: fp32 4, bf16 2)
    act_fp8: np.ndarray  # bool: Plan.act_fp8_input_store
    clamp_fused: np.ndarray  # bool: Plan.act_clamp_fused
    yarn_fused: np.ndarray  # bool: Plan.yarn_rope_fused
    gemm_fused: np.ndarray  # bool: Plan.moe_grouped_gemm == "fused" (one kernel for the local experts)
    ce: np.ndarray  # Plan.cross_entropy coded as plan.CROSS_ENTROPY_CODES
    master_bytes: np.ndarray  # float: master-weight bytes per parameter (Plan.master_weights: 4, 2 or 0)
    sdpa: np.ndarray  # Plan.cudnn_sdpa coded as plan.CUDNN_SDPA_CODES (0 cuDNN 9.1, 1 cuDNN 9.19)
    fp8_attn: np.ndarray  # bool: Plan.fp8_attention (the attention core in FP8)
    muon: np.ndarray  # bool: Plan.optimizer == "muon" (planner/costmodel/muon.py)
    cp_comm: np.ndarray  # Plan.cp_comm_type coded as context_parallel.CP_COMM_CODES (0 p2p, 1 a2a, 2 allgather)

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @cached_property
    def shard(self) -> np.ndarray:
        """GPUs per ZeRO/FSDP shard group (``dp`` when sharding is flat)."""
        return np.where(self.dp_shard > 0, self.dp_shard, self.dp)

    @cached_property
    def grad_mb(self) -> np.ndarray:
        """Gradients reduced every micro-batch (:func:`planner.costmodel.plan.grad_per_microbatch`)."""
        return grad_per_microbatch(self.grad_red, self.zero, self.pp)

    @cached_property
    def m(self) -> np.ndarray:
        """Micro-batches per step (gradient accumulation); computed once per object (its columns are
        never written in place), as several terms of a stage read it."""
        return self.gb // (self.dp * self.mb)

    def take(self, idx) -> "PlanArrays":
        return PlanArrays(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    @staticmethod
    def from_plans(plans: Iterable[Plan], num_layers: int) -> "PlanArrays":
        plans = list(plans)
        cols: dict[str, list] = {f.name: [] for f in fields(PlanArrays)}
        for p in plans:
            f, mid, la = p.stage_layers(num_layers)
            rc = RECOMPUTE_CODES[p.recompute]
            rc_layers = 0
            if rc == 2:
                rc_layers = num_layers if p.recompute_layers is None else p.recompute_layers
            vals = dict(
                num_gpus=p.num_gpus, tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, vpp=p.vpp, zero=p.zero,
                mb=p.micro_batch, gb=p.global_batch, seq=p.seq_len, recompute=rc,
                rc_layers=rc_layers, sp=p.sequence_parallel and p.tp > 1, fa=p.flash_attention,
                rc_mod=module_mask(p.recompute_modules), off_mod=offload_mask(p.offload_modules),
                fp8=PRECISION_CODES[p.precision], fp32_grads=p.fp32_grads,
                dp_shard=p.dp_shard or 0, grad_red=GRAD_REDUCE_CODES[p.grad_reduce],
                reshard=p.reshard_after_forward, grad_bf16=p.grad_bf16_copy, opt_offload=p.optimizer_offload,
                act_offload=p.activation_offload,
                ovl_grad=p.overlap_grad_reduce, ovl_param=p.overlap_param_gather,
                ovl_tp=p.overlap_tp_comm, first=f, mid=mid, last=la, ep=p.ep, etp=p.etp,
                moe_disp=DISPATCHER_CODES[p.moe_dispatcher], moe_ovl=p.moe_overlap, moe_imb=p.moe_imbalance,
                moe_rr=p.moe_routing == "round_robin", moe_pad=p.moe_pad_to_capacity,
                bf16_frac=bf16_layers_of(p.precision, p.bf16_layers, num_layers) / max(num_layers, 1),
                lowp_params=p.lowp_params, pp_sched=PP_SCHEDULE_CODES[p.pp_schedule],
                moment_bytes=MOMENT_BYTES[p.adam_moments_dtype], act_fp8=p.act_fp8_input_store,
                clamp_fused=p.act_clamp_fused, yarn_fused=p.yarn_rope_fused, gemm_fused=p.moe_grouped_gemm == "fused",
                ce=CROSS_ENTROPY_CODES[p.cross_entropy], master_bytes=MASTER_WEIGHT_BYTES[p.master_weights],
                sdpa=CUDNN_SDPA_CODES[p.cudnn_sdpa], fp8_attn=p.fp8_attention,
                muon=p.optimizer == "muon", cp_comm={"p2p": 0, "a2a": 1, "allgather": 2}[p.cp_comm_type],
            )
            for k, v in vals.items():
                cols[k].append(v)
        out = {}
        for k, v in cols.items():
            dtype = bool if k in ("sp", "fa", "fp32_grads", "ovl_grad", "ovl_param", "ovl_tp", "moe_ovl", "reshard",
                                  "grad_bf16", "opt_offload", "act_offload", "lowp_params", "act_fp8",
                                  "clamp_fused", "yarn_fused", "gemm_fused", "moe_rr", "moe_pad", "fp8_attn",
                                  "muon") else np.int64
            dtype = float if k in ("moe_imb", "bf16_frac", "moment_bytes", "master_bytes") else dtype
            out[k] = np.asarray(v, dtype=dtype)
        return PlanArrays(**out)


#: Columns the cost model's per-layout terms never read: the data-parallel degree and what follows
#: from it (GPU count, global batch, ZeRO shard group, micro-batches per step ``m``), and how the
#: data-parallel group shards and reduces (ZeRO stage, gradient-reduce schedule, optimizer offload,
#: DeepSpeed's bf16 gradient copy, the DP overlaps). A stage's parameters, stored activations and
#: per-micro-batch times are priced once per group of :meth:`PlanArrays.groups` over these
#: (memory.stage_layout_terms, step.layout_terms, evaluate.LayoutTerms); tests/test_layout_terms.py
#: checks that changing these columns leaves those terms unchanged.
LAYOUT_FREE = ("num_gpus", "gb", "dp", "dp_shard", "zero", "grad_red", "opt_offload", "grad_bf16", "ovl_grad",
               "ovl_param")


def group_rows(cols, n: int):
    """:meth:`PlanArrays.groups` of the rows of ``cols`` (arrays of ``n`` rows; a broadcast view,
    stride 0, is one value and does not enter the key): ``(rep, inv)``."""
    key, mult = np.zeros(n, dtype=np.int64), 1
    for col in cols:
        col = np.asarray(col)
        if col.ndim == 0 or n == 0 or col.strides[0] == 0:
            continue
        if col.dtype.kind == "f":
            vals, codes = np.unique(col, return_inverse=True)
            r = len(vals)
        else:
            col = col.astype(np.int64, copy=False)
            lo, hi = int(col.min()), int(col.max())
            codes, r = col - lo, hi - lo + 1
        if r == 1:
            continue
        if mult > (1 << 62) // r:  # the key would overflow: renumber it densely first
            vals, key = np.unique(key, return_inverse=True)
            key, mult = key.astype(np.int64, copy=False), len(vals)
        key = key + codes * mult
        mult *= r
    vals, inv = np.unique(key, return_inverse=True)
    rep = np.empty(len(vals), dtype=np.int64)
    rep[inv] = np.arange(n)
    return rep, inv
