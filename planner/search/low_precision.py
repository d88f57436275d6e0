"""The answer's low-precision line (issue 23): the recommended plan in the GPU's best low-precision recipe.

Precision stays the user's choice (the numerics are theirs), but a 16-bit answer says what the GPU's best
low-precision recipe would give: FP8 on Hopper, MXFP8 on Blackwell (:func:`planner.frameworks.recipes.
low_precision_recipe`, with its source). :func:`low_precision_line` re-prices the recommended plan's layout (GPU
type and count, degrees, batch, micro-batch, recomputation) in that recipe, with the recipe knobs that recipe opens
(the fused grouped MLP and FP8 attention of Megatron-Core's block-scaled recipes, where the framework runs them,
each kept only where it is faster), and gives its days and dollars beside the 16-bit ones. The layout is the
16-bit answer's, so the figure is what that plan gains by the recipe alone: a search in the recipe may find a
faster layout still (low precision frees memory), which the line says.
"""

from __future__ import annotations

import itertools

from pydantic import BaseModel, ConfigDict

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.evaluate import evaluate
from plan_search.planner.costmodel.plan import Plan

SIXTEEN_BIT = ("bf16", "fp16")


class LowPrecisionLine(BaseModel):
    """The recommended layout in the GPU's best low-precision recipe (``precision``, from ``source``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    precision: str
    source: str
    framework: str | None
    plan: Plan
    step_time_s: float
    days: float
    cost_usd: float
    gpu_hours: float
    memory_gib: float
    precision_16bit: str
    days_16bit: float
    cost_usd_16bit: float

    @property
    def text(self) -> str:
        """One line: ``in mxfp8 (its recipe): 12.3 days, $4.56M (bf16: 15.1 days, $5.58M), the same layout``."""
        return (f"in {self.precision} (the GPU's low-precision recipe{f' under {self.framework}' if self.framework else ''}): "
                f"{self.days:,.1f} days, {_money(self.cost_usd)} ({self.precision_16bit}: {self.days_16bit:,.1f} "
                f"days, {_money(self.cost_usd_16bit)}), the same layout; a search in {self.precision} may find a "
                f"faster one (--precision {self.precision})")


def _money(x: float) -> str:
    for div, s in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"${x / div:,.2f}{s}"
    return f"${x:,.0f}"


def low_precision_line(model: ModelSpec, cluster: ClusterSpec, plan: Plan, framework: str | None,
                       tokens: float, memory_headroom: float, checkpoint_interval_h: float | None = None,
                       days_16bit: float | None = None, cost_usd_16bit: float | None = None) -> LowPrecisionLine | None:
    """``plan`` (a 16-bit plan of ``model`` on ``cluster``) in the GPU's best low-precision recipe that
    ``framework`` runs, the fastest of its recipe-knob variants that fits and the framework runs (None: none does,
    the plan is already low precision, or the GPU has no low-precision recipe)."""
    from plan_search.planner.frameworks.recipes import low_precision_recipe, searched_values

    if plan.precision not in SIXTEEN_BIT:
        return None
    rec = low_precision_recipe(framework, cluster)
    if rec is None:
        return None
    spans = searched_values(framework, cluster, rec.value, model.is_moe)
    opened = {k: v for k, v in spans.items() if k in ("moe_grouped_gemm", "fp8_attention") and len(v) > 1}
    given = plan.model_fields_set
    cands = []
    for values in itertools.product(*opened.values()):
        change = {"precision": rec.value, **{k: v for k, v in zip(opened, values) if k not in given}}
        try:
            q = Plan(**{**plan.model_dump(), **change})
            q.check_against(model)
        except (ValueError, InputError):
            continue
        if framework is not None:
            from plan_search.planner.frameworks.rules import runnable

            q = runnable(framework, q, model, cluster)
            if q is None:
                continue
        if q not in cands:
            cands.append(q)
    if not cands:
        return None
    r = evaluate(model, cluster, PlanArrays.from_plans(cands, model.num_layers), memory_headroom=memory_headroom,
                 tokens=tokens, checkpoint_interval_h=checkpoint_interval_h)
    fits = [i for i in range(len(cands)) if bool(r["fits"][i])]
    if not fits:
        return None
    i = min(fits, key=lambda j: float(r["step_s"][j]))
    if days_16bit is None or cost_usd_16bit is None:
        r16 = evaluate(model, cluster, PlanArrays.from_plans([plan], model.num_layers), memory_headroom=memory_headroom,
                       tokens=tokens, checkpoint_interval_h=checkpoint_interval_h)
        days_16bit, cost_usd_16bit = float(r16["days"][0]), float(r16["cost_usd"][0])
    return LowPrecisionLine(precision=rec.value, source=rec.source, framework=framework, plan=cands[i],
                            step_time_s=float(r["step_s"][i]), days=float(r["days"][i]), cost_usd=float(r["cost_usd"][i]),
                            gpu_hours=float(r["gpu_hours"][i]), memory_gib=float(r["memory"]["total"][i]) / 2**30,
                            precision_16bit=plan.precision, days_16bit=float(days_16bit),
                            cost_usd_16bit=float(cost_usd_16bit))
