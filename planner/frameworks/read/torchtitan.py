"""torchtitan job TOML (0.2.x: ``[model]``, ``[training]``, ``[parallelism]``, ``[activation_checkpoint]``,
``[compile]``, ``[quantize.*]``, ...) read into the model (the ``[model]`` name and flavor), the GPU count and the plan.

The key names are the kept list's (:func:`planner.frameworks.rules.kept_args` ``("torchtitan")``); the plan is
:func:`planner.frameworks.emit.from_torchtitan_toml`, which reads back what ``--emit`` writes, given the sections
as recording mappings (:class:`_Rec`): a key is *used* when that function read it. ``data_parallel_shard_degree
= -1`` (torchtitan: the GPUs left over) is resolved with the GPU count; a section torchtitan does not have refuses
the file.
"""

from __future__ import annotations

import re
from typing import Any

from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as fw
from plan_search.planner.frameworks.torchtitan_flavors import FLAVORS, TORCHTITAN_SRC
from plan_search.planner.frameworks.read.megatron import consistency
from plan_search.planner.frameworks.read.report import Entry, LaunchRead, check_kinds

VERSION = fw.VERSIONS["torchtitan"]
_SRC = TORCHTITAN_SRC

_OUT = "logging, profiling, checkpointing, validation or process set-up: outside the step"
_OPT = "optimizer or schedule hyper-parameter: no effect on the step time or memory"
_DATA = "data, tokenizer or data loader: outside the step"
_NUM = "numerics of the same kernels: no effect on the step time or memory the planner prices"
_SECTION_REASON = {"job": _OUT, "profiling": _OUT, "metrics": _OUT, "checkpoint": _OUT, "validation": _OUT,
                   "comm": _OUT, "memory_estimation": _OUT, "fault_tolerance": _OUT, "experimental": _OUT,
                   "lr_scheduler": _OPT, "optimizer": _OPT, "debug": _NUM}
_KEY_REASON = {
    "training.dataset": _DATA, "training.dataset_path": _DATA, "training.max_norm": _OPT, "training.steps": _OPT,
    "training.gc_freq": _OUT, "training.gc_debug": _OUT, "model.hf_assets_path": _DATA, "model.tokenizer_path": _DATA,
    "model.print_after_conversion": _OUT, "parallelism.context_parallel_load_balancer": _NUM,
    "parallelism.context_parallel_rotate_method": "priced as all-gather K/V exchange (torchtitan's default)",
    "activation_checkpoint.preserve_rng_state": _NUM, "activation_checkpoint.determinism_check": _NUM,
    "activation_checkpoint.debug": _OUT, "activation_checkpoint.early_stop": _NUM,
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": _NUM,
    "activation_checkpoint.visualize_memory_budget_pareto": _OUT, "compile.backend": _NUM,
    "compile.components": "with compile.enable: the kernel-efficiency profile (compiled or eager)",
    "compile.enable": "the kernel-efficiency profile: torchtitan compiled or eager",
}
#: Keys whose value is the only one priced: another value is not understood.
_ONLY = {"optimizer.name": ("AdamW", "Adam"), "training.dtype": ("float32",),
         "training.mixed_precision_reduce": ("float32",), "training.enable_cpu_offload": (False,),
         "parallelism.disable_loss_parallel": (False,), "optimizer.early_step_in_backward": (False,)}
_SHAPES = re.compile(r"parallel|degree|layers|batch|seq_len|pipeline|flavor|converters|mode|split|fqns_per")


class _Rec(dict):
    """A section that remembers which of its keys were read."""

    def __init__(self, data: dict, prefix: str, seen: set) -> None:
        super().__init__(data)
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


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _lines(text: str) -> dict[str, int]:
    """key path -> line it is written on."""
    out, section = {}, ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        m = re.fullmatch(r"\[\s*([A-Za-z0-9_.\s]+?)\s*\]", line)
        if m:
            section = m.group(1).replace(" ", "") + "."
            out.setdefault(section[:-1], n)
            continue
        m = re.match(r"([A-Za-z0-9_]+)\s*=", line)
        if m:
            out[section + m.group(1)] = n
    return out


def model_of(d: dict, given: ModelSpec | None, lines: dict[str, int]) -> tuple[ModelSpec, str]:
    from plan_search.models.catalog import get_model

    mdl = d.get("model") or {}
    name, flavor = mdl.get("name"), mdl.get("flavor")
    if name is None and flavor is None:
        if given is None:
            raise InputError("torchtitan: the file has no [model] name/flavor: give --model")
        return given, f"--model {given.name}"
    entry = FLAVORS.get((str(name), str(flavor)))
    if entry is None:
        if given is not None:
            return given, f"--model {given.name} ([model] {name} {flavor} is not a flavor this reader knows)"
        known = ", ".join(f"{a} {b}" for a, b in FLAVORS)
        raise InputError(f"torchtitan: line {lines.get('model.flavor')}: [model] name {name!r} flavor {flavor!r} is not "
                         f"one this reader knows ({known}): give --model")
    m = get_model(entry) if isinstance(entry, str) else ModelSpec(**entry)
    if given is not None and (given.num_layers, given.hidden_size) != (m.num_layers, m.hidden_size):
        raise InputError(f"torchtitan: [model] {name} {flavor} is {m.name}, not --model {given.name}; leave --model out")
    return m, f"[model] {name} {flavor}: " + (f"catalog {m.name}" if isinstance(entry, str) else entry["source"])


def _preset_gpus(text: str) -> tuple[int | None, str | None, int | None]:
    """torchtitan's presets say ``# NOTE: this toml config is a preset for 64 A100 GPUs``."""
    for n, raw in enumerate(text.splitlines(), 1):
        m = re.search(r"preset for (\d+) ([A-Za-z0-9]+) GPUs", raw)
        if m:
            return int(m.group(1)), m.group(2).lower(), n
    return None, None, None


def read(text: str, path: str, *, model: ModelSpec | None = None, num_gpus: int | None = None) -> LaunchRead:
    where = "torchtitan"
    d = E._parse_toml(text)
    if not isinstance(d, dict):
        raise InputError(f"{where}: {path} is not a TOML table")
    kept = fw.kept_args("torchtitan")
    sections = {k.rsplit(".", 1)[0] for k in kept}
    lines = _lines(text)
    flat = _flatten(d)
    for key, _ in flat:
        sec = key.rsplit(".", 1)[0] if "." in key else ""
        if sec not in sections and not any(s.startswith(sec + ".") for s in sections):
            raise InputError(f"{where}: line {lines.get(sec, lines.get(key))}: [{sec or key}] is not a section of {VERSION}'s job "
                             f"config (known: {', '.join(sorted(s for s in sections if '.' not in s))})")
    check_kinds("torchtitan", flat, lines, where)
    m, how = model_of(d, model, lines)
    par = dict(d.get("parallelism") or {})
    tr = dict(d.get("training") or {})
    n_file, gpu_file, preset_line = _preset_gpus(text)
    tp, pp, cp = (int(par.get(k, 1)) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                                 "context_parallel_degree"))
    rep = int(par.get("data_parallel_replicate_degree", 1))
    shard = int(par.get("data_parallel_shard_degree", -1))
    if num_gpus is not None:
        n, gpus_from = num_gpus, f"--gpus {num_gpus}" + (f" (the file's preset says {n_file})"
                                                        if n_file and n_file != num_gpus else "")
    elif shard > 0:
        n, gpus_from = rep * shard * tp * pp * cp, "the product of the degrees"
    elif n_file:
        n, gpus_from = n_file, f"the preset comment: {n_file} {gpu_file.upper()} GPUs"
    else:
        raise InputError(f"{where}: data_parallel_shard_degree = -1 takes the GPUs left over and the file does not say "
                         "how many there are: give --gpus")
    defaulted: list[Entry] = []
    if shard < 0:
        mp = rep * tp * pp * cp
        if n % mp:
            raise InputError(f"{where}: line {lines.get('parallelism.tensor_parallel_degree')}: replicate*tp*pp*cp = "
                             f"{rep}*{tp}*{pp}*{cp} = {mp} does not divide the world size {n}")
        shard = n // mp
        defaulted.append(Entry(f"data_parallel_shard_degree {shard}", lines.get("parallelism.data_parallel_shard_degree"),
                               f"-1: the {n} GPUs over replicate*tp*pp*cp"))
        par["data_parallel_shard_degree"] = shard
    dp = rep * shard
    consistency(where, n, tp, pp, cp, None, None, 0, 1, 1)
    if rep * shard * tp * pp * cp != n:
        raise InputError(f"{where}: replicate*shard*tp*pp*cp = {rep}*{shard}*{tp}*{pp}*{cp} = {rep * shard * tp * pp * cp}"
                         f" is not the world size {n}")
    lb = int(tr.get("local_batch_size", 8))
    gb = int(tr.get("global_batch_size", -1))
    if gb > 0 and gb % (lb * dp):
        raise InputError(f"{where}: line {lines.get('training.global_batch_size')}: global_batch_size {gb} is not a "
                         f"multiple of dp {dp} x local_batch_size {lb} = {dp * lb}")
    if m.is_moe:
        ep = int(par.get("expert_parallel_degree", 1))
        if m.num_experts % ep:
            raise InputError(f"{where}: line {lines.get('parallelism.expert_parallel_degree')}: {m.num_experts} experts "
                             f"are not divisible by expert_parallel_degree {ep}")
        par.setdefault("expert_parallel_degree", 1)
    for key, dflt in (("training.local_batch_size", 8), ("training.seq_len", 2048),
                      ("activation_checkpoint.mode", "selective"), ("activation_checkpoint.selective_ac_option", "2")):
        sec, k = key.split(".")
        if k not in (d.get(sec) or {}):
            defaulted.append(Entry(f"{key} {dflt}", None, "torchtitan's default"))
    if "global_batch_size" not in tr:
        defaulted.append(Entry(f"training.global_batch_size {lb * dp}", None, "-1: local_batch_size x dp"))
    seen: set[str] = set()
    rec = {s: (_Rec(dict(v), f"{s}.", seen) if isinstance(v, dict) else v) for s, v in d.items()}
    rec["parallelism"] = _Rec(par, "parallelism.", seen)
    plan = E.from_torchtitan_toml(rec, m.num_layers)
    if how.startswith("[model]"):
        seen |= {"model.name", "model.flavor"}
    if plan.num_gpus != n:
        raise InputError(f"{where}: the degrees make {plan.num_gpus} GPUs, not {n}")
    comp = d.get("compile") or {}
    compiled = bool(comp.get("enable", True)) and "model" in (comp.get("components") or ["model"])
    if "compile" not in d:
        defaulted.append(Entry("compile.enable (priced compiled)", None,
                               "the torchtitan kernel-efficiency profile plan-estimate --framework torchtitan prices"))
    used, unpriced, unknown = [], [], []
    converters = (d.get("model") or {}).get("converters") or []
    for key, v in flat:
        shown = f"{key} = {v!r}"[:120]
        line = lines.get(key)
        sec = key.rsplit(".", 1)[0]
        if key in seen and key not in _KEY_REASON:
            used.append(Entry(shown, line, key.rsplit(".", 1)[1]))
            continue
        if key in _ONLY:
            if v in _ONLY[key] or (isinstance(v, str) and v in _ONLY[key]):
                unpriced.append(Entry(shown, line, "the value priced"))
            else:
                unknown.append(Entry(shown, line, f"priced as {_ONLY[key][0]!r}: the estimate is made without it"))
            continue
        if key.startswith("compile."):
            used.append(Entry(shown, line, "kernel profile: " + ("compiled" if compiled else "eager")))
            continue
        why = _KEY_REASON.get(key) or _SECTION_REASON.get(sec.split(".")[0])
        if key.startswith("quantize."):
            why = ("recipe details of the low-precision converters: priced as torchtitan's float8 (tensorwise)"
                   if converters else "settings of a converter the file does not enable (model.converters)")
        if key.startswith("training.dataloader") or key.startswith("validation."):
            why = _DATA if key.startswith("training") else _OUT
        if why and key in kept:
            unpriced.append(Entry(shown, line, why))
            continue
        if key in kept and key.startswith("activation_checkpoint.") and key not in seen:
            unknown.append(Entry(shown, line, "not understood: the estimate is made without it"))
            continue
        if _SHAPES.search(key):
            raise InputError(f"{where}: line {line}: {key} changes the model or the parallel layout and is not "
                             "understood by this reader")
        unknown.append(Entry(shown, line, "not understood: the estimate is made without it"))
    if n_file and num_gpus is None and shard is not None:
        used.insert(0, Entry(f"preset for {n_file} {gpu_file.upper()} GPUs", preset_line, "num_gpus, gpu"))
    r = LaunchRead(path=path, framework="torchtitan", dialect="torchtitan-toml", version=VERSION, model=m, plan=plan,
                   gpus_from=gpus_from, gpu_ref=gpu_file, used=used, unpriced=unpriced, not_understood=unknown,
                   defaulted=defaulted, notes=[Entry(f"model: {how}", None, "model")], text=text,
                   settings={"sections": d, "lines": lines}, compiled=compiled)
    return r
