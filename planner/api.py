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

from plan_search.planner.costmodel.estimate import Estimate, RunEstimate
from plan_search.planner.search.request import FRONT_COLUMNS, SearchRequest, SearchResult  # noqa: F401

def front_dataframe(result: SearchResult) -> pd.DataFrame:
    """The front of ``result`` as a DataFrame: one row per front point, in the result's order
    (GPU count, then days), the plan knobs as columns, ``recommended`` True on the recommended
    point (none when the recommended plan is not on the front). An empty front gives an empty
    frame with the same columns."""
    rows = result.front_rows()
    return pd.DataFrame(rows, columns=list(FRONT_COLUMNS))


def estimate_dataframe(estimates: Estimate | Iterable[Estimate]) -> pd.DataFrame:
    """One row per estimate (a single :class:`Estimate` gives one row): model, cluster, the
    plan's fields, the headline figures, ``memory_*`` (GiB), ``time_*`` (seconds per step),
    ``run_*`` (empty when the estimate has no token budget) and ``eff_*`` (the efficiency
    terms used). Columns are the same for every estimate, in a fixed order."""
    items = [estimates] if isinstance(estimates, Estimate) else list(estimates)
    for e in items:
        if not isinstance(e, Estimate):
            raise TypeError(f"estimate_dataframe: expected Estimate objects, got {type(e).__name__}")
    rows = [e.flat_row() for e in items]
    columns = list(rows[0]) if rows else ["model", "cluster", "num_gpus"]
    return pd.DataFrame(rows, columns=columns)


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
        row = r.flat_row()
        rows.append(row)
    columns = list(rows[0]) if rows else [k for k in SearchRequest.model_fields if k != "knobs"]
    return pd.DataFrame(rows, columns=columns)


def estimate_from(path, *, gpu: str | None = None, model=None, gpus: int | None = None, launch: int | None = None,
                  seq_len: int | None = None, sets=(), memory_headroom: float = 0.07, tokens=None,
                  checkpoint_interval_h: float = 1.0):
    """``plan-estimate --from FILE`` as a function: ``(read, estimate)``, the
    :class:`~planner.frameworks.read.LaunchRead` (model, plan, and the used / not priced / not understood /
    defaulted account of the file) and the :class:`Estimate` of the plan as the file's framework runs it.
    ``gpu`` when the file does not name the GPU type; ``model`` (a name, file or ModelSpec) when it does not define
    the model; ``gpus`` to give or override the GPU count."""
    from plan_search.planner.frameworks.read.price import read_and_price

    r, _plan, _cluster, est = read_and_price(str(path), model_ref=model, gpu_ref=gpu, num_gpus=gpus, launch=launch,
                                             sets=sets, memory_headroom=memory_headroom, tokens=tokens,
                                             checkpoint_interval_h=checkpoint_interval_h, seq_len=seq_len)
    return r, est
