"""plan-search: a planner for distributed training of large models.

The public Python API (imported lazily, so ``import plan_search`` and every command start fast):

- :func:`search` — the Pareto front of GPU count, days and dollars (``plan-search``): a
  :class:`SearchRequest`, a dict of its fields, or keyword arguments in; :class:`SearchResult`
  out; :class:`NoFeasiblePlan` raised when nothing qualifies.
- :func:`estimate` — every figure of one plan (``plan-estimate``); returns an :class:`Estimate`.
- :func:`estimate_from` — a launch file priced (``plan-estimate --from``): its account and the :class:`Estimate`.
- :class:`Plan` — the parallel plan (degrees and knobs), validated on construction.
- :func:`allocate` — several jobs on a pool of GPUs (``plan-allocate``).
- :func:`estimate_dataframe`, :func:`front_dataframe`, :func:`request_dataframe` — pandas views.
- :func:`to_megatron_args`, :func:`to_deepspeed_config`, :func:`to_torchtitan_toml`,
  :func:`to_nemo_overrides` — launch configurations of a plan.

The repository's folders ``models/``, ``hardware/``, ``planner/`` and ``cli/`` are installed as
``plan_search.models``, ``plan_search.hardware``, ``plan_search.planner`` and ``plan_search.cli``:
nothing generic lands at the top level of site-packages.
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0"

#: public name -> module that defines it
_EXPORTS = {
    "search": "plan_search.planner.search.front",
    "SearchRequest": "plan_search.planner.search.request",
    "SearchResult": "plan_search.planner.search.request",
    "NoFeasiblePlan": "plan_search.planner.search.request",
    "Knobs": "plan_search.planner.search.request",
    "estimate": "plan_search.planner.estimate",
    "estimate_from": "plan_search.planner.api",
    "Estimate": "plan_search.planner.costmodel.estimate",
    "Plan": "plan_search.planner.costmodel.plan",
    "allocate": "plan_search.planner.allocate",
    "estimate_dataframe": "plan_search.planner.api",
    "front_dataframe": "plan_search.planner.api",
    "request_dataframe": "plan_search.planner.api",
    "to_megatron_args": "plan_search.planner.frameworks.emit",
    "to_deepspeed_config": "plan_search.planner.frameworks.emit",
    "to_torchtitan_toml": "plan_search.planner.frameworks.emit",
    "to_nemo_overrides": "plan_search.planner.frameworks.emit",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'plan_search' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
