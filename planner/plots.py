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


def plot_format(path) -> str:
    """The picture format of ``path`` from its suffix (``png`` without one), or a one-line
    InputError naming the formats matplotlib writes -- checked before the work, not after it."""
    from matplotlib.backend_bases import FigureCanvasBase

    from plan_search.models.io import short_repr

    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    known = FigureCanvasBase.get_supported_filetypes()
    if fmt not in known:
        raise InputError(f"--plot: {short_repr(Path(path).name)}: .{short_repr(fmt)[1:-1]} is not a picture format; "
                         f"use one of {', '.join('.' + k for k in sorted(known))}")
    return fmt


def _money_axis(ax, values: Sequence[float]):  # ax unused: kept for the callers' signature
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
            fig.savefig(tmp, dpi=130, format=plot_format(p))
    finally:
        plt.close(fig)
    return p


def front_figure(result):
    """The figure of :func:`plot_front` (not saved): training days (x, log) against dollars (y),
    one series per GPU type -- its points on the joint front filled, the points of its own front
    that another type dominates hollow, so a dominated type is drawn too -- each point labelled
    with its GPU count, the recommended plan marked once (a star) and described in a box."""
    plt = require_matplotlib()
    from matplotlib.lines import Line2D

    front = list(result.front)
    others = list(getattr(result, "other_fronts", []) or [])
    systems = list(result.inputs.systems)
    allp = front + others
    div, unit = _money_axis(None, [fp.cost_usd for fp in allp])
    fig, ax = plt.subplots(figsize=(9, 5.6))
    on_front = {id(fp) for fp in front}
    marks = {i: name for name, i in (result.landmarks or {}).items() if name != "recommended"}
    labelled = _labelled_points(front, others, marks)
    partly = False
    for k, name in enumerate(systems):
        pts = sorted((fp for fp in allp if fp.gpu == name), key=lambda fp: fp.num_gpus)
        col, mk = COLOURS[k % len(COLOURS)], MARKERS[k % len(MARKERS)]
        dominated = not any(fp.gpu == name for fp in front)
        label = name + (" (dominated: every point beaten by another GPU type)" if dominated else "")
        if not pts:
            ax.plot([], [], color=col, marker=mk, ls="none", label=f"{name}: nothing feasible")
            continue
        # the line joins the type's points that no other of its points beats on days and dollars
        # alone (its days-dollars staircase); the rest are on the front only for using fewer GPUs
        stair = _staircase(pts)
        ax.plot([fp.days for fp in stair], [fp.cost_usd / div for fp in stair], color=col, lw=1.6, alpha=0.8,
                zorder=2)
        filled = [fp for fp in pts if id(fp) in on_front]
        hollow = [fp for fp in pts if id(fp) not in on_front]
        if filled:
            ax.plot([fp.days for fp in filled], [fp.cost_usd / div for fp in filled], color=col, marker=mk,
                    ls="none", ms=6, zorder=3, label=label)
        if hollow:
            ax.plot([fp.days for fp in hollow], [fp.cost_usd / div for fp in hollow], color=col, marker=mk,
                    ls="none", ms=6, mfc="white", mew=1.4, zorder=3, label=None if filled else label)
            partly = partly or bool(filled)
        for fp in pts:
            if id(fp) in labelled:
                ax.annotate(f"{fp.num_gpus:,}", (fp.days, fp.cost_usd / div), xytext=(7, 6),
                            textcoords="offset points", fontsize=7.5, color=col, zorder=4)
    if partly:
        ax.plot([], [], color="0.4", marker="o", mfc="white", ls="none", label="hollow: dominated by another type")
    ax.plot([], [], color="0.4", lw=1.6, label="line: best days for the dollars (any GPU count)")
    e = result.recommended
    if e.run is not None:
        ax.plot([e.run.days], [e.run.cost_usd / div], marker="*", ms=18, color="gold", mec="black", mew=1.1,
                ls="none", zorder=6, label="recommended")
        p = e.plan
        text = (f"recommended ({result.objective}): {p.num_gpus:,} x {e.cluster}\n"
                f"{e.run.days:,.1f} days, {_money(e.run.cost_usd)}, MFU {100 * e.mfu:.0f}%\n"
                f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp} mb{p.micro_batch} gb{p.global_batch} "
                f"zero{p.zero} {p.recompute}")
        ax.text(0.98, 0.97, text, transform=ax.transAxes, ha="right", va="top", fontsize=8.5, zorder=7,
                bbox=dict(boxstyle="round,pad=0.4", fc="white", ec="0.6", alpha=0.95))
    if not allp:  # the time limit stopped the walk before any point
        ax.text(0.5, 0.5, "no front point within the time limit", transform=ax.transAxes, ha="center")
        fig.tight_layout()
        return fig
    days = [fp.days for fp in allp]
    if _log_if_wide(ax, days, "x", 10):
        _plain_log_labels(ax.xaxis)
    costs = [fp.cost_usd / div for fp in allp]
    lo, hi = min(costs), max(costs)
    pad = (hi - lo) * 0.12 or hi * 0.1 or 1.0
    ax.set_ylim(max(0.0, lo - pad), hi + 3 * pad)  # room for the box above the points
    ax.set_xlabel("training days" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel(f"cost of the run, {unit}")
    ax.grid(True, which="major", alpha=0.3)
    inp = result.inputs
    ax.set_title(f"{inp.model} ({inp.params / 1e9:.1f}B params), {_tokens(inp.tokens)} tokens: the front of "
                 f"GPUs, days and dollars\n(each point a plan, labelled with its GPU count)", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.95)
    fig.tight_layout()
    return fig


def _staircase(pts: list) -> list:
    """The points no other of ``pts`` beats on days and dollars both, by days."""
    out, best = [], math.inf
    for fp in sorted(pts, key=lambda fp: (fp.days, fp.cost_usd)):
        if fp.cost_usd < best:
            out.append(fp)
            best = fp.cost_usd
    return out


def _labelled_points(front, others, marks: dict) -> set:
    """Points labelled with their GPU count: all of them when few, else the landmarks (fewest
    GPUs, cheapest, balanced, fastest) and each type's days-dollars staircase (thinned to about
    a dozen), so labels do not pile up."""
    allp = front + others
    if len(allp) <= 16:
        return {id(fp) for fp in allp}
    keep = {id(front[i]) for i in marks if i < len(front)}
    by_type: dict[str, list] = {}
    for fp in allp:
        by_type.setdefault(fp.gpu, []).append(fp)
    for pts in by_type.values():
        stair = _staircase(pts)
        keep |= {id(fp) for fp in stair[:: max(1, -(-len(stair) // 12))]}
    return keep


def plot_front(result, path) -> Path:
    """The front of a :class:`planner.request.SearchResult` as a picture at ``path`` (see
    :func:`front_figure`)."""
    return _save(front_figure(result), path)


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


#: Sweep axes by name: (label, short column header, unit). Other names are read generically:
#: the last dotted part, its unit suffix (``_gbps`` GB/s, ``_gib`` GiB ...) spelled out.
AXIS_NAMES = {
    "gpus": ("GPU count", "GPUs", ""), "num_gpus": ("GPU count", "GPUs", ""),
    "max_gpus": ("largest GPU count", "max GPUs", ""), "gpu": ("GPU type", "GPU", ""), "model": ("model", "model", ""),
    "seq_len": ("sequence length", "seq", "tokens"), "global_batch": ("global batch", "batch", "sequences"),
    "tokens": ("training tokens", "tokens", ""),
    "gpu.hbm_bandwidth_gbps": ("HBM bandwidth", "HBM", "GB/s"),
    "gpu.memory_gib": ("GPU memory", "memory", "GiB"),
    "node.inter_node_gbps": ("inter-node bandwidth per GPU", "inter-node", "GB/s"),
    "node.intra_node_gbps": ("intra-node (NVLink) bandwidth per GPU", "intra-node", "GB/s"),
    "node.intra_domain_size": ("NVLink domain", "domain", "GPUs"),
    "storage_read_gbps": ("storage read bandwidth", "read", "GB/s"),
    "storage_write_gbps": ("storage write bandwidth", "write", "GB/s"),
    "price_per_gpu_hour_usd": ("price", "price", "$/GPU-h"),
}
UNIT_SUFFIXES = (("_gbps", "GB/s"), ("_gib", "GiB"), ("_tflops", "TFLOP/s"), ("_usd", "USD"), ("_kw", "kW"),
                 ("_w", "W"), ("_days", "days"), ("_h", "h"), ("_s", "s"))


def axis_names(axis: str) -> tuple[str, str, str]:
    """(label, short header, unit) of a sweep axis (see :data:`AXIS_NAMES`)."""
    if axis in AXIS_NAMES:
        return AXIS_NAMES[axis]
    name = axis.rsplit(".", 1)[-1]
    unit = ""
    for suffix, u in UNIT_SUFFIXES:
        if name.endswith(suffix):
            name, unit = name[: -len(suffix)], u
            break
    words = name.replace("_", " ").strip() or axis
    return words, words if len(words) <= 12 else words[:11] + ".", unit


def _label(axis: str) -> str:
    """An axis label with its unit: ``inter-node bandwidth per GPU, GB/s``."""
    label, _, unit = axis_names(axis)
    return f"{label}, {unit}" if unit else label


def _value(axis: str, v) -> str:
    """A value of an axis with its unit, for a legend: ``HBM 2,039 GB/s``."""
    _, short, unit = axis_names(axis)
    try:
        f = float(v)
        text = f"{f:,.0f}" if f.is_integer() else f"{f:g}"
    except (TypeError, ValueError):
        text = str(v)
    return f"{short} {text}" + (f" {unit}" if unit and unit != "GPUs" else "")


LINESTYLES = ("-", "--", ":", "-.")


def _facet_axis(rec, groups_by: list[str]) -> str | None:
    """The grouping axis that moves the days most (ratio of the largest to the smallest median
    days over its values), when it has 2-4 values and at least 1.5x: each of its values gets a
    panel with its own scale, so the lines of the other axes are not squeezed into bundles
    (used when two or more axes group the lines)."""
    best, best_ratio = None, 1.5
    for a in groups_by:
        vals = rec[a].dropna().unique().tolist()
        if not 2 <= len(vals) <= 4:
            continue
        med = rec.groupby(a)["days"].median().astype(float)
        if len(med) and med.min() > 0 and med.max() / med.min() > best_ratio:
            best, best_ratio = a, float(med.max() / med.min())
    return best


def sweep_figure(df, axes: Sequence[str], x: str | None = None):
    """The figure of :func:`plot_sweep` (not saved)."""
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
    # panels only when two or more axes group the lines (one grouping axis: its lines on one chart
    # compare best)
    facet = _facet_axis(rec, groups_by) if len(rec) and len(groups_by) >= 2 else None
    facet_vals = list(dict.fromkeys(df.drop_duplicates("scenario")[facet].tolist())) if facet else [None]
    lines_by = [a for a in groups_by if a != facet]
    ncol = len(facet_vals)
    fig, grid = plt.subplots(2, ncol, figsize=(max(9, 4.6 * ncol), 7), sharex=True, squeeze=False)
    xs_all = df[x].dropna().unique().tolist() if x in df.columns else []
    numeric = _numeric(xs_all)
    if numeric:
        pos = lambda v: float(v)  # noqa: E731
    else:
        order = list(dict.fromkeys(df[x].tolist()))
        pos = lambda v: float(order.index(v))  # noqa: E731
    div, unit = _money_axis(None, rec["cost_usd"].astype(float).tolist() if len(rec) else [1.0])
    keys = list(dict.fromkeys(df.drop_duplicates("scenario")[lines_by].itertuples(index=False, name=None))) \
        if lines_by else [()]
    truncated = len(keys) > MAX_GROUPS
    keys = keys[:MAX_GROUPS]
    for c, fv in enumerate(facet_vals):
        top, bottom = grid[0][c], grid[1][c]
        frec = rec if facet is None else rec[rec[facet] == fv]
        fbad = bad if facet is None else bad[bad[facet] == fv]
        for k, key in enumerate(keys):
            key = key if isinstance(key, tuple) else (key,)
            sel, sel_bad = frec, fbad
            for a, v in zip(lines_by, key):
                sel = sel[sel[a] == v]
                sel_bad = sel_bad[sel_bad[a] == v]
            col, mk, ls = COLOURS[k % len(COLOURS)], MARKERS[k % len(MARKERS)], LINESTYLES[k % len(LINESTYLES)]
            # earlier lines wider and lines dashed differently, so coinciding ones stay visible
            lw = 1.4 + 2.2 * (1 - k / max(1, len(keys) - 1)) if len(keys) > 1 else 2.0
            ms = 5 + 4 * (1 - k / max(1, len(keys) - 1)) if len(keys) > 1 else 6
            label = (", ".join(_value(a, v) for a, v in zip(lines_by, key)) or None) if c == 0 else None
            if len(sel):
                sel = sel.assign(_x=[pos(v) for v in sel[x]]).sort_values("_x")
                top.plot(sel["_x"], sel["days"].astype(float), color=col, marker=mk, ls=ls, lw=lw, ms=ms, label=label)
                bottom.plot(sel["_x"], sel["cost_usd"].astype(float) / div, color=col, marker=mk, ls=ls, lw=lw,
                            ms=ms)
            elif label:
                top.plot([], [], color=col, marker=mk, ls=ls, lw=lw, ms=ms, label=f"{label} (infeasible)")
            if len(sel_bad) and x in sel_bad.columns:
                xb = [pos(v) for v in sel_bad[x]]
                for panel in (top, bottom):
                    panel.plot(xb, [0.02] * len(xb), transform=panel.get_xaxis_transform(), ls="none", marker="x",
                               ms=9, mew=2, color=col, clip_on=False, zorder=5)
        if c == 0 and len(bad):
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
        if len(frec) and _log_if_wide(top, frec["days"].astype(float).tolist(), "y", 10):
            _plain_log_labels(top.yaxis)
        if not len(frec):  # nothing feasible in this panel: say so rather than draw an empty scale
            for panel in (top, bottom):
                panel.set_yticks([])
            top.text(0.5, 0.5, "no feasible plan", transform=top.transAxes, ha="center", va="center",
                     fontsize=9, color="0.35")
        bottom.margins(y=0.15)  # both panels scaled to their data, like the days above
        if c == 0:
            top.set_ylabel("training days")
            bottom.set_ylabel(f"cost of the run, {unit}")
        bottom.set_xlabel(_label(x))
        if facet is not None:
            top.set_title(_value(facet, fv), fontsize=10)
        for panel in (top, bottom):
            panel.grid(True, alpha=0.3)
    what = "every front point" if not axes else "the recommended plan of each scenario"
    n_s = df["scenario"].nunique()
    fig.suptitle(f"plan-sweep: {axis_names(x)[0]} against days and dollars\n({what}; {n_s} scenario"
                 f"{'' if n_s == 1 else 's'}{', first ' + str(MAX_GROUPS) + ' lines' if truncated else ''})",
                 fontsize=10.5)
    first = grid[0][0]
    if first.get_legend_handles_labels()[0]:
        first.legend(fontsize=8, loc="best", framealpha=0.95, ncol=2 if len(keys) > 6 else 1)
    fig.tight_layout()
    return fig


def plot_sweep(df, path, axes: Sequence[str], x: str | None = None) -> Path:
    """A sweep's table (:func:`planner.sweep.run_sweep`'s frame) as a picture at ``path``: the
    axis ``x`` against days and dollars of each scenario's recommended plan, one line per group
    of the other axes' values (one panel per value of the axis that moves the days most, when
    there is one). Without axes: the single scenario's front (GPUs against both)."""
    return _save(sweep_figure(df, axes, x), path)
