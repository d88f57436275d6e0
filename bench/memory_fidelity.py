"""Memory fidelity: predicted against measured peak memory, per run, with the measure each source used.

    python bench/memory_fidelity.py            # per-row table, summary, floors
    python bench/memory_fidelity.py --fit      # + refit the two calibrated terms (fragmentation, SP gather
                                               #   buffers) on these rows, and leave-one-table-out figures
                                               #   (each table held out of its own fit; ~3 min)

Rows: every row of the project's runs files (planner/runs_2026_12.csv, planner/published_runs.csv)
with ``measured_memory_gb``, plus the published out-of-memory configurations listed in
:data:`PUBLISHED_OOM` (each must be predicted not to fit). Where an out-of-memory configuration is
a run that ran on fewer GPUs (Narayanan et al. 2021's 530B ZeRO-3: 640 GPUs ran, 560 did not fit),
the pair bounds the figure the run that ran needs at capacity, and the share of the allocator slack
that cannot be released that fits both is printed beside the built-in one
(:data:`planner.costmodel.memory.UNRELEASABLE_SLACK_SHARE`, fitted on that bracket alone; :func:`bracket_check`).

Two figures per row: the peaks with room (allocated, reserved, device: what a run with memory to
spare measures, compared with the measured peaks) and the figure at capacity (``needed``: allocated
+ the slack the caching allocator cannot give back + outside the allocator), which feasibility is
judged on -- here as in plan-estimate and plan-search (:func:`planner.costmodel.evaluate.memory_fit`).

What each source measured (:data:`MEASURE_BY_SOURCE`) decides which predicted figure it is
compared with (:func:`planner.costmodel.memory.as_measured`): ``allocated``
(torch.cuda.max_memory_allocated), ``reserved`` (torch.cuda.max_memory_reserved) or ``device``
(nvidia-smi). Floors (issue 11): median |error| <= 8% over the rows with a measured peak; no run
that ran needing more than its GPU's physical capacity; every published OOM predicted not to fit.

MoE rows (:func:`moe_rows_check`): every MoE row of planner/runs_2026_12.csv that ran, completed by
bench/moe_fidelity.py's loader (imported, not copied: the printed degrees, bench/moe_recipes.yaml's
recipe settings, ``moe_fidelity.memory_settings``), its least-memory candidate's figure at capacity
against the GPU's; rows the loader cannot complete are listed as unknown, and a row above capacity
is also priced with its recipe's degrees where the recipe names others (``recipe_degrees_figure``).
A row whose printed MBS x DP x GA is not its GBS takes its recipe's micro-batch
(``moe_fidelity._recipe_settled_micro_batch`` says why and which row).

The plan of a row is what the source ran; what it leaves out is set as its framework does, and
said in :func:`plan_for` (torchtitan: FSDP2 with fp32 reduce, reshard_after_forward off under
pipeline parallelism, the pipeline's micro-batch count = its number of stages).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.spec import ClusterSpec
from plan_search.models.catalog import get_model
from plan_search.planner.calibration import RunRecord, load_runs
from plan_search.planner.costmodel import memory
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.evaluate import evaluate, memory_fit
from plan_search.planner.costmodel.plan import Plan

PLANNER = Path(__file__).resolve().parents[1] / "planner"
RUN_FILES = (PLANNER / "runs_2026_12.csv", PLANNER / "published_runs.csv")

#: What each source's memory figure is.
MEASURE_BY_SOURCE = {
    # torchtitan logs ``memory: {max_reserved_gib}GiB``: torch.cuda.memory_stats()
    # ["reserved_bytes.all.peak"], reset every log interval (torchtitan/components/metrics.py,
    # DeviceMemoryMonitor.get_peak_stats; train.py at 9dec370 logs the same field).
    "torchtitan-2024-12": "reserved",
}
#: Sources not listed: what the row's notes say it measured, else nvidia-smi (a paper's or a
#: blog's "memory" is the nvidia-smi figure unless it says otherwise).
DEFAULT_MEASURE = "device"
_MEASURE_WORDS = [(r"max_memory_allocated|max[ _]allocated|memory_allocated", "allocated"),
                  (r"max_memory_reserved|max[ _]reserved|reserved", "reserved"),
                  (r"nvidia-smi|nvml|rocm-smi", "device")]


def measure_of(rec: RunRecord) -> str:
    """Which figure a row's memory is (:data:`memory.MEASURE_KINDS`)."""
    if rec.group in MEASURE_BY_SOURCE:
        return MEASURE_BY_SOURCE[rec.group]
    for pat, kind in _MEASURE_WORDS:
        if re.search(pat, rec.notes, re.I):
            return kind
    return DEFAULT_MEASURE

#: The 96 GB HBM2e H100 of the torchtitan benchmark (Grand Teton, 500 W): six 16 GiB HBM2e stacks;
#: usable capacity 95.58 GiB by analogy with the 80 GB part (five 16 GiB stacks, nvidia-smi
#: 81,559 of 81,920 MiB: 361 MiB reserved by the driver -> 6/5 x 361 MiB here). Derived, not
#: re-read from an nvidia-smi output of that part.
H100_96GB_MEMORY_GIB = (6 * 16 * 1024 - 6 / 5 * 361) / 1024

#: Published configurations that ran out of memory (or were reported not to fit): model, GPU, plan, source.
PUBLISHED_OOM = [
    # Korthikanti et al. 2022, Fig. 1 and Sec. 1: with tensor (and pipeline) parallelism alone and
    # no recomputation, the activations of the 175B / 530B / 1T models do not fit in an A100's
    # 80 GB (the reason the paper exists). Configurations of its Table 3 without SP or recompute.
    ("megatron-gpt-175b", "a100-80gb",
     dict(num_gpus=64, tp=8, pp=8, micro_batch=1, global_batch=64, seq_len=2048, recompute="none",
          sequence_parallel=False, flash_attention=False, zero=0, fp32_grads=False, precision="fp16"),
     "Korthikanti et al. 2022, Fig. 1 (175B, t8 p8, no recompute, no SP)"),
    ("megatron-gpt-530b", "a100-80gb",
     dict(num_gpus=280, tp=8, pp=35, micro_batch=1, global_batch=280, seq_len=2048, recompute="none",
          sequence_parallel=False, flash_attention=False, zero=0, fp32_grads=False, precision="fp16"),
     "Korthikanti et al. 2022, Fig. 1 (530B, t8 p35, no recompute, no SP)"),
    ("megatron-gpt-1t", "a100-80gb",
     dict(num_gpus=512, tp=8, pp=64, micro_batch=1, global_batch=512, seq_len=2048, recompute="none",
          sequence_parallel=False, flash_attention=False, zero=0, fp32_grads=False, precision="fp16"),
     "Korthikanti et al. 2022, Fig. 1 (1T, t8 p64, no recompute, no SP)"),
    # Narayanan et al. 2021, Table 2 (as recorded in planner/published_runs.csv's notes): "530B did
    # not fit on 560 GPUs w/ mbs 4" with ZeRO-3 (DeepSpeed) and no model parallelism.
    ("megatron-gpt-530b", "a100-80gb",
     dict(num_gpus=560, tp=1, pp=1, micro_batch=4, global_batch=2240, seq_len=2048, recompute="full",
          sequence_parallel=False, flash_attention=False, zero=3, fp32_grads=False, precision="fp16"),
     "Narayanan et al. 2021, Table 2 note (530B ZeRO-3 on 560 GPUs, mb 4)"),
]


#: Measured peaks of published runs that are not rows of the runs files (no complete step-time row of
#: their own there), each a run that ran: (model, GPU, profile, plan, measured GiB, source). torchtitan's
#: 2024-12 H100 benchmark (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md@820504e20;
#: torchtitan 9dec370, torch 1963fc8): "Memory(GiB)" is torchtitan's logged reserved peak
#: (MEASURE_BY_SOURCE), the maximum over the GPUs, on the 96 GB HBM2e H100 at 500 W. Tables 1 and 3:
#: Llama 3.1 8B, FSDP on 8 / 128 GPUs, local batch 2 at seq 8192 (the run's llama3_8b.toml), selective
#: activation checkpointing -- its op-level SAC (``selective_ac_option = "op"``, the toml's setting at
#: 9dec370) -- eager, torch.compile, and torch.compile + Float8 (torchao dynamic scaling: fp8-current);
#: the loss uncompiled on fp32 logits (train.py@9dec370: "compiling loss function causes CUDA errors,
#: turning off for now"). Table 2's first row (FSDP 8, CP 1, seq 32768, LBS 1, full AC, compile + Float8)
#: is not in the runs files either. Left out: the Trainy H200 rows of
#: benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae compiles the loss, a
#: cross entropy the planner has no value for).
_T = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md@820504e20 ")
_T8 = dict(zero=3, tp=1, pp=1, cp=1, micro_batch=2, seq_len=8192, reshard_after_forward=True, fp32_grads=True,
           recompute="selective")
KNOWN_PEAKS = [
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan-eager", dict(_T8, num_gpus=8, global_batch=16, precision="bf16"),
     82.4, _T + "Table 1 FSDP (eager)"),
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan", dict(_T8, num_gpus=8, global_batch=16, precision="bf16"),
     77.0, _T + "Table 1 FSDP + torch.compile"),
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan",
     dict(_T8, num_gpus=8, global_batch=16, precision="fp8-current"), 76.8, _T + "Table 1 FSDP + compile + Float8"),
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan-eager",
     dict(_T8, num_gpus=128, global_batch=256, precision="bf16"), 67.0, _T + "Table 3 FSDP (eager)"),
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan", dict(_T8, num_gpus=128, global_batch=256, precision="bf16"),
     62.0, _T + "Table 3 FSDP + torch.compile"),
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan",
     dict(_T8, num_gpus=128, global_batch=256, precision="fp8-current"), 61.8, _T + "Table 3 FSDP + compile + Float8"),
    ("llama3.1-8b", "h100-96gb-500w", "torchtitan",
     dict(_T8, num_gpus=8, global_batch=8, micro_batch=1, seq_len=32768, recompute="full", precision="fp8-current"),
     83.9, _T + "Table 2 FSDP 8, CP 1, seq 32768"),
]


def known_peak_rows() -> list[tuple]:
    """:data:`KNOWN_PEAKS` as rows of :func:`load_rows` -- (record, plan, cluster) with a record that
    carries what :func:`predict` and :func:`table_of` read (model, measured figure, source) and an index
    of -1, -2, ... (no runs-file row)."""
    from types import SimpleNamespace

    from plan_search.hardware.profiles import profile_for

    out = []
    for i, (model, gpu, prof, plan, gib, src) in enumerate(KNOWN_PEAKS):
        c = get_cluster(gpu)
        c = c.model_copy(update={"efficiency": profile_for(c, prof)})
        if gpu == "h100-96gb-500w":
            c = c.model_copy(update={"gpu": c.gpu.model_copy(update={"memory_gib": H100_96GB_MEMORY_GIB})})
        m = get_model(model)
        rec = SimpleNamespace(index=-(i + 1), model=m, measured_memory_gb=gib, source=src, group="torchtitan-2024-12",
                              notes="", label=src.split(".md@820504e20 ")[-1].split(" ", 2)[-1], gpu=gpu)
        out.append((rec, Plan(**plan), c))
    return out


def cluster_for(rec: RunRecord) -> ClusterSpec:
    """The run's system with the efficiency profile of its framework (``rec.profile``: DeepSpeed's
    ZeRO-3 gathers one sub-module at a time, FSDP whole blocks)."""
    from plan_search.hardware.profiles import profile_for

    c = get_cluster(rec.gpu)
    if rec.profile != "megatron":
        c = c.model_copy(update={"efficiency": profile_for(c, rec.profile)})
    if re.search(r"96\s*GB", rec.notes + " " + rec.source):
        c = c.model_copy(update={"gpu": c.gpu.model_copy(update={"memory_gib": H100_96GB_MEMORY_GIB})})
    return c


def table_of(rec: RunRecord) -> str:
    m = re.search(r"Table \d+", rec.source)
    return f"{rec.group} {m.group(0)}" if m else rec.group


def plan_for(rec: RunRecord) -> Plan:
    """The plan the source ran: the record's candidate, completed as the framework runs it."""
    p = rec.candidates[0]
    if rec.group == "torchtitan-2024-12":
        # torchtitan at 9dec370: FSDP2 MixedPrecisionPolicy(param bf16, reduce fp32); under PP
        # reshard_after_forward=False (parallelize_llama.apply_fsdp); the pipeline runs as many
        # micro-batches as it has stages (pp x stages per rank; assumed: 2 per rank when interleaved).
        interleaved = "Interleaved" in rec.notes or "Interleaved" in rec.source
        v = 2 if interleaved and p.pp > 1 else 1
        local = p.global_batch // p.dp
        mb = local // (p.pp * v) if p.pp > 1 else local
        want = dict(p.model_dump(), micro_batch=mb, vpp=v, reshard_after_forward=p.pp == 1, fp32_grads=True,
                    sequence_parallel=p.tp > 1, flash_attention=True)
        for c in rec.candidates:
            if c.micro_batch == mb and c.vpp == v:
                want.update(first_stage_layers=c.first_stage_layers, last_stage_layers=c.last_stage_layers)
        if p.pp > 1 and want.get("first_stage_layers") is None and rec.model.num_layers % p.pp:
            mid = -(-rec.model.num_layers // p.pp)
            edge = (rec.model.num_layers - (p.pp - 2) * mid) // 2
            want.update(first_stage_layers=edge, last_stage_layers=edge)
        return Plan(**want)
    return p


def predict(rec: RunRecord, plan: Plan, cluster: ClusterSpec) -> dict:
    x = PlanArrays.from_plans([plan], rec.model.num_layers)
    mem, _, fits = memory_fit(rec.model, cluster, x)  # plan-estimate's and the search's rule, no headroom
    kind = measure_of(rec)
    cap = cluster.gpu.memory_gib * memory.GIB
    return {
        "kind": kind,
        "predicted_gib": float(memory.as_measured(mem, kind, cap)[0]) / memory.GIB,
        "device_gib": float(mem["device"][0]) / memory.GIB,  # nvidia-smi with room
        "needed_gib": float(mem["total"][0]) / memory.GIB,  # at capacity: the feasibility figure
        "fits": bool(fits[0]),
        "allocated_gib": float(mem["allocated"][0]) / memory.GIB,
        "capacity_gib": cluster.gpu.memory_gib,
    }


def with_fragmentation(c: ClusterSpec, f: float) -> ClusterSpec:
    return c.model_copy(update={"efficiency": c.efficiency.model_copy(update={"fragmentation": f})})


def _predict_with(rows, f: float, k: float) -> list[float]:
    """Predicted GiB of each row with fragmentation ``f`` and ``k`` SP gather buffers."""
    saved = memory.SP_GATHER_BUFFERS
    memory.SP_GATHER_BUFFERS = k
    try:
        return [predict(r, p, with_fragmentation(c, f))["predicted_gib"] for r, p, c in rows]
    finally:
        memory.SP_GATHER_BUFFERS = saved


def fit_terms(rows) -> tuple[float, float]:
    """(fragmentation, SP gather buffers) minimising the mean squared log error of the rows: a
    grid of 0.02 x 0.5 over [0, 1] x [0, 12], then 0.005 x 0.1 around the best (deterministic)."""
    meas = np.array([r.measured_memory_gb for r, _, _ in rows])

    def loss(f, k):
        return float(np.mean(np.log(np.array(_predict_with(rows, f, k)) / meas) ** 2))

    grid = [(loss(f, k), f, k) for f in np.arange(0.0, 1.0001, 0.02) for k in np.arange(0.0, 12.001, 0.5)]
    _, f0, k0 = min(grid)
    fine = [(loss(f, k), f, k) for f in np.arange(max(0.0, f0 - 0.02), f0 + 0.0201, 0.005)
            for k in np.arange(max(0.0, k0 - 0.5), k0 + 0.501, 0.1)]
    _, f1, k1 = min(fine)
    return round(float(f1), 3), round(float(k1), 2)


def load_rows():
    rows = []
    for path in RUN_FILES:
        if not path.is_file():
            continue
        for rec in load_runs(path):
            if rec.measured_memory_gb:
                rows.append((rec, plan_for(rec), cluster_for(rec)))
    return rows + known_peak_rows()


def table(rows, title: str, terms: tuple[float, float] | None = None) -> list[float]:
    print(f"\n{title}")
    print(f"{'#':>3s} {'source / table':34s} {'run':24s} {'plan':30s} {'measure':9s} {'meas.':>6s} "
          f"{'pred.':>6s} {'error':>7s} {'device':>7s} {'needed':>7s} {'cap.':>6s}")
    errs = []
    saved = memory.SP_GATHER_BUFFERS
    if terms is not None:
        memory.SP_GATHER_BUFFERS = terms[1]
    try:
        for rec, plan, c in rows:
            cc = with_fragmentation(c, terms[0]) if terms is not None else c
            r = predict(rec, plan, cc)
            e = r["predicted_gib"] / rec.measured_memory_gb - 1.0
            errs.append(e)
            over = "" if r["fits"] else " ABOVE CAPACITY"
            print(f"{rec.index:3d} {table_of(rec)[:34]:34s} {rec.label[:24]:24s} {plan.label[:30]:30s} {r['kind']:9s} "
                  f"{rec.measured_memory_gb:6.1f} {r['predicted_gib']:6.1f} {100 * e:+6.1f}% {r['device_gib']:7.1f} "
                  f"{r['needed_gib']:7.1f} {r['capacity_gib']:6.1f}{over}")
    finally:
        memory.SP_GATHER_BUFFERS = saved
    return errs


def oom_check() -> bool:
    print("\npublished out-of-memory configurations (each must be predicted not to fit, no headroom):")
    ok = True
    from plan_search.hardware.profiles import profile_for

    for model, gpu, plan, src in PUBLISHED_OOM:
        m, c = get_model(model), get_cluster(gpu)
        if "ZeRO-3" in src:  # run with DeepSpeed, as the row that ran: its profile
            c = c.model_copy(update={"efficiency": profile_for(c, "deepspeed")})
        r = evaluate(m, c, PlanArrays.from_plans([Plan(**plan)], m.num_layers))
        peak, fits = float(r["memory_peak_gib"][0]), bool(r["fits"][0])
        ok &= not fits
        print(f"  {src:60s} predicted {peak:7.1f} GiB of {c.gpu.memory_gib:g}: {'fits (WRONG)' if fits else 'does not fit'}")
    return ok


def bracket_check() -> None:
    """A published out-of-memory configuration and a run that ran, the same plan on fewer GPUs
    (Narayanan et al. 2021 Table 2: 530B ZeRO-3, micro-batch 4, at 560 GPUs did not fit, at 640
    it ran): between them only the sharded states change, so the two bound the device figure of
    the run that ran to ``(capacity - delta, capacity]`` with ``delta`` the predicted difference.
    Printed with the predicted breakdown, to show which part the bound falls on."""
    from plan_search.hardware.profiles import profile_for

    ran = {}
    for path in RUN_FILES:
        if path.is_file():
            for rec in load_runs(path):
                p = rec.candidates[0]
                arch = (rec.model.num_layers, rec.model.hidden_size, rec.model.vocab_size)
                ran[(arch, rec.gpu, p.tp, p.pp, p.micro_batch, p.zero, p.recompute, p.sequence_parallel)] = (rec, path.name)
    for model, gpu, plan, src in PUBLISHED_OOM:
        m = get_model(model)
        c = get_cluster(gpu)
        arch = (m.num_layers, m.hidden_size, m.vocab_size)
        want = Plan(**plan)
        hit = ran.get((arch, c.name, want.tp, want.pp, want.micro_batch, want.zero, want.recompute,
                       want.sequence_parallel))
        if hit is None or hit[0].candidates[0].num_gpus <= want.num_gpus:
            continue
        rec, fname = hit
        c = cluster_for(rec)
        if "ZeRO-3" in src:
            c = c.model_copy(update={"efficiency": profile_for(get_cluster(gpu), "deepspeed")})
        ran_plan = Plan(**dict(plan, num_gpus=rec.candidates[0].num_gpus, global_batch=rec.candidates[0].global_batch))
        mem = {}
        for key, pl in (("ran", ran_plan), ("oom", Plan(**plan))):
            x = PlanArrays.from_plans([pl], m.num_layers)
            mem[key] = {k: float(v[0]) / memory.GIB for k, v in memory.peak_memory(m, c, x).items()}
        cap = c.gpu.memory_gib
        delta = mem["oom"]["total"] - mem["ran"]["total"]
        r = mem["ran"]
        print(f"\n{fname} row {rec.index} ({rec.label}, {ran_plan.num_gpus} GPUs) ran; {plan['num_gpus']} GPUs did not fit:")
        print(f"  together they put the figure it needs at capacity in ({cap - delta:.1f}, {cap:g}] GiB; predicted "
              f"{r['total']:.1f} = allocated {r['allocated']:.1f} (states {r['weights'] + r['gradients'] + r['optimizer']:.1f}, "
              f"activations {r['activations']:.1f}, re-run layer/loss {r['transient']:.1f}, "
              f"gathers {r['zero3_gather_buffer']:.1f}) + unreleasable slack {r['allocator_slack']:.1f} "
              f"+ outside the allocator {r['framework_overhead']:.1f}; with room the slack is "
              f"{r['allocator_slack'] + r['releasable_slack']:.1f} (device {r['device']:.1f})")
        lo, hi = cap - delta - (r["allocated"] + r["framework_overhead"]), cap - (r["allocated"] + r["framework_overhead"])
        # the slack of this plan that the allocator cannot release, as a share of the fragmentation slack
        # (the SP buffers, kept whole, are none here: no sequence parallelism)
        frag = (r["allocator_slack"] + r["releasable_slack"]) if not ran_plan.sequence_parallel else float("nan")
        print(f"  the unreleasable slack that fits both: {max(lo, 0.0):.1f} to {hi:.1f} GiB against "
              f"{r['allocator_slack']:.1f} predicted: a share of the slack with room in ({max(lo, 0.0) / frag:.3f}, "
              f"{hi / frag:.3f}], built-in {memory.UNRELEASABLE_SLACK_SHARE:g} (fitted on this pair alone)")


def ran_over_capacity() -> tuple[list[str], list[str]]:
    """Every dense run of the runs files (with or without a measured peak): those whose printed
    configuration (the least-memory candidate where the source left knobs open) is predicted to
    need more than the GPU's physical capacity, and those the default headroom refuses."""
    over, refused = [], []
    for path in RUN_FILES:
        if not path.is_file():
            continue
        for rec in load_runs(path):
            if rec.model.is_moe:
                continue  # the expert-parallel memory model is issue 13's
            c = cluster_for(rec)
            plans = [plan_for(rec)] if rec.group == "torchtitan-2024-12" else rec.candidates
            x = PlanArrays.from_plans(plans, rec.model.num_layers)
            mem, _, fits = memory_fit(rec.model, c, x)  # the one feasibility rule, no headroom
            _, _, fits_default = memory_fit(rec.model, c, x, memory.DEFAULT_MEMORY_HEADROOM, mem)
            best = float(np.min(mem["total"])) / memory.GIB
            if not fits_default.any():
                refused.append(f"{path.name} row {rec.index} ({rec.label}, {best:.1f} of {c.gpu.memory_gib:g} GiB)")
            if not fits.any():
                i = int(np.argmin(mem["total"]))
                parts = (f"allocated {float(mem['allocated'][i]) / memory.GIB:.1f} + unreleasable slack "
                         f"{float(mem['allocator_slack'][i]) / memory.GIB:.1f} + outside "
                         f"{float(mem['framework_overhead'][i]) / memory.GIB:.1f}")
                over.append(f"{path.name} row {rec.index} ({rec.label}, {best:.1f} of {c.gpu.memory_gib:g} GiB: {parts})")
    return over, refused


def recipe_degrees_figure(run, cluster) -> tuple[str, bool]:
    """For a row whose recipe (bench/moe_recipes.yaml) names degrees that differ from its published
    table's: (what the least figure at capacity is with the recipe's degrees instead -- which of the
    two ran is unknown, the benchmark prices the table's --, whether it fits); ('', False) when the
    recipe names none or none is valid."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from moe_fidelity import recipe_differs, recipe_for
    from plan_search.models.io import InputError

    import csv
    from importlib import resources

    text = resources.files("plan_search.planner").joinpath("runs_2026_12.csv").read_text(encoding="utf-8")
    row = list(csv.DictReader(text.splitlines()))[run.index - 1000]
    upd = recipe_differs(recipe_for(row))
    if not upd:
        return "", False
    plans = []
    for p in run.candidates:
        d = dict(p.model_dump(), **upd)
        d.pop("dp", None)
        try:
            q = Plan(**d)
            q.check_against(run.model)
        except (ValueError, InputError):
            continue
        plans.append(q)
    if not plans:
        return "", False
    mem, _, fits = memory_fit(run.model, cluster, PlanArrays.from_plans(plans, run.model.num_layers))
    what = ", ".join(f"{k} {v}" for k, v in upd.items())
    return (f"with its recipe's {what} (the table prints otherwise; which ran is unknown): "
            f"{float(np.min(mem['total'])) / memory.GIB:.1f} GiB"), bool(fits.any())


def moe_rows_check() -> tuple[list[str], list[str]]:
    """Every MoE row of planner/runs_2026_12.csv that ran, completed as bench/moe_fidelity.py
    completes it (its loader: printed degrees, bench/moe_recipes.yaml's recipe settings -- recompute
    modules, etp, dispatcher, MTP depth, the report's or recipe's memory settings -- and, where a
    source leaves a knob open, every value it admits), priced on its GPU as the API prices plans:
    the least-memory candidate's figure at capacity (``needed``, what feasibility is judged on)
    against the GPU's capacity. Rows the loader cannot complete are printed with its reason: their
    configuration is unknown, not guessed. Returns the rows predicted above capacity, and those of
    them whose configuration is not settled (their recipe's degrees, which differ from the printed
    ones, fit)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from moe_fidelity import load_moe_runs  # the one configuration completion (not copied)

    runs, skipped = load_moe_runs()
    print(f"\nMoE runs that ran ({len(runs)} rows of planner/runs_2026_12.csv, completed by bench/moe_fidelity.py's "
          f"loader; the least-memory candidate where the source leaves knobs open), needed at capacity vs capacity:")
    print(f"{'row':>5s} {'model':16s} {'GPU':12s} {'GPUs':>5s} {'source':22s} {'plan (least memory)':40s} {'states':>7s} "
          f"{'acts':>6s} {'trans':>6s} {'slack':>6s} {'needed':>7s} {'cap.':>6s}  knobs open / notes")
    over, unsettled, tight = [], [], []
    G = memory.GIB
    for r in runs:
        c = get_cluster(r.gpu)
        mem, _, fits = memory_fit(r.model, c, r.arrays)  # the one feasibility rule, no headroom
        i = int(np.argmin(mem["total"]))
        p = r.candidates[i]
        states = float(mem["weights"][i] + mem["gradients"][i] + mem["optimizer"][i]) / G
        need = float(mem["total"][i]) / G
        extra = [k for k, v in (("bf16-moments", p.adam_moments_dtype == "bf16"), ("fp8-act-inputs", p.act_fp8_input_store),
                                ("bf16-grads", not p.fp32_grads)) if v]
        label = f"{p.label} {p.precision} rc={p.recompute}{' ' + ','.join(extra) if extra else ''}"
        flag = ""
        if fits.any() and need > c.gpu.memory_gib * (1.0 - memory.DEFAULT_MEMORY_HEADROOM):
            tight.append(f"{r.index} ({need:.1f} of {c.gpu.memory_gib:.1f})")
        if not fits.any():
            flag = " ABOVE CAPACITY"
            over.append(f"{r.index} ({r.model_key} {r.gpu} x{r.n}, {need:.1f} of {c.gpu.memory_gib:.1f} GiB)")
        notes = ("open: " + ",".join(r.assumed)) if r.assumed else ""
        if flag:
            alt, alt_fits = recipe_degrees_figure(r, c)
            if alt:
                notes += ("; " if notes else "") + alt
            if alt_fits:
                unsettled.append(str(r.index))
        print(f"{r.index:5d} {r.model_key[:16]:16s} {r.gpu[:12]:12s} {r.n:5d} {r.group[:22]:22s} {label[:40]:40s} "
              f"{states:7.1f} {float(mem['activations'][i]) / G:6.1f} {float(mem['transient'][i]) / G:6.1f} "
              f"{float(mem['allocator_slack'][i]) / G:6.1f} {need:7.1f} {c.gpu.memory_gib:6.1f}{flag}"
              f"{'  ' + notes[:400] if notes else ''}")
    for label, why in skipped:
        print(f"  not priced, configuration not complete: {label}: {why}")
    print(f"MoE runs that ran predicted above capacity: {len(over)} of {len(runs)}"
          f"{': ' + '; '.join(over) if over else ''}"
          f"{f' (configuration not settled: {chr(44).join(unsettled)}; the recipe degrees fit)' if unsettled else ''}")
    print(f"MoE runs that fit but are refused at the default headroom ({100 * memory.DEFAULT_MEMORY_HEADROOM:.0f}%, "
          f"'tight'): {len(tight)}{': ' + '; '.join(tight) if tight else ''}")
    return over, unsettled


#: How the Megatron-MoE-ModelZoo tables print their recompute modules -> Plan.recompute_modules names.
_MODULE_WORDS = {"norm": "layernorm", "act": "moe_act"}


def printed_modules(text: str) -> str | None:
    """``Plan.recompute_modules`` of a row's printed "selective: <modules>" (None when it prints none)."""
    from plan_search.planner.costmodel.plan import RECOMPUTE_MODULE_SETS, canonical_modules

    m = re.match(r"\s*selective\s*:\s*(.+)", text or "", re.I)
    if not m:
        return None
    mods = canonical_modules("+".join(_MODULE_WORDS.get(w.strip().lower(), w.strip().lower())
                                      for w in re.split(r"[,+]", m.group(1)) if w.strip()))
    return mods if mods in RECOMPUTE_MODULE_SETS else None


def printed_offload(notes: str) -> str | None:
    """``Plan.offload_modules`` of a row's notes ("fine-grained activation offloading of expert_fc1 and
    moe_act"), or None."""
    from plan_search.planner.costmodel.plan import OFFLOAD_MODULE_SETS, canonical_offload

    m = re.search(r"activation offloading of ([a-z_0-9, ]+?)(?: required|;|$)", notes or "", re.I)
    if not m:
        return None
    mods = canonical_offload("+".join(w for w in re.split(r",|\band\b", m.group(1)) if w.strip()))
    return mods if mods in OFFLOAD_MODULE_SETS else None


def known_good_moe_check() -> list[str]:
    """The MoE rows of planner/runs_2026_12.csv that ran but print no step time (TFLOP/s only: not rows of
    bench/moe_fidelity.py's step-time benchmark), each a known-good configuration: completed by
    bench/moe_fidelity.py's candidate builder (its ``_row_candidates``), their printed recompute modules
    as ``Plan.recompute_modules`` (Megatron's ``--recompute-modules``: "layernorm, moe", "moe_act,
    layernorm"), priced at capacity (least-memory candidate). Returns those predicted above capacity;
    rows whose notes name a setting the planner does not price (fine-grained activation offloading of
    single modules) are listed with it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import csv
    from importlib import resources

    import moe_fidelity as mf

    text = resources.files("plan_search.planner").joinpath("runs_2026_12.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    print("\nMoE runs that ran with no step time (TFLOP/s only; known-good configurations), needed at capacity:")
    over = []
    for i, row in enumerate(rows):
        if not mf._num(row.get("num_experts")) or re.search(r"Nemotron-3|HYBRID", f"{row['model']} {row.get('notes', '')}"):
            continue
        if mf._num(row.get("measured_step_time_s")) or mf._num(row.get("measured_tokens_per_s_per_gpu")):
            continue
        key = next((k for pat, k in mf.MODELS if re.search(pat, row["model"])), None)
        if key is None:
            continue
        model, gpu, n = get_model(key), mf._gpu_for(row), mf._int(row["num_gpus"])
        cands, assumed = mf._row_candidates(row, model, mf.source_group(row["source"]), gpu, n, key)
        mods = printed_modules(row.get("recompute", ""))
        if mods:
            cands = [Plan(**dict(p.model_dump(exclude={"dp"}), recompute_modules=mods)) for p in cands]
        off = printed_offload(row.get("notes", ""))
        if off:
            cands = [Plan(**dict(p.model_dump(exclude={"dp"}), offload_modules=off)) for p in cands]
        if not cands:
            print(f"  {1000 + i} {key} {gpu} x{n}: no valid plan for the printed degrees")
            continue
        c = get_cluster(gpu)
        mem, _, fits = memory_fit(model, c, PlanArrays.from_plans(cands, model.num_layers))
        j = int(np.argmin(mem["total"]))
        need = float(mem["total"][j]) / memory.GIB
        unpriced = "fine-grained activation offloading" if re.search(r"activation offloading", row.get("notes", ""),
                                                                       re.I) and not off else ""
        flag = "" if fits.any() else " ABOVE CAPACITY"
        if flag:
            over.append(f"{1000 + i}{' (' + unpriced + ' not priced)' if unpriced else ''}")
        print(f"  {1000 + i} {key:16s} {gpu:12s} x{n:<4d} seq {mf._int(row['seq_len']):6d} {cands[j].label[:36]:36s} "
              f"modules {mods or cands[j].recompute}{', offload ' + off if off else ''}: {need:6.1f} of "
              f"{c.gpu.memory_gib:g} GiB{flag}"
              f"{'; open: ' + ','.join(assumed) if assumed else ''}{'; notes: ' + unpriced + ', not priced' if unpriced else ''}")
    return over


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true", help="refit the fragmentation on the rows, and leave-one-table-out")
    args = ap.parse_args()
    rows = load_rows()
    if not rows:
        print("memory: no row of the runs files has a measured memory figure; memory is not validated here")
        return 0
    default = rows[0][2].efficiency.fragmentation
    errs = table(rows, f"memory where measured ({len(rows)} rows; built-in fragmentation {default:g})")
    med = float(np.median(np.abs(errs)))
    over = [rec.index for rec, p, c in rows if not predict(rec, p, c)["fits"]]
    print(f"median |error| {100 * med:.1f}%, mean signed {100 * float(np.mean(errs)):+.1f}%, "
          f"max under-prediction {100 * min(0.0, min(errs)):.1f}%, max over-prediction {100 * max(0.0, max(errs)):+.1f}%")
    room = [1.0 - predict(rec, p, c)["needed_gib"] / c.gpu.memory_gib for rec, p, c in rows]
    print(f"room the measured runs are predicted to leave (1 - needed/capacity): min {100 * min(room):.1f}%; "
          f"default headroom {100 * memory.DEFAULT_MEMORY_HEADROOM:.0f}%")
    refused = [rec.index for (rec, p, c), r in zip(rows, room) if r < memory.DEFAULT_MEMORY_HEADROOM]
    oom_ok = oom_check()
    bracket_check()
    all_over, all_refused = ran_over_capacity()
    print(f"\nevery dense run of the runs files (no measured peak needed) needing more than capacity: "
          f"{'; '.join(all_over) if all_over else 'none'}")
    print(f"refused at the default headroom ({100 * memory.DEFAULT_MEMORY_HEADROOM:.0f}%): "
          f"{'; '.join(all_refused) if all_refused else 'none'}")
    moe_over, moe_unsettled = moe_rows_check()
    good_over = known_good_moe_check()
    print(f"MoE known-good configurations predicted above capacity: {len(good_over)}"
          f"{': ' + '; '.join(good_over) if good_over else ''}")
    print(f"floors: median <= 8%: {'MET' if med <= 0.08 else 'NOT MET'}; no run that ran above capacity: "
          f"{'MET' if not over else 'NOT MET ' + str(over)} on the measured rows, "
          f"{'MET' if not all_over else f'NOT MET ({len(all_over)} row)'} over every dense run, "
          f"{'MET' if not moe_over else f'NOT MET ({len(moe_over)} rows, {len(moe_unsettled)} of them with a configuration not settled)'} over every MoE run, "
          f"{'MET' if not good_over else f'NOT MET ({len(good_over)} row)'} over the MoE known-good configurations; "
          f"every published OOM predicted not to fit: "
          f"{'MET' if oom_ok else 'NOT MET'}; refused at the default headroom: {refused or 'none'} of the measured rows, "
          f"{len(all_refused)} of every dense run (memory.DEFAULT_MEMORY_HEADROOM says why)")
    if args.fit:
        f, k = fit_terms(rows)
        print(f"\nfitted on all {len(rows)} rows (rows {', '.join(str(r.index) for r, _, _ in rows)}): "
              f"fragmentation {f:.3f}, SP gather buffers {k:.2f}")
        table(rows, "with the fitted terms", terms=(f, k))
        print("\nleave-one-table-out (both terms fitted on the other tables, the held-out table predicted):")
        loo_errs = []
        for t in sorted({table_of(r) for r, _, _ in rows}):
            train = [row for row in rows if table_of(row[0]) != t]
            test = [row for row in rows if table_of(row[0]) == t]
            ft, kt = fit_terms(train)
            e = [g / r.measured_memory_gb - 1.0 for g, (r, _, _) in zip(_predict_with(test, ft, kt), test)]
            loo_errs += e
            print(f"  {t:34s} n={len(test)} fitted {ft:.3f}, {kt:.2f}: " + " ".join(f"{100 * v:+.1f}%" for v in e))
        print(f"leave-one-table-out median |error| {100 * float(np.median(np.abs(loo_errs))):.1f}%, "
              f"worst {100 * float(np.max(np.abs(loo_errs))):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
