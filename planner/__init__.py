"""plan-search's planner: the analytic cost model, the search and the public Python API.

- :func:`planner.estimate` — every figure of one plan (``plan-estimate``); returns an
  :class:`Estimate`.
- :class:`planner.Plan` — the parallel plan (degrees and knobs), validated on construction.
- :func:`planner.search` — the Pareto front of GPU count, days and dollars (``plan-search``):
  :class:`SearchRequest` in, :class:`SearchResult` out, :class:`NoFeasiblePlan` raised when
  nothing qualifies.
- :func:`planner.allocate` — several jobs on a pool of GPUs (``plan-allocate``).
- ``.to_dataframe()`` on results, and :mod:`planner.api` for pandas tables.

Note: ``planner.search`` is the function; the module is ``sys.modules["planner.search"]``.
"""

from .estimate import Estimate, estimate
from .plan import Plan
from .request import NoFeasiblePlan, SearchRequest, SearchResult
from .search import search
from .api import estimate_dataframe, front_dataframe, request_dataframe  # noqa: E402
from .allocate import allocate  # noqa: E402

__all__ = [
    "Estimate", "NoFeasiblePlan", "Plan", "SearchRequest", "SearchResult", "allocate", "estimate",
    "estimate_dataframe", "front_dataframe", "request_dataframe", "search",
]
