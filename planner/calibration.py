"""Published (or your own) measured runs, and the fit of the efficiency terms to them.

A run is one row in the layout of ``published_runs.csv`` (the project's copy of
``shared/calibration/published_runs.csv``, source column kept). Each row becomes a
:class:`RunRecord`: the model, the system, the candidate plans that agree with what the source
printed (a knob the source leaves out — micro-batch, virtual stages, recomputation, and for a few
rows tp/pp — is left to the planner, which takes the fastest plan that fits, and the record says
so), and the measured step time, converted with the source's own FLOP convention where only
TFLOP/s or MFU was printed.

Execution conventions a source implies but does not print (FlashAttention, precision, overlap,
ZeRO) are stated once per source in :data:`SOURCE_CONVENTIONS`, with the reason.

:func:`fit_efficiency` fits the :class:`~hardware.spec.EfficiencySpec` terms by minimising the
squared log error of predicted against measured step time (Nelder-Mead in a bounded, transformed
space; deterministic).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from itertools import product
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.spec import ClusterSpec, EfficiencySpec
from plan_search.models import counting
from plan_search.models.catalog import get_model
from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.evaluate import evaluate
from plan_search.planner.costmodel.plan import Plan

# --------------------------------------------------------------------------- conventions
# Megatron-LM of 2021: fp16 mixed precision, no FlashAttention (2022) nor sequence parallelism
# (Korthikanti et al. 2022), data-parallel all-reduce after the backward, fp16 gradients.
_MEGATRON_2021 = dict(precision="fp16", flash_attention=False, sequence_parallel=False, zero=0, fp32_grads=False,
                      overlap_grad_reduce=False, overlap_param_gather=False, overlap_tp_comm=False, cudnn_sdpa="9.1")
# Megatron-Core era: TE FlashAttention, sequence parallelism, distributed optimizer (ZeRO-1)
# with gradient-reduce and parameter-gather overlap, TP communication overlap; the TE 1.x of 2024 runs
# cuDNN 9.1's fused attention (Plan.cudnn_sdpa; Megatron-Bridge's rows below state 9.19).
_MEGATRON_CORE = dict(precision="bf16", flash_attention=True, sequence_parallel=True, zero=1, fp32_grads=True,
                      overlap_grad_reduce=True, overlap_param_gather=True, overlap_tp_comm=True, cudnn_sdpa="9.1")
# NeMo 24.07 / long-sequence tables and Megatron-Bridge: the above in FP8 (printed); assumed:
# gradients reduced in bf16 (the performance recipes' grad_reduce_in_fp32=False).
_NEMO_FP8 = dict(_MEGATRON_CORE, precision="fp8", fp32_grads=False)

#: What each source implies about how it ran, beyond the printed configuration.
SOURCE_CONVENTIONS: dict[str, dict] = {
    "narayanan2021-table1": _MEGATRON_2021,
    # Table 2 (same paper): PTD-P rows as Table 1; the ZeRO-3 rows ran DeepSpeed, which prefetches
    # parameters and overlaps reduction (overlap_comm) -- set per row from zero_stage.
    "narayanan2021-table2": _MEGATRON_2021,
    # Korthikanti et al. 2022: Megatron-LM with their sequence parallelism (per row) and selective
    # recomputation, no FlashAttention; DP = 1 so data-parallel settings do not matter.
    "korthikanti2022": {k: v for k, v in _MEGATRON_2021.items() if k != "sequence_parallel"},
    # Megatron-Core r0.8 README: bf16, --overlap-grad-reduce, --overlap-param-gather,
    # --tp-comm-overlap (printed in the notes).
    "megatron-core-2024": _MEGATRON_CORE,
    "nemo-24.07": _NEMO_FP8,
    "nemo-long-seq": _NEMO_FP8,
    # Megatron-Bridge r0.1.0-r0.5.0 (containers 25.09-26.06) run Transformer Engine 2.6+ (NVIDIA-NeMo/
    # Megatron-Bridge pyproject.toml: transformer-engine >=2.6.0a0 at v0.1.0rc4, >=2.9.0a0 at v0.2.0, whose
    # docker/Dockerfile.ci builds FROM nvcr.io/nvidia/pytorch:25.09-py3): cuDNN 9.1x releases of 2025-26
    # (which one each container ships was not re-read), priced at cuDNN 9.19's measured attention rate
    # (compute.CUDNN_SDPA_SPEEDUP; an assumption for the earlier 9.1x releases). The 2024 sources (NeMo
    # 24.03/24.07: TE 1.x, 1.8 in 24.07 per the NeMo Framework software-component table) keep 9.1.
    "megatron-bridge": dict(_NEMO_FP8, cudnn_sdpa="9.19"),
    # torchtitan's 2024-12 H100 benchmark: FSDP2 (fully sharded: zero 3), torch.compile, Float8
    # (torchao), SDPA flash attention, sequence parallelism with TP; FSDP2's default
    # MixedPrecisionPolicy in torchtitan: bf16 params, fp32 reduce (mixed_precision_reduce).
    "torchtitan-2024-12": dict(_MEGATRON_CORE, precision="fp8", zero=3, fp32_grads=True, overlap_tp_comm=False),
    # NeMo AutoModel: FSDP2 with TE kernels, BF16 (printed); its FSDP2Manager's default
    # MixedPrecisionPolicy reduces in bf16 (param_dtype, reduce_dtype and output_dtype bfloat16:
    # NVIDIA-NeMo/Automodel nemo_automodel/distributed/fsdp2.py FSDP2Manager.mp_policy).
    "nemo-automodel": dict(_MEGATRON_CORE, zero=3, fp32_grads=False, overlap_tp_comm=False),
    # Megatron-MoE-ModelZoo and the DeepSeek-V3 report: MoE rows (another cost model's concern).
    "megatron-moe-modelzoo": _MEGATRON_CORE,
    "deepseek-v3": dict(_MEGATRON_CORE, precision="fp8"),
    # Anything else (your own CSV): Megatron-Core defaults in bf16, without TP overlap.
    "other": dict(_MEGATRON_CORE, overlap_tp_comm=False),
}

_GROUPS = [
    (r"Narayanan.*Table 1", "narayanan2021-table1"),
    (r"Narayanan", "narayanan2021-table2"),
    (r"Korthikanti", "korthikanti2022"),
    (r"Megatron-LM README", "megatron-core-2024"),
    (r"performance_long_sequence", "nemo-long-seq"),
    (r"NeMo docs/source/performance", "nemo-24.07"),
    (r"Megatron-Bridge", "megatron-bridge"),
    # runs_2026_12.csv (the project's copy of shared/calibration/runs_2026_12.csv)
    (r"pytorch/torchtitan", "torchtitan-2024-12"),
    (r"NeMo/Automodel", "nemo-automodel"),
    (r"Megatron-MoE-ModelZoo", "megatron-moe-modelzoo"),
    (r"DeepSeek-V3", "deepseek-v3"),
]

#: FLOP convention of each source's TFLOP/s or MFU figure (see shared/calibration/README.md).
#: "hardware": Narayanan eq. 3 with the recomputed forward; "model": no recomputation, full
#: (non-causal) attention -- Megatron-Core's and NeMo 24.07's count.
_FLOP_CONVENTION = {
    "narayanan2021-table1": "hardware",
    "narayanan2021-table2": "hardware",
    "korthikanti2022": "model",
    "megatron-core-2024": "model",
    "nemo-24.07": "model",
    "nemo-long-seq": "model",
    "megatron-bridge": "model",
    "torchtitan-2024-12": "model",
    "nemo-automodel": "model",
    "megatron-moe-modelzoo": "model",
    "deepseek-v3": "model",
    "other": "model",
}

#: CSV GPU name -> catalog system (first match wins: GB200 before B200). A row whose system is
#: not in the catalog is skipped. The torchtitan rows' "H100-96GB-HBM2e (500 W)" parts are their
#: own catalog entry, h100-96gb-500w (same GH100 die, 2.4 TB/s HBM2e, clocks derated for the 500 W
#: limit: hardware/catalog.yaml).
_GPU_NAMES = [(r"A100.*80", "a100-80gb"), (r"A100.*40", "a100-40gb"), (r"H100.*PCIe", "h100-pcie"),
              (r"H100.*96\s*GB.*500\s*W", "h100-96gb-500w"), (r"H100", "h100-sxm"), (r"H200", "h200"), (r"H800", "h800"), (r"GB300", "gb300-nvl72"),
              (r"GB200", "gb200-nvl72"), (r"B300", "b300"), (r"B200", "b200"), (r"V100", "v100-32gb"),
              (r"MI300X", "mi300x")]

#: Catalog model a CSV model name stands for (architecture flags come from the catalog; the
#: shape columns of the row, where printed, override it).
_MODEL_NAMES = [
    (r"Megatron-Core", None),  # GPT rows: shape printed; catalog mcore-gpt-* by size below
    (r"^GPT3-5B", "nemo-gpt3-5b"), (r"^GPT3-20B", "nemo-gpt3-20b"), (r"^GPT3-175B", "gpt3-175b"),
    (r"LLAMA2-7B", "llama2-7b"), (r"LLAMA2-13B", "llama2-13b"), (r"LLAMA2-70B", "llama2-70b"),
    (r"LLAMA3-8B|LLAMA3 8B", "llama3.1-8b"), (r"LLAMA3-70B|LLAMA3 70B", "llama3.1-70b"),
    (r"LLAMA3.1 405B", "llama3.1-405b"),
    (r"Nemotron-8B", "nemotron-3-8b"), (r"Nemotron-22B", "nemotron-3-22b"), (r"Nemotron-340B", "nemotron-4-340b"),
]


def source_group(source: str) -> str:
    for pat, key in _GROUPS:
        if re.search(pat, source):
            return key
    return "other"


def _num(v: str) -> float | None:
    v = (v or "").strip()
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        return None


#: The lowest model-FLOPs utilisation a measured run may imply (a millionth of the peak): below it the
#: figure is a unit slip or a typo, not a training run.
MIN_MFU = 1e-6

#: Columns of the runs layout that hold numbers (empty = not printed by the source).
NUMERIC_COLUMNS = ("params_b", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "num_gpus",
                   "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch", "measured_tflops_per_gpu",
                   "measured_mfu", "measured_tokens_per_s_per_gpu", "measured_step_time_s", "measured_memory_gb")


def _check_numbers(row: dict, i: int) -> None:
    """Every numeric cell is empty or a finite, non-negative number below 1e15: else one line
    naming the row (1 = the first data row) and the column."""
    for col in NUMERIC_COLUMNS:
        v = (row.get(col) or "").strip()
        if not v:
            continue
        try:
            f = float(v)
        except ValueError:
            f = None
        if f is None or not math.isfinite(f) or f < 0 or f >= 1e15:
            raise InputError(f"runs: row {i + 1}: {col}: {v[:40]!r} is not a finite non-negative number; "
                             "leave the cell empty where the source printed nothing")
        if col == "measured_mfu" and f > 1:
            raise InputError(f"runs: row {i + 1}: measured_mfu: {v[:40]!r} is above 1; MFU is a fraction of the "
                             "peak (0.45 for 45%)")


def _int(v: str) -> int | None:
    f = _num(v)
    return int(round(f)) if f is not None else None


@dataclass
class RunRecord:
    """One measured run, ready for the cost model."""

    index: int
    source: str
    group: str
    label: str
    model: ModelSpec
    gpu: str
    candidates: list[Plan]
    free_knobs: list[str]
    measured_step_s: float
    measured_from: str
    notes: str = ""
    arrays: PlanArrays | None = field(default=None, repr=False)
    measured_memory_gb: float | None = None
    #: Kernel-efficiency profile the run's framework stands for (:func:`run_profile`).
    profile: str = "megatron"


def _model_for_row(row: dict) -> ModelSpec | None:
    name = row["model"].strip()
    base: ModelSpec | None = None
    for pat, cat in _MODEL_NAMES:
        if re.search(pat, name):
            base = get_model(cat) if cat else None
            break
    shape = {
        "num_layers": _int(row.get("layers")),
        "hidden_size": _int(row.get("hidden")),
        "num_heads": _int(row.get("heads")),
        "num_kv_heads": _int(row.get("kv_heads")),
        "ffn_hidden_size": _int(row.get("ffn_hidden")),
        "vocab_size": _int(row.get("vocab")),
    }
    seq = _int(row.get("seq_len"))
    if base is None:
        if None in (shape["num_layers"], shape["hidden_size"], shape["num_heads"], shape["vocab_size"]):
            return None
        llama = bool(re.search(r"llama|mistral|qwen", name, re.I))
        fields = dict(name=name, activation="swiglu" if llama else "gelu",
                      position="rotary" if llama else "learned", norm="rmsnorm" if llama else "layernorm",
                      bias=not llama, dropout=not llama,
                      tied_embeddings=bool(re.search(r"Narayanan|Korthikanti", row["source"])))
        fields.update({k: v for k, v in shape.items() if v is not None})
        if seq:
            fields["seq_len"] = seq
        return ModelSpec(**fields)
    upd = {k: v for k, v in shape.items() if v is not None}
    if seq:
        upd["seq_len"] = seq
    data = base.model_dump()
    data.update(upd)
    data["name"] = base.name
    return ModelSpec(**data)


def _measured_step(row: dict, model: ModelSpec, group: str, gb: int, seq: int, n: int, recompute: str):
    step = _num(row.get("measured_step_time_s"))
    if step:
        return step, "step time"
    tok = _num(row.get("measured_tokens_per_s_per_gpu"))
    if tok:
        return gb * seq / (n * tok), "tokens/s/GPU"
    tfl = _num(row.get("measured_tflops_per_gpu"))
    mfu = _num(row.get("measured_mfu"))
    if tfl is None and mfu is not None:
        peak = get_cluster(_gpu_for(row)).gpu.peak("bf16")
        tfl = mfu * peak
    if tfl:
        conv = _FLOP_CONVENTION.get(group, "model")
        if conv == "hardware":
            flops = counting.megatron_flops_per_iteration(model, gb, seq, recompute=(recompute == "full"))
        else:
            flops = counting.training_flops_per_iteration(model, gb, seq, "none", causal=False)
        return flops / (n * tfl * 1e12), f"TFLOP/s ({conv} FLOPs)"
    return None, ""


def _gpu_for(row: dict) -> str:
    for pat, name in _GPU_NAMES:
        if re.search(pat, row["gpu"]):
            try:
                get_cluster(name)
            except (InputError, KeyError, ValueError):
                break
            return name
    raise InputError(f"gpu: unknown GPU {row['gpu']!r} in the runs file")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _bridge_fp8_recipe(row: dict) -> dict:
    """The FP8 recipe a Megatron-Bridge performance row ran: from release r0.2.0 (container 25.11)
    on, the performance scripts offer only ``--compute_dtype fp8_cs`` for per-tensor FP8 (choices
    bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4: scripts/performance/argument_parser.py at r0.2.0-r0.5.0),
    i.e. Transformer Engine's current (tensorwise) scaling, and they turn the recipe's bf16 first
    and last layers off (utils/helpers.py resp. utils/precision.py get_precision_config:
    ``current_scaling_cfg.first_last_layers_bf16 = False``); the tables print it "FP8-CS" (25.11)
    or "FP8" (26.02-26.06). The 25.09 tables (release r0.1.0) print no precision: that release's
    scripts default to ``--fp8_recipe ds``, delayed scaling, which the row keeps."""
    said = f"{row.get('source', '')} {row.get('notes', '')} {row.get('container_or_version', '')}"
    if re.search(r"\b25\.09\b", said) and not re.search(r"FP8-CS", said):
        return {}
    return {"precision": "fp8-current", "bf16_layers": 0}


def _candidates(row: dict, model: ModelSpec, conv: dict, n: int) -> tuple[list[Plan], list[str]]:
    free: list[str] = []
    tp, pp, cp = _int(row.get("tp")), _int(row.get("pp")), _int(row.get("cp"))
    mb, vpp, gb = _int(row.get("micro_batch")), _int(row.get("vpp")), _int(row.get("global_batch"))
    seq = _int(row.get("seq_len")) or model.seq_len
    rc = (row.get("recompute") or "").strip().lower() or None
    sp_raw = (row.get("sequence_parallel") or "").strip().lower()
    zero_raw = (row.get("zero_stage") or "").strip().upper()
    conv = dict(conv)
    prec_raw = (row.get("precision") or "").strip().lower()
    titan = (row.get("framework") or "").strip().lower() == "torchtitan"
    if prec_raw:  # runs_2026_12.csv prints the recipe per row; it overrides the source's convention
        # torchtitan's Float8 is torchao's dynamic (per-tensor, current) scaling: "only dynamic
        # tensor scaling (the default) is supported" (torchtitan/float8.py @9dec370)
        conv["precision"] = "fp8-current" if titan and prec_raw == "fp8" else prec_raw
    if source_group(row.get("source", "")) == "megatron-bridge" and conv.get("precision") == "fp8":
        conv.update(_bridge_fp8_recipe(row))
    if zero_raw == "FSDP":
        conv["zero"] = 3
    elif zero_raw:
        conv["zero"] = int(float(zero_raw))
        if conv["zero"] == 3:  # DeepSpeed ZeRO-3 prefetches and overlaps its collectives
            conv.update(overlap_grad_reduce=True, overlap_param_gather=True)
    if sp_raw in ("yes", "no"):
        conv["sequence_parallel"] = sp_raw == "yes"
    # What a row's caption or notes print about how it ran (torchtitan's tables): AsyncTP is TP
    # communication overlapped with the GEMMs; the pipeline schedule fixes vpp = 1 (1F1B) or > 1
    # (Interleaved 1F1B) where the number of virtual stages is not printed.
    said = f"{row.get('source', '')} {row.get('notes', '')}"
    if re.search(r"AsyncTP", said):
        conv["overlap_tp_comm"] = True
    interleaved = bool(re.search(r"Interleaved 1F1B", said, re.I))
    plain_1f1b = bool(re.search(r"\b1F1B\b", said)) and not interleaved
    cp = cp or 1
    tps = [tp] if tp else [t for t in (1, 2, 4, 8) if model.num_heads % t == 0]
    if not tp:
        free.append("tp")
    pps = [pp] if pp else [p for p in _divisors(model.num_layers) if p <= 64]
    if not pp:
        free.append("pp")
    mbs = [mb] if mb else [1, 2, 4, 8]
    if not mb:
        free.append("micro_batch")
    rcs = [rc] if rc else ["none", "selective", "full"]
    if not rc:
        free.append("recompute")
    if vpp is None:
        free.append("vpp")
    out: list[Plan] = []
    for t, p, b, r in product(tps, pps, mbs, rcs):
        if n % (t * p * cp):
            continue
        d = n // (t * p * cp)
        if gb % (d * b):
            continue
        per_stage = -(-model.num_layers // p)
        # Virtual stages not printed: any number of layers per virtual stage that divides the
        # stage's layers (Megatron's --num-layers-per-virtual-pipeline-stage, 1 included: the
        # Megatron-Core weak-scaling models of 92 and 112 layers at pp 4 and 16 have 23 and 7
        # layers per stage, which only 1 layer per virtual stage interleaves).
        vpps = [vpp if vpp else 1] if vpp is not None or p == 1 else _divisors(per_stage)
        if plain_1f1b:
            vpps = [1]
        elif interleaved and p > 1:
            vpps = [v for v in vpps if v > 1] or vpps
        if titan and p > 1 and vpp is None:
            # torchtitan @9dec370 (2024-12): looped schedules place 2 stages per rank
            # (pipelining_utils.py: num_stages_per_rank = 2), and the micro-batches default to the
            # pipeline degree, not the number of stages (pipelining_utils.py build_pipeline_schedule:
            # n_microbatches = pipeline_parallel_degree when pipeline_parallel_microbatches is unset):
            # micro_batch = local batch / pp.
            vpps = [2 if interleaved else 1]
            if not mb and (gb // d) % p == 0 and b != (gb // d) // p:
                continue
        for v in vpps:
            v = v if p > 1 else 1
            split = {}
            if p > 2 and model.num_layers % p:
                # Uneven split as Megatron's account-for-embedding/loss options make it: middle
                # stages take ceil(l/p) layers, first and last share the rest.
                mid = -(-model.num_layers // p)
                edge = model.num_layers - (p - 2) * mid
                if edge <= 1 or edge % 2:
                    continue
                split = dict(first_stage_layers=edge // 2, last_stage_layers=edge // 2)
            extra = {}
            if titan and conv.get("zero") == 3:
                # torchtitan's FSDP2 default: reshard_after_forward = not pp_enabled
                # (planner/frameworks/rules.py with_defaults, parallelize_llama.apply_fsdp @9dec370)
                extra["reshard_after_forward"] = p == 1
            try:
                plan = Plan(num_gpus=n, tp=t, pp=p, cp=cp, vpp=v, micro_batch=b, global_batch=gb,
                            seq_len=seq, recompute=r, **split, **conv, **extra)
                plan.check_against(model)
            except (ValueError, InputError):
                continue
            out.append(plan)
    return out, free


#: Largest runs CSV read (the published runs are ~30 kB).
MAX_RUNS_BYTES = 16 * 1024 * 1024


#: Why plan-calibrate leaves the mixture-of-experts rows of a runs file out (one statement, for its messages).
MOE_ROWS_SKIPPED = (
    "a runs file's shape columns describe no experts (their count, width, routing, shared experts), so a "
    "MoE row would be priced as a dense model; MoE efficiency terms are fitted with bench/moe_fidelity.py "
    "--refit against the catalog's MoE models")


def load_runs(path: str | Path | None = None, gpu: str | None = None,
              skipped: dict[str, int] | None = None) -> list[RunRecord]:
    """Read a runs CSV (default: the project's copy of the published runs) into records.

    Rows without a model shape, a GPU count, a batch, or a measurement are skipped: they are
    not complete configurations; mixture-of-experts rows (``num_experts``) are skipped
    (:data:`MOE_ROWS_SKIPPED`). ``gpu`` keeps only rows of that catalog system. ``skipped``, when
    given, counts the rows of that system left out, by reason (``moe``, ``incomplete``).
    """
    skipped = {} if skipped is None else skipped
    if path is None:
        text = resources.files("plan_search.planner").joinpath("published_runs.csv").read_text(encoding="utf-8")
    else:
        from plan_search.models.io import expand_path, short_repr
        from plan_search.models.output import reason

        p = expand_path(path)
        try:
            regular = p.is_file()
        except (OSError, ValueError):
            regular = False
        if not regular:
            raise InputError(f"runs: file {short_repr(str(path), 120)} not found (or not a regular file)")
        try:
            if p.stat().st_size > MAX_RUNS_BYTES:
                raise InputError(f"runs: {short_repr(p.name)} is larger than the limit of {MAX_RUNS_BYTES:,} bytes")
            text = p.read_text(encoding="utf-8-sig")  # a byte-order mark (Excel) is not part of "source"
        except UnicodeDecodeError:
            raise InputError(f"runs: {short_repr(p.name)} is not UTF-8 text (a CSV in the layout of "
                             "published_runs.csv)") from None
        except OSError as exc:
            raise InputError(f"runs: cannot read {short_repr(str(path), 120)} ({reason(exc)})") from None
    try:
        # every cell a string ("" where a short row has none); cells past the header are dropped
        rows = [{k: (v if isinstance(v, str) else "") for k, v in row.items() if k is not None}
                for row in csv.DictReader(io.StringIO(text, newline=""))]
    except csv.Error as exc:
        raise InputError(f"runs: not a readable CSV ({' '.join(str(exc).split())[:120]})") from None
    required = {"source", "model", "gpu", "num_gpus", "global_batch", "seq_len"}
    if rows and not required <= set(rows[0]):
        missing = ", ".join(sorted(required - set(rows[0])))
        raise InputError(f"runs: the CSV lacks the column(s) {missing} (layout of published_runs.csv)")
    records = []
    for i, row in enumerate(rows):
        _check_numbers(row, i)
        try:
            g = _gpu_for(row)
        except InputError:
            continue
        tfl = _num(row.get("measured_tflops_per_gpu"))
        top = max(get_cluster(g).gpu.peak_tflops.values())
        if tfl is not None and tfl > top:
            raise InputError(f"runs: row {i + 1}: measured_tflops_per_gpu: {tfl:g} is above the {g} peak of "
                             f"{top:g} TFLOP/s (an MFU above 1); give TFLOP/s per GPU")
        if gpu and get_cluster(gpu).name != g:
            continue
        if _num(row.get("num_experts")):
            # Mixture-of-experts rows of runs_2026_12.csv: the dense model built from the shape
            # columns would misprice them; they are left to the expert-parallel cost model.
            skipped["moe"] = skipped.get("moe", 0) + 1
            continue
        group = source_group(row["source"])
        model = _model_for_row(row)
        n, gb = _int(row.get("num_gpus")), _int(row.get("global_batch"))
        if model is None or not n or not gb:
            skipped["incomplete"] = skipped.get("incomplete", 0) + 1
            continue
        conv = SOURCE_CONVENTIONS[group]
        cands, free = _candidates(row, model, conv, n)
        if not cands:
            skipped["incomplete"] = skipped.get("incomplete", 0) + 1
            continue
        rc = (row.get("recompute") or "full").strip().lower()
        measured, how = _measured_step(row, model, group, gb, cands[0].seq_len, n, rc)
        if not measured:
            skipped["incomplete"] = skipped.get("incomplete", 0) + 1
            continue
        # a measurement faster than the GPU's peak is not a run (an MFU above 1): model FLOPs
        # (full attention, no recomputation) at the GPU's highest peak are a lower bound on time
        floor_s = counting.training_flops_per_iteration(model, gb, cands[0].seq_len, "none", causal=True) / (
            n * max(get_cluster(g).gpu.peak_tflops.values()) * 1e12)
        # a measurement slower than a millionth of the peak is not a run either (1e-308 TFLOP/s made an infinite
        # step and a 'math domain error' in the fit)
        if not math.isfinite(measured) or floor_s / measured < MIN_MFU:
            col = next(c for c in ("measured_step_time_s", "measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu",
                                   "measured_mfu") if _num(row.get(c)))
            raise InputError(f"runs: row {i + 1}: {col}: {row[col].strip()[:40]!r} means a step of {measured:.4g} s, "
                             f"an MFU below {MIN_MFU:g} on {n} {g} (the model's FLOPs take {floor_s:.4g} s "
                             "there): not a measured run; check the unit (TFLOP/s per GPU, tokens/s per GPU, seconds)")
        if measured < floor_s:
            raise InputError(f"runs: row {i + 1}: the measured {how} means a step of {measured:.4g} s, faster than "
                             f"{floor_s:.4g} s, the model's FLOPs at the peak of {n} {g} (an MFU above 1)")
        label = f"{row['model'].strip()} @{n}"
        rec = RunRecord(i, row["source"], group, label, model, g, cands, free, measured, how, row.get("notes", ""))
        rec.arrays = PlanArrays.from_plans(cands, model.num_layers)
        rec.measured_memory_gb = _num(row.get("measured_memory_gb"))
        rec.profile = run_profile(row, cands)
        records.append(rec)
    return records


def run_profile(row: dict, candidates: Sequence[Plan]) -> str:
    """The kernel-efficiency profile a run stands for (``hardware/efficiency_profiles.yaml``):
    ``torchtitan`` for torchtitan's runs (FSDP2, torch.compile, torchao Float8: the printed
    ``framework`` column), ``deepspeed`` for the ZeRO-3 rows of Narayanan et al. Table 2 (run with
    DeepSpeed, Sec. 5.2), ``megatron`` (Megatron-LM/NeMo/Megatron-Bridge with Transformer Engine,
    and NeMo AutoModel, whose kernels are TE's) otherwise."""
    fw = (row.get("framework") or "").strip().lower()
    if fw == "torchtitan":
        return "torchtitan"
    if source_group(row.get("source", "")) == "narayanan2021-table2" and candidates and candidates[0].zero == 3:
        return "deepspeed"
    return "megatron"


def load_all_runs(gpu: str | None = None) -> list[RunRecord]:
    """Every dense published run with a complete configuration: ``published_runs.csv`` and the
    dense rows of ``runs_2026_12.csv`` (the project's copies; MoE rows are skipped by
    :func:`load_runs`). Records of the second file have ``index`` offset by 1000."""
    recs = load_runs(gpu=gpu)
    new = load_runs(resources.files("plan_search.planner").joinpath("runs_2026_12.csv"), gpu=gpu)
    for r in new:
        r.index += 1000
    return recs + new


# --------------------------------------------------------------------------- prediction
@dataclass
class Prediction:
    record: RunRecord
    plan: Plan
    predicted_step_s: float
    feasible: bool

    @property
    def error(self) -> float:
        """Signed relative error of the predicted step time."""
        return self.predicted_step_s / self.record.measured_step_s - 1.0


def predict(rec: RunRecord, cluster: ClusterSpec) -> Prediction:
    """The planner's step time for a record: the fastest candidate that fits (or, when none
    fits, the fastest of all, flagged infeasible)."""
    r = evaluate(rec.model, cluster, rec.arrays)
    step = r["step_s"]
    fits = r["fits"]
    pool = np.where(fits, step, np.inf) if fits.any() else step
    i = int(np.argmin(pool))
    return Prediction(rec, rec.candidates[i], float(step[i]), bool(fits[i]))


# --------------------------------------------------------------------------- fitting
#: Fitted terms, their bounds, and when a term is identifiable from a set of runs.
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff_max": (0.25, 0.98),
    "gemm_dim_scale": (50.0, 4000.0),
    "attention_eff": (0.1, 0.9),
    "bmm_attention_eff": (0.1, 0.9),
    "fp8_gemm_eff_ratio": (0.3, 1.0),
    "inter_bw_eff": (0.2, 0.95),
    "zero3_bw_eff": (0.02, 1.0),
    "tp_overlap": (0.0, 0.95),
    "dp_overlap": (0.0, 1.0),
    "step_overhead_s": (0.0, 2.0),
}


def _relevant_terms(records: Sequence[RunRecord]) -> list[str]:
    terms = ["gemm_eff_max", "gemm_dim_scale", "inter_bw_eff", "step_overhead_s"]
    plans = [p for r in records for p in r.candidates]
    # FlashAttention's efficiency is a cited prior (EfficiencySpec.attention_eff), not fitted:
    # only very long sequences identify it, and a fit of it does not carry across sources.
    if any(not p.flash_attention for p in plans):
        terms.append("bmm_attention_eff")
    if any(p.zero == 3 for p in plans):
        terms.append("zero3_bw_eff")
    if any(p.overlap_tp_comm and p.tp > 1 for p in plans):
        terms.append("tp_overlap")
    if any(p.overlap_grad_reduce and p.dp > 1 for p in plans):
        terms.append("dp_overlap")
    return terms


def _to_unit(v, lo, hi):
    u = (v - lo) / (hi - lo)
    u = min(max(u, 0.01), 0.99)
    return math.log(u / (1 - u))


def _from_unit(z, lo, hi):
    return lo + (hi - lo) / (1.0 + math.exp(-z))


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, iters: int = 400, step: float = 0.6) -> np.ndarray:
    """Plain deterministic Nelder-Mead minimisation (no SciPy dependency)."""
    n = len(x0)
    simplex = [x0.copy()] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(s) for s in simplex]
    for _ in range(iters):
        order = np.argsort(vals)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < 1e-10:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(xc)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (s - best) for s in simplex[1:]]
                vals = [vals[0]] + [f(s) for s in simplex[1:]]
    return simplex[int(np.argmin(vals))]


#: Weight of the pull towards the prior (the EfficiencySpec defaults) in the fit's transformed
#: space. The link efficiencies are physical figures (NCCL reaches most of a link's rate on
#: large messages), weakly identified by step times: they move only where the runs insist.
PRIOR_WEIGHT = {"inter_bw_eff": 2e-3, "zero3_bw_eff": 2e-3}
DEFAULT_PRIOR_WEIGHT = 1e-5


#: Below this many rows a fit moves only the GEMM efficiency ceiling; every other term keeps the
#: prior (for a system with a handful of published runs, e.g. Blackwell: the prior is the
#: reference system's fit, :func:`fit_efficiency` ``prior``).
MIN_ROWS_FOR_ALL_TERMS = 6


def fit_efficiency(
    records: Sequence[RunRecord], cluster: ClusterSpec, terms: Iterable[str] | None = None, iters: int = 400,
    prior: EfficiencySpec | None = None,
) -> EfficiencySpec:
    """Fit the efficiency terms of ``cluster`` to ``records`` (all of that GPU).

    Minimises the mean squared log error of step time plus a pull towards the priors (``prior``,
    by default the :class:`EfficiencySpec` defaults; :data:`PRIOR_WEIGHT`), so that a term the runs
    cannot see stays at its prior. With a ``prior`` the fit starts from it and the terms it does
    not fit are the prior's (a profile carried from a reference system); with fewer than
    :data:`MIN_ROWS_FOR_ALL_TERMS` rows only ``gemm_eff_max`` is fitted. Starts from the cluster's
    current values (or the prior) and from a second point with slow sharded-DP collectives; keeps
    the better optimum. Deterministic.
    """
    records = list(records)
    if not records:
        raise InputError("runs: no complete rows for this GPU to calibrate on")
    if terms is not None:
        terms = list(terms)
    elif len(records) < MIN_ROWS_FOR_ALL_TERMS:
        terms = ["gemm_eff_max"]
    else:
        terms = _relevant_terms(records)
    if prior is not None:
        cluster = cluster.model_copy(update={"efficiency": prior})
    start = cluster.efficiency.model_dump()
    prior = (prior or EfficiencySpec()).model_dump()
    unit = lambda d: np.array([_to_unit(d[t], *FIT_BOUNDS[t]) for t in terms])  # noqa: E731
    z_prior = unit(prior)
    weights = np.array([PRIOR_WEIGHT.get(t, DEFAULT_PRIOR_WEIGHT) for t in terms])

    def spec_of(z) -> EfficiencySpec:
        upd = {t: _from_unit(float(v), *FIT_BOUNDS[t]) for t, v in zip(terms, z)}
        return cluster.efficiency.model_copy(update=upd)

    def loss(z) -> float:
        c = cluster.model_copy(update={"efficiency": spec_of(z)})
        errs = [math.log(predict(r, c).predicted_step_s / r.measured_step_s) for r in records]
        return float(np.mean(np.square(errs))) + float(np.sum(weights * np.square(z - z_prior)))

    starts = [unit(start), unit(dict(start, zero3_bw_eff=0.3, dp_overlap=0.9))]
    best = None
    for s0 in starts:
        z = nelder_mead(loss, s0, iters=iters)
        z = nelder_mead(loss, z, iters=iters // 2, step=0.2)
        val = loss(z)
        if best is None or val < best[0] - 1e-12:
            best = (val, z)
    fitted = spec_of(best[1])
    srcs = sorted({r.group for r in records})
    return fitted.model_copy(update={"source": f"fitted by plan-calibrate on {len(records)} runs ({', '.join(srcs)})"})


def error_summary(preds: Sequence[Prediction]) -> dict:
    errs = np.abs([p.error for p in preds])
    if len(errs) == 0:
        return {"n": 0, "median": float("nan"), "p90": float("nan")}
    return {"n": len(errs), "median": float(np.median(errs)), "p90": float(np.percentile(errs, 90))}
