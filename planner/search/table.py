"""The table handed to the solver (or the oracle): one row per feasible candidate, in stable order
(:class:`Table`, :func:`build_table`), grouped by (GPU type, GPU count); the per-group arg-min
(:func:`group_argmin`), the ordinal ranks that are CP-SAT's objective coefficients (:func:`positions`),
and the exactly-safe pruning (:func:`prune`, see :mod:`planner.search.front`'s step 4)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from plan_search.planner.search.pricing import System

@dataclass
class Table:
    """Candidates handed to the solver (or the oracle): one row each, in stable order."""

    system: np.ndarray
    row: np.ndarray
    group: np.ndarray  # dense id of (system, GPU count)
    gpus: np.ndarray
    days: np.ndarray
    cost: np.ndarray
    energy: np.ndarray
    power: np.ndarray
    mfu: np.ndarray

    def __len__(self) -> int:
        return len(self.system)

    def take(self, idx) -> "Table":
        return Table(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def column(self, key: str) -> np.ndarray:
        return -self.mfu if key == "neg_mfu" else getattr(self, key)


def group_ids(systems: list[System]) -> tuple[list[np.ndarray], int]:
    """Dense (system, GPU count) group id of every candidate of every system, and their number."""
    out, offset = [], 0
    for s in systems:
        counts = np.unique(s.space.x.num_gpus)
        out.append(offset + np.searchsorted(counts, s.space.x.num_gpus))
        offset += len(counts)
    return out, offset


def group_argmin(group: np.ndarray, n_groups: int, keys, mask=None) -> np.ndarray:
    """Per group, the row minimising the lexicographic ``keys`` among ``mask`` (ties: the lowest
    row index; a NaN ranks last, and a group whose tied rows are all NaN on a key keeps them all
    tied, as a sort would); -1 for a group without rows. O(rows still tied) per key, no sort;
    ``keys`` may be a generator (a key is read only while more than one row is left)."""
    n = len(group)
    rows = np.arange(n) if mask is None else np.flatnonzero(mask)
    for k in keys:
        if len(rows) <= 1:
            break
        col = k[rows]
        if n_groups == 1:  # one reduction, no scatter (exhaustive_pick's case)
            b = np.fmin.reduce(col)
            keep = (col == b) | (b != b)
        else:
            g = group[rows]
            best = np.full(n_groups, np.nan)
            np.fmin.at(best, g, col)  # NaN only where every row of the group is NaN
            b = best[g]
            keep = (col == b) | np.isnan(b)
        rows = rows[keep]
    first = np.full(n_groups, n, dtype=np.int64)
    np.minimum.at(first, group[rows], rows)
    return np.where(first < n, first, -1)


def build_table(systems: list[System], feasible: list[np.ndarray], groups: list[np.ndarray]) -> Table:
    parts = []
    for s, f, g in zip(systems, feasible, groups):
        idx = np.nonzero(f)[0]
        c = s.cols
        parts.append(Table(np.full(len(idx), s.index, dtype=np.int64), idx, g[idx], s.space.x.num_gpus[idx],
                           c["days"][idx], c["cost_usd"][idx], c["energy_kwh"][idx], c["power_kw"][idx],
                           c["mfu"][idx]))
    return Table(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Table)})


def positions(t: Table, key: tuple[str, ...]) -> np.ndarray:
    """Rank of every row under the lexicographic ``key`` (ties: table order). A permutation of
    0..len-1: the integer objective coefficients."""
    order = np.lexsort((np.arange(len(t)),) + tuple(t.column(k) for k in reversed(key)))
    pos = np.empty(len(t), dtype=np.int64)
    pos[order] = np.arange(len(t))
    return pos


def ordinal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each value among the distinct values, the sorted distinct values)."""
    uniq, inv = np.unique(values, return_inverse=True)
    return inv.astype(np.int64), uniq


def prune(t: Table, n_groups: int) -> np.ndarray:
    """Rows that may matter (exactly safe, see the module docstring): per (system, GPU count)
    group its (days, dollars) front, its least-energy and its highest-MFU row; sorted."""
    if not len(t):
        return np.zeros(0, dtype=np.int64)
    g = t.group
    # the group's fastest row (then cheapest, then first): on the group front; every other row
    # with no lower dollars is weakly dominated by it
    q = group_argmin(g, n_groups, (t.days, t.cost))
    q = q[q >= 0]
    q_cost = np.full(n_groups, np.inf)
    q_cost[g[q]] = t.cost[q]
    sub = np.union1d(q, np.nonzero(t.cost < q_cost[g])[0])
    # exact (days, dollars) front per group among those few rows
    o = sub[np.lexsort((sub, t.cost[sub], t.days[sub], g[sub]))]
    cost_r = np.unique(t.cost[o], return_inverse=True)[1].astype(np.int64)
    key = cost_r - g[o] * (len(o) + 1)  # decreasing offsets: the running minimum restarts per group
    prev = np.concatenate([[np.iinfo(np.int64).max], np.minimum.accumulate(key)[:-1]])
    keep = [o[key < prev]]
    for k in (("energy", "days", "cost"), ("neg_mfu", "days", "cost")):
        r = group_argmin(g, n_groups, tuple(t.column(c) for c in k))
        keep.append(r[r >= 0])
    return np.unique(np.concatenate(keep))
