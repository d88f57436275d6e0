"""Tables of the planner's documents for notebooks and schedulers: pandas DataFrames.

- :func:`front_dataframe` — one row per front point of a :class:`planner.request.SearchResult`
  (the columns of ``plan-search --format csv``, with the plan's knobs flattened).
- :func:`estimate_dataframe` — one row per :class:`planner.estimate.Estimate`, with the plan's
  knobs, the memory and time breakdowns and the run figures flattened as columns.
- :func:`request_dataframe` — one row per :class:`planner.request.SearchRequest`, its knob
  bounds as ``knobs_*`` columns.

Nested fields are flattened with a prefix (``memory_peak_gib``, ``time_compute_s``,
``run_days``, ``eff_gemm_eff_max``); the plan's fields keep their own names (``tp``, ``pp``,
``dp``, ``cp``, ``vpp``, ``micro_batch``, ``zero``, ``recompute``, ...), as in the CSV. Lists
become one string (``binding`` joined by ``+``, ``reasons`` by ``; ``), so every cell is a
scalar and the frame writes to CSV or Parquet as is.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from .estimate import Estimate, RunEstimate
from .request import SearchRequest, SearchResult

#: Columns of :func:`front_dataframe`, in order (``plan-search --format csv``'s header plus
#: the model, seq_len and front index).
FRONT_COLUMNS = (
    "model", "gpu", "num_gpus", "nodes", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch", "seq_len",
    "grad_accum", "zero", "recompute", "recompute_layers", "sequence_parallel", "precision", "fp32_grads",
    "overlap_tp_comm", "first_stage_layers", "last_stage_layers", "step_time_s", "tokens_per_s",
    "tokens_per_s_per_gpu", "mfu", "memory_gib", "memory_usable_gib", "comm_ratio", "days", "gpu_hours",
    "cost_usd", "energy_kwh", "power_kw", "scaling_efficiency", "bottleneck", "binding", "recommended",
)

_PLAN_KEYS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch", "seq_len", "zero", "recompute",
              "recompute_layers", "sequence_parallel", "precision", "fp32_grads", "overlap_tp_comm",
              "first_stage_layers", "last_stage_layers")


def front_dataframe(result: SearchResult) -> pd.DataFrame:
    """The front of ``result`` as a DataFrame: one row per front point, in the result's order
    (GPU count, then days), the plan knobs as columns, ``recommended`` True on the recommended
    point (none when the recommended plan is not on the front). An empty front gives an empty
    frame with the same columns."""
    rows = []
    for i, fp in enumerate(result.front):
        d = fp.model_dump()
        plan = d.pop("plan")
        d.update({k: plan[k] for k in _PLAN_KEYS})
        d["grad_accum"] = fp.grad_accum
        d["binding"] = "+".join(fp.binding)
        d["recommended"] = result.recommended_index == i
        d["model"] = result.inputs.model
        rows.append({k: d.get(k) for k in FRONT_COLUMNS})
    return pd.DataFrame(rows, columns=list(FRONT_COLUMNS))


def _estimate_row(e: Estimate) -> dict:
    d = e.model_dump()
    row = {"model": d["model"], "cluster": d["cluster"], "num_gpus": e.plan.num_gpus}
    plan = d["plan"]
    row.update({k: plan[k] for k in plan if k != "num_gpus"})
    row["grad_accum"] = e.plan.grad_accum
    for k in ("params", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
              "hardware_tflops_per_gpu", "mfu", "hfu", "feasible", "bottleneck", "comm_ratio", "power_kw"):
        row[k] = d[k]
    row["reasons"] = "; ".join(d["reasons"])
    for k, v in d["memory"].items():
        row[f"memory_{k}"] = v
    for k, v in d["time"].items():
        row[f"time_{k}"] = v
    run = d["run"] or {}
    for k in RunEstimate.model_fields:
        row[f"run_{k}"] = run.get(k)
    for k, v in d["efficiency"].items():
        row[f"eff_{k}"] = v
    return row


def estimate_dataframe(estimates: Estimate | Iterable[Estimate]) -> pd.DataFrame:
    """One row per estimate (a single :class:`Estimate` gives one row): model, cluster, the
    plan's fields, the headline figures, ``memory_*`` (GiB), ``time_*`` (seconds per step),
    ``run_*`` (empty when the estimate has no token budget) and ``eff_*`` (the efficiency
    terms used). Columns are the same for every estimate, in a fixed order."""
    items = [estimates] if isinstance(estimates, Estimate) else list(estimates)
    for e in items:
        if not isinstance(e, Estimate):
            raise TypeError(f"estimate_dataframe: expected Estimate objects, got {type(e).__name__}")
    rows = [_estimate_row(e) for e in items]
    columns = list(rows[0]) if rows else ["model", "cluster", "num_gpus"]
    return pd.DataFrame(rows, columns=columns)


def _cell(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x).lower() if isinstance(x, bool) else str(x) for x in v)
    return v


def request_dataframe(requests: SearchRequest | Iterable[SearchRequest]) -> pd.DataFrame:
    """One row per request (a single request gives one row): its fields in declaration order,
    the knob bounds as ``knobs_<name>``; a list becomes one comma-joined string (``gpu``
    ``"h100-sxm,a100-80gb"``, ``knobs_tp`` ``"1,2,4"``; booleans ``true``/``false``), ``None``
    stays empty (the default domain)."""
    items = [requests] if isinstance(requests, SearchRequest) else list(requests)
    for r in items:
        if not isinstance(r, SearchRequest):
            raise TypeError(f"request_dataframe: expected SearchRequest objects, got {type(r).__name__}")
    rows = []
    for r in items:
        d = r.model_dump()
        knobs = d.pop("knobs")
        row = {k: _cell(v) for k, v in d.items()}
        row.update({f"knobs_{k}": _cell(v) for k, v in knobs.items()})
        rows.append(row)
    columns = list(rows[0]) if rows else [k for k in SearchRequest.model_fields if k != "knobs"]
    return pd.DataFrame(rows, columns=columns)
