"""Plots of a search's front and of a sweep (matplotlib, an optional extra: ``pip install
'plan-search[plot]'``; imported lazily, ``Agg`` backend, so no display is needed).

- :func:`plot_front`: GPU count against training days (left axis, solid) and dollars (right
  axis, dashed), one colour per GPU type, the recommended plan marked with a star.
- :func:`plot_sweep`: a sweep's parameter against days (top) and dollars (bottom), each
  scenario's recommended plan, one line per group of the other axes' values; an infeasible
  scenario is an ``x`` on the bottom edge.

The file type follows the name's suffix (``.png``, ``.svg``, ``.pdf``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from plan_search.models.io import InputError

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
MAX_GROUPS = len(COLOURS) * 2


def require_matplotlib():
    """``matplotlib.pyplot`` on the Agg backend, or a one-line error naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'plan-search[plot]' (or pip install matplotlib)") \
            from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _money_axis(ax, values: Sequence[float]):
    """Dollars in $k or $M, whichever reads better."""
    top = max((v for v in values if v is not None and math.isfinite(v)), default=1.0)
    div, unit = (1e6, "million USD") if top >= 2e6 else ((1e3, "thousand USD") if top >= 2e3 else (1.0, "USD"))
    return div, unit


def _tokens(x: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if x >= div:
            return f"{x / div:.4g}{suffix}"
    return f"{x:.4g}"


def _log_if_wide(ax, values, axis: str = "x", base: int = 2) -> bool:
    vals = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if len(vals) >= 2 and max(vals) / min(vals) >= 8:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=base)
        return True
    return False


def _money(x: float) -> str:
    if x >= 1e9:
        return f"${x / 1e9:.2f}B"
    if x >= 1e6:
        return f"${x / 1e6:.2f}M"
    if x >= 1e4:
        return f"${x / 1e3:.0f}k"
    return f"${x:,.0f}"


def _int_ticks(ax, values) -> None:
    """Ticks at the values themselves, or (many of them) at the powers of two between the ends."""
    from matplotlib.ticker import FixedLocator, NullLocator

    vals = sorted({int(v) for v in values})
    if len(vals) > 12:
        lo, hi = vals[0], vals[-1]
        if ax.get_xscale() == "log":
            pw = [1 << i for i in range(max(0, lo.bit_length() - 1), hi.bit_length() + 1) if lo <= 1 << i <= hi]
        else:
            step = math.ceil(len(vals) / 10)
            pw = vals[::step]
        ticks = set(pw)
        for end in (lo, hi):  # the ends too, unless a tick sits almost on them
            if all(abs(math.log2(end / t)) > 0.5 for t in ticks):
                ticks.add(end)
        vals = sorted(ticks)
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{v:,}" for v in vals], rotation=45 if len(vals) > 6 else 0,
                       ha="right" if len(vals) > 6 else "center")


def _plain_log_labels(axis) -> None:
    """Log-scale tick labels as plain numbers (2, 5, 10, 20), not 2x10^0."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    fmt = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_major_formatter(fmt)
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _save(fig, path) -> Path:
    """Written atomically (``models.output``): a failed write leaves the previous file whole."""
    import matplotlib.pyplot as plt

    from plan_search.models.output import atomic_output

    p = Path(path)
    try:
        with atomic_output(p, "--plot") as tmp:
            fig.savefig(tmp, dpi=130, format=p.suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)
    return p


def plot_front(result, path) -> Path:
    """The front of a :class:`planner.request.SearchResult` as a picture at ``path``."""
    plt = require_matplotlib()
    front = result.front
    systems = list(result.inputs.systems)
    fig, ax = plt.subplots(figsize=(9, 5.4))
    ax2 = ax.twinx()
    div, unit = _money_axis(ax2, [fp.cost_usd for fp in front])
    from matplotlib.lines import Line2D

    handles = []
    for k, name in enumerate(systems):
        pts = sorted((fp for fp in front if fp.gpu == name), key=lambda fp: fp.num_gpus)
        if not pts:
            handles.append(Line2D([], [], ls="none", label=f"{name}: no point on the front (dominated)"))
            continue
        col, mk = COLOURS[k % len(COLOURS)], MARKERS[k % len(MARKERS)]
        n = [fp.num_gpus for fp in pts]
        h1, = ax.plot(n, [fp.days for fp in pts], color=col, marker=mk, lw=2, ms=6, label=f"{name}: days")
        h2, = ax2.plot(n, [fp.cost_usd / div for fp in pts], color=col, marker=mk, lw=1.3, ls="--", ms=6,
                       mfc="white", alpha=0.9, label=f"{name}: cost")
        handles += [h1, h2]
    e = result.recommended
    if e.run is not None:
        ax.plot([e.plan.num_gpus], [e.run.days], marker="*", ms=20, color="gold", mec="black", mew=1.2,
                ls="none", zorder=6)
        ax2.plot([e.plan.num_gpus], [e.run.cost_usd / div], marker="*", ms=14, color="gold", mec="black",
                 mew=1.0, ls="none", zorder=6)
        handles.append(Line2D([], [], marker="*", ms=12, color="gold", mec="black", ls="none",
                              label="recommended"))
        p = e.plan
        text = (f"recommended ({result.objective}): {p.num_gpus:,} x {e.cluster}\n"
                f"{e.run.days:,.1f} days, {_money(e.run.cost_usd)}, MFU {100 * e.mfu:.0f}%\n"
                f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp} mb{p.micro_batch} zero{p.zero} {p.recompute}")
        ax.annotate(text, xy=(p.num_gpus, e.run.days), xytext=(0.98, 0.97), textcoords="axes fraction",
                    ha="right", va="top", fontsize=8.5,
                    bbox=dict(boxstyle="round,pad=0.4", fc="white", ec="0.6", alpha=0.95),
                    arrowprops=dict(arrowstyle="->", color="0.35", lw=0.9, shrinkB=8), zorder=7)
    counts = [fp.num_gpus for fp in front]
    _log_if_wide(ax, counts, "x", 2)
    _int_ticks(ax, counts)
    if _log_if_wide(ax, [fp.days for fp in front], "y", 10):
        _plain_log_labels(ax.yaxis)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("training days (solid)")
    ax2.set_ylabel(f"cost, {unit} (dashed)")
    ax2.set_ylim(bottom=0, top=max([fp.cost_usd / div for fp in front] + [0]) * 1.25 or 1)
    ax.grid(True, which="major", alpha=0.3)
    inp = result.inputs
    ax.set_title(f"{inp.model} ({inp.params / 1e9:.1f}B params), {_tokens(inp.tokens)} tokens: "
                 f"Pareto front of GPUs, days and dollars", fontsize=10.5)
    ax.legend(handles=handles, loc="lower left", fontsize=8, framealpha=0.95,
              ncol=2 if len(handles) > 5 else 1)
    fig.tight_layout()
    return _save(fig, path)


# ------------------------------------------------------------------ sweeps
def _numeric(values) -> bool:
    for v in values:
        if isinstance(v, bool):
            return False
        try:
            float(v)
        except (TypeError, ValueError):
            return False
    return True


def choose_x(df, axes: Sequence[str]) -> str | None:
    """The numeric axis with the most distinct values (ties: the first); else the first axis."""
    best, best_n = None, -1
    for a in axes:
        vals = df[a].dropna().unique().tolist()
        if _numeric(vals) and len(vals) > best_n:
            best, best_n = a, len(vals)
    if best is None and axes:
        best = max(axes, key=lambda a: df[a].nunique())
    return best


def _label(axis: str) -> str:
    return {"gpus": "GPUs", "num_gpus": "GPUs", "max_gpus": "max GPUs", "seq_len": "sequence length", "global_batch": "global batch",
            "tokens": "training tokens", "gpu": "GPU type", "model": "model"}.get(axis, axis)


def plot_sweep(df, path, axes: Sequence[str], x: str | None = None) -> Path:
    """A sweep's table (:func:`planner.sweep.run_sweep`'s frame) as a picture at ``path``: the
    axis ``x`` against days and dollars of each scenario's recommended plan, one line per group
    of the other axes' values. Without axes: the single scenario's front (GPUs against both)."""
    plt = require_matplotlib()
    axes = list(axes)
    rec = df[(df["status"] == "ok") & (df["recommended"] == True)]  # noqa: E712  (nullable booleans)
    bad = df[df["status"] != "ok"].drop_duplicates("scenario")
    if not axes:
        rec = df[(df["status"] == "ok") & (df["on_front"] == True)]  # noqa: E712
        x, groups_by = "num_gpus", []
    else:
        x = x or choose_x(df, axes)
        groups_by = [a for a in axes if a != x]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    xs_all = df[x].dropna().unique().tolist() if x in df.columns else []
    numeric = _numeric(xs_all)
    if numeric:
        pos = lambda v: float(v)  # noqa: E731
    else:
        order = list(dict.fromkeys(df[x].tolist()))
        pos = lambda v: float(order.index(v))  # noqa: E731
    div, unit = _money_axis(bottom, rec["cost_usd"].astype(float).tolist() if len(rec) else [1.0])
    keys = list(dict.fromkeys(df.drop_duplicates("scenario")[groups_by].itertuples(index=False, name=None))) \
        if groups_by else [()]
    truncated = len(keys) > MAX_GROUPS
    keys = keys[:MAX_GROUPS]
    for k, key in enumerate(keys):
        key = key if isinstance(key, tuple) else (key,)
        sel = rec
        sel_bad = bad
        for a, v in zip(groups_by, key):
            sel = sel[sel[a] == v]
            sel_bad = sel_bad[sel_bad[a] == v]
        col, mk = COLOURS[k % len(COLOURS)], MARKERS[k % len(MARKERS)]
        # earlier groups drawn wider, so lines that coincide stay visible under later ones
        lw = 1.5 + 2.5 * (1 - k / max(1, len(keys) - 1)) if len(keys) > 1 else 2.0
        ms = 5 + 4 * (1 - k / max(1, len(keys) - 1)) if len(keys) > 1 else 6
        label = ", ".join(f"{_label(a)}={v}" for a, v in zip(groups_by, key)) or None
        if len(sel):
            sel = sel.assign(_x=[pos(v) for v in sel[x]]).sort_values("_x")
            top.plot(sel["_x"], sel["days"].astype(float), color=col, marker=mk, lw=lw, ms=ms, label=label)
            bottom.plot(sel["_x"], sel["cost_usd"].astype(float) / div, color=col, marker=mk, lw=lw, ms=ms)
        elif label:
            top.plot([], [], color=col, marker=mk, lw=lw, ms=ms, label=f"{label} (infeasible)")
        if len(sel_bad) and x in sel_bad.columns:
            xb = [pos(v) for v in sel_bad[x]]
            for panel in (top, bottom):
                panel.plot(xb, [0.02] * len(xb), transform=panel.get_xaxis_transform(), ls="none", marker="x",
                           ms=9, mew=2, color=col, clip_on=False, zorder=5)
    if len(bad):
        top.plot([], [], ls="none", marker="x", ms=8, mew=2, color="0.3", label="infeasible scenario")
    xs = [pos(v) for v in xs_all]
    if numeric:
        _log_if_wide(bottom, xs, "x", 2)
        if all(float(v).is_integer() for v in xs):
            _int_ticks(bottom, xs)
        elif len(set(xs)) <= 12:  # ticks at the swept values themselves
            from matplotlib.ticker import FixedLocator, NullLocator

            vals = sorted(set(xs))
            bottom.xaxis.set_major_locator(FixedLocator(vals))
            bottom.xaxis.set_minor_locator(NullLocator())
            bottom.set_xticklabels([f"{v:g}" for v in vals])
    else:
        bottom.set_xticks(range(len(order)))
        bottom.set_xticklabels([str(v) for v in order], rotation=30 if len(order) > 4 else 0,
                               ha="right" if len(order) > 4 else "center")
        bottom.set_xlim(-0.5, len(order) - 0.5)
    if len(rec) and _log_if_wide(top, rec["days"].astype(float).tolist(), "y", 10):
        _plain_log_labels(top.yaxis)
    top.set_ylabel("training days")
    bottom.set_ylabel(f"cost, {unit}")
    costs = (rec["cost_usd"].astype(float) / div).tolist() if len(rec) else []
    bottom.set_ylim(0, (max(costs) * 1.15) if costs and max(costs) > 0 else 1)
    bottom.set_xlabel(_label(x))
    for panel in (top, bottom):
        panel.grid(True, alpha=0.3)
    what = "every front point" if not axes else "the recommended plan of each scenario"
    n_s = df["scenario"].nunique()
    top.set_title(f"plan-sweep: {_label(x)} against days and dollars\n({what}; {n_s} scenario"
                  f"{'' if n_s == 1 else 's'}"
                  f"{', first ' + str(MAX_GROUPS) + ' groups' if truncated else ''})", fontsize=10.5)
    if top.get_legend_handles_labels()[0]:
        top.legend(fontsize=8, loc="best", framealpha=0.95, ncol=2 if len(keys) > 6 else 1)
    fig.tight_layout()
    return _save(fig, path)
