"""Goodput (issue 25): failures, restarts and checkpoints priced into a run's wall time, and the
checkpoint interval that balances them. Pure functions of numbers and numpy arrays; the one copy
that plan-estimate, the search, sweeps and allocation evaluate (through
:func:`planner.costmodel.evaluate.run_figures`).

The model (exponential failures at a constant rate, Daly 2006, "A higher order estimate of the
optimum checkpoint interval for restart dumps", FGCS 22(3):303-312, eq. for the expected wall time
of one segment): a run is cut into segments of ``tau`` seconds of training followed by a save that
blocks the GPUs ``C`` seconds. Failures arrive at rate ``1/M`` over the whole job (``M``: the job's
mean time between failures, ``86.4e6 / (rate_per_1000_gpu_days x GPUs)`` seconds). A failure loses
the work since the last checkpoint and costs ``R`` seconds of recovery (detect and restart, then read
the checkpoint back), during which failures can strike again. The expected wall time of a segment is

    E(tau) = M e^(R/M) (e^((tau + C)/M) - 1)

and goodput is ``tau / E(tau)``: the share of wall-clock time that trains. Its parts (Google's ML
Productivity Goodput categories; they and goodput sum to 1), per segment:

- checkpoint save: ``C``;
- lost progress: ``M (e^a - 1) - (tau + C)`` with ``a = (tau + C)/M`` (the expected time of the failed
  attempts: work and saves done since the last checkpoint, then thrown away);
- restart / start-up and restore: ``M (e^a - 1)(e^(R/M) - 1)``, the expected recovery time (e^a - 1
  recoveries, each ``M (e^(R/M) - 1)`` with failures during it), split in proportion to the restart
  time and the restore read time.

The interval that maximises goodput solves ``(1 - x) e^(x + c) = 1`` (``x = tau/M``, ``c = C/M``),
found by Newton's method from Daly's higher-order estimate of Young's ``sqrt(2 C M)`` (Young 1974,
CACM 17(9):530), which is only a first-order approximation: at ``M`` of minutes it is far off, and the first-order goodput
``1 - sqrt(2C/M) - R/M`` goes negative where the exact one is still positive.

Checkpoint cost:

- size: bf16 weights plus fp32 master weights, momentum and variance, 14 B per parameter
  (:data:`CHECKPOINT_BYTES_PER_PARAM`), written once across the job: a fully parallel save
  (Megatron-Core dist_checkpointing's fully parallel save, PyTorch DCP's de-duplicated plan) gives each
  GPU ``size / GPUs`` to write;
- synchronous save: the GPUs wait for the whole write, ``size / storage_write_gbps`` (aggregate);
- asynchronous save (Megatron ``--async-save``, torchtitan ``checkpoint.async_mode``, NeMo
  ``ckpt_async_save``): only the device-to-host staging blocks; the write goes on in the background and
  must end before the next save starts (``tau + C >= write``). Staging blocks for
  :data:`ASYNC_STAGING_FIXED_S` plus each GPU's share over its host link
  (:func:`planner.costmodel.offload.host_link_gbps` at ``HOST_LINK_EFF``). Anchor: PyTorch's blog
  "6x faster Async Checkpointing in PyTorch" (Meta and Crusoe, 2025-04-30): Llama3-70B on 1,856 H200
  under torchtitan, training "blocked for less than a second (.78 seconds at 1856 scale)"; the fixed
  term is that figure less the copy of 14 B x 70.55e9 / 1,856 over 0.8 x 64 GB/s (0.010 s). Earlier,
  IBM and PyTorch ("Reducing Model Checkpointing Times by Over 10x ...", 2024) measured a 7B model's
  downtime 148.8 s synchronous and 6.3 s asynchronous (thread-based staging before plan caching).
  Megatron's asynchronous save has no published blocking time we found; the same staging is priced.
  Not priced: a failure during a background write loses that checkpoint too (the previous one is
  restored); at Llama 3's figures the write is ~1% of ``M``.
- restore: ``size / storage_read_gbps`` (aggregate), added to the restart time in ``R``.

Failure rates (failures per 1,000 GPU-days, :data:`FAILURE_RATE_PRESETS`): Llama 3 (Dubey et al.
2024, "The Llama 3 Herd of Models", Sec. 3.3.4 and Table 5): 419 unexpected interruptions in 54 days
on 16,384 H100: 419 / (54 x 16,384) x 1,000 = 0.47. Meta's research clusters (Kokolis et al., HPCA
2025, arXiv 2410.21680): RSC-1 6.50 and RSC-2 2.34 failures per 1,000 node-days, A100 nodes of 8 GPUs,
so 0.81 and 0.29 per 1,000 GPU-days (a node's failure counted against its 8 GPUs). Per GPU type
(:func:`preset_for`): Hopper takes Llama 3's; Ampere RSC-1's (the larger cluster, with the larger
jobs); other types have no published rate and take Llama 3's H100 figure (said in the answer's
source). A cluster file's ``failures_per_1000_gpu_days`` or the ``failure_rate`` option replaces it;
0 turns failures off (then goodput is ``tau / (tau + C)``, the interval as given, 1 hour by default,
what the planner priced before issue 25).

Restart time (:data:`RESTART_S_DEFAULT`, 10 minutes): detection, rescheduling, process start and
collective set-up, before the checkpoint is read. No published figure for the Llama 3 run; 10 minutes
is the restart the issue's Llama 3 floor assumes and Daly 2006's worked examples use (Figs. 3-5:
R = 10 min). An assumption: ``plan-calibrate --interruptions`` fits it from a cluster's own log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SECONDS_PER_DAY = 86_400.0
#: bf16 weights + fp32 master weights, momentum and variance (Adam, mixed precision).
CHECKPOINT_BYTES_PER_PARAM = 14.0

#: failures per 1,000 GPU-days: name -> (rate, source).
FAILURE_RATE_PRESETS: dict[str, tuple[float, str]] = {
    "llama3-h100": (419.0 / (54.0 * 16_384.0) * 1000.0,
                    "Llama 3 (Dubey et al. 2024, Table 5): 419 unexpected interruptions in 54 days on 16,384 H100"),
    "rsc1-a100": (6.50 / 8.0, "Meta RSC-1 (Kokolis et al., HPCA 2025, arXiv 2410.21680): 6.50 failures per 1,000 "
                              "node-days, 8 A100 per node"),
    "rsc2-a100": (2.34 / 8.0, "Meta RSC-2 (Kokolis et al., HPCA 2025, arXiv 2410.21680): 2.34 failures per 1,000 "
                              "node-days, 8 A100 per node"),
}
_ARCH_PRESET = {"hopper": "llama3-h100", "ampere": "rsc1-a100"}

#: seconds to detect a failure and restart the job, before reading the checkpoint (see module doc).
RESTART_S_DEFAULT = 600.0
#: fixed part of an asynchronous save's blocking staging, s (the PyTorch 2025 anchor, module doc).
ASYNC_ANCHOR_BLOCKING_S = 0.78
ASYNC_ANCHOR_BYTES_PER_GPU = CHECKPOINT_BYTES_PER_PARAM * 70.55e9 / 1856.0
ASYNC_ANCHOR_LINK_GBPS = 64.0 * 0.8  # H200 host: PCIe 5.0 x16 at offload.HOST_LINK_EFF
ASYNC_STAGING_FIXED_S = ASYNC_ANCHOR_BLOCKING_S - ASYNC_ANCHOR_BYTES_PER_GPU / (ASYNC_ANCHOR_LINK_GBPS * 1e9)
#: the interval when failures are off and none is given (what the planner priced before issue 25).
NO_FAILURE_INTERVAL_S = 3600.0

BADPUT_KEYS = ("checkpoint_save", "lost_progress", "restart", "restore")


@dataclass(frozen=True)
class Recovery:
    """The run's recovery settings; ``None`` takes the cluster's value, else the default.

    ``failures_per_1000_gpu_days``: 0 turns failures off. ``restart_s``: detect + restart, before the
    restore read. ``async_checkpoint``: only the device-to-host copy blocks. ``checkpoint_interval_h``:
    the interval priced; None: the one that maximises goodput (1 hour without failures)."""

    failures_per_1000_gpu_days: float | None = None
    restart_s: float | None = None
    async_checkpoint: bool = True
    checkpoint_interval_h: float | None = None


def of_request(request) -> Recovery:
    """The :class:`Recovery` of a search request (its failure_rate, restart_minutes, async_checkpoint and
    checkpoint_interval_h; validated by the request)."""
    rate = getattr(request, "failure_rate", None)
    restart = getattr(request, "restart_minutes", None)
    return Recovery(failures_per_1000_gpu_days=None if rate is None else float(rate),
                    restart_s=None if restart is None else float(restart) * 60.0,
                    async_checkpoint=bool(getattr(request, "async_checkpoint", True)),
                    checkpoint_interval_h=getattr(request, "checkpoint_interval_h", None))


def preset_for(gpu_architecture: str | None) -> tuple[float, str]:
    """(failures per 1,000 GPU-days, source) of a GPU architecture's preset."""
    name = _ARCH_PRESET.get(gpu_architecture or "")
    if name:
        rate, src = FAILURE_RATE_PRESETS[name]
        return rate, f"{name}: {src}"
    rate, src = FAILURE_RATE_PRESETS["llama3-h100"]
    return rate, f"no published rate for {gpu_architecture or 'this GPU type'}; llama3-h100: {src}"


def failure_rate_of(cluster, recovery: Recovery | None = None) -> tuple[float, str]:
    """(failures per 1,000 GPU-days, where it comes from): the option, else the cluster file's, else
    the GPU type's preset."""
    if recovery is not None and recovery.failures_per_1000_gpu_days is not None:
        return float(recovery.failures_per_1000_gpu_days), "given"
    own = getattr(cluster, "failures_per_1000_gpu_days", None)
    if own is not None:
        return float(own), f"cluster {cluster.name}"
    return preset_for(cluster.gpu.architecture)


def restart_s_of(cluster, recovery: Recovery | None = None) -> float:
    if recovery is not None and recovery.restart_s is not None:
        return float(recovery.restart_s)
    own = getattr(cluster, "restart_minutes", None)
    return float(own) * 60.0 if own is not None else RESTART_S_DEFAULT


def mtbf_s(failures_per_1000_gpu_days: float, num_gpus):
    """The job's mean time between failures, s (inf without failures)."""
    n = np.asarray(num_gpus, dtype=float)
    if failures_per_1000_gpu_days <= 0:
        return np.full(n.shape, np.inf)
    return 1000.0 * SECONDS_PER_DAY / (failures_per_1000_gpu_days * n)


def checkpoint_bytes(total_params: float) -> float:
    return total_params * CHECKPOINT_BYTES_PER_PARAM


def sync_save_s(ckpt_bytes: float, storage_write_gbps: float) -> float:
    """A synchronous save blocks for the whole write (aggregate storage bandwidth)."""
    return ckpt_bytes / (storage_write_gbps * 1e9)


def async_blocking_s(ckpt_bytes: float, num_gpus, host_link_gbps: float):
    """An asynchronous save blocks for the staging copy of each GPU's share (fully parallel save)."""
    return ASYNC_STAGING_FIXED_S + ckpt_bytes / np.asarray(num_gpus, dtype=float) / (host_link_gbps * 1e9)


def restore_s(ckpt_bytes: float, storage_read_gbps: float) -> float:
    return ckpt_bytes / (storage_read_gbps * 1e9)


def young_interval_s(save_s, mtbf):
    """Young's first-order interval sqrt(2 C M) (the optimiser's start)."""
    return np.sqrt(2.0 * np.asarray(save_s, dtype=float) * mtbf)


def optimal_interval_s(save_s, mtbf, iterations: int = 5):
    """The training seconds between saves that maximise goodput under the exact model: the root of
    ``(1 - x) e^(x + c) = 1`` (x = tau/M, c = C/M), by Newton's method from Daly's estimate (Young's
    interval with its next terms; clipped below 1: the root is in (0, 1)). After the first step it converges from above (the function is
    concave and decreasing on (0, 1)), quadratically."""
    c_arr, m_arr = np.broadcast_arrays(np.asarray(save_s, dtype=float), np.asarray(mtbf, dtype=float))
    finite = np.isfinite(m_arr)
    if not finite.all():
        out = np.full(c_arr.shape, np.inf)
        if finite.any():
            out[finite] = optimal_interval_s(c_arr[finite], m_arr[finite], iterations)
        return out
    c = c_arr / m_arr
    # start: Daly's higher-order estimate sqrt(2c)(1 + sqrt(c/2)/3 + c/18) - c (Daly 2006, eq. 37; Young's
    # sqrt(2c) with its first corrections), within ~1e-4 of the root at c <= 1e-3: two or three steps
    r = np.sqrt(2.0 * c)
    x = np.clip(np.where(c < 2.0, r * (1.0 + np.sqrt(0.5 * c) / 3.0 + c / 18.0) - c, 0.999), 1e-300, 0.999)
    # a fixed number of steps, no test across rows: each row's root is its own (the search's rows and
    # plan-estimate's one row give the same figure); 4 reach 1e-13 for c in [1e-12, 50]
    for _ in range(iterations):
        e = np.exp(x + c)
        step = (np.expm1(x + c) - x * e) / (x * e)  # -f / f', f = (1-x)e^(x+c) - 1, f' = -x e^(x+c)
        x = np.clip(x + step, 1e-300, 1.0 - 1e-16)
    return x * m_arr


def segment_wall_s(tau, save_s, restart_total_s, mtbf):
    """Expected wall time of one segment of ``tau`` training seconds: M e^(R/M) (e^((tau+C)/M) - 1)."""
    return mtbf * np.exp(restart_total_s / mtbf) * np.expm1((tau + save_s) / mtbf)


def goodput_of(tau, save_s, restart_total_s, mtbf):
    """tau / E(tau); without failures (M inf) tau / (tau + C)."""
    tau, save_s, mtbf = np.broadcast_arrays(np.asarray(tau, float), np.asarray(save_s, float), np.asarray(mtbf, float))
    with np.errstate(invalid="ignore", over="ignore"):
        g = tau / segment_wall_s(tau, save_s, restart_total_s, mtbf)
    return np.where(np.isfinite(mtbf), g, tau / (tau + save_s))


def badput_split(tau, save_s, restart_s, restore_read_s, mtbf) -> dict:
    """Shares of wall time per category (:data:`BADPUT_KEYS`); with goodput they sum to 1."""
    tau, save_s, mtbf = np.broadcast_arrays(np.asarray(tau, float), np.asarray(save_s, float), np.asarray(mtbf, float))
    r = restart_s + restore_read_s
    fin = np.isfinite(mtbf)
    m = np.where(fin, mtbf, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        attempts = m * np.expm1((tau + save_s) / m)
        recovery = attempts * np.expm1(r / m)
        wall = attempts + recovery
    wall = np.where(fin, wall, tau + save_s)
    lost = np.where(fin, attempts - tau - save_s, 0.0)
    recovery = np.where(fin, recovery, 0.0)
    share_restart = restart_s / r if r > 0 else 0.0
    return {
        "checkpoint_save": save_s / wall,
        "lost_progress": np.maximum(lost, 0.0) / wall,
        "restart": recovery * share_restart / wall,
        "restore": recovery * (1.0 - share_restart) / wall,
    }


def run_goodput(*, num_gpus, step_s, ckpt_bytes: float, storage_write_gbps: float, storage_read_gbps: float,
                host_link_gbps: float, failures_per_1000_gpu_days: float, restart_s: float,
                async_checkpoint: bool, checkpoint_interval_h: float | None = None, lean: bool = False) -> dict:
    """Goodput of every plan (arrays over ``num_gpus`` and ``step_s``, the time of one step with its
    data reading). The interval is the given one, else the optimum in whole steps (the better of the
    two step counts around it; with an asynchronous save at least the background write, so that
    ``tau + C`` covers it). ``lean``: goodput alone (the search's columns)."""
    n = np.asarray(num_gpus, dtype=float)
    step_s = np.asarray(step_s, dtype=float)
    write_s = sync_save_s(ckpt_bytes, storage_write_gbps)
    read_s = restore_s(ckpt_bytes, storage_read_gbps)
    mtbf = mtbf_s(failures_per_1000_gpu_days, n)
    save = async_blocking_s(ckpt_bytes, n, host_link_gbps) if async_checkpoint else np.full(n.shape, write_s)
    r_total = restart_s + read_s
    if checkpoint_interval_h is None and failures_per_1000_gpu_days <= 0:  # no optimum without failures
        checkpoint_interval_h = NO_FAILURE_INTERVAL_S / 3600.0
    if checkpoint_interval_h is not None:
        # a save happens at a step's end: an interval shorter than a step is one step (what the launch
        # settings, every steps_iv steps, run)
        tau = np.maximum(np.full(n.shape, checkpoint_interval_h * 3600.0), step_s)
        steps_iv = np.maximum(1.0, np.round(tau / step_s))
        g = goodput_of(tau, save, r_total, mtbf)
    else:
        target = optimal_interval_s(save, mtbf)
        lo = np.maximum(1.0, np.floor(target / step_s))
        if async_checkpoint:  # whole steps that cover the background write (tau + C >= write)
            lo = np.maximum(lo, np.ceil(np.maximum(write_s - save, 0.0) / step_s))
        g_lo = goodput_of(lo * step_s, save, r_total, mtbf)
        g_hi = goodput_of((lo + 1.0) * step_s, save, r_total, mtbf)
        up = g_hi > g_lo
        steps_iv = np.where(up, lo + 1.0, lo)
        tau = steps_iv * step_s
        g = np.where(up, g_hi, g_lo)
    out = {"goodput": g}
    if lean:
        return out
    out.update({
        "checkpoint_interval_s": tau,
        "checkpoint_interval_steps": steps_iv,
        "checkpoint_save_blocking_s": save,
        "checkpoint_write_s": np.full(n.shape, write_s),
        "restore_s": np.full(n.shape, read_s),
        "restart_s": np.full(n.shape, float(restart_s)),
        "mtbf_s": mtbf,
        "badput": badput_split(tau, save, restart_s, read_s, mtbf),
    })
    return out


def first_order_goodput(save_s, restart_total_s, mtbf):
    """Young's first-order goodput 1 - sqrt(2C/M) - R/M (for comparison: negative at large scale)."""
    return 1.0 - np.sqrt(2.0 * np.asarray(save_s, float) / mtbf) - restart_total_s / np.asarray(mtbf, float)


def fit_interruptions(rows: list[dict]) -> dict:
    """Failure rate and restart time of a cluster from its run log (see :mod:`planner.calibration`):
    ``rows`` of ``{"timestamp": datetime, "event": "start"|"interruption"|"end", "gpus": int,
    "lost_minutes": float}``. The rate is the maximum-likelihood one of a Poisson process: the
    interruptions over the GPU-days observed (each start..end window at its GPU count); the restart
    time the mean of the interruptions' lost minutes (the exponential's maximum-likelihood mean)."""
    windows, open_at, gpus, lost, n_int = [], None, None, [], 0
    for i, r in enumerate(rows):
        ev = r["event"]
        if ev == "start":
            if open_at is not None:
                raise ValueError(f"row {i + 1}: a start while the window opened at {open_at.isoformat()} is open")
            open_at, gpus = r["timestamp"], r["gpus"]
        elif ev == "end":
            if open_at is None:
                raise ValueError(f"row {i + 1}: an end without a start")
            days = (r["timestamp"] - open_at).total_seconds() / SECONDS_PER_DAY
            if days <= 0:
                raise ValueError(f"row {i + 1}: end {r['timestamp'].isoformat()} is not after its start")
            windows.append(days * gpus)
            open_at = None
        else:
            if open_at is None:
                raise ValueError(f"row {i + 1}: an interruption outside a start..end window")
            n_int += 1
            if r.get("lost_minutes") is not None:
                lost.append(float(r["lost_minutes"]))
    if open_at is not None:
        raise ValueError(f"the window opened at {open_at.isoformat()} has no end row")
    gpu_days = sum(windows)
    if gpu_days <= 0:
        raise ValueError("no start..end window: the log needs at least one start and one end row")
    rate = n_int / gpu_days * 1000.0
    out = {"failures_per_1000_gpu_days": rate, "interruptions": n_int, "gpu_days": gpu_days,
           "restart_minutes": (sum(lost) / len(lost)) if lost else None}
    if n_int:  # the Poisson rate's 90% interval (normal approximation on the count, floored at 0)
        half = 1.645 * math.sqrt(n_int)
        out["rate_low"], out["rate_high"] = max(0.0, n_int - half) / gpu_days * 1000.0, (n_int + half) / gpu_days * 1000.0
    return out


#: whether each framework can save asynchronously (False: the save blocks for the whole write).
#: Megatron-LM ``--async-save`` (with ``--ckpt-format torch_dist``); torchtitan ``checkpoint.async_mode``
#: ("async", DCP's async_save); NeMo 2.0 ``MegatronStrategy(ckpt_async_save=True)``; DeepSpeed's
#: decoupled checkpoint engine (deepspeed/runtime/checkpoint_engine/decoupled_checkpoint_engine.py: the
#: save runs in a separate process while training goes on).
ASYNC_SAVE = {"megatron": True, "torchtitan": True, "nemo": True, "deepspeed": True}


def framework_settings(interval_steps: int, async_checkpoint: bool) -> dict[str, str]:
    """The checkpoint interval (and asynchronous saving) in each framework's own terms."""
    n = int(interval_steps)
    a = async_checkpoint
    return {
        "megatron": f"--save-interval {n}" + (" --async-save --ckpt-format torch_dist" if a else ""),
        "torchtitan": f"[checkpoint] enable = true, interval = {n}"
                      + (', async_mode = "async"' if a else ""),
        "nemo": f"log.ckpt.every_n_train_steps={n}" + (" trainer.strategy.ckpt_async_save=true" if a else ""),
        "deepspeed": f"engine.save_checkpoint(...) every {n} steps"
                     + (" with the decoupled checkpoint engine (asynchronous)" if a else ""),
    }
