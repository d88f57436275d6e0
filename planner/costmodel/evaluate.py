"""Every figure of a plan, vectorised: the one function the estimate, the search and the oracle share.

:func:`evaluate` takes a model, a cluster and a :class:`PlanArrays` of candidates and returns
arrays: step time with its breakdown, memory with its breakdown, feasibility, throughput, MFU,
and (for a token budget) days, GPU-hours, dollars and energy.

Conventions:

- *Model FLOPs* (MFU): ``training_flops_per_iteration(recompute="none", causal=True)``: attention
  counted over the causal half of the ``s x s`` square (:data:`MFU_CONVENTION`: what Megatron-Bridge's
  performance tables and Megatron-LM's logs report); ``mfu_full_attention`` is the same step counted
  over the full square (torchtitan's logs, PaLM, Narayanan et al. 2021). *Hardware FLOPs* (HFU) add
  what recomputation redoes (causal, as the kernels execute it). MFU and HFU are against the dense
  bf16 peak, whatever the GEMM precision (so FP8 runs can exceed 50%), and say so in the output.
- Run time for ``tokens``: ``ceil(tokens / (global_batch * seq)) * max(step, data-read time)``
  divided by the run's goodput (:mod:`planner.costmodel.goodput`: checkpoint saves, work lost to
  failures, restarts and restores, at the checkpoint interval that maximises goodput unless
  ``checkpoint_interval_h`` is given). Checkpoint = bf16 weights + fp32 master, momentum, variance
  (14 B/param). Data: token ids at 4 B (2 B when the vocabulary fits in 16 bits).
- Energy: GPUs x TDP x hours x PUE (the board at its rated power: an upper bound).
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models import counting
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel import comm
from plan_search.planner.costmodel import dispatch
from plan_search.planner.costmodel import goodput as goodput_model
from plan_search.planner.costmodel import offload
from plan_search.planner.costmodel import memory
from plan_search.planner.costmodel import step
from plan_search.planner.costmodel.arrays import LAYOUT_FREE, PlanArrays, group_rows

GIB = memory.GIB
CHECKPOINT_BYTES_PER_PARAM = goodput_model.CHECKPOINT_BYTES_PER_PARAM

#: The attention convention of MFU (issue 23): causal, the frameworks' own reports' count. Megatron-Bridge's
#: performance tables print its num_floating_point_operations (src/megatron/bridge/training/utils/flop_utils.py,
#: "Only half of the attention matrix is non-zero" since r0.1.0 @684a6861, core_attn_seq_factor / 2 at
#: @067f987d) and Megatron-LM's logs the same count (megatron/training/training.py @d98e8a64, "causal mask
#: (only half of the mask is non-zero)"). torchtitan's logs count the full square ("we follow the convention
#: and do not account for sparsity in causal attention": torchtitan/models/utils.py
#: get_dense_model_nparams_and_flops @b5bcd76c), as PaLM and Narayanan et al. 2021 do: ``mfu_full_attention``.
MFU_CONVENTION = ("causal attention (Megatron-Bridge's performance tables and Megatron-LM's logs count it so: "
                  "flop_utils.py@067f987d, training.py@d98e8a64); full-attention count (torchtitan's logs, "
                  "models/utils.py@b5bcd76c) in mfu_full_attention")


def _flops_per_token_terms(model: ModelSpec, x: PlanArrays, causal: bool = True):
    """Weight-GEMM, attention (the causal count unless ``causal`` is False, local layers at their window:
    :func:`counting.attention_flops_per_token`) and logits forward FLOPs per token, each with its
    share of the multi-token-prediction depths (DeepSeek-V3; Megatron-LM's
    ``num_floating_point_operations`` counts them too: training.py @ d98e8a64)."""
    mtp_block, mtp_attn, mtp_head = counting.mtp_flops_terms_per_token(model, x.seq, causal=causal)
    gemm = counting.layer_gemm_flops_per_token(model) + mtp_block
    attn = counting.attention_flops_per_token(model, x.seq, causal=causal) + mtp_attn
    return gemm, attn, counting.logits_flops_per_token(model) + mtp_head


def model_flops_per_iteration(model: ModelSpec, x: PlanArrays, causal: bool = True):
    """Model FLOPs of one step: forward + backward, no recomputation (MFU's numerator; ``causal``:
    :data:`MFU_CONVENTION`, False for the full-attention count)."""
    gemm, attn, logits = _flops_per_token_terms(model, x, causal)
    return x.gb.astype(float) * x.seq * 3.0 * (gemm + attn + logits)


def hardware_flops_per_iteration(model: ModelSpec, x: PlanArrays):
    """FLOPs the GPUs execute in one step, recomputation included (Narayanan et al.'s count, attention causal
    as the kernels execute it)."""
    gemm, attn, _ = _flops_per_token_terms(model, x)
    layers_stage = np.maximum(np.maximum(x.first, x.last), 1)
    rc_frac = np.minimum(x.rc_layers, layers_stage) / layers_stage
    extra = np.where(x.recompute == 2, rc_frac * (gemm + attn), np.where(x.recompute == 1, attn, 0.0))
    return model_flops_per_iteration(model, x) + x.gb.astype(float) * x.seq * extra


def memory_fit(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, memory_headroom: float = 0.0,
               memory_breakdown: dict | None = None, total_only: bool = False, _terms: dict | None = None):
    """(memory breakdown, usable bytes, fits): the one feasibility rule, which the search also
    applies on its own before timing (memory first: a plan that does not fit is not timed).
    ``memory_breakdown``: :func:`memory.peak_memory` of ``x`` when the caller already has it;
    ``total_only``: the breakdown's ``total`` alone (and ``worst_stage``; the search's memory-first pass);
    ``_terms``: :meth:`LayoutTerms.memory` of ``x``."""
    mem = memory_breakdown if memory_breakdown is not None else memory.peak_memory(
        model, cluster, x, total_only, _terms)
    usable = cluster.gpu.memory_gib * GIB * (1.0 - memory_headroom)
    return mem, usable, mem["total"] <= usable


def evaluate(
    model: ModelSpec,
    cluster: ClusterSpec,
    x: PlanArrays,
    memory_headroom: float = 0.0,
    tokens: float | None = None,
    checkpoint_interval_h: float | None = None,
    recovery: goodput_model.Recovery | None = None,
) -> dict:
    """All figures for every candidate in ``x`` (numpy arrays): what plan-estimate prints (the
    search prices memory first and times with :func:`search_figures`)."""
    st = step.step_time(model, cluster, x)
    mem, usable, fits = memory_fit(model, cluster, x, memory_headroom)
    out = {
        "step_s": st["step_s"],
        "breakdown": st["breakdown"],
        "raw": st["raw"],
        "bubble_fraction": st["bubble_fraction"],
        "memory": mem,
        "memory_peak_gib": mem["total"] / GIB,  # the figure feasibility is judged on: needed at capacity
        "memory_allocated_gib": mem["allocated"] / GIB,
        "memory_reserved_gib": mem["reserved"] / GIB,
        "memory_usable_gib": np.full(len(x), usable / GIB),
        "fits": fits,
    }
    out.update(run_figures(model, cluster, x, st, tokens, checkpoint_interval_h, recovery=recovery))
    out["bottleneck"] = bottleneck(cluster, x, st["breakdown"], fits, out["data_read_s"] > out["step_s"])
    return out


def run_figures(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, st: dict, tokens: float | None,
                checkpoint_interval_h: float | None = None, lean: bool = False,
                recovery: goodput_model.Recovery | None = None) -> dict:
    """The figures of :func:`evaluate` that follow from the step time ``st`` (:func:`step.step_time`
    of ``x``): throughput, MFU/HFU, comm ratio, power, data reading, checkpoints and goodput and, for
    a token budget, days, GPU-hours, dollars and energy (goodput-adjusted: the wall time of the run
    with its failures, restarts and checkpoint saves). ``lean``: only what the search keeps for every
    candidate (comm ratio, power, MFU, goodput and the run figures; no HFU, per-GPU rates or
    checkpoint columns) -- the same operations on the same values, so the figures are identical.
    ``checkpoint_interval_h`` (or ``recovery.checkpoint_interval_h``): the interval priced; None: the
    one that maximises goodput. ``recovery``: failure rate, restart time, asynchronous saving
    (:class:`goodput.Recovery`; None: the cluster's, else the defaults)."""
    step_s = st["step_s"]
    n = x.num_gpus.astype(float)
    tokens_per_step = x.gb.astype(float) * x.seq
    peak_bf16 = cluster.gpu.peak("bf16") * 1e12
    model_tflops = model_flops_per_iteration(model, x) / step_s / n / 1e12
    out = {"step_s": step_s}
    if not lean:
        tok_s = tokens_per_step / step_s
        hw_tflops = hardware_flops_per_iteration(model, x) / step_s / n / 1e12
        out.update({
            "tokens_per_s": tok_s,
            "tokens_per_s_per_gpu": tok_s / n,
            "model_tflops_per_gpu": model_tflops,
            "hardware_tflops_per_gpu": hw_tflops,
            "hfu": hw_tflops * 1e12 / peak_bf16,
            "mfu_full_attention": model_flops_per_iteration(model, x, causal=False) / step_s / n / peak_bf16,
        })
    out["mfu"] = model_tflops * 1e12 / peak_bf16
    exposed_comm = sum(st["breakdown"][k] for k in ("tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s", "ep_comm_s"))
    out["comm_ratio"] = exposed_comm / step_s
    out["power_kw"] = power_kw(cluster, x)
    # Data loading.
    bytes_per_token = 2.0 if model.vocab_size <= 65536 else 4.0
    read_s = tokens_per_step * bytes_per_token / (cluster.storage_read_gbps * 1e9)
    out["data_read_s"] = read_s
    # Checkpoints, failures and recovery: the share of the wall time that trains.
    step_eff_s = np.maximum(step_s, read_s)
    gp = goodput_terms(model, cluster, x.num_gpus, step_eff_s, checkpoint_interval_h, recovery, lean)
    out["goodput"] = gp["goodput"]
    if not lean:
        out["data_loading_ok"] = read_s <= step_s
        out["checkpoint_write_s"] = gp["checkpoint_write_s"]
        out["checkpoint_overhead_fraction"] = gp["badput"]["checkpoint_save"]
        for k in ("checkpoint_interval_s", "checkpoint_interval_steps", "checkpoint_save_blocking_s", "restore_s",
                  "restart_s", "mtbf_s", "badput"):
            out[k] = gp[k]
        out["failure_rate_per_1000_gpu_days"], out["failure_rate_source"] = gp["rate"], gp["rate_source"]
        out["async_checkpoint"] = gp["async_checkpoint"]
        out["checkpoint_interval_given"] = gp["interval_given"]
    if tokens:
        steps = np.ceil(tokens / tokens_per_step)
        train_s = steps * step_eff_s
        run_s = train_s / gp["goodput"]
        hours = run_s / 3600.0
        out["steps"] = steps
        out["days"] = hours / 24.0
        out["gpu_hours"] = hours * n
        out["cost_usd"] = hours * n * cluster.price_per_gpu_hour_usd
        out["energy_kwh"] = hours * out["power_kw"]
        out["energy_cost_usd"] = out["energy_kwh"] * cluster.energy_price_usd_per_kwh
        if not lean:  # the same run without failures: training and its checkpoint saves alone
            free_h = train_s * (1.0 + gp["checkpoint_save_blocking_s"] / gp["checkpoint_interval_s"]) / 3600.0
            out["days_without_failures"] = free_h / 24.0
            out["cost_usd_without_failures"] = free_h * n * cluster.price_per_gpu_hour_usd
            out["expected_interruptions"] = run_s / gp["mtbf_s"]
    return out


def goodput_terms(model: ModelSpec, cluster: ClusterSpec, num_gpus, step_eff_s, checkpoint_interval_h=None,
                  recovery: goodput_model.Recovery | None = None, lean: bool = False) -> dict:
    """:func:`goodput.run_goodput` of plans on ``cluster`` (their GPU counts and steps with data
    reading), the failure rate, restart time and saving mode resolved from ``recovery``, the cluster
    and the defaults; with ``rate``, ``rate_source`` and ``async_checkpoint`` (not lean)."""
    rec = recovery or goodput_model.Recovery()
    rate, source = goodput_model.failure_rate_of(cluster, rec)
    interval_h = checkpoint_interval_h if checkpoint_interval_h is not None else rec.checkpoint_interval_h
    r = goodput_model.run_goodput(
        num_gpus=num_gpus, step_s=step_eff_s,
        ckpt_bytes=goodput_model.checkpoint_bytes(counting.total_params(model)),
        storage_write_gbps=cluster.storage_write_gbps, storage_read_gbps=cluster.storage_read_gbps,
        host_link_gbps=offload.host_link_gbps(cluster) * offload.HOST_LINK_EFF,
        failures_per_1000_gpu_days=rate, restart_s=goodput_model.restart_s_of(cluster, rec),
        async_checkpoint=rec.async_checkpoint, checkpoint_interval_h=interval_h, lean=lean)
    if not lean:
        r.update(rate=rate, rate_source=source, async_checkpoint=rec.async_checkpoint,
                 interval_given=interval_h is not None)
    return r


def power_kw(cluster: ClusterSpec, x: PlanArrays):
    """Power of a plan's GPUs, kW: GPUs x TDP x PUE (the board at its rated power: an upper bound)."""
    return x.num_gpus.astype(float) * cluster.gpu.tdp_w * cluster.pue / 1000.0


def search_figures(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, tokens: float | None,
                   checkpoint_interval_h: float | None = None, _terms: dict | None = None,
                   recovery: goodput_model.Recovery | None = None) -> dict:
    """What the search keeps of :func:`evaluate` for every candidate it times (memory priced apart,
    before): :func:`step.step_time` and the lean :func:`run_figures`, without the memory breakdown
    and the bottleneck (computed again, by :func:`evaluate`, for the plans it reports).
    ``_terms``: :meth:`LayoutTerms.step` of ``x``."""
    st = step.step_time(model, cluster, x, _terms)
    return run_figures(model, cluster, x, st, tokens, checkpoint_interval_h, lean=True, recovery=recovery)


#: The search shares the per-layout terms (:class:`LayoutTerms`); False prices every candidate on
#: its own. The figures are the same, bit for bit, either way (tests/test_layout_terms.py). CPU time
#: of the warm search, medians of alternated runs (7 and 3) on this 2-core machine (load ~5), off ->
#: on: GPT-3 175B 0.232 -> 0.190 s, DeepSeek-V3 (<= 4,096 H100) 0.523 -> 0.363 s (heavier per-layer
#: terms: expert GEMMs, dispatch, MLA, MTP). Where no two candidates share a layout (one GPU count,
#: one ZeRO stage) the grouping is pure overhead: ~2-3 ms on ~1,000-4,000 candidates (~15%).
SHARE_TERMS = True


class LayoutTerms:
    """The per-layout terms of one search's candidates on one system (:func:`memory.stage_layout_terms`,
    :func:`step.layout_terms`), priced once per group of candidates that differ only in the columns
    of :data:`arrays.LAYOUT_FREE` -- their data-parallel degree, GPU count, batch and micro-batches
    per step -- and on :func:`step.layout_key_extra` (whether a pipeline send leaves the NVLink
    domain). The terms read nothing else, and the cost model is row-wise, so every figure is the
    same as pricing each row on its own. :meth:`add` takes a space (or a piece of one: the search
    enumerates GPU counts piece by piece, and one layout recurs at every count its dp divides) and
    returns the group of each of its rows; memory terms are priced for a piece's new groups at
    once, step terms for the groups of the rows timed, as they are asked for. The GPT-3 175B
    default search: 251,532 candidates in 9,339 groups (step terms priced for 3,891), DeepSeek-V3
    on <= 4,096 H100: 665,868 in 17,260 (8,130). One object per search and system:
    nothing is kept across searches. ``None`` from :meth:`build` when :data:`SHARE_TERMS` is off."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec):
        self.model, self.cluster = model, cluster
        self.xu: PlanArrays | None = None  # one row per group
        self._key: list | None = None  # the key columns of xu (LAYOUT_FREE left out, extra in)
        self._mem: dict | None = None
        self._step: dict | None = None
        self._have = np.zeros(0, dtype=bool)  # step terms priced, per group

    @classmethod
    def build(cls, model: ModelSpec, cluster: ClusterSpec) -> "LayoutTerms | None":
        """A table for one search on ``cluster``, or None when :data:`SHARE_TERMS` is off."""
        return cls(model, cluster) if SHARE_TERMS else None

    def add(self, x: PlanArrays) -> np.ndarray:
        """The group of every row of ``x``; its rows of new groups join the table."""
        key = [getattr(x, f.name) for f in fields(PlanArrays) if f.name not in LAYOUT_FREE]
        key += list(step.layout_key_extra(self.cluster, x))
        key = [np.broadcast_to(k, len(x)) for k in key]
        n_old = 0 if self.xu is None else len(self.xu)
        if not n_old:
            rep, inv = group_rows(key, len(x))
            new_rows, inv_x = rep, inv
        else:
            both = [np.concatenate([a, b]) if not _same_constant(a, b) else b[:1].repeat(0) for a, b in zip(self._key, key)]
            rep, inv = group_rows([c for c in both if len(c)], n_old + len(x))
            tid = np.full(len(rep), -1, dtype=np.int64)
            tid[inv[:n_old]] = np.arange(n_old)
            newg = np.flatnonzero(tid < 0)
            tid[newg] = n_old + np.arange(len(newg))
            new_rows, inv_x = rep[newg] - n_old, tid[inv[n_old:]]
        if len(new_rows):
            xn = x.take(new_rows)
            mem = memory.layout_terms_per_stage(self.model, self.cluster, xn)
            kn = [k[new_rows] for k in key]
            if not n_old:
                self.xu, self._key, self._mem = xn, kn, _Table(mem, len(new_rows))
            else:
                self.xu = PlanArrays(**{f.name: np.concatenate([getattr(self.xu, f.name), getattr(xn, f.name)])
                                        for f in fields(PlanArrays)})
                self._key = [np.concatenate([a, b]) for a, b in zip(self._key, kn)]
                self._mem.grow(len(new_rows))
                self._mem.put(slice(n_old, None), mem)
            self._have = np.concatenate([self._have, np.zeros(len(new_rows), dtype=bool)])
            if self._step is not None:
                self._step.grow(len(new_rows))
        return inv_x

    def memory(self, groups) -> dict:
        """:func:`memory.stage_layout_terms` per stage of rows of these ``groups`` (``peak_memory``'s ``_terms``)."""
        return self._mem.take(groups)

    def step(self, groups) -> dict:
        """:func:`step.layout_terms` of rows of these ``groups`` (``step_time``'s ``_terms``); the
        groups not priced yet are priced now, together."""
        todo = np.flatnonzero((np.bincount(groups, minlength=len(self._have)) > 0) & ~self._have) \
            if len(groups) else np.zeros(0, dtype=np.int64)
        if len(todo):
            new = step.layout_terms(self.model, self.cluster, self.xu.take(todo))
            if self._step is None:
                self._step = _Table({}, len(self._have))
            self._step.put(todo, new)
            self._have[todo] = True
        return self._step.take(groups)


class _Table:
    """Terms (nested dicts of float arrays, or float scalars: the same for every group) of the groups
    as one ``terms x groups`` array. :meth:`take` gives the rows of many candidates as a mapping that
    gathers a term when it is read (a term a plan's formula skips -- the activation-offload cap
    without offload -- is never gathered; gathering costs about what four array operations do)."""

    def __init__(self, terms: dict, n: int):
        self.const: dict = {}  # path -> scalar, the same for every group so far
        self.data = np.empty((0, n))
        self.row: dict = {}  # path -> its row of data
        self.put(slice(None), terms)

    def put(self, idx, terms: dict) -> None:
        for path in _paths(terms):
            v = terms
            for k in path:
                v = v[k]
            if np.asarray(v).dtype != np.float64:  # a float64 table holds them exactly
                raise TypeError(f"layout term {'.'.join(path)}: {np.asarray(v).dtype}, not float64")
            if path not in self.row and path not in self.const and np.ndim(v) == 0:
                self.const[path] = v
                continue
            if path in self.const:
                if np.ndim(v) == 0 and v == self.const[path]:
                    continue
                fill = np.full((1, self.data.shape[1]), self.const.pop(path))  # now varies: a row
                self.row[path], self.data = len(self.data), np.concatenate([self.data, fill])
            elif path not in self.row:
                self.row[path], self.data = len(self.data), np.concatenate([self.data, np.empty((1, self.data.shape[1]))])
            self.data[self.row[path], idx] = v

    def grow(self, n: int) -> None:
        self.data = np.concatenate([self.data, np.empty((len(self.data), n))], axis=1)

    def take(self, groups) -> dict:
        out: dict = {}
        for path, v in self.const.items():
            _nest(out, path, v)
        for path, i in self.row.items():
            _nest(out, path, _Rows(self.data[i], groups))
        return _resolve(out)


class _Rows:
    """One term's rows, gathered when read (np.take: contiguous; ``a[:, idx]`` of the table is not)."""

    __slots__ = ("row", "groups")

    def __init__(self, row, groups):
        self.row, self.groups = row, groups


class _LazyTerms(dict):
    """A dict whose :class:`_Rows` values are gathered on first read."""

    def __getitem__(self, k):
        v = dict.__getitem__(self, k)
        if isinstance(v, _Rows):
            v = np.take(v.row, v.groups)
            dict.__setitem__(self, k, v)
        return v

    def items(self):
        return ((k, self[k]) for k in self.keys())

    def values(self):
        return (self[k] for k in self.keys())


def _nest(out: dict, path: tuple, v) -> None:
    d = out
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = v


def _resolve(d: dict) -> "_LazyTerms":
    return _LazyTerms({k: _resolve(v) if isinstance(v, dict) and not isinstance(v, _LazyTerms) else v
                       for k, v in d.items()})


def _paths(terms: dict, pre: tuple = ()) -> list:
    out = []
    for k, v in terms.items():
        out += _paths(v, pre + (k,)) if isinstance(v, dict) else [pre + (k,)]
    return out


def _same_constant(a, b) -> bool:
    """Both key columns one and the same value (the column can stay out of the key)."""
    b_const = b.strides[0] == 0 or len(b) == 0
    return bool(b_const and len(b) and (len(a) == 0 or (a.min() == b[0] and a.max() == b[0])))


BOTTLENECKS = ("compute", "hbm_bandwidth", "nvlink", "nic", "all-to-all (nvlink)", "all-to-all (nic)", "bubble",
               "memory", "storage")


def _link_name(crosses):
    return np.where(crosses, "nic", "nvlink")


def bottleneck(cluster: ClusterSpec, x: PlanArrays, b: dict, fits, io_bound):
    """The binding resource: the largest share of the step, named by the resource behind it."""
    tp_cross = comm.crosses_domain(1, x.tp, cluster, x.num_gpus)
    cp_cross = comm.crosses_domain(x.tp, x.cp, cluster, x.num_gpus)
    pp_cross = x.tp * x.cp * x.dp >= comm.domain_share(x.num_gpus, cluster)
    dp_cross = comm.crosses_domain(x.tp * x.cp, x.dp, cluster, x.num_gpus)
    names = np.array(["compute", "hbm_bandwidth", "tp", "cp", "pp", "dp", "bubble", "ep"])
    vals = np.stack([
        b["compute_s"] + b["recompute_s"],
        b["memory_bound_s"] + b["optimizer_s"],
        b["tp_comm_s"],
        b["cp_comm_s"],
        b["pp_comm_s"],
        b["dp_comm_s"],
        b["bubble_s"],
        b["ep_comm_s"],  # MoE token dispatch/combine: named "all-to-all (link)"
    ])
    which = names[np.argmax(vals, axis=0)]
    res = which.astype(object)
    res = np.where(which == "tp", _link_name(tp_cross), res)
    res = np.where(which == "cp", _link_name(cp_cross), res)
    res = np.where(which == "pp", _link_name(pp_cross), res)
    res = np.where(which == "dp", _link_name(dp_cross), res)
    ep_cross = dispatch.ep_crosses_domain(x, cluster)
    res = np.where(which == "ep", np.where(ep_cross, "all-to-all (nic)", "all-to-all (nvlink)"), res)
    res = np.where(io_bound, "storage", res)
    res = np.where(fits, res, "memory")
    return res
