"""DeepSpeed config JSON (what ``deepspeed.initialize(config=...)`` takes), with the ``PipelineModule`` and
``deepspeed.moe.layer.MoE`` arguments ``plan-estimate --emit`` writes after it, read into the plan.

The config does not carry the model, the sequence length or the attention kernel (the model code's): the model is
``--model``, the sequence its ``seq_len`` or ``--seq-len``. The world size is ``tp x pp x dp`` when
``train_batch_size`` is given (dp = batch / (micro x accumulation)), else ``--gpus``. The plan is
:func:`planner.frameworks.emit.from_deepspeed_config`, given recording mappings: a key is *used* when it read it.
"""

from __future__ import annotations

import json
import re

from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as fw
from plan_search.planner.frameworks.read.megatron import consistency
from plan_search.planner.frameworks.read.report import Entry, LaunchRead, check_kinds

VERSION = fw.VERSIONS["deepspeed"]
_OPT = "optimizer or schedule hyper-parameter: no effect on the step time or memory"
_OUT = "logging, checkpointing or monitoring: outside the step"
_NUM = "numerics or buffer sizes of the same step: not priced"
_REASON = {"optimizer": _OPT, "scheduler": _OPT, "gradient_clipping": _OPT, "steps_per_print": _OUT,
           "wall_clock_breakdown": _OUT, "tensorboard": _OUT, "wandb": _OUT, "csv_monitor": _OUT, "comms_logger": _OUT,
           "flops_profiler": _OUT, "checkpoint": _OUT, "prescale_gradients": _NUM, "gradient_predivide_factor": _NUM,
           "torch_autocast.enabled": "False: the bf16/fp16 section sets the precision", "zero_allow_untested_optimizer": _OUT,
           "communication_data_type": _NUM, "memory_breakdown": _OUT, "dump_state": _OUT}
_ZERO_NUM = re.compile(r"zero_optimization\.(reduce_bucket_size|allgather_bucket_size|contiguous_gradients|reduce_scatter|"
                       r"allgather_partitions|round_robin_gradients|(stage3_)?param_persistence_threshold|"
                       r"(stage3_)?max_live_parameters|(stage3_)?max_reuse_distance|sub_group_size|"
                       r"(stage3_)?gather_16bit_weights_on_model_save|stage3_gather_fp16_weights_on_model_save|"
                       r"ignore_unused_parameters|load_from_fp32_weights|elastic_checkpoint|"
                       r"(stage3_)?model_persistence_threshold|memory_efficient_linear)$")
_FP = re.compile(r"(fp16|bf16)\.(loss_scale|initial_scale_power|loss_scale_window|hysteresis|min_loss_scale|"
                 r"consecutive_hysteresis|auto_cast|immediate_grad_update|check_grad_overflow)$")
_SHAPES = re.compile(r"offload|stage|batch|tensor_parallel|pipeline|autotp|num_stages|ep_size|experts|"
                     r"bf16_master|bf16_optimizer|fp16_master|zero_hpz|quantized|sequence_parallel")


class _Rec(dict):
    def __init__(self, data: dict, prefix: str, seen: set) -> None:
        super().__init__({k: (_Rec(v, f"{prefix}{k}.", seen) if isinstance(v, dict) else v) for k, v in data.items()})
        self._prefix, self._seen = prefix, seen

    def get(self, k, d=None):
        self._seen.add(self._prefix + str(k))
        return super().get(k, d)

    def __getitem__(self, k):
        self._seen.add(self._prefix + str(k))
        return super().__getitem__(k)

    def __contains__(self, k):
        self._seen.add(self._prefix + str(k))
        return super().__contains__(k)


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _json_lines(text: str) -> dict[str, int]:
    """Dotted key -> line of pretty-printed JSON (the config's keys, then the PipelineModule/MoE parts')."""
    out: dict[str, int] = {}
    stack: list[str] = []
    part = ""
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith(("#", "//")):
            part = "PipelineModule." if "pipelinemodule" in s.lower() else "MoE." if "moe" in s.lower() else part
            stack = []
            continue
        m = re.match(r'"([^"]+)"\s*:\s*(.*)', s)
        if m:
            key = part + ".".join(stack + [m.group(1)])
            out.setdefault(key, n)
            if m.group(2).startswith("{") and not m.group(2).rstrip(",").endswith("}"):
                stack.append(m.group(1))
        elif s.startswith("}") and stack:
            stack.pop()
    return out


def split_documents(text: str, where: str) -> list[tuple[str, dict]]:
    """The JSON documents of the text: the config, then ``# PipelineModule ...`` and ``# ... MoE ...`` parts."""
    parts: list[tuple[str, list[str]]] = [("config", [])]
    for raw in text.splitlines():
        if raw.lstrip().startswith("#") or raw.lstrip().startswith("//"):
            title = raw.lstrip("#/ ").lower()
            if "config.json" in title:  # the model's Hugging Face config (emit.py, issue 23): not the plan's
                parts.append(("model_config", []))
            elif "pipelinemodule" in title:
                parts.append(("pipeline", []))
            elif "moe" in title:
                parts.append(("moe", []))
            continue
        parts[-1][1].append(raw)
    out = []
    for name, lines in parts:
        body = "\n".join(lines).strip()
        if not body:
            continue
        try:
            doc = json.loads(body)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: the {name} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if not isinstance(doc, dict):
            raise InputError(f"{where}: the {name} is not a JSON object")
        out.append((name, doc))
    if not out or out[0][0] != "config":
        raise InputError(f"{where}: no DeepSpeed config JSON object")
    return out


def read(text: str, path: str, *, model: ModelSpec | None = None, num_gpus: int | None = None,
         seq_len: int | None = None) -> LaunchRead:
    where = "deepspeed"
    docs = dict(split_documents(text, where))
    cfg, pipe, moe = docs["config"], docs.get("pipeline"), docs.get("moe")
    how_model = f"--model {model.name}" if model is not None else ""
    if model is None and isinstance(docs.get("model_config"), dict):
        # the Hugging Face config.json plan-estimate --emit prints after the config (issue 23): the model's
        from plan_search.models.hf import from_hf_config, hf_model_name

        hf = docs["model_config"]
        model = from_hf_config(hf, hf_model_name(hf) or "model from launch file", where=f"{where} model config")
        how_model = "the file's Hugging Face config.json section"
    if model is None:
        raise InputError(f"{where}: a DeepSpeed config does not carry the model: give --model")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if cfg.get(key) == "auto":
            raise InputError(f"{where}: {key} \"auto\" is filled in by the Hugging Face Trainer at run time: write the "
                             "number in the config")
    check_kinds("deepspeed", _flatten(cfg) + [(k, v) for k, v in cfg.items()], _json_lines(text), where)
    check_kinds("deepspeed", [("PipelineModule." + k, v) for k, v in (pipe or {}).items()] +
                [("PipeModelDataParallelTopology." + k, v) for k, v in ((pipe or {}).get("topology") or {}).items()] +
                [("MoE." + k, v) for k, v in (moe or {}).items()], _json_lines(text), where)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if cfg.get(key) == "auto":
            raise InputError(f"{where}: {key} \"auto\" is filled in by the Hugging Face Trainer at run time: write the "
                             "number in the config")
    defaulted: list[Entry] = []
    tp = int((cfg.get("tensor_parallel") or {}).get("autotp_size") or 0) or int(((pipe or {}).get("topology") or {})
                                                                                .get("num_mp", 1))
    pp = int((pipe or {}).get("num_stages", 1))
    mb = cfg.get("train_micro_batch_size_per_gpu")
    gas = int(cfg.get("gradient_accumulation_steps", 1))
    gb = cfg.get("train_batch_size")
    cfg = dict(cfg)
    if gb is None:
        if num_gpus is None or mb is None:
            raise InputError(f"{where}: without train_batch_size the world size is needed: give --gpus (and "
                             "train_micro_batch_size_per_gpu in the config)")
        if num_gpus % (tp * pp):
            raise InputError(f"{where}: tp*pp = {tp}*{pp} does not divide the world size {num_gpus}")
        gb = int(mb) * gas * (num_gpus // (tp * pp))
        cfg["train_batch_size"] = gb
        defaulted.append(Entry(f"train_batch_size {gb}", None, "micro x accumulation x dp (DeepSpeed's rule)"))
    if mb is None:
        if num_gpus is None:
            raise InputError(f"{where}: without train_micro_batch_size_per_gpu the world size is needed: give --gpus")
        dp = num_gpus // (tp * pp)
        if int(gb) % (gas * dp):
            raise InputError(f"{where}: train_batch_size {gb} is not a multiple of accumulation {gas} x dp {dp}")
        cfg["train_micro_batch_size_per_gpu"] = mb = int(gb) // (gas * dp)
        defaulted.append(Entry(f"train_micro_batch_size_per_gpu {mb}", None, "batch / (accumulation x dp)"))
    if "gradient_accumulation_steps" not in cfg:
        defaulted.append(Entry("gradient_accumulation_steps 1", None, "DeepSpeed's default"))
    if int(gb) % (int(mb) * gas):
        raise InputError(f"{where}: train_batch_size {gb} is not micro {mb} x accumulation {gas} x dp")
    dp = int(gb) // (int(mb) * gas)
    n = tp * pp * dp
    gpus_from = "tp x pp x dp of the config (dp = train_batch_size / (micro x accumulation))"
    if num_gpus is not None and num_gpus != n:
        raise InputError(f"{where}: train_batch_size {gb} = micro {mb} x accumulation {gas} x dp {dp} makes tp*pp*dp = "
                         f"{tp}*{pp}*{dp} = {n} GPUs, not --gpus {num_gpus}")
    seq = seq_len or model.seq_len
    if seq_len is None:
        defaulted.append(Entry(f"seq_len {seq}", None, f"--model {model.name}'s (the config does not carry it)"))
    if model.is_moe:
        ep = int((moe or {}).get("ep_size", 1))
        consistency(where, n, tp, pp, 1, None, None, model.num_experts, ep, tp if (moe or {}).get(
            "enable_expert_tensor_parallelism") else 1)
    seen: set = set()
    plan = E.from_deepspeed_config(_Rec(cfg, "", seen), n, seq, _Rec(pipe, "PipelineModule.", seen) if pipe else None,
                                   moe=_Rec(moe, "MoE.", seen) if moe else None)
    used, unpriced, unknown = [], [], []
    lines = _json_lines(text)
    if docs.get("model_config"):
        used.append(Entry("Hugging Face config.json section", None, "model"))
    entries = _flatten(docs["config"]) + [("PipelineModule." + k, v) for k, v in _flatten(pipe or {})] + \
        [("MoE." + k, v) for k, v in _flatten(moe or {})]
    for key, v in entries:
        shown = f"{key}: {json.dumps(v)}"[:120]
        line = lines.get(key)
        if key in seen or key.startswith("PipelineModule.topology") or (
                key.startswith("activation_checkpointing.") and not v):
            used.append(Entry(shown, line, key.rsplit(".", 1)[-1]))
            continue
        why = _REASON.get(key) or _REASON.get(key.split(".", 1)[0])
        if why is None and (_ZERO_NUM.match(key) or _FP.match(key)):
            why = _NUM
        if why is None and key.startswith("MoE.") and key in ("MoE.num_experts", "MoE.k"):
            why = "the model's (--model)"
        if why is None and key in ("PipelineModule.partition_method", "MoE.drop_tokens", "MoE.use_residual",
                                   "MoE.capacity_factor", "bf16.enabled", "fp16.enabled", "MoE.min_capacity",
                                   "MoE.eval_capacity_factor"):
            why = "what the plan assumes (even split of the transformer layers; dropless top-k; the precision)"
        if why:
            unpriced.append(Entry(shown, line, why))
            continue
        if _SHAPES.search(key) and v not in (None, False, 0, "none"):
            raise InputError(f"{where}: line {line}: {key} changes the memory or the parallel layout and is not "
                             "understood by this reader")
        unknown.append(Entry(shown, line, "not understood: the estimate is made without it"))
    return LaunchRead(path=path, framework="deepspeed", dialect="deepspeed-json", version=VERSION, model=model,
                      plan=plan, gpus_from=gpus_from, used=used, unpriced=unpriced, not_understood=unknown,
                      defaulted=defaulted, notes=[Entry(f"model: {how_model}", None, "model")], text=text,
                      settings={"config": docs["config"], "pipeline": pipe, "moe": moe})
