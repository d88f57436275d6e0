"""The model specification: one immutable, validated document describing a decoder-only transformer.

Terms used throughout the project (they follow Narayanan et al. 2021 and Korthikanti et al. 2022):

- ``num_layers`` (l): transformer blocks.
- ``hidden_size`` (h): width of the residual stream.
- ``num_heads`` (a): query heads; ``head_dim`` (hd) is ``h / a`` unless given.
- ``num_kv_heads`` (g): key/value heads; ``g = a`` is multi-head attention, ``1 < g < a``
  grouped-query attention (GQA), ``g = 1`` multi-query attention (MQA).
- ``ffn_hidden_size`` (f): inner width of the dense MLP.
- ``vocab_size`` (V), ``seq_len`` (s): the default training sequence length.
- ``activation``: ``gelu`` / ``relu2`` MLPs have two matrices (``2*h*f`` parameters);
  ``swiglu`` / ``geglu`` (gated) MLPs have three (``3*h*f``).
- Mixture of experts: ``num_experts`` (E) routed experts, ``experts_per_token`` (k) of them used by
  each token, each an MLP of width ``expert_ffn_hidden_size``; ``num_shared_experts`` always-on
  experts of width ``shared_expert_ffn_hidden_size``; the first ``first_dense_layers`` layers and
  every layer whose index is not a multiple of ``moe_layer_freq`` are dense MLPs of width ``f``.

Derived figures (parameters, FLOPs) are computed in :mod:`models.counting`, one place only; this
module only holds and validates the data.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GATED_ACTIVATIONS = ("swiglu", "geglu")
#: The largest ``num_layers`` (also what bounds per-layer work done before validation, e.g. the
#: MoE layer pattern of a HuggingFace config).
MAX_LAYERS = 10_000


class ModelSpec(BaseModel):
    """A decoder-only transformer, as plain data (litgpt ``Config`` style)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="catalog name or a label for the model")
    num_layers: int = Field(gt=0, le=MAX_LAYERS, description="transformer blocks (l)")
    hidden_size: int = Field(gt=0, le=1_000_000, description="residual width (h)")
    num_heads: int = Field(gt=0, le=100_000, description="query heads (a)")
    num_kv_heads: int | None = Field(
        default=None, gt=0, le=100_000, description="key/value heads (g); default = num_heads"
    )
    head_dim: int | None = Field(
        default=None, gt=0, le=100_000, description="per-head width; default hidden_size/num_heads"
    )
    ffn_hidden_size: int | None = Field(
        default=None, gt=0, le=10_000_000, description="dense MLP inner width (f); default 4h"
    )
    vocab_size: int = Field(gt=0, le=100_000_000, description="vocabulary (V)")
    seq_len: int = Field(default=2048, gt=0, le=100_000_000, description="training sequence length (s)")
    global_batch: int = Field(
        default=1024, gt=0, le=100_000_000, description="default global batch, in sequences"
    )
    activation: Literal["gelu", "relu2", "swiglu", "geglu"] = "gelu"
    position: Literal["learned", "rotary", "alibi"] = "learned"
    tied_embeddings: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    bias: bool = Field(default=True, description="linear layers carry biases")
    qkv_bias: bool | None = Field(
        default=None, description="Q/K/V projections carry biases (Qwen2); default = bias"
    )
    dropout: bool = Field(default=True, description="dropout layers present (their masks are stored)")

    num_experts: int = Field(default=0, ge=0, le=100_000, description="routed experts (E); 0 = dense")
    experts_per_token: int = Field(default=0, ge=0, le=100_000, description="routed experts per token (k)")
    expert_ffn_hidden_size: int | None = Field(default=None, gt=0, le=10_000_000)
    num_shared_experts: int = Field(default=0, ge=0, le=1_000)
    shared_expert_ffn_hidden_size: int | None = Field(default=None, gt=0, le=10_000_000)
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP")
    moe_layer_freq: int = Field(default=1, ge=1, description="every n-th layer is MoE (after the dense ones)")

    aliases: tuple[str, ...] = ()
    source: str = Field(default="user supplied", description="paper/table or config the shape comes from")

    @model_validator(mode="before")
    @classmethod
    def _fill_derived(cls, data):
        """Fill the defaulted shape fields in one place, before validation freezes the object."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("num_kv_heads") is None and data.get("num_heads") is not None:
            data["num_kv_heads"] = data["num_heads"]
        if data.get("ffn_hidden_size") is None and isinstance(data.get("hidden_size"), int):
            data["ffn_hidden_size"] = 4 * data["hidden_size"]
        if data.get("qkv_bias") is None:
            data["qkv_bias"] = data.get("bias", True)
        if data.get("num_experts") and data.get("expert_ffn_hidden_size") is None:
            data["expert_ffn_hidden_size"] = data.get("ffn_hidden_size")
        if data.get("num_shared_experts") and data.get("shared_expert_ffn_hidden_size") is None:
            data["shared_expert_ffn_hidden_size"] = data.get("expert_ffn_hidden_size") or data.get(
                "ffn_hidden_size"
            )
        if data.get("head_dim") is None and isinstance(data.get("hidden_size"), int) and isinstance(
            data.get("num_heads"), int
        ):
            h, a = data["hidden_size"], data["num_heads"]
            if a > 0 and h % a == 0:
                data["head_dim"] = h // a
        return data

    @model_validator(mode="after")
    def _check_shape(self) -> "ModelSpec":
        if self.head_dim is None:
            raise ValueError(
                f"num_heads: {self.num_heads} does not divide hidden_size {self.hidden_size}; "
                "give head_dim explicitly or fix the head count"
            )
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_kv_heads: {self.num_kv_heads} does not divide num_heads {self.num_heads}; "
                "use a divisor of num_heads"
            )
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise ValueError(
                    f"experts_per_token: {self.experts_per_token} must be between 1 and "
                    f"num_experts {self.num_experts}"
                )
            if self.first_dense_layers > self.num_layers:
                raise ValueError(
                    f"first_dense_layers: {self.first_dense_layers} exceeds num_layers {self.num_layers}"
                )
        elif self.experts_per_token:
            raise ValueError("experts_per_token: set only together with num_experts > 0")
        return self

    # Small, purely structural helpers (no counting here).
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        if not self.is_moe:
            return 0
        rest = range(self.first_dense_layers, self.num_layers)
        return sum(1 for i in rest if (i - self.first_dense_layers) % self.moe_layer_freq == 0)
