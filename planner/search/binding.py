"""What binds a front point: per (GPU type, GPU count) group, the fastest run with one per-plan
constraint (memory, comm ratio) lifted (:func:`binding_days`); the over-memory plans memory-first
pricing left untimed are timed lazily, a round at a time (:data:`BIND_ROUND`, :data:`LAZY_BINDING`)."""

from __future__ import annotations

import math

import numpy as np

from plan_search.planner.search.pricing import System, time_rows

CONSTRAINTS = ("memory", "comm_ratio", "power", "deadline", "budget", "gpus")


def _relaxed(m: dict, name: str) -> np.ndarray:
    """Evaluated candidates meeting every constraint but ``name``."""
    out = m["done"].copy()
    for k in CONSTRAINTS:
        if k != name:
            out &= m[k]
    return out


#: The lazy "memory binds" check times the over-memory plans of a group this many at a time in its
#: first round, eight times more in each next one, until one is faster than the group's point.
BIND_ROUND = 16
#: False: time every over-memory plan of the front's GPU counts (the long way; tests compare the two).
LAZY_BINDING = True


def binding_days(systems, ms, groups, n_groups, request=None, want=None,
                 deadline: float = math.inf, below: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per group, the fastest run when one per-plan constraint (memory, comm ratio) is lifted.
    ``want`` (groups): price the over-memory plans of those groups only (memory-first evaluation
    left them untimed); the other groups' memory figure is then a lower bound of inf. Past
    ``deadline`` the over-memory plans are no longer timed (``out["complete"]`` False).

    ``below`` (per group, days; -inf for a group nobody reads): the memory figure of group ``g``
    is read only as ``figure < t`` for days ``t >= below[g]`` (the front points of the group).
    Its over-memory plans are then timed a round at a time (:data:`BIND_ROUND`, less recomputation
    first) until one runs faster than ``below[g]`` -- the figure is then below every such ``t``,
    as the full minimum is -- or every one is timed (the figure is then the full minimum). Each
    comparison gives what timing them all gives; None: all of them are timed. (A plan that fits
    is no faster than its group's point, the group's fastest feasible plan: it is not timed here.)"""
    out: dict = {"complete": True}
    wanted = np.ones(n_groups, dtype=bool)
    if want is not None:
        wanted[:] = False
        wanted[np.asarray(want, dtype=np.int64)] = True
    if below is not None:  # a group nobody reads (-inf) is left alone: its figure is not compared
        wanted &= np.isfinite(below)
    for name in ("memory", "comm_ratio"):
        best = np.full(n_groups, np.inf)
        for s, m, g in zip(systems, ms, groups):
            r = _relaxed(m, name)
            if name == "memory" and request is not None and "timed" in s.cols:
                if below is None:
                    done = time_rows(s.space.model, s.cluster, s.space.x, s.cols, np.flatnonzero(r & wanted[g]),
                                     request, deadline)
                else:  # the untimed ones (a timed plan can stop a group early, never change an answer)
                    need = np.flatnonzero(r & wanted[g] & ~s.cols["timed"])
                    done = _time_until_below(s, need, g, below, request, deadline)
                if not done:
                    out["complete"] = False
                r = r & s.cols["timed"]
            np.minimum.at(best, g[r], s.cols["days"][r])
        out[name] = best
    return out


def _time_until_below(s: System, rows: np.ndarray, g: np.ndarray, below: np.ndarray, request,
                      deadline: float) -> bool:
    """Time ``rows`` (candidates of ``s``; ``g`` their groups) group by group, :data:`BIND_ROUND`
    of each group first (less recomputation first, then the stable order), then eight times more
    per round, until each group has a timed row faster than ``below`` of its group or none left;
    False when the deadline stopped it. ``rows`` are untimed and of groups whose ``below`` is finite
    (the caller's selection)."""
    days, timed = s.cols["days"], s.cols["timed"]
    hit = np.zeros(len(below), dtype=bool)
    gr = g[rows]
    if not len(rows):
        return True
    # grouped; within a group the plans that recompute less first (the likeliest to be faster than a
    # point that fits: GPT-3 175B's answered groups need ~3,000 plans timed instead of ~9,000 in the
    # stable order), then the stable order; a radix sort on small keys. Any order gives the same answer.
    key = gr * 4 + np.clip(s.space.x.recompute[rows], 0, 3)
    o = np.argsort(key.astype(np.int16) if 4 * len(below) < 2**15 else key, kind="stable")
    rows, gr = rows[o], gr[o]
    starts = np.flatnonzero(np.r_[True, gr[1:] != gr[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    lo, size = 0, BIND_ROUND
    while True:
        live = ~hit[gr[starts]] & (starts + lo < ends)  # groups not answered, with rows left
        if not live.any():
            return True
        a, b = starts[live] + lo, np.minimum(starts[live] + lo + size, ends[live])
        pick = rows[np.concatenate([np.arange(i, j) for i, j in zip(a.tolist(), b.tolist())])]
        if not time_rows(s.space.model, s.cluster, s.space.x, s.cols, pick, request, deadline):
            return False
        pg = g[pick]
        hit[pg[days[pick] < below[pg]]] = True
        lo, size = lo + size, size * 8
