"""``plan_search.estimate``: one plan's estimate, as ``plan-estimate`` gives it.

The cost model's :func:`plan_search.planner.costmodel.estimate.estimate`; when a framework is
named, the plan is first what ``plan-estimate --framework`` prices: the knobs the caller left
unset at that framework's defaults (Megatron-Core's vocab-parallel loss for Megatron and NeMo,
torchtitan's reshard-after-forward under FSDP2), and refused with the rule it breaks when the
framework cannot run it (:func:`plan_search.planner.frameworks.rules.as_run`, which plan-estimate
--framework calls too). One plan, one figure, whichever
interface asks.
"""

from __future__ import annotations

from plan_search.planner.costmodel.estimate import Estimate
from plan_search.planner.costmodel.estimate import estimate as _costmodel_estimate


def estimate(model, cluster, plan=None, *, framework: str | None = None, **kwargs) -> Estimate:
    """:func:`plan_search.planner.costmodel.estimate.estimate` (same arguments), the plan as
    ``framework`` runs it when one is named."""
    as_run = None
    if isinstance(framework, str):
        from plan_search.planner.frameworks import rules

        fw = rules._known(framework)

        def as_run(plan, model_spec, cluster_spec):
            return rules.as_run(fw, plan, model_spec, cluster_spec)

    return _costmodel_estimate(model, cluster, plan, framework=framework, plan_defaults=as_run, **kwargs)
