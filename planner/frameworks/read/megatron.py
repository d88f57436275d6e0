"""Megatron-LM launches: a shell script (``torchrun ... pretrain_gpt.py <flags>``), a plain argument list, or
a ModelZoo-style YAML of ``MODEL_ARGS`` (flag: value), read into the model, the GPU count and the plan.

The flag names and kinds are the kept list's (:func:`planner.frameworks.rules.kept_args`, the one list the
emitters write from); the plan is :func:`planner.frameworks.emit.from_megatron_namespace`, the same function
that reads back what ``plan-estimate --emit`` writes. Which flags were *used* is recorded by the namespace
itself (:class:`_Recording`): a flag is used when the plan or model reader looked at it. The flags the
planner knowingly leaves out (data, optimizer hyper-parameters, logging, ...) are :data:`UNPRICED`, each with
its reason; any other flag is *not understood*, and one whose name says it shapes the model or the parallel
layout (:data:`_SHAPES`) refuses the file.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any, Sequence

from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as fw
import plan_search.planner.frameworks.read.shell as shell
from plan_search.planner.frameworks.read.report import Entry, LaunchRead

VERSION = fw.VERSIONS["megatron"]
_SCRIPT = re.compile(r"(?:^|/)(pretrain_[A-Za-z0-9_]+\.py)$")

# ------------------------------------------------------------------ flags the planner leaves out, and why

_OPT = "optimizer or schedule hyper-parameter: no effect on the step time or memory"
_DATA = "data, tokenizer or data loader: outside the step"
_LOG = "logging, profiling, evaluation or checkpointing: outside the step"
_NUM = "numerics of the same kernels: no effect on the step time or memory the planner prices"
_RAMP = "batch ramp-up at the start of the run: the plan prices the full global batch"
_SYS = "process set-up: no effect on the step"

#: (pattern over the flag name, reason). Flags not here and not read by the plan or model are not understood.
UNPRICED: tuple[tuple[str, str], ...] = (
    (r"--(lr|min-lr|lr-[a-z0-9-]+|decoupled-[a-z-]+|weight-decay|start-weight-decay|end-weight-decay|"
     r"weight-decay-incr-style|adam-[a-z0-9-]+|sgd-momentum|clip-grad|init-method-[a-z-]+|train-iters|train-samples|"
     r"loss-scale|initial-loss-scale|min-loss-scale|loss-scale-window|hysteresis|seed|"
     r"override-opt[_-]param-scheduler|use-checkpoint-opt[_-]param-scheduler|moe-aux-loss-coeff|moe-z-loss-coeff|"
     r"moe-router-load-balancing-type|moe-router-topk-scaling-factor|moe-router-bias-update-rate|"
     r"mtp-loss-scaling-factor|moe-input-jitter-eps|calculate-per-token-loss|no-load-optim|no-load-rng|"
     r"no-save-optim|no-save-rng|finetune|lr-warmup-init)", _OPT),
    (r"--(data-path|data-cache-path|split|vocab-file|merge-file|tokenizer-[a-z-]+|mock-data|num-workers|"
     r"no-mmap-bin-files|no-create-attention-mask-in-dataloader|tiktoken-[a-z-]+|(train|valid|test)-data-path|"
     r"data-args-path|per-split-data-args-path|reset-position-ids|reset-attention-mask|eod-mask-loss|"
     r"dataloader-type|data-impl|legacy-tokenizer|object-storage-cache-path|s3-cache-path|vocab-extra-ids|"
     r"sft|dataset|mmap-warmup|num-dataset-builder-threads)", _DATA),
    (r"--(log-[a-z0-9-]+|logging-level|tensorboard-[a-z-]+|wandb-[a-z-]+|profile|profile-[a-z-]+|"
     r"use-pytorch-profiler|timing-log-[a-z-]+|save|load|save-interval|eval-iters|eval-interval|exit-[a-z-]+|"
     r"ckpt-[a-z-]+|dist-ckpt-[a-z-]+|auto-detect-ckpt-format|use-dist-ckpt|async-save|non-persistent-[a-z-]+|"
     r"no-check-for-nan-in-loss-and-grad|check-for-nan-in-loss-and-grad|distributed-timeout-minutes|"
     r"one-logger-[a-z-]+|pretrained-checkpoint|no-initialization|use-cpu-initialization|"
     r"rerun-mode|check-weight-hash-across-dp-replicas-interval|log-throughput|timing-log-level|"
     r"record-memory-history|memory-snapshot-path|tensorboard-queue-size|barrier-with-L1-time|"
     r"skip-train|test-mode|ft-[a-z-]+|enable-ft-package|straggler-[a-z-]+)", _LOG),
    (r"--(apply-layernorm-1p|norm-epsilon|layernorm-epsilon|rotary-base|rotary-percent|rotary-interleaved|"
     r"rotary-scaling-factor|rotary-seq-len-interpolation-factor|mscale|mscale-all-dim|use-rope-scaling|"
     r"rope-scaling-factor|use-mcore-models|use-legacy-models|transformer-impl|fp8-amax-history-len|"
     r"fp8-amax-compute-algo|fp8-margin|fp8-interval|no-fp8-wgrad|attention-softmax-in-fp32|"
     r"apply-query-key-layer-scaling|no-masked-softmax-fusion|no-bias-gelu-fusion|no-bias-swiglu-fusion|"
     r"no-bias-dropout-fusion|no-rope-fusion|no-persist-layer-norm|no-gradient-accumulation-fusion|"
     r"moe-router-fusion|moe-router-pre-softmax|moe-router-padding-for-fp8|moe-router-padding-for-quantization|"
     r"moe-router-dtype|moe-permute-fusion|moe-grouped-gemm|moe-enable-deepep|moe-flex-dispatcher-backend|"
     r"no-position-embedding|enable-experimental|manual-gc|manual-gc-interval|manual-gc-eval|"
     r"empty-unused-memory-level|use-flash-attn|fp16-lm-cross-entropy|fp32-residual-connection|"
     r"distributed-backend|ddp-bucket-size|ddp-num-buckets|ddp-average-in-collective|no-align-grad-reduce|"
     r"no-align-param-gather|overlap-param-gather-with-optimizer-step|tp-comm-overlap-cfg|"
     r"make-vocab-size-divisible-by|max-position-embeddings|delay-wgrad-compute|"
     r"moe-shared-expert-overlap|use-tp-pp-dp-mapping|fsdp-double-buffer|"
     r"moe-mlp-glu-interleave-size|main-grads-dtype|main-params-dtype|init-model-with-meta-device|"
     r"moe-token-dropping|disable-tp-comm-bulk-[a-z]+|disable-tp-comm-overlap-[a-z]+|tp-comm-overlap-rs-dgrad|"
     r"num-layers-at-start-in-bf16|num-layers-at-end-in-bf16|"
     # architecture flags emit.py writes (issue 23) that change no priced kernel: NoPE layers, Llama 4's L2 QK norm,
     # YaRN's correction-range parameters
     r"no-rope-freq|qk-l2-norm|yarn-original-max-position-embeddings|yarn-beta-fast|yarn-beta-slow|"
     r"no-yarn-correction-range-round-to-int)", _NUM),
    (r"--(rampup-batch-size|step-batch-size-schedule)", _RAMP),
    (r"--(local-rank|local_rank|use-tp-pp-dp-mapping|deepspeed_config|deepspeed-config)", _SYS),
)
_UNPRICED = [(re.compile(p + r"$"), why) for p, why in UNPRICED]

#: A not-understood flag whose name says this changes the model or the layout: the file is refused.
_SHAPES = re.compile(r"parallel|layers?\b|layer-|hidden|heads?\b|head-|experts?|moe-|pipeline|recompute|batch|"
                     r"seq-length|fp8|fp4|vocab|ffn|mtp|query-groups|lora|num-|offload|window|attention-type")

# ------------------------------------------------------------------ launcher and GPU count


def _launcher_gpus(words: list[str]) -> tuple[int | None, str]:
    """The world size the launcher words give (torchrun / torch.distributed.run / deepspeed / srun)."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-"):
            k, eq, v = w.partition("=")
            k = k.lstrip("-").replace("_", "-")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                v = words[i + 1]
                i += 1
            opts.setdefault(k, v)
        i += 1

    def num(k):
        v = opts.get(k)
        if v is None:
            return None
        v = v.split(":")[-1]
        return int(v) if v.isdigit() else None

    per = num("nproc-per-node") or num("num-gpus")
    nodes = num("nnodes") or num("num-nodes")
    if nodes is None and any(opts.get(k) for k in ("nnodes", "num-nodes")):
        return None, ""  # a node count the script leaves to the scheduler ($SLURM_NNODES): not one node
    if per and ("nproc-per-node" in opts or "num-gpus" in opts):
        n = per * (nodes or 1)
        return n, f"launcher: {per} per node x {nodes or 1} node(s)"
    if num("ntasks-per-node") and (num("nodes") or num("N")):
        per, nodes = num("ntasks-per-node"), num("nodes") or num("N")
        return per * nodes, f"srun: {per} tasks per node x {nodes} node(s)"
    if num("ntasks") or num("n"):
        n = num("ntasks") or num("n")
        return n, f"srun: {n} tasks"
    return None, ""


def _sbatch_gpus(comments) -> tuple[int | None, str, int | None]:
    nodes = per = None
    line = None
    for ln, c in comments:
        m = re.match(r"SBATCH\s+(--nodes|-N)[= ]\s*(\d+)", c)
        if m:
            nodes, line = int(m.group(2)), ln
        m = re.match(r"SBATCH\s+(--gpus-per-node|--ntasks-per-node|--gres=gpu:)[= ]?\s*(?:[a-z0-9]+:)?(\d+)", c)
        if m:
            per = int(m.group(2))
    if nodes and per:
        return nodes * per, f"#SBATCH: {per} per node x {nodes} node(s)", line
    return None, "", None


# ------------------------------------------------------------------ flags


class _Recording(argparse.Namespace):
    """A namespace that remembers which attributes were read (the flags the readers used)."""

    def __getattribute__(self, name: str):
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def split_flags(words: Sequence[shell.Word]) -> list[tuple[str, list[str], int, tuple[str, ...]]]:
    """``--flag value...`` groups: (flag, values, line, unresolved names). Values: one for a valued kept flag,
    none for a switch, all up to the next ``--`` word for a list or an unknown flag."""
    kept = fw.kept_args("megatron")
    out = []
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        text = w.text
        if not text.startswith("--") or text == "--":
            raise InputError(f"megatron: line {w.line}: {text[:60]!r} is not a flag (a value without its flag, or "
                             "a command word after the script)")
        flag, eq, val = text.partition("=")
        spec = kept.get(flag)
        vals: list[str] = [val] if eq else []
        unresolved = set(w.unresolved)
        j = i + 1
        if not eq:
            if spec is not None and spec.kind == "flag":
                pass
            elif spec is not None and spec.kind != "list":
                if j < n and not (words[j].text.startswith("--") and len(words[j].text) > 2):
                    vals.append(words[j].text)
                    unresolved |= set(words[j].unresolved)
                    j += 1
            else:
                while j < n and not (words[j].text.startswith("--") and len(words[j].text) > 2):
                    vals.append(words[j].text)
                    unresolved |= set(words[j].unresolved)
                    j += 1
        out.append((flag, vals, w.line, tuple(sorted(unresolved))))
        i = j
    return out


def _namespace(flags, where: str) -> _Recording:
    kept = fw.kept_args("megatron")
    ns = _Recording()
    for spec in kept.values():
        setattr(ns, _dest(spec.name), False if spec.kind == "flag" else None)
    object.__setattr__(ns, "_read", set())
    for flag, vals, line, unresolved in flags:
        spec = kept.get(flag)
        if spec is None:
            continue
        d = _dest(flag)
        if spec.kind == "flag":
            if vals and vals[0].lower() in ("false", "0"):
                setattr(ns, d, False)
            else:
                setattr(ns, d, True)
            continue
        if spec.kind == "list":
            setattr(ns, d, list(vals))
            continue
        if not vals:
            raise InputError(f"{where}: line {line}: {flag} has no value")
        v = vals[0]
        if unresolved and "$" in v:
            setattr(ns, d, ("unresolved", v, line, flag))
            continue
        v = v.strip("'\"")
        if spec.kind in ("int", "float"):
            try:
                x = float(v) if spec.kind == "float" else int(v)
            except ValueError:
                raise InputError(f"{where}: line {line}: {flag} {v[:40]!r} is not {'a number' if spec.kind == 'float' else 'an integer'}") from None
            setattr(ns, d, x)
        else:
            if spec.choices and v not in spec.choices:
                raise InputError(f"{where}: line {line}: {flag} {v[:40]!r} is not one of {', '.join(spec.choices)}")
            setattr(ns, d, v)
    return ns


def _check_unresolved(ns: _Recording, where: str) -> None:
    """A value the plan or the model reads but the script did not define: one line naming the flag."""
    for name in object.__getattribute__(ns, "_read"):
        v = object.__getattribute__(ns, name) if hasattr(ns, name) else None
        if isinstance(v, tuple) and v and v[0] == "unresolved":
            _, text, line, flag = v
            raise InputError(f"{where}: line {line}: {flag} {text} is not defined in the file (set the variable "
                             "in the script)")


def _int_of(v):
    return None if isinstance(v, tuple) else v


# ------------------------------------------------------------------ the model


def layer_pattern(text: str, num_layers: int | None, line: int, where: str) -> tuple[int, int]:
    """(first dense layers, MoE frequency) of ``--moe-layer-freq``: an integer, or a list expression
    such as ``([0]*3+[1]*58)`` (evaluated over lists of 0/1 and integers only, bounded)."""
    text = text.strip().strip("'\"")
    if re.fullmatch(r"\d+", text):
        return 0, int(text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise InputError(f"{where}: line {line}: --moe-layer-freq {text[:40]!r} is not an integer or a list") from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = ev(node.left), ev(node.right)
            if isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(a, int) and isinstance(b, int):
                return a + b
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            a, b = ev(node.left), ev(node.right)
            if isinstance(a, int) and isinstance(b, list):
                a, b = b, a
            if isinstance(a, list) and isinstance(b, int) and 0 <= len(a) * b <= 100_000:
                return a * b
        raise InputError(f"{where}: line {line}: --moe-layer-freq {text[:40]!r} is not a list of 0/1 this reader "
                         "evaluates")

    pat = ev(tree)
    if not isinstance(pat, list) or any(x not in (0, 1) for x in pat):
        raise InputError(f"{where}: line {line}: --moe-layer-freq {text[:40]!r} is not a list of 0/1")
    if num_layers is not None and len(pat) != num_layers:
        raise InputError(f"{where}: line {line}: --moe-layer-freq lists {len(pat)} layers, --num-layers is {num_layers}")
    first = pat.index(1) if 1 in pat else len(pat)
    ones = [i for i, x in enumerate(pat) if x]
    freq = (ones[1] - ones[0]) if len(ones) > 1 else 1
    if [int(i >= first and (i - first) % freq == 0) for i in range(len(pat))] != pat:
        raise InputError(f"{where}: line {line}: --moe-layer-freq {text[:40]!r}: MoE layers must follow the dense "
                         "ones at a fixed stride")
    return first, freq


def _architecture_extras(ns, d: dict, pos: str) -> None:
    """The architecture flags ``emit.megatron_model_args`` writes beyond the shape (RoPE base and scaling, norm
    epsilon, QK norms, attention sinks, sliding windows, the clamped GLU), read only when the file sets them (the
    rest of the model is the catalog model's of this shape, or --model's)."""
    g = lambda k: getattr(ns, k, None)  # noqa: E731
    for flag, field_name in (("rotary_base", "rope_theta"), ("rotary_percent", "rotary_percent"),
                             ("norm_epsilon", "norm_eps"), ("activation_func_clamp_value", "activation_clamp"),
                             ("moe_router_topk_scaling_factor", "router_topk_scaling")):
        if g(flag) is not None:
            d[field_name] = g(flag)
    if g("apply_layernorm_1p"):
        d["layernorm_1p"] = True
    if g("qk_l2_norm"):
        d["qk_l2_norm"] = True
    if g("softmax_type") is not None:
        d["attention_sinks"] = g("softmax_type") == "learnable"
    if g("quick_geglu") and g("activation_func_clamp_value") is not None and g("glu_linear_offset") == E.GPT_OSS_GLU_OFFSET:
        d["activation"] = "swiglu"  # GPT-OSS's clamped SwiGLU is written as Megatron's quick-GeGLU (emit)
    if g("use_rope_scaling"):
        d.update(rope_scaling="llama3", rope_factor=g("rope_scaling_factor") or 8.0, **E.MEGATRON_LLAMA3_ROPE)
    elif pos == "yarn" or (g("multi_latent_attention") and g("rotary_scaling_factor") is not None):
        d.update(rope_scaling="yarn", rope_factor=g("rotary_scaling_factor") or 1.0)
        if g("mscale") is not None:
            d["rope_mscale"] = g("mscale")
        if g("mscale_all_dim") is not None:
            d["rope_mscale_all_dim"] = g("mscale_all_dim")
        if g("yarn_original_max_position_embeddings") is not None:
            d["rope_original_max_position"] = g("yarn_original_max_position_embeddings")
        for flag, field_name in (("yarn_beta_fast", "rope_beta_fast"), ("yarn_beta_slow", "rope_beta_slow")):
            if g(flag) is not None:
                d[field_name] = g(flag)
    if g("window_size"):
        try:
            left, right = (int(v) for v in str(g("window_size")).strip("()").split(","))
        except ValueError:
            raise InputError(f"megatron: --window-size {g('window_size')!r} is not 'LEFT,RIGHT'") from None
        d.update(attention_window=left + 1, attention_window_kind="sliding",
                 global_attention_every=int(g("window_attn_skip_freq") or 0))
    if g("moe_router_pre_softmax"):
        d["router_norm_topk"] = False
    # read with the model: emit's vocabulary padding, NoPE layers, the GLU offset, YaRN's rounding
    g("make_vocab_size_divisible_by"), g("no_rope_freq"), g("glu_linear_offset")
    g("no_yarn_correction_range_round_to_int")


#: Tokenizers whose vocabulary the file implies (size as the model's vocab_size).
_TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}


def model_of(ns: _Recording, flags_line: dict[str, int], given: ModelSpec | None, where: str,
             defaulted: list[Entry]) -> tuple[ModelSpec, str]:
    """The model the flags define (inverse of ``emit.megatron_model_args`` and ``megatron_moe_args``), or
    ``given`` when they do not define one; (model, how)."""
    nl, h, a = _int_of(ns.num_layers), _int_of(ns.hidden_size), _int_of(ns.num_attention_heads)
    if not (nl and h and a):
        if given is None:
            missing = [f for f, v in (("--num-layers", nl), ("--hidden-size", h), ("--num-attention-heads", a)) if not v]
            raise InputError(f"{where}: the file does not define the model ({', '.join(missing)} missing): give --model")
        return given, f"--model {given.name} (the file does not set the shape)"
    _check_unresolved(ns, where)
    d: dict[str, Any] = {"num_layers": nl, "hidden_size": h, "num_heads": a}

    def default(flag, value, field_name):
        defaulted.append(Entry(f"{flag} {value}", None, f"{field_name}: Megatron-LM's default"))

    swiglu = bool(ns.swiglu)
    if ns.ffn_hidden_size:
        d["ffn_hidden_size"] = ns.ffn_hidden_size
    else:  # arguments.py: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu
        d["ffn_hidden_size"] = int(4 * h * 2 / 3 / 64) * 64 if swiglu else 4 * h
        default("--ffn-hidden-size", d["ffn_hidden_size"], "ffn_hidden_size")
    d["num_kv_heads"] = ns.num_query_groups if (ns.group_query_attention and ns.num_query_groups) else a
    if ns.kv_channels:
        d["head_dim"] = ns.kv_channels
    d["activation"] = "swiglu" if swiglu else "relu2" if ns.squared_relu else "geglu" if ns.quick_geglu else "gelu"
    pos = ns.position_embedding_type
    if pos is None:
        pos = "rope" if ns.use_rotary_position_embeddings else "learned_absolute"
        default("--position-embedding-type", pos, "position")
    if pos not in ("rope", "yarn", "learned_absolute"):
        raise InputError(f"{where}: line {flags_line.get('--position-embedding-type')}: --position-embedding-type "
                         f"{pos} is not priced (rope, yarn, learned_absolute)")
    d["position"] = "learned" if pos == "learned_absolute" else "rotary"
    _architecture_extras(ns, d, pos)
    if ns.normalization is None:
        default("--normalization", "LayerNorm", "norm")
    d["norm"] = "rmsnorm" if ns.normalization == "RMSNorm" else "layernorm"
    d["bias"] = not ns.disable_bias_linear
    if ns.disable_bias_linear:
        d["qkv_bias"] = bool(ns.add_qkv_bias)
    d["tied_embeddings"] = not ns.untie_embeddings_and_output_weights
    ad, hd = ns.attention_dropout, ns.hidden_dropout
    if ad is None or hd is None:
        default("--attention-dropout/--hidden-dropout", "0.1", "dropout")
    d["dropout"] = not ((0.1 if ad is None else ad) == 0 and (0.1 if hd is None else hd) == 0)
    if ns.seq_length:
        d["seq_len"] = ns.seq_length
    if ns.qk_layernorm:
        d["qk_norm"] = True
    # attention and activation variants emit.py writes (issue 23): a sliding window (W-1, 0) every layer but each
    # skip-freq-th, learnable softmax offsets (attention sinks), GPT-OSS's clamped SwiGLU as quick GeGLU + offset 1
    if ns.window_size:
        left, _, right = str(ns.window_size).strip("()").partition(",")
        d["attention_window"], d["attention_window_kind"] = int(left) + 1, "sliding"
        d["global_attention_every"] = int(ns.window_attn_skip_freq or 0)
    if ns.softmax_type == "learnable":
        d["attention_sinks"] = True
    if ns.quick_geglu and ns.activation_func_clamp_value is not None and ns.glu_linear_offset == 1.0:
        d["activation"], d["activation_clamp"] = "swiglu", float(ns.activation_func_clamp_value)
    if ns.multi_latent_attention:  # MLATransformerConfig defaults (megatron-core 0.16.1)
        for flag, field_name, dflt in (("--kv-lora-rank", "kv_lora_rank", 512), ("--qk-head-dim", "qk_nope_head_dim", 128),
                                       ("--qk-pos-emb-head-dim", "qk_rope_head_dim", 64),
                                       ("--v-head-dim", "v_head_dim", 128)):
            v = getattr(ns, _dest(flag))
            if v is None:
                v = dflt
                default(flag, dflt, field_name)
            d[field_name] = v
        if ns.q_lora_rank:
            d["q_lora_rank"] = ns.q_lora_rank
        d.pop("head_dim", None)  # --kv-channels is not MLA's head width (qk_nope + qk_rope; ModelSpec)
        if ns.experimental_attention_variant == "dsa":  # DeepSeek Sparse Attention, as emit.py writes it
            d.update(index_n_heads=ns.dsa_indexer_n_heads, index_head_dim=ns.dsa_indexer_head_dim,
                     index_topk=ns.dsa_indexer_topk)
    if ns.mtp_num_layers:
        d["mtp_num_layers"] = ns.mtp_num_layers
    if ns.num_experts:
        d["num_experts"] = ns.num_experts
        if ns.moe_router_topk is None:
            default("--moe-router-topk", 2, "experts_per_token")
        d["experts_per_token"] = ns.moe_router_topk or 2
        d["expert_ffn_hidden_size"] = ns.moe_ffn_hidden_size or d["ffn_hidden_size"]
        if ns.moe_shared_expert_intermediate_size:
            d["num_shared_experts"] = 1
            d["shared_expert_ffn_hidden_size"] = ns.moe_shared_expert_intermediate_size
        if ns.moe_layer_freq:
            f, k = layer_pattern(str(ns.moe_layer_freq), nl, flags_line.get("--moe-layer-freq"), where)
            d["first_dense_layers"], d["moe_layer_freq"] = f, k
        if ns.moe_router_score_function == "sigmoid":
            d["router_score"] = "sigmoid"
        if ns.moe_router_enable_expert_bias:
            d["router_expert_bias"] = True
        if ns.moe_router_num_groups:
            d["router_num_groups"] = ns.moe_router_num_groups
            d["router_group_topk"] = ns.moe_router_group_topk
        if ns.moe_expert_capacity_factor is not None:
            d["moe_capacity_factor"] = ns.moe_expert_capacity_factor
    # the vocabulary: the flag, the tokenizer, the matching catalog model or --model
    how = "the file's flags"
    match = given if given is not None else _catalog_match(d)
    vocab = ns.vocab_size
    if vocab is None and ns.tokenizer_type in _TOKENIZER_VOCAB:
        vocab = _TOKENIZER_VOCAB[ns.tokenizer_type]
        defaulted.append(Entry(f"vocab_size {vocab}", None, f"the vocabulary of --tokenizer-type {ns.tokenizer_type}"))
    if vocab is None and ns.tokenizer_type is None and "--vocab-file" in flags_line and "--merge-file" in flags_line:
        vocab = _TOKENIZER_VOCAB["GPT2BPETokenizer"]  # Megatron's GPT-2 BPE files (--vocab-file, --merge-file)
        defaulted.append(Entry(f"vocab_size {vocab}", flags_line["--vocab-file"],
                               "GPT-2 BPE: --vocab-file with --merge-file (GPT2BPETokenizer)"))
    if vocab is None and given is not None:
        vocab = given.vocab_size
        defaulted.append(Entry(f"vocab_size {vocab}", None, f"from --model {given.name} (the file does not set it)"))
    if vocab is None and match is not None:
        vocab = match.vocab_size
        defaulted.append(Entry(f"vocab_size {vocab}", None, f"from catalog model {match.name}, whose shape the "
                                                           "file's flags match"))
    if vocab is None:
        raise InputError(f"{where}: the file sets no --vocab-size and its tokenizer does not say it: give --model "
                         "for the vocabulary")
    d["vocab_size"] = vocab
    name = match.name if match is not None else (given.name if given is not None else "model from launch file")
    d["name"] = name
    d["source"] = "launch file flags"
    _check_unresolved(ns, where)  # a value the model needs and the file leaves to a variable: named
    m = merged_with_catalog(d, match, where, defaulted)
    if match is not None:
        how = f"the file's flags (the shape of catalog model {match.name})"
    if given is not None:
        _compare(m, given, where)
        how = f"the file's flags; what they do not carry from --model {given.name}"
    return m, how


_SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "num_experts",
                 "experts_per_token", "expert_ffn_hidden_size")


def _catalog_match(d: dict) -> ModelSpec | None:
    """The catalog model whose shape (layers, widths, heads, experts) the file gives and which agrees with the most
    of the file's other model fields (activation, norm, vocabulary, ...); None when no shape matches."""
    from plan_search.models.catalog import get_model, model_names

    best, score = None, -1
    for name in model_names():
        m = get_model(name)
        if m.num_experts != d.get("num_experts", 0):
            continue
        if all(getattr(m, k) == d[k] for k in _SHAPE_FIELDS if k in d):
            agree = sum(getattr(m, k) == v for k, v in d.items() if k in ModelSpec.model_fields and k not in
                        ("name", "source"))
            if agree > score:
                best, score = m, agree
    return best


def merged_with_catalog(d: dict, match: ModelSpec | None, where: str, defaulted: list[Entry],
                        whose: str = "flags") -> ModelSpec:
    """The model of the file's fields ``d``; the fields the file does not carry (sliding windows, router bias,
    ...) from the catalog model whose shape it matches, each listed as defaulted."""
    from plan_search.models.io import error_text

    try:
        if match is None:
            return ModelSpec(**d)
        try:
            own = ModelSpec(**d)
        except Exception:  # the file does not carry every field (NeMo overrides: the recipe's)
            own = None
        base = match.model_dump()
        base.update({k: v for k, v in d.items() if k not in ("name", "source")})
        base.update(name=match.name, source=f"launch file {whose}; the rest catalog {match.name}")
        m = ModelSpec(**base)
    except Exception as exc:  # pydantic: one line
        raise InputError(f"{where}: the {whose} do not make a model ({error_text(exc)})") from None
    if own is None:
        kept = [k for k in ("vocab_size", "activation", "norm", "position", "bias", "tied_embeddings") if k not in d]
        defaulted.append(Entry(", ".join(f"{k} {getattr(m, k)}" for k in kept), None,
                               f"from catalog model {match.name}, whose shape the file's {whose} give"))
        return m
    for k in ModelSpec.model_fields:
        if k in ("name", "source", "aliases", "global_batch", "seq_len") or k in d:
            continue
        if getattr(m, k) != getattr(own, k):
            defaulted.append(Entry(f"{k} {getattr(m, k)}", None, f"from catalog model {match.name}, whose shape the "
                                                                 f"file's {whose} match"))
    return m


def _compare(m: ModelSpec, given: ModelSpec, where: str) -> None:
    for k in _SHAPE_FIELDS:
        if getattr(m, k) != getattr(given, k):
            raise InputError(f"{where}: the file's {k} {getattr(m, k)} is not --model {given.name}'s "
                             f"{getattr(given, k)}; leave --model out or give the model the file runs")


# ------------------------------------------------------------------ the launch


def find_launch(script: shell.Script, where: str, index: int | None = None):
    """(launch command, index of the script word) of the script's ``pretrain_*.py`` commands."""
    found = []
    for c in script.commands:
        for k, w in enumerate(c.words):
            if _SCRIPT.search(w.text):
                found.append((c, k))
                break
    if not found:
        return None
    if index is not None:
        if not 1 <= index <= len(found):
            raise InputError(f"{where}: launch {index} asked; the file has {len(found)} launch command(s)")
        return found[index - 1], found
    return found[0], found


def read(text: str, path: str, *, model: ModelSpec | None = None, num_gpus: int | None = None,
         launch: int | None = None) -> LaunchRead:
    where = "megatron"
    script = shell.run(text)
    hit = find_launch(script, where, launch)
    launcher: list[str] = []
    launch_line = None
    entries_notes: list[Entry] = [Entry(w, ln, "not evaluated") for ln, w in script.notes]
    if hit is None:
        import plan_search.planner.frameworks.read.modelzoo as modelzoo

        zoo = [(c, modelzoo.is_modelzoo(c)) for c in script.commands if modelzoo.is_modelzoo(c) is not None]
        if zoo:
            if launch is not None and not 1 <= launch <= len(zoo):
                raise InputError(f"{where}: launch {launch} asked; the file has {len(zoo)} launch command(s)")
            cmd, k = zoo[(launch or 1) - 1]
            for j, (c, _) in enumerate(zoo, 1):
                if c is not cmd:
                    entries_notes.append(Entry(f"launch {j}: sbatch_benchmarking.sh", c.line,
                                               f"another launch command (read it with launch {j})"))
            seen_files: list = []
            words, n_zoo, how = modelzoo.flags(cmd, k, script, path, seen_files)
            r = build(split_flags(words), text, path, "megatron-modelzoo", script=None, model=model,
                      num_gpus=num_gpus, notes=entries_notes, launch_line=cmd.line, gpus_hint=(n_zoo, how))
            yml = seen_files[0][0] if seen_files else "the model's YAML"
            for group in (r.used, r.unpriced, r.not_understood):
                group[:] = [Entry(e.text, None, f"{e.what} ({yml} line {-e.line})") if e.line and e.line < 0 else e
                            for e in group]
            r.notes.append(Entry(f"ModelZoo launch: the wrapper's flags ({modelzoo.SOURCE})", cmd.line, "dialect"))
            return r
        # an argument list: the file's words are the flags
        args = [w for c in script.commands for w in c.words]
        if not args or not args[0].text.startswith("--"):
            sources = [w for ln, w in script.notes if "reads another file" in w]
            if sources:
                raise InputError(f"{where}: {path} has no launch command; it only sources other files "
                                 f"({'; '.join(sources)[:120]}): give the script that runs pretrain_gpt.py")
            raise InputError(f"{where}: {path} has no pretrain_*.py command and is not a list of flags")
        dialect = "megatron-args"
        flag_words = args
    else:
        (cmd, k), found = hit
        launcher = [w.text for w in cmd.words[:k]]
        flag_words = cmd.words[k + 1:]
        launch_line = cmd.line
        dialect = "megatron-script"
        for j, (c, kk) in enumerate(found, 1):
            if c is not cmd:
                entries_notes.append(Entry(f"launch {j}: {c.words[kk].text}", c.line,
                                           f"another launch command (read it with launch {j})"))
    flags = split_flags(flag_words)
    return build(flags, text, path, dialect, launcher=launcher, script=script, model=model, num_gpus=num_gpus,
                 notes=entries_notes, launch_line=launch_line)


def build(flags, text: str, path: str, dialect: str, *, launcher=(), script: shell.Script | None = None,
          model: ModelSpec | None = None, num_gpus: int | None = None, notes=(), launch_line=None,
          gpus_hint: tuple[int | None, str] = (None, "")) -> LaunchRead:
    """The :class:`LaunchRead` of split Megatron flags (shared by the script, argument-list and YAML forms)."""
    where = "megatron"
    seen: dict[str, int] = {}
    for flag, vals, line, _ in flags:
        seen[flag] = line
    ns = _namespace(flags, where)
    defaulted: list[Entry] = []
    m, how = model_of(ns, seen, model, where, defaulted)
    # the GPU count: the command line's --gpus, the launcher, WORLD_SIZE, #SBATCH
    n_file, n_how = _launcher_gpus(list(launcher))
    if n_file is None and gpus_hint[0]:
        n_file, n_how = gpus_hint
    if n_file is None and script is not None:
        ws = script.vars.get("WORLD_SIZE")
        if isinstance(ws, str) and ws.isdigit():
            n_file, n_how = int(ws), "WORLD_SIZE"
        else:
            n_file, n_how, _ = _sbatch_gpus(script.comments)
    if num_gpus is not None:
        gpus_from = f"--gpus {num_gpus}" + (f" (the file says {n_file}: {n_how})" if n_file and n_file != num_gpus else "")
        n = num_gpus
    elif n_file:
        n, gpus_from = n_file, n_how
    else:
        raise InputError(f"{where}: the file does not give the GPU count (no --nproc-per-node/--nnodes, WORLD_SIZE "
                         "or #SBATCH nodes): give --gpus")
    tp = _int_of(ns.tensor_model_parallel_size) or 1
    pp = _int_of(ns.pipeline_model_parallel_size) or 1
    cp = _int_of(ns.context_parallel_size) or 1
    for name in ("micro_batch_size", "global_batch_size", "seq_length", "expert_model_parallel_size",
                 "expert_tensor_parallel_size", "num_virtual_stages_per_pipeline_rank"):
        getattr(ns, name)  # read: an undefined value the plan needs is named below
    _check_unresolved(ns, where)
    consistency(where, n, tp, pp, cp, ns.micro_batch_size, ns.global_batch_size, m.num_experts,
                _int_of(ns.expert_model_parallel_size) or 1, _int_of(ns.expert_tensor_parallel_size) or tp,
                lines=seen)
    plan = E.from_megatron_namespace(ns, n)
    _check_unresolved(ns, where)
    read_names = object.__getattribute__(ns, "_read")
    used, unpriced, unknown = [], [], []
    for flag, vals, line, _ in flags:
        shown = " ".join([flag] + vals)[:120]
        d = _dest(flag)
        if (flag in fw.kept_args("megatron") and d in read_names) or flag in _IMPLIED:
            used.append(Entry(shown, line, _what(flag)))
            continue
        why = _unpriced_reason(flag)
        if why:
            unpriced.append(Entry(shown, line, why))
            continue
        if flag == "--recompute-modules":
            planned = E.selective_modules(plan, m) or ["core_attn"]
            if plan.recompute != "selective":
                unpriced.append(Entry(shown, line, "used only with --recompute-granularity selective"))
            elif sorted(vals) == sorted(planned):
                used.append(Entry(shown, line, "recompute (the planner's selective set)"))
            else:
                unknown.append(Entry(shown, line, f"priced as the planner's selective set ({' '.join(planned)}): "
                                                  "the estimate is made without this set"))
            continue
        if flag in _KNOWN_UNPRICED:
            unknown.append(Entry(shown, line, _KNOWN_UNPRICED[flag]))
            continue
        if _SHAPES.search(flag):
            raise InputError(f"{where}: line {line}: {flag} changes the model or the parallel layout and is not "
                             "understood by this reader: remove it to price the file without it, or leave --from")
        unknown.append(Entry(shown, line, "not understood: the estimate is made without it"))
    for flag, value, field_name in _PLAN_DEFAULTS:
        if flag not in seen and (field_name != "etp" or m.is_moe) and (field_name != "moe_dispatcher" or m.is_moe):
            defaulted.append(Entry(f"{flag} {value}", None, f"{field_name}: Megatron-LM's default"))
    if (ns.fp8_format and not ns.fp8_recipe) and "--fp4-format" not in seen:
        defaulted.append(Entry("--fp8-recipe delayed", None, "precision: Megatron-LM's default"))
    used.insert(0, Entry(gpus_from, launch_line, "num_gpus"))
    return LaunchRead(path=path, framework="megatron", dialect=dialect, version=VERSION, model=m, plan=plan,
                      gpus_from=gpus_from, used=used, unpriced=unpriced, not_understood=unknown, defaulted=defaulted,
                      notes=list(notes) + [Entry(f"model: {how}", None, "model")], text=text,
                      settings={"flags": flags})


#: Flags that change neither the model nor the layout but whose effect on the step the planner does not price:
#: listed as not understood, with what the estimate assumes instead.
_KNOWN_UNPRICED = {
    "--moe-router-force-load-balancing": "forced balanced routing (benchmarking): priced with the plan's moe_imbalance",
    "--cuda-graph-impl": "CUDA graphs: launch overheads not priced separately",
    "--cuda-graph-scope": "CUDA graphs: launch overheads not priced separately",
    "--enable-cuda-graph": "CUDA graphs: launch overheads not priced separately",
    "--moe-router-padding-for-fp8": "router padding for FP8 GEMMs: not priced",
    "--moe-router-padding-for-quantization": "router padding for low-precision GEMMs: not priced",
    "--reuse-grad-buf-for-mxfp8-param-ag": "buffer reuse for the MXFP8 parameter all-gather: not priced",
    "--moe-hybridep-num-sms": "HybridEP SM count: not priced",
    "--rotary-seq-len-interpolation-factor": "RoPE interpolation: no effect on the step",
    "--overlap-cpu-optimizer-d2h-h2d": "with --optimizer-cpu-offload",
}


#: Flags the plan reader implies without reading them: bf16 is the precision when neither --fp16 nor a low-precision
#: recipe is given (emit.from_megatron_namespace).
_IMPLIED = {"--bf16", "--accumulate-allreduce-grads-in-fp32"}


def _unpriced_reason(flag: str) -> str | None:
    for rx, why in _UNPRICED:
        if rx.fullmatch(flag):
            return why
    return None


_WHAT = {"--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp", "--context-parallel-size": "cp",
         "--num-virtual-stages-per-pipeline-rank": "vpp", "--num-layers-per-virtual-pipeline-stage": "vpp",
         "--micro-batch-size": "micro_batch", "--global-batch-size": "global_batch", "--seq-length": "seq_len",
         "--expert-model-parallel-size": "ep", "--expert-tensor-parallel-size": "etp",
         "--use-distributed-optimizer": "zero", "--use-megatron-fsdp": "zero",
         "--data-parallel-sharding-strategy": "zero", "--sequence-parallel": "sequence_parallel",
         "--attention-backend": "flash_attention", "--use-flash-attn": "flash_attention",
         "--overlap-grad-reduce": "overlap_grad_reduce", "--overlap-param-gather": "overlap_param_gather",
         "--tp-comm-overlap": "overlap_tp_comm", "--recompute-granularity": "recompute",
         "--recompute-method": "recompute", "--recompute-num-layers": "recompute_layers",
         "--recompute-activations": "recompute", "--fp16": "precision", "--bf16": "precision",
         "--fp8-format": "precision", "--fp8-recipe": "precision", "--fp4-format": "precision",
         "--fp4-recipe": "precision", "--fp8-param-gather": "lowp_params", "--grad-reduce-in-bf16": "fp32_grads",
         "--accumulate-allreduce-grads-in-fp32": "fp32_grads", "--moe-token-dispatcher-type": "moe_dispatcher",
         "--overlap-moe-expert-parallel-comm": "moe_overlap", "--decoder-first-pipeline-num-layers": "first_stage_layers",
         "--decoder-last-pipeline-num-layers": "last_stage_layers", "--cross-entropy-loss-fusion": "cross_entropy",
         "--cross-entropy-fusion-impl": "cross_entropy", "--fp8-dot-product-attention": "fp8_attention"}


def _what(flag: str) -> str:
    if flag in _WHAT:
        return _WHAT[flag]
    return "model" if flag in _MODEL_FLAGS else "plan"


_MODEL_FLAGS = {"--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
                "--num-query-groups", "--kv-channels", "--position-embedding-type", "--use-rotary-position-embeddings",
                "--normalization", "--swiglu", "--squared-relu", "--quick-geglu", "--disable-bias-linear",
                "--add-qkv-bias", "--untie-embeddings-and-output-weights", "--attention-dropout", "--hidden-dropout",
                "--vocab-size", "--tokenizer-type", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
                "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-router-score-function",
                "--moe-router-enable-expert-bias", "--moe-router-num-groups", "--moe-router-group-topk",
                "--moe-expert-capacity-factor", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
                "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers", "--qk-layernorm",
                # issue 23's architecture flags (emit.megatron_model_args)
                "--rotary-base", "--rotary-percent", "--norm-epsilon", "--apply-layernorm-1p", "--qk-l2-norm",
                "--softmax-type", "--window-size", "--window-attn-skip-freq", "--activation-func-clamp-value",
                "--glu-linear-offset", "--use-rope-scaling", "--rope-scaling-factor", "--rotary-scaling-factor",
                "--mscale", "--mscale-all-dim", "--yarn-original-max-position-embeddings", "--yarn-beta-fast",
                "--yarn-beta-slow", "--no-yarn-correction-range-round-to-int", "--no-rope-freq",
                "--moe-router-pre-softmax", "--moe-router-topk-scaling-factor", "--make-vocab-size-divisible-by",
                "--experimental-attention-variant", "--dsa-indexer-n-heads", "--dsa-indexer-head-dim",
                "--dsa-indexer-topk"}

#: The plan flags whose absence means Megatron-LM's default (arguments.py at the kept commit).
_PLAN_DEFAULTS = (("--tensor-model-parallel-size", 1, "tp"), ("--pipeline-model-parallel-size", 1, "pp"),
                  ("--context-parallel-size", 1, "cp"), ("--attention-backend", "auto", "flash_attention"),
                  ("--recompute-granularity", "none", "recompute"),
                  ("--use-distributed-optimizer", "off", "zero 0"),
                  ("--overlap-grad-reduce", "off", "overlap_grad_reduce"),
                  ("--expert-tensor-parallel-size", "tp", "etp"),
                  ("--moe-token-dispatcher-type", "allgather", "moe_dispatcher"))


def consistency(where: str, n: int, tp: int, pp: int, cp: int, mb, gb, experts: int, ep: int, etp: int,
                lines: dict | None = None) -> None:
    """A file that contradicts itself, refused in one line naming both values."""
    lines = lines or {}

    def at(flag):
        return f"line {lines[flag]}: " if lines.get(flag) else ""

    mp = tp * pp * cp
    if n % mp:
        raise InputError(f"{where}: {at('--tensor-model-parallel-size')}tp*pp*cp = {tp}*{pp}*{cp} = {mp} does not "
                         f"divide the world size {n}")
    dp = n // mp
    if mb and gb and gb % (mb * dp):
        raise InputError(f"{where}: {at('--global-batch-size')}global batch {gb} is not a multiple of dp {dp} x "
                         f"micro-batch {mb} = {dp * mb}")
    if experts and experts % ep:
        raise InputError(f"{where}: {at('--expert-model-parallel-size')}{experts} experts are not divisible by "
                         f"ep {ep}")
    if experts and (tp * cp * dp) % (ep * etp):
        raise InputError(f"{where}: {at('--expert-model-parallel-size')}ep*etp = {ep}*{etp} does not divide "
                         f"tp*cp*dp = {tp}*{cp}*{dp} = {tp * cp * dp} (the world size {n} over pp {pp})")


def parse_args_list(args: Sequence[str]):
    """Split flags of a plain argument list (the emitter's output)."""
    return split_flags([shell.Word(a, 0) for a in args])


def read_yaml(text: str, path: str, *, model: ModelSpec | None = None, num_gpus: int | None = None) -> LaunchRead:
    """A YAML of ``MODEL_ARGS: {--flag: value}`` (the ModelZoo's model configs): ``true`` a switch, ``false`` left
    out; a ``${VAR}`` the file does not define stays unresolved (and is named if the plan needs it)."""
    from plan_search.models.io import parse_document

    doc = parse_document(text, f"megatron {Path(path).name}")
    args = doc.get("MODEL_ARGS")
    if not isinstance(args, dict):
        raise InputError(f"megatron: {Path(path).name}: MODEL_ARGS is not a mapping of flags")
    lines: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*(--[A-Za-z0-9-]+)\s*:", raw)
        if m:
            lines.setdefault(m.group(1), n)
    words: list[shell.Word] = []
    for flag, v in args.items():
        v = "true" if v is True else "false" if v is False else str(v)
        if v == "false":
            continue
        line = lines.get(str(flag), 0)
        words.append(shell.Word(str(flag), line))
        spec = fw.kept_args("megatron").get(str(flag))
        if v != "true" and spec is not None and spec.kind == "flag":
            continue  # a switch set by a variable (${MOE_GROUPED_GEMM}): on, as the wrapper's true
        if v != "true":
            unresolved = tuple(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", v))
            words.append(shell.Word(v, line, unresolved))
    return build(split_flags(words), text, path, "megatron-yaml", model=model, num_gpus=num_gpus)
