"""NeMo 2.0 / Megatron-Bridge recipe overrides: a YAML of overrides (nested or dotted keys), or the
``key=value`` list a ``nemo llm pretrain --factory <recipe> ...`` line or a perf script passes.

The keys are the kept list's (:func:`planner.frameworks.rules.kept_args` ``("nemo")``: NeMo 2.0 paths
``trainer.strategy.*``, ``data.*``, ``model.config.*``, ``optim.config.*``); Megatron-Bridge's ConfigContainer paths
(``model.tensor_model_parallel_size``, ``train.global_batch_size``, ``ddp.*``, ...) are translated to them
(:data:`BRIDGE`). The plan is :func:`planner.frameworks.emit.from_nemo_overrides`, which reads back what ``--emit``
writes, given a recording mapping: a key is *used* when it read it. The recipe itself (activation, norm,
tokenizer) is not in the overrides: the model is the catalog model whose shape the overrides give, or ``--model``.
"""

from __future__ import annotations

import re

from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as fw
from plan_search.planner.frameworks.read.megatron import _catalog_match, consistency, merged_with_catalog
from plan_search.planner.frameworks.read.report import Entry, LaunchRead, check_kinds

VERSION = fw.VERSIONS["nemo"]

#: Megatron-Bridge ConfigContainer paths -> the NeMo 2.0 paths of the same setting.
BRIDGE = {
    "train.global_batch_size": "data.global_batch_size", "train.micro_batch_size": "data.micro_batch_size",
    "dataset.sequence_length": "data.seq_length", "dataset.seq_length": "data.seq_length",
    "model.seq_length": "data.seq_length",
    "optimizer.use_distributed_optimizer": "optim.config.use_distributed_optimizer",
    "mixed_precision": "trainer.plugins.precision",
}
_BRIDGE_STRATEGY = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                    "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
                    "sequence_parallel", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
                    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
_MODEL_KEYS = {"num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
               "num_attention_heads": "num_heads", "num_query_groups": "num_kv_heads", "kv_channels": "head_dim",
               "num_moe_experts": "num_experts", "moe_router_topk": "experts_per_token",
               "moe_ffn_hidden_size": "expert_ffn_hidden_size", "q_lora_rank": "q_lora_rank",
               "kv_lora_rank": "kv_lora_rank", "qk_head_dim": "qk_nope_head_dim",
               "qk_pos_emb_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim", "mtp_num_layers": "mtp_num_layers",
               "moe_expert_capacity_factor": "moe_capacity_factor", "vocab_size": "vocab_size",
               "dsa_indexer_n_heads": "index_n_heads", "dsa_indexer_head_dim": "index_head_dim",
               "dsa_indexer_topk": "index_topk"}
#: model.config keys of the model or of the recomputation that the plan reader does not read itself.
_MODEL_SIDE = {"moe_layer_freq", "moe_shared_expert_intermediate_size", "multi_latent_attention",
               "moe_router_score_function", "moe_router_enable_expert_bias", "moe_router_num_groups",
               "moe_router_group_topk", "recompute_method", "recompute_num_layers", "recompute_modules", "seq_length",
               "moe_pad_expert_input_to_capacity", "overlap_moe_expert_parallel_comm", "moe_token_dispatcher_type",
               # the architecture emit.nemo_model_overrides writes (issue 23)
               "normalization", "gated_linear_unit", "add_bias_linear", "add_qkv_bias",
               "share_embeddings_and_output_weights", "position_embedding_type", "qk_layernorm", "qk_l2_norm",
               "softmax_type", "window_size", "window_attn_skip_freq", "no_rope_freq", "activation_func_clamp_value",
               "glu_linear_offset", "layernorm_zero_centered_gamma", "moe_shared_expert_gate", "hidden_dropout",
               "attention_dropout", "experimental_attention_variant"}
_OUT = "logging, checkpointing, data or tokenizer: outside the step"
_OPT = "optimizer or schedule hyper-parameter: no effect on the step time or memory"
_UNPRICED = ((r"(log|logger|checkpoint|resume|tokenizer|dataset|data\.(?!seq_length|micro|global)|trainer\.(max_steps|"
              r"val_check_interval|limit_[a-z_]+|log_every_n_steps|callbacks|enable_checkpointing|max_time)|"
              r"nemo_run|run\.|profiling|comm_overlap|rerun|ft\.|straggler|inprocess).*", _OUT),
             (r"(optim\.config\.(lr|min_lr|weight_decay|adam_[a-z0-9]+|clip_grad|bf16|fp16|params_dtype)|optim\.lr_scheduler|"
              r"scheduler|optimizer\.(lr|min_lr|weight_decay|adam_[a-z0-9]+|clip_grad)|train\.(train_iters|eval_[a-z_]+|"
              r"manual_gc[a-z_]*)).*", _OPT),
             (r"(model\.config\.(init_method_std|rotary_base|rotary_percent|layernorm_epsilon|moe_aux_loss_coeff|"
              r"moe_router_load_balancing_type|moe_z_loss_coeff|moe_router_topk_scaling_factor|apply_rope_fusion|"
              r"bias_dropout_fusion|masked_softmax_fusion|moe_router_bias_update_rate|moe_router_pre_softmax|"
              r"moe_grouped_gemm|moe_permute_fusion|moe_router_dtype|moe_flex_dispatcher_backend|"
              r"gradient_accumulation_fusion|seq_length|make_vocab_size_divisible_by|moe_router_fusion)|"
              r"trainer\.strategy\.(ddp\.average_in_collective|save_ckpt_format|ckpt_[a-z_]+|gradient_as_bucket_view|"
              r"ddp\.check_for_nan_in_grad|ddp\.bucket_size)|trainer\.(accelerator|plugins\.fp8_recipe))$",
              "numerics of the same kernels: no effect on the step time or memory the planner prices"))
_UNPRICED_RX = [(re.compile(p), why) for p, why in _UNPRICED]
_SHAPES = re.compile(r"parallel|layers|hidden|heads|experts|moe_|pipeline|recompute|batch|seq_length|fp8|vocab|ffn|"
                     r"mtp|query_groups|lora|devices|num_nodes|offload")


class _Rec(dict):
    def __init__(self, data: dict, seen: set) -> None:
        super().__init__(data)
        self._seen = seen

    def get(self, k, d=None):
        self._seen.add(k)
        return super().get(k, d)


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _translate(key: str) -> str:
    if key in BRIDGE:
        return BRIDGE[key]
    if key.startswith("ddp."):
        return "trainer.strategy." + key
    head, _, rest = key.partition(".")
    if head == "model" and rest in _BRIDGE_STRATEGY:
        return "trainer.strategy." + rest
    if head == "model" and rest and not rest.startswith("config."):
        return "model.config." + rest
    return key


def parse(text: str, path: str) -> tuple[dict, dict[str, int]]:
    """(overrides as dotted keys, key -> line) of a YAML document or a key=value list."""
    lines: dict[str, int] = {}
    suffix = path.lower().rsplit(".", 1)[-1]
    if suffix in ("yaml", "yml"):
        from plan_search.models.io import parse_document

        doc = parse_document(text, f"nemo {path}")
        flat = _flatten(doc)
        for key in flat:
            leaf = key.rsplit(".", 1)[-1]
            for n, raw in enumerate(text.splitlines(), 1):
                if re.match(rf"\s*['\"]?{re.escape(key if '.' in raw.split(':')[0] else leaf)}['\"]?\s*:", raw):
                    lines.setdefault(key, n)
                    break
        return flat, lines
    out: dict = {}
    import plan_search.planner.frameworks.read.shell as shell

    script = shell.run(text)
    for cmd in script.commands:
        for w in cmd.words:
            m = re.fullmatch(r"\+{0,2}([A-Za-z_][A-Za-z0-9_.]*)=(.*)", w.text, re.S)
            if m and "." in m.group(1):
                k, v = m.group(1), m.group(2)
                out[k] = E.parse_nemo_overrides(f"{k}={v}").get(k, v) if " " not in v else v
                if isinstance(out[k], str) and re.fullmatch(r"\[[A-Za-z0-9_.,\-]*\]", out[k]):  # [a,b]: NeMo's list
                    out[k] = [int(x) if x.isdigit() else x for x in out[k][1:-1].split(",") if x]
                lines.setdefault(k, w.line)
    if not out:
        raise InputError(f"nemo: {path} has no key=value overrides (e.g. trainer.strategy.tensor_model_parallel_size=8)")
    return out, lines


def read(text: str, path: str, *, model: ModelSpec | None = None, num_gpus: int | None = None) -> LaunchRead:
    where = "nemo"
    raw, raw_lines = parse(text, path)
    o: dict = {}
    lines: dict[str, int] = {}
    origin: dict[str, str] = {}
    for k, v in raw.items():
        t = _translate(k)
        o[t] = v
        origin[t] = k
        if k in raw_lines:
            lines[t] = raw_lines[k]
    check_kinds("nemo", [(t, v) for t, v in o.items() if not (isinstance(v, str) and v == "None")], lines, where)
    if o.get("trainer.plugins.precision") in ("bf16_mixed", "fp16_mixed"):  # Megatron-Bridge's names
        o["trainer.plugins.precision"] = o["trainer.plugins.precision"].replace("_", "-").replace("fp16", "16")
    defaulted: list[Entry] = []
    s = "trainer.strategy."
    gpus_from = "trainer.num_nodes x trainer.devices"
    if num_gpus is not None:
        file_n = None
        try:
            file_n = int(o.get("trainer.num_nodes", 1)) * int(o["trainer.devices"])
        except (KeyError, TypeError, ValueError):
            pass
        gpus_from = f"--gpus {num_gpus}" + (f" (the file says {file_n})" if file_n and file_n != num_gpus else "")
        o["trainer.devices"] = 8 if num_gpus % 8 == 0 else num_gpus
        o["trainer.num_nodes"] = num_gpus // o["trainer.devices"]
    elif "trainer.devices" not in o:
        raise InputError(f"{where}: the overrides do not give the GPU count (trainer.devices, trainer.num_nodes): "
                         "give --gpus")
    for k, dflt in (("trainer.strategy.tensor_model_parallel_size", 1), ("trainer.strategy.pipeline_model_parallel_size", 1),
                    ("trainer.strategy.context_parallel_size", 1), ("trainer.strategy.sequence_parallel", False),
                    ("optim.config.use_distributed_optimizer", True), ("trainer.strategy.ddp.overlap_grad_reduce", False),
                    ("trainer.strategy.ddp.grad_reduce_in_fp32", True), ("model.config.recompute_granularity", None)):
        if k not in o:
            defaulted.append(Entry(f"{k} {dflt}", None, "NeMo's default; a recipe may set its own"))
    # the model: its shape from model.config, the rest from the catalog model of that shape, or --model
    d = {f: o[f"model.config.{k}"] for k, f in _MODEL_KEYS.items() if o.get(f"model.config.{k}") is not None}
    if o.get("model.config.multi_latent_attention") is False:
        d.pop("kv_lora_rank", None)
    seq = o.get("data.seq_length")
    match = _catalog_match(d) if {"num_layers", "hidden_size", "num_heads"} <= set(d) else None
    if match is None and model is None:
        raise InputError(f"{where}: the overrides do not name a catalog model's shape (model.config.num_layers, "
                         "hidden_size, num_attention_heads, ...): give --model")
    if model is not None and match is not None and match.num_layers != model.num_layers:
        raise InputError(f"{where}: the overrides' num_layers {match.num_layers} is not --model {model.name}'s "
                         f"{model.num_layers}")
    base = model or match
    if model is not None:
        d = {k: v for k, v in d.items() if k in ("num_layers",)}
    m = merged_with_catalog({**d, "name": base.name}, base, where, defaulted, whose="overrides")
    if seq is not None:
        m = m.model_copy(update={"seq_len": int(seq)})
    tp = int(o.get(s + "tensor_model_parallel_size", 1))
    pp = int(o.get(s + "pipeline_model_parallel_size", 1))
    cp = int(o.get(s + "context_parallel_size", 1))
    try:
        n = int(o.get("trainer.num_nodes") or 1) * int(o["trainer.devices"])
    except (TypeError, ValueError):
        raise InputError(f"{where}: trainer.devices {o.get('trainer.devices')!r} is not a GPU count") from None
    ep = int(o.get(s + "expert_model_parallel_size", 1) or 1)
    etp = int(o.get(s + "expert_tensor_parallel_size") or tp)
    consistency(where, n, tp, pp, cp, o.get("data.micro_batch_size"), o.get("data.global_batch_size"),
                m.num_experts, ep, etp, lines={"--global-batch-size": lines.get("data.global_batch_size")})
    seen: set = set()
    plan = E.from_nemo_overrides(_Rec(o, seen))
    try:  # the architecture keys emit writes for this model (model.config.rotary_base, layernorm_epsilon, ...)
        model_keys = set(E.nemo_model_overrides(m, tp))
    except Exception:  # noqa: BLE001 - a model emit cannot describe: no key is the architecture's
        model_keys = set()
    used, unpriced, unknown = [], [], []
    for t, v in o.items():
        k = origin.get(t)
        if k is None:
            continue
        shown = f"{k}={v!r}"[:120]
        line = lines.get(t)
        if t in seen or t.startswith("model.config.") and t[len("model.config."):] in _MODEL_KEYS:
            used.append(Entry(shown, line, t.rsplit(".", 1)[-1]))
            continue
        if t in model_keys or t.startswith("model.config.") and t[len("model.config."):] in _MODEL_SIDE:
            used.append(Entry(shown, line, "model (the recipe's, checked against the model's shape)"
                              if not t.startswith("model.config.recompute") else "recompute"))
            continue
        if False:
            used.append(Entry(shown, line, t.rsplit(".", 1)[-1]))
            continue
        why = next((w for rx, w in _UNPRICED_RX if rx.fullmatch(t)), None)
        if why:
            unpriced.append(Entry(shown, line, why))
            continue
        if v is None or v is False:
            unpriced.append(Entry(shown, line, "unset or off: the plan's default"))
            continue
        if _SHAPES.search(t):
            raise InputError(f"{where}: line {line}: {k} changes the model or the parallel layout and is not "
                             "understood by this reader")
        unknown.append(Entry(shown, line, "not understood: the estimate is made without it"))
    return LaunchRead(path=path, framework="nemo", dialect="nemo-overrides", version=VERSION, model=m, plan=plan,
                      gpus_from=gpus_from, used=used, unpriced=unpriced, not_understood=unknown, defaulted=defaulted,
                      notes=[Entry(f"model: {m.name}", None, "model")], text=text, settings={"overrides": raw})
