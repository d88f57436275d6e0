"""The front's points as the answer reports them (:func:`_front_points`): each re-priced by the same
:func:`evaluate` as plan-estimate, with its scaling efficiency, what binds it and the plan-estimate
command that reproduces it."""

from __future__ import annotations

import math

import numpy as np

from plan_search.hardware.resolve import resolve_cluster
from plan_search.planner.costmodel import goodput
from plan_search.planner.costmodel.evaluate import evaluate
from plan_search.planner.search import clock
from plan_search.planner.search.command import estimate_command
from plan_search.planner.search.fitted import UNFITTED_BAND, is_fitted
from plan_search.planner.search.framework import run_by
from plan_search.planner.search.request import FrontPoint, SearchRequest
from plan_search.planner.search.table import Table

def _gpu_ref(req: SearchRequest, system_name: str) -> str:
    """The request's GPU reference (catalog name or file) that resolved to ``system_name``."""
    for ref in req.gpu:
        if resolve_cluster(ref, req.sets).name == system_name:
            return ref
    return system_name


#: Front points built between two looks at the clock (:func:`_front_points`).
POINTS_PER_CLOCK = 64


def _front_points(systems, table: Table, rows: list[int], req, bind: dict,
                  own: list[list[int]] | None = None, deadline: float = math.inf,
                  cut: list[str] | None = None) -> tuple[list[FrontPoint], list[FrontPoint]]:
    """Front rows as FrontPoints, sorted by GPU count, then days, then system order; figures
    re-evaluated (one evaluate() call per system) so they are exactly plan-estimate's. With
    ``own`` (each system's own front), also the points of those fronts that are not on the joint
    one. Scaling efficiency: GPU-hours of the system's most efficient point on its own front
    (its cheapest feasible plan) over the point's. Past ``deadline`` (looked at every
    :data:`POINTS_PER_CLOCK` points, ~0.25 ms each) no further point is built: the front reported
    is then its points of the smaller GPU counts, and ``cut`` gets a line saying from which count."""
    order = lambda rr: sorted(rr, key=lambda i: (int(table.gpus[i]), float(table.days[i]),  # noqa: E731
                                                  int(table.system[i]), int(table.row[i])))
    rows = order(rows)
    on_front = set(rows)
    extra = order({i for rr in (own or []) for i in rr} - on_front)
    by_sys: dict[int, list[int]] = {}
    for i in rows + extra:
        by_sys.setdefault(int(table.system[i]), []).append(int(table.row[i]))
    evals = {}
    for k, rr in by_sys.items():
        s = systems[k]
        sub = s.space.take(np.array(rr))  # the rows read: their plans and figures
        r = evaluate(s.space.model, s.cluster, sub.x, memory_headroom=req.memory_headroom,
                     tokens=req.tokens, checkpoint_interval_h=req.checkpoint_interval_h,
                     recovery=goodput.of_request(req))
        evals[k] = (r, {row: j for j, row in enumerate(rr)}, sub)
    ref: dict[str, float] = {}  # least GPU-hours per GPU type among its points (its cheapest plan)
    for i in rows + extra:
        k = int(table.system[i])
        r, where, _ = evals[k]
        name = systems[k].name  # per GPU type (one system per GPU type and framework)
        ref[name] = min(ref.get(name, math.inf), float(r["gpu_hours"][where[int(table.row[i])]]))
    refs: dict[int, str] = {}
    fit = {k: is_fitted(s.cluster) for k, s in enumerate(systems)}

    def point(i: int) -> FrontPoint:
        k, row = int(table.system[i]), int(table.row[i])
        s = systems[k]
        r, where, sub = evals[k]
        j = where[row]
        f = lambda name: float(r[name][j])  # noqa: E731
        plan = sub.plan(j)  # validated: the Plan's rules hold for every point
        fws = run_by(s.framework, plan, s.space.model, s.cluster)
        # the point's other fields are this function's own floats, ints and strings: built without
        # re-walking the validated plan (FrontPoint's checks took ~0.35 ms a point, 0.35 s of a
        # 1,000-point front, past a short time limit's end)
        return FrontPoint.model_construct(
            gpu=s.name, num_gpus=plan.num_gpus, nodes=plan.num_gpus / s.cluster.node.gpus_per_node, plan=plan,
            grad_accum=plan.grad_accum, step_time_s=f("step_s"), tokens_per_s=f("tokens_per_s"),
            tokens_per_s_per_gpu=f("tokens_per_s_per_gpu"), mfu=f("mfu"),
            mfu_full_attention=f("mfu_full_attention"), memory_gib=f("memory_peak_gib"),
            memory_usable_gib=f("memory_usable_gib"), comm_ratio=f("comm_ratio"), days=f("days"),
            gpu_hours=f("gpu_hours"), cost_usd=f("cost_usd"), energy_kwh=f("energy_kwh"), power_kw=f("power_kw"),
            scaling_efficiency=ref[s.name] / f("gpu_hours") if f("gpu_hours") > 0 else 1.0,
            bottleneck=str(r["bottleneck"][j]),
            binding=[b for b in ("memory", "comm_ratio") if bind[b][int(table.group[i])] < float(table.days[i])],
            estimate_command=estimate_command(req, refs.setdefault(k, _gpu_ref(req, s.name)), plan,
                                              fws[0] if fws else "none"),
            framework=fws, fitted=fit[k], band=None if fit[k] else UNFITTED_BAND,
        )

    def points(rr: list[int], what: str) -> list[FrontPoint]:
        out = []
        for a, i in enumerate(rr):
            if a and a % POINTS_PER_CLOCK == 0 and clock.now() > deadline:
                if cut is not None:
                    cut.append(f"{what}: {len(rr) - a:,} points from {int(table.gpus[i]):,} GPUs up not reported "
                               "(time limit)")
                break
            out.append(point(i))
        return out

    return points(rows, "front"), points(extra, "other systems' fronts")
