"""The execution document: one parallel plan, the single source of truth for its degrees.

Terms (Megatron-LM's, Narayanan et al. 2021; Korthikanti et al. 2022):

- ``tp`` tensor-parallel degree: each layer's matrices split over ``tp`` GPUs (all-reduce or,
  with sequence parallelism, reduce-scatter/all-gather per layer).
- ``cp`` context-parallel degree: the sequence split over ``cp`` GPUs (ring exchange of K/V).
- ``dp`` data-parallel degree: model replicas (or ZeRO shards) over which the batch is split.
- ``pp`` pipeline-parallel degree: layers split into ``pp`` stages; ``vpp`` virtual stages
  (model chunks) per GPU for the interleaved 1F1B schedule (``vpp = 1``: plain 1F1B).
- ``num_gpus = tp * cp * dp * pp``. Ranks are laid out as Megatron does: tp innermost, then cp,
  then dp, then pp; so a tp group occupies consecutive GPUs of a node, and a pp group strides
  ``tp*cp*dp`` ranks.
- ``micro_batch`` sequences per micro-batch per replica; ``global_batch`` sequences per
  optimizer step; ``grad_accum = global_batch / (dp * micro_batch)`` micro-batches per step.
- ``zero``: 0 plain data parallel; 1 optimizer states sharded (Megatron's
  ``--use-distributed-optimizer`` is stage 1, with fp32 gradient accumulation: ``fp32_grads``);
  2 gradients sharded too; 3 parameters sharded too (FSDP / ZeRO-3).
- ``recompute``: ``none``; ``selective`` (the attention core, Korthikanti et al.); ``full``
  (each layer's forward redone in the backward). ``recompute_layers`` limits full recomputation
  to that many layers per pipeline stage (Megatron ``--recompute-method block``).
- ``first_stage_layers`` / ``last_stage_layers``: uneven pipeline split (Megatron
  ``--decoder-first/last-pipeline-num-layers``); the rest are shared evenly by middle stages.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
PRECISION_CODES = {"bf16": 0, "fp16": 0, "fp8": 1}


class Plan(BaseModel):
    """A parallel execution plan; validates its own arithmetic on construction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_gpus: int = Field(gt=0, le=10_000_000)
    tp: int = Field(default=1, gt=0, le=100_000)
    pp: int = Field(default=1, gt=0, le=100_000)
    dp: int | None = Field(default=None, gt=0, le=10_000_000, description="default num_gpus/(tp*pp*cp)")
    cp: int = Field(default=1, gt=0, le=100_000)
    vpp: int = Field(default=1, gt=0, le=10_000, description="at most num_layers / pp (check_against)")
    zero: int = Field(default=1, ge=0, le=3)
    micro_batch: int = Field(default=1, gt=0, le=1_000_000)
    global_batch: int = Field(gt=0, le=100_000_000)
    seq_len: int = Field(gt=0, le=100_000_000)
    recompute: Literal["none", "selective", "full"] = "selective"
    recompute_layers: int | None = Field(default=None, ge=0, description="full recompute on k layers/stage")
    sequence_parallel: bool = True
    flash_attention: bool = True
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    fp32_grads: bool = Field(default=True, description="fp32 gradient accumulation/reduction (Megatron)")
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False
    first_stage_layers: int | None = Field(default=None, gt=0)
    last_stage_layers: int | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _fill_dp(cls, data):
        if isinstance(data, dict) and data.get("dp") is None:
            try:
                n, t, p, c = (int(data.get(k, 1)) for k in ("num_gpus", "tp", "pp", "cp"))
            except (TypeError, ValueError):
                return data
            if t > 0 and p > 0 and c > 0 and n % (t * p * c) == 0:
                data = dict(data, dp=n // (t * p * c))
        return data

    @model_validator(mode="after")
    def _check_degrees(self) -> "Plan":
        if self.dp is None or self.tp * self.pp * self.dp * self.cp != self.num_gpus:
            raise ValueError(
                f"num_gpus: tp*pp*cp ({self.tp}*{self.pp}*{self.cp}) must divide num_gpus "
                f"{self.num_gpus} and tp*pp*dp*cp must equal it"
                + (f" (dp={self.dp})" if self.dp else "")
            )
        if self.global_batch % (self.dp * self.micro_batch):
            raise ValueError(
                f"global_batch: {self.global_batch} is not divisible by dp*micro_batch "
                f"({self.dp}*{self.micro_batch}); pick a multiple of {self.dp * self.micro_batch}"
            )
        if self.vpp > 1 and self.pp == 1:
            raise ValueError("vpp: interleaved stages need pp > 1; set vpp 1 or raise pp")
        if self.vpp > 1 and self.grad_accum % self.pp:
            raise ValueError(
                f"vpp: the interleaved schedule needs grad_accum ({self.grad_accum}) to be a multiple "
                f"of pp ({self.pp}); change global_batch/micro_batch or use vpp 1"
            )
        if self.seq_len % (2 * self.cp) and self.cp > 1:
            raise ValueError(
                f"seq_len: {self.seq_len} must be divisible by 2*cp ({2 * self.cp}) for load-balanced "
                "context parallelism"
            )
        if self.cp > 1 and not self.flash_attention:
            raise ValueError("cp: context parallelism needs flash_attention on")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)
        if self.pp == 1 and (self.first_stage_layers is not None or self.last_stage_layers is not None):
            raise ValueError("first_stage_layers: an uneven split needs pp > 1; drop it or raise pp")
        if self.recompute_layers is not None and self.recompute != "full":
            raise ValueError("recompute_layers: only meaningful with recompute full")
        return self

    @property
    def label(self) -> str:
        """One-line summary of the degrees and main knobs, e.g. ``t8 p12 d16 v2 mb1 z1 full``."""
        s = f"t{self.tp} p{self.pp} d{self.dp}"
        s += f" c{self.cp}" if self.cp > 1 else ""
        s += f" v{self.vpp}" if self.vpp > 1 else ""
        rc = self.recompute + (f"({self.recompute_layers})" if self.recompute_layers else "")
        return s + f" mb{self.micro_batch} z{self.zero} {rc}"

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step per pipeline (``m``)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def stage_layers(self, num_layers: int) -> tuple[int, int, int]:
        """(first, middle, last) stage layer counts; ``middle`` is per middle stage.

        With one of first/last given, the remaining layers are shared by the other stages.
        """
        p, l = self.pp, num_layers
        if p == 1:
            return l, l, l
        f, la = self.first_stage_layers, self.last_stage_layers
        if f is None and la is None:
            return l // p, l // p, l // p
        if p == 2:
            f = f if f is not None else l - la
            return f, f, l - f
        if f is None:
            f = (l - la) // (p - 1)
        if la is None:
            la = (l - f) // (p - 1)
        return f, (l - f - la) // (p - 2), la

    def check_against(self, model: ModelSpec) -> None:
        """The rules that need the model; raises :class:`InputError` naming the rule."""
        m = model
        if m.is_moe:
            raise InputError(
                f"model: {m.name} is a mixture of experts; its parameters and FLOPs are counted "
                "(plan-catalog), but the expert-parallel cost model is not implemented yet"
            )
        if m.num_heads % self.tp:
            raise InputError(f"tp: {self.tp} does not divide num_heads {m.num_heads}; use a divisor")
        if m.num_kv_heads % self.tp and self.tp % m.num_kv_heads:
            raise InputError(
                f"tp: {self.tp} and num_kv_heads {m.num_kv_heads} must divide one another"
            )
        if (m.ffn_hidden_size or 0) % self.tp:
            raise InputError(f"tp: {self.tp} does not divide ffn_hidden_size {m.ffn_hidden_size}")
        if self.pp * self.vpp > m.num_layers:
            raise InputError(
                f"pp: pp*vpp ({self.pp}*{self.vpp}) exceeds num_layers {m.num_layers}; lower pp or vpp"
            )
        l = m.num_layers
        if self.pp > 1:
            uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
            if not uneven and l % self.pp:
                raise InputError(
                    f"pp: {self.pp} does not divide num_layers {l}; use a divisor or set "
                    "first_stage_layers/last_stage_layers"
                )
            f, mid, la = self.stage_layers(l)
            middle_total = l - f - la if self.pp > 2 else 0
            if self.pp > 2 and (middle_total <= 0 or middle_total % (self.pp - 2)):
                raise InputError(
                    f"first_stage_layers: with first {f} and last {la} layers, the remaining "
                    f"{middle_total} layers do not split evenly over {self.pp - 2} middle stages"
                )
            if self.pp == 2 and (f <= 0 or la <= 0 or f + la != l):
                raise InputError(f"first_stage_layers: {f} + {la} must equal num_layers {l}")
            if self.vpp > 1 and mid % self.vpp:
                raise InputError(
                    f"vpp: layers per (middle) stage ({mid}) must be divisible by vpp {self.vpp}"
                )
        if self.recompute_layers is not None:
            f, mid, la = self.stage_layers(l)
            if self.recompute_layers > max(f, mid, la):
                raise InputError(
                    f"recompute_layers: {self.recompute_layers} exceeds the layers per stage ({max(f, mid, la)})"
                )
