"""The objectives: each one's lexicographic key (:data:`OBJECTIVE_KEYS`, stated once), its text, and
the ``balanced`` default's rule (:func:`resolve_objective`: deadline, budget or scaling efficiency)."""

from __future__ import annotations

from plan_search.planner.search.request import SearchRequest

#: Lexicographic keys of the objectives (all minimised; the stable order breaks what is left).
OBJECTIVE_KEYS = {
    "fastest": ("days", "cost", "gpus"),
    "cheapest": ("cost", "days", "gpus"),
    "fewest-gpus": ("gpus", "days", "cost"),
    "least-energy": ("energy", "days", "cost", "gpus"),
    "best-mfu": ("neg_mfu", "days", "cost", "gpus"),
}
FRONT_KEY = OBJECTIVE_KEYS["fastest"]
OBJECTIVE_TEXT = {
    "balanced": "the fastest plan at or above the scaling-efficiency threshold",
    "fastest": "the shortest run",
    "cheapest": "the lowest cost",
    "fewest-gpus": "the fewest GPUs",
    "least-energy": "the least energy",
    "best-mfu": "the highest MFU",
}


def resolve_objective(req: SearchRequest) -> tuple[str, tuple[str, ...]]:
    """(rule, lexicographic key) of the request's objective. ``balanced`` is the default and
    follows how a team decides: with a deadline, the cheapest plan that meets it (``deadline``);
    else with a budget, the fastest plan within it (``budget``); else the fastest plan whose
    scaling efficiency is at least ``min_scaling_efficiency`` (``efficiency``: its dollars at most
    the cheapest plan's / the threshold). The other objectives are their own rule."""
    if req.objective != "balanced":
        return req.objective, OBJECTIVE_KEYS[req.objective]
    if req.deadline_days is not None:
        return "deadline", OBJECTIVE_KEYS["cheapest"]
    if req.budget_usd is not None:
        return "budget", OBJECTIVE_KEYS["fastest"]
    return "efficiency", OBJECTIVE_KEYS["fastest"]


def efficiency_cap(cheapest_cost: float, threshold: float) -> float:
    """Dollars a plan may cost under the efficiency rule: the cheapest plan's / the threshold
    (a hair above, so the cheapest plan itself passes at threshold 1 whatever the rounding)."""
    return cheapest_cost / threshold * (1.0 + 1e-12)
