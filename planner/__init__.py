"""plan-search's planner: the analytic cost model, the search and the public Python API.

- :func:`planner.estimate` — every figure of one plan (``plan-estimate``).
- :class:`planner.Plan` — the parallel plan (degrees and knobs), validated on construction.
- :func:`planner.search` — the Pareto front of GPU count, days and dollars (``plan-search``).
"""

from .estimate import Estimate, estimate
from .plan import Plan

__all__ = ["Estimate", "Plan", "estimate"]

try:  # the search module arrives with its own issue; the API exposes it once present
    from .search import search  # noqa: F401

    __all__.append("search")
except ImportError:  # pragma: no cover
    pass
