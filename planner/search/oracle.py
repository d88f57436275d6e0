"""The oracle: the front and the picks computed directly on every row of the table (a numpy skyline,
:func:`exhaustive_front`; :func:`exhaustive_pick`), what ``solver="exhaustive"`` answers and the tests
compare CP-SAT with."""

from __future__ import annotations

import math

import numpy as np

from plan_search.planner.search import clock
from plan_search.planner.search.table import Table, group_argmin

def exhaustive_front(t: Table, deadline: float = math.inf, cut: list[str] | None = None) -> list[int]:
    """Non-dominated rows of (GPUs, days, dollars), by a plain skyline: rows sorted by (days,
    dollars, GPUs, order); a row is on the front unless an earlier one has no more GPUs and no
    higher dollars. Processed by GPU count: a staircase of (days, dollars) over all smaller
    counts, and a running minimum within the count. Past ``deadline`` no further count is taken
    (one count per loop: thousands of explicit counts take seconds): the rows returned are then
    the front of the counts taken, exact for them (a larger count never dominates a smaller
    one's point), and ``cut`` gets a line saying so."""
    if not len(t):
        return []
    out: list[int] = []
    stair_d = np.zeros(0)
    stair_c = np.zeros(0)
    stable = np.arange(len(t))
    for n in np.unique(t.gpus):
        if out and clock.now() > deadline:
            if cut is not None:
                cut.append(f"front: GPU counts from {int(n):,} up not compared (time limit)")
            break
        idx = np.nonzero(t.gpus == n)[0]
        o = idx[np.lexsort((stable[idx], t.cost[idx], t.days[idx]))]
        d, c = t.days[o], t.cost[o]
        # dominated by a smaller count: the staircase point with the largest days <= d has the
        # lowest dollars among those
        if len(stair_d):
            j = np.searchsorted(stair_d, d, side="right") - 1
            beaten = (j >= 0) & (stair_c[np.maximum(j, 0)] <= c)
        else:
            beaten = np.zeros(len(o), dtype=bool)
        prev = np.concatenate([[np.inf], np.minimum.accumulate(c)[:-1]])
        alive = (~beaten) & (c < prev)
        out.extend(o[alive].tolist())
        # merge into the staircase: days ascending, dollars strictly descending
        d_all = np.concatenate([stair_d, d[alive]])
        c_all = np.concatenate([stair_c, c[alive]])
        so = np.lexsort((c_all, d_all))
        d_all, c_all = d_all[so], c_all[so]
        pm = np.concatenate([[np.inf], np.minimum.accumulate(c_all)[:-1]])
        k = c_all < pm
        stair_d, stair_c = d_all[k], c_all[k]
    return out


def exhaustive_pick(t: Table, key, mask: np.ndarray | None = None) -> int | None:
    """The row minimising ``key`` (ties: table order; NaNs last), among ``mask`` if given: the row
    ranked first by :func:`positions`; :func:`group_argmin` over one group (no sort: a table of a
    million candidates took ~60 ms per pick sorted, past the time limit's end)."""
    if not len(t):
        return None
    row = int(group_argmin(np.zeros(len(t), dtype=np.int64), 1, (t.column(k) for k in key), mask)[0])
    return None if row < 0 else row
