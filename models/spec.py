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
  experts of width ``shared_expert_ffn_hidden_size``. Layer ``i`` is MoE when
  ``i >= first_dense_layers`` and ``(i - first_dense_layers) % moe_layer_freq == 0``; every other
  layer has a dense MLP of width ``f`` (Llama 4 Maverick: 1 and 2 -> MoE layers 1, 3, 5 ...).
  Routing: ``router_score`` (softmax/sigmoid), ``router_bias`` (a trained bias in the router
  linear, GPT-OSS), ``router_expert_bias`` (DeepSeek-V3's aux-loss-free balancing bias, updated
  outside backprop), node/group-limited routing (``router_num_groups``, ``router_group_topk``),
  ``moe_capacity_factor`` (None = dropless), ``shared_expert_gate`` (Qwen2-MoE's sigmoid gate).
- Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2), set by ``kv_lora_rank``: queries through
  an optional low-rank ``q_lora_rank`` bottleneck, keys/values from a ``kv_lora_rank`` latent plus
  one shared rotary key of ``qk_rope_head_dim``; per-head query/key width
  ``head_dim = qk_nope_head_dim + qk_rope_head_dim`` and value width ``v_head_dim``.
- ``v_head_dim`` (value/output head width) defaults to ``head_dim``; ``num_heads * head_dim`` may
  differ from ``hidden_size`` (Qwen3, GPT-OSS). ``qk_norm``: per-head RMSNorm of Q and K (Qwen3);
  ``attention_sinks``: one learned logit per head (GPT-OSS).
- Local attention: ``attention_window`` tokens, ``attention_window_kind`` sliding (GPT-OSS,
  Gemma, Mistral) or chunked (Llama 4); with ``global_attention_every = n`` layer ``i`` is global
  (full) when ``(i + 1) % n == 0`` and local otherwise; ``n = 0`` makes every layer local.
- ``mtp_num_layers``: DeepSeek-V3 multi-token-prediction depths trained with the model; they are
  *not* part of ``total_params`` (DeepSeek-V3's 671B excludes the 14B MTP), see ``counting.mtp_params``.

Derived figures (parameters, FLOPs) are computed in :mod:`models.counting`, one place only; this
module only holds and validates the data.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from plan_search.models.io import NoBoolNumbers

GATED_ACTIVATIONS = ("swiglu", "geglu")
#: The largest ``num_layers`` (also what bounds per-layer work done before validation, e.g. the
#: MoE layer pattern of a HuggingFace config).
MAX_LAYERS = 10_000


class ModelSpec(NoBoolNumbers):
    """A decoder-only transformer, as plain data (litgpt ``Config`` style)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # schema built on first use: fast CLI start

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
    seq_len_source: str | None = Field(
        default=None, description="where seq_len comes from when it is not the document's own training length "
        "(HF import: the rule models.hf took); printed beside plans that use it",
    )
    global_batch: int = Field(
        default=1024, gt=0, le=100_000_000, description="default global batch, in sequences"
    )
    activation: Literal["gelu", "relu2", "swiglu", "geglu"] = "gelu"
    position: Literal["learned", "rotary", "alibi"] = "learned"
    rope_scaling: Literal["yarn", "llama3"] | None = Field(
        default=None, description="rotary positions scaled by YaRN (HF rope_scaling rope_type 'yarn': GPT-OSS, "
        "DeepSeek-V2/V3, Kimi-K2) or Llama 3.1's frequency scaling ('llama3': Llama 3.1, Llama 4 Scout); other "
        "scalings (linear, dynamic) are not modelled: None",
    )
    # Architecture fields a launch configuration must carry to rebuild the model (issue 23); they change no
    # parameter or FLOP count. HF keys: models/hf.py.
    rope_theta: float = Field(
        default=10000.0, gt=0, le=1e12, allow_inf_nan=False,
        description="rotary base (HF rope_theta / rotary_emb_base); 10,000 is RoPE's (Su et al. 2021) and the "
        "frameworks' default",
    )
    rotary_percent: float = Field(
        default=1.0, gt=0, le=1, allow_inf_nan=False,
        description="share of each head's width that is rotated (HF rotary_pct / partial_rotary_factor: GPT-NeoX "
        "0.25, Nemotron 0.5)",
    )
    rope_factor: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                      description="rope_scaling factor (yarn, llama3)")
    rope_original_max_position: int | None = Field(
        default=None, gt=0, le=100_000_000, description="rope_scaling original_max_position_embeddings (yarn, llama3)")
    rope_low_freq_factor: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                               description="llama3 rope_scaling low_freq_factor")
    rope_high_freq_factor: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                                description="llama3 rope_scaling high_freq_factor")
    rope_beta_fast: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                         description="yarn rope_scaling beta_fast")
    rope_beta_slow: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                         description="yarn rope_scaling beta_slow")
    rope_mscale: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False,
                                      description="yarn rope_scaling mscale (DeepSeek MLA)")
    rope_mscale_all_dim: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False,
                                              description="yarn rope_scaling mscale_all_dim (DeepSeek MLA)")
    norm_eps: float = Field(default=1e-5, gt=0, le=1, allow_inf_nan=False,
                            description="epsilon of every norm (HF rms_norm_eps / layer_norm_eps ...)")
    layernorm_1p: bool = Field(default=False, description="LayerNorm weights stored as w - 1 (zero-centred "
                               "gamma: Nemotron's LayerNorm1p)")
    qk_l2_norm: bool = Field(default=False, description="weightless L2 norm of queries and keys (Llama 4 "
                             "use_qk_norm; no parameters)")
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
    router_score: Literal["softmax", "sigmoid"] = Field(
        default="softmax", description="router score function (DeepSeek-V3, Kimi-K2: sigmoid)"
    )
    router_bias: bool = Field(default=False, description="router linear carries a trained bias (GPT-OSS): E params/MoE layer")
    router_expert_bias: bool = Field(
        default=False,
        description="aux-loss-free balancing bias (DeepSeek-V3 e_score_correction_bias): E values per MoE "
        "layer, in the checkpoint but updated outside backprop (no gradient, no optimizer state)",
    )
    router_num_groups: int = Field(
        default=0, ge=0, le=100_000, description="expert groups of group-limited routing (DeepSeek n_group); 0 = none"
    )
    router_group_topk: int = Field(
        default=0, ge=0, le=100_000, description="groups a token may be routed to (DeepSeek topk_group); 0 = all"
    )
    moe_capacity_factor: float | None = Field(
        default=None, gt=0, le=1_000, allow_inf_nan=False,
        description="expert capacity as a multiple of the balanced load tokens*k/E (excess tokens dropped); None = dropless",
    )
    shared_expert_gate: bool = Field(default=False, description="sigmoid gate on the shared expert (Qwen2-MoE): h params/MoE layer")
    router_topk_scaling: float | None = Field(
        default=None, gt=0, le=1e6, allow_inf_nan=False,
        description="routed experts' weights multiplied by this (DeepSeek routed_scaling_factor); None = 1",
    )
    router_norm_topk: bool = Field(
        default=True, description="the k routing weights are renormalized to sum to 1 (HF norm_topk_prob; "
        "Mixtral, GPT-OSS, Qwen3-MoE, DeepSeek-V3); False: the scores before top-k as they are (Qwen2-MoE, "
        "DeepSeek-V2)",
    )

    v_head_dim: int | None = Field(default=None, gt=0, le=100_000, description="value/output head width; default head_dim")
    q_lora_rank: int | None = Field(
        default=None, gt=0, le=1_000_000, description="MLA query low-rank width; None = full-rank Q projection"
    )
    kv_lora_rank: int | None = Field(
        default=None, gt=0, le=1_000_000, description="MLA compressed key/value latent width; None = no MLA"
    )
    qk_rope_head_dim: int | None = Field(
        default=None, gt=0, le=100_000, description="MLA rotary part of each query/key head (shared by all heads for keys)"
    )
    qk_nope_head_dim: int | None = Field(
        default=None, gt=0, le=100_000, description="MLA non-rotary part of each query/key head"
    )
    qk_norm: bool = Field(default=False, description="per-head RMSNorm of queries and keys (Qwen3): 2*head_dim params/layer")
    attention_sinks: bool = Field(default=False, description="one learned sink logit per head (GPT-OSS): a params/layer")
    activation_clamp: float | None = Field(
        default=None, gt=0, le=1e6,
        description="gated activation clamp (GPT-OSS swiglu_limit 7.0): gate <= limit, linear in [-limit, limit]; None = no clamp",
    )
    attention_window: int | None = Field(
        default=None, gt=0, le=100_000_000, description="local attention span in tokens; None = full attention everywhere"
    )
    attention_window_kind: Literal["sliding", "chunked"] = Field(
        default="sliding", description="local layers: a sliding window (GPT-OSS, Gemma) or fixed chunks (Llama 4)"
    )
    global_attention_every: int = Field(
        default=0, ge=0, le=MAX_LAYERS,
        description="with attention_window: layer i is global when (i+1) % n == 0; 0 = every layer local",
    )
    mtp_num_layers: int = Field(
        default=0, ge=0, le=100, description="multi-token-prediction depths trained with the model (DeepSeek-V3: 1)"
    )
    index_n_heads: int | None = Field(
        default=None, gt=0, le=100_000, description="DeepSeek Sparse Attention: lightning-indexer heads (DeepSeek-V3.2: "
        "64); None = dense attention",
    )
    index_head_dim: int | None = Field(
        default=None, gt=0, le=100_000, description="DeepSeek Sparse Attention: lightning-indexer head width (V3.2: 128)"
    )
    index_topk: int | None = Field(
        default=None, gt=0, le=100_000_000, description="DeepSeek Sparse Attention: keys each query attends to, chosen "
        "by the indexer (V3.2: 2048)",
    )

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
        if data.get("kv_lora_rank") is not None and data.get("head_dim") is None:
            nope, rope = data.get("qk_nope_head_dim"), data.get("qk_rope_head_dim")
            if isinstance(nope, int) and isinstance(rope, int) and not isinstance(nope, bool) and not isinstance(rope, bool):
                data["head_dim"] = nope + rope
        if data.get("head_dim") is None and isinstance(data.get("hidden_size"), int) and isinstance(
            data.get("num_heads"), int
        ):
            h, a = data["hidden_size"], data["num_heads"]
            if a > 0 and h % a == 0:
                data["head_dim"] = h // a
        if data.get("v_head_dim") is None:
            data["v_head_dim"] = data.get("head_dim")
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
            if self.first_dense_layers >= self.num_layers:  # no MoE layer left: the experts are never used
                raise ValueError(
                    f"first_dense_layers: {self.first_dense_layers} leaves no mixture-of-experts layer of "
                    f"num_layers {self.num_layers}; give at most {self.num_layers - 1}, or num_experts 0 for a dense model"
                )
            if self.router_num_groups:
                if self.num_experts % self.router_num_groups:
                    raise ValueError(
                        f"router_num_groups: {self.router_num_groups} does not divide num_experts "
                        f"{self.num_experts}; use a divisor"
                    )
                if not 0 < self.router_group_topk <= self.router_num_groups:
                    raise ValueError(
                        f"router_group_topk: {self.router_group_topk} must be between 1 and "
                        f"router_num_groups {self.router_num_groups}"
                    )
                reachable = self.router_group_topk * (self.num_experts // self.router_num_groups)
                if self.experts_per_token > reachable:
                    raise ValueError(
                        f"experts_per_token: {self.experts_per_token} exceeds the {reachable} experts of the "
                        f"router_group_topk {self.router_group_topk} groups a token may use"
                    )
            elif self.router_group_topk:
                raise ValueError("router_group_topk: set only together with router_num_groups > 0")
        else:
            for field in ("experts_per_token", "num_shared_experts", "router_num_groups", "router_group_topk",
                          "router_bias", "router_expert_bias", "shared_expert_gate", "first_dense_layers",
                          "expert_ffn_hidden_size", "shared_expert_ffn_hidden_size"):
                if getattr(self, field):
                    raise ValueError(f"{field}: set only together with num_experts > 0")
            if self.moe_layer_freq != 1:  # a dense model's layers are all dense: it would be ignored
                raise ValueError("moe_layer_freq: set only together with num_experts > 0")
            if self.moe_capacity_factor is not None:
                raise ValueError("moe_capacity_factor: set only together with num_experts > 0")
        if self.shared_expert_gate and not self.num_shared_experts:
            raise ValueError("shared_expert_gate: set only together with num_shared_experts > 0")
        dsa = ("index_n_heads", "index_head_dim", "index_topk")
        given = [f for f in dsa if getattr(self, f) is not None]
        if given and len(given) < 3:
            missing = [f for f in dsa if f not in given]
            raise ValueError(f"{missing[0]}: DeepSeek Sparse Attention needs {', '.join(dsa)} together; set it or drop "
                             f"{', '.join(given)}")
        if given and self.kv_lora_rank is None:
            raise ValueError("index_topk: DeepSeek Sparse Attention runs on multi-head latent attention (MQA mode over "
                             "the latent); set kv_lora_rank, or drop the index_* fields")
        if given and self.attention_window is not None:
            raise ValueError("index_topk: sparse attention with attention_window is not modelled; drop one")
        mla_dims = ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")
        if self.kv_lora_rank is None:
            for field in mla_dims:
                if getattr(self, field) is not None:
                    raise ValueError(f"{field}: multi-head latent attention needs kv_lora_rank too; set it or drop {field}")
        else:
            for field in ("qk_rope_head_dim", "qk_nope_head_dim"):
                if getattr(self, field) is None:
                    raise ValueError(f"{field}: required with kv_lora_rank (multi-head latent attention)")
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise ValueError(
                    f"head_dim: {self.head_dim} must equal qk_nope_head_dim + qk_rope_head_dim "
                    f"({self.qk_nope_head_dim + self.qk_rope_head_dim}) with multi-head latent attention"
                )
            if self.num_kv_heads != self.num_heads:
                raise ValueError(
                    f"num_kv_heads: {self.num_kv_heads}; multi-head latent attention decompresses one key/value "
                    f"per query head, so num_kv_heads must equal num_heads {self.num_heads}"
                )
            for field in ("kv_lora_rank", "q_lora_rank"):  # a latent is a compression of the hidden state
                rank = getattr(self, field)
                if rank is not None and rank > self.hidden_size:
                    raise ValueError(
                        f"{field}: {rank} exceeds hidden_size {self.hidden_size}; multi-head latent attention "
                        f"projects the hidden state down to this rank, so give at most {self.hidden_size}"
                    )
        if self.rope_scaling is not None and self.position != "rotary":
            raise ValueError(f"rope_scaling: set only with rotary positions, not {self.position}")
        if self.activation_clamp is not None and self.activation not in GATED_ACTIVATIONS:
            raise ValueError(
                f"activation_clamp: set only with a gated activation ({', '.join(GATED_ACTIVATIONS)}), "
                f"not {self.activation}"
            )
        if self.attention_window is None:
            if self.global_attention_every:
                raise ValueError("global_attention_every: set only together with attention_window")
        elif self.global_attention_every > self.num_layers:
            raise ValueError(
                f"global_attention_every: {self.global_attention_every} exceeds num_layers {self.num_layers}"
            )
        return self

    # Small, purely structural helpers (no counting here).
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)."""
        return self.kv_lora_rank is not None

    @property
    def is_sparse_attention(self) -> bool:
        """DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer picks ``index_topk`` keys per query."""
        return self.index_topk is not None

    def is_moe_layer(self, i: int) -> bool:
        """Whether block ``i`` (0-based) has a mixture-of-experts MLP."""
        return self.is_moe and i >= self.first_dense_layers and (i - self.first_dense_layers) % self.moe_layer_freq == 0

    def is_local_attention_layer(self, i: int) -> bool:
        """Whether block ``i`` (0-based) attends within ``attention_window`` only."""
        if self.attention_window is None:
            return False
        n = self.global_attention_every
        return n == 0 or (i + 1) % n != 0

    @property
    def num_local_attention_layers(self) -> int:
        if self.attention_window is None:
            return 0
        n = self.global_attention_every
        return self.num_layers - (self.num_layers // n if n else 0)

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        if not self.is_moe:
            return 0
        rest = max(0, self.num_layers - self.first_dense_layers)
        return -(-rest // self.moe_layer_freq)  # ceil: layers first, first+freq, ... below num_layers
