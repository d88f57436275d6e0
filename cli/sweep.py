"""``plan-sweep SWEEP.yaml``: what-if sweeps, one ``plan-search`` per scenario, into one tidy table.

The sweep file's format, the output's columns, resumption and the executors are described in
:mod:`planner.sweep`. Exit codes (``cli.common``): 0 the table was written and at least one
scenario has a feasible plan, 2 bad input (nothing is run), 3 no scenario is feasible (the
table, saying why for each, is written all the same), 130 interrupted (what finished is written;
rerun the same command to resume; with ``--overwrite`` over an existing table, that table is left
as it was and the same command starts over), 1 a worker process died (the same).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from plan_search import __version__

from plan_search.cli.common import EXIT_INFEASIBLE, guarded, OneLineCommand, short_days, short_money, align_row, rule_row, \
    clip_middle

EXIT_INTERRUPTED = 130


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and v != v) or str(v) == "<NA>":
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def format_summary(df, axes, width: int = 80) -> str:
    """One line per scenario: its parameters and its recommended plan (or why none), within
    ``width`` columns: axes under short headers (named with their keys and units below the
    table), the GPU count and system only when they are not an axis or constant, and the least
    telling plan columns dropped when the row would not fit."""
    from plan_search.planner.plots import axis_names

    axes = list(axes)
    scen = [g for _, g in df.groupby("scenario", sort=True)]
    recs = []
    for g in scen:
        first = g.iloc[0]
        r = g[g["recommended"] == True] if first["status"] == "ok" else g.iloc[0:0]  # noqa: E712
        recs.append((first, r.iloc[0] if len(r) else None))
    ok = [r for _, r in recs if r is not None]
    systems = {str(r["system"]) for r in ok}
    show_sys = len(systems) > 1 and "gpu" not in axes
    same_gpus = "gpus" in axes and all(_cell(f["gpus"]) == str(r["num_gpus"]) for f, r in recs if r is not None)
    cols: list[tuple[str, object]] = [("#", lambda f, r: str(f["scenario"]))]
    heads = {}
    for a in axes:
        label, short, unit = axis_names(a)
        heads[a] = short
        cols.append((short, lambda f, r, a=a: _cell(f[a])))
    if not same_gpus:
        cols.append(("GPUs", lambda f, r: str(r["num_gpus"])))
    if show_sys:
        cols.append(("system", lambda f, r: str(r["system"])))

    def rc(r):
        v = {"none": "none", "selective": "sel", "full": "full"}.get(str(r["recompute"]), str(r["recompute"]))
        return f"f{r['recompute_layers']}" if v == "full" and _cell(r["recompute_layers"]) != "-" else v

    cols += [("tp", lambda f, r: str(r["tp"])), ("pp", lambda f, r: str(r["pp"])), ("dp", lambda f, r: str(r["dp"])),
             ("cp", lambda f, r: str(r["cp"])), ("v", lambda f, r: str(r["vpp"])),
             ("mb", lambda f, r: str(r["micro_batch"])), ("z", lambda f, r: str(r["zero"])), ("rc", lambda f, r: rc(r)),
             ("days", lambda f, r: short_days(float(r["days"]))), ("$", lambda f, r: short_money(float(r["cost_usd"]))),
             ("MFU", lambda f, r: f"{100 * float(r['mfu']):.0f}%"), ("bottleneck", lambda f, r: str(r["bottleneck"]))]
    n_axes = len(axes) + 1
    rows = []
    for f, r in recs:
        if r is None:
            rows.append([c(f, None) for _, c in cols[:n_axes]] + [f"{f['status']}: {_cell(f['reason'])}"])
        else:
            rows.append([c(f, r) for _, c in cols])
    head = [h for h, _ in cols]
    dropped = []
    for drop in ("mb", "v", "bottleneck", "cp", "z"):
        widths = [max([len(head[i])] + [len(r[i]) for r in rows if len(r) == len(head)]) for i in range(len(head))]
        if sum(widths) + len(widths) - 1 <= width:
            break
        j = head.index(drop)
        dropped.append(drop)
        head.pop(j)
        for r in rows:
            if len(r) > n_axes + 1 or (len(r) > j and len(r) == len(head) + 1):
                r.pop(j)
    n = len(head)
    widths = [max([len(head[i])] + [len(r[i]) for r in rows if len(r) == n or i < len(r) - 1]) for i in range(n)]

    def numeric(i):
        try:
            [float(r[i]) for r in rows if len(r) > i and r[i] != "-"]
            return True
        except ValueError:
            return False

    left = ({head.index("system")} if "system" in head else set()) | \
        ({head.index("bottleneck")} if "bottleneck" in head else set()) | \
        {i for i in range(1, n_axes) if not numeric(i)}

    def fmt(cells):
        if len(cells) < n:  # an infeasible scenario: its parameters, then the status
            return align_row(cells[:-1], widths, left, " ") + " " + cells[-1]
        return align_row(cells, widths, left, " ")

    lines = [fmt(head), rule_row(widths, " ")]
    lines += [fmt(r) for r in rows]
    notes = [f"{heads[a]}: {a}" + (f", {axis_names(a)[2]}" if axis_names(a)[2] else "") for a in axes
             if heads[a].lower() != a.lower()]
    if not show_sys and len(systems) == 1 and "gpu" not in axes:
        notes.append(f"system {next(iter(systems))}")
    if same_gpus:
        notes.append("each scenario's plan uses its GPUs")
    if "MFU" in head:
        notes.append("MFU: attention counted causal")
    if "bottleneck" in dropped and ok:
        kinds = sorted({str(r["bottleneck"]) for r in ok})
        notes.append("bottleneck " + ", ".join(kinds))
    if notes:
        import textwrap

        lines += textwrap.wrap("; ".join(notes), width=width, subsequent_indent="  ")
    return "\n".join(lines)


@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="plan-sweep", message="%(prog)s %(version)s")
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="the table: .csv or .parquet [default: SWEEP_FILE with the format's suffix]")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"], case_sensitive=False), default=None,
              help="output format [default: from the output's suffix, else csv]")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process pool on this machine; ray: Ray tasks (pip install 'plan-search[ray]')")
@click.option("--workers", type=click.IntRange(min=1, max=4096), default=None,
              help="parallel scenarios [default: the usable cores; 1 runs them in this process]")
@click.option("--ray-address", default=None, help="Ray cluster to join [default: RAY_ADDRESS, else a local "
              "Ray instance with --workers CPUs]")
@click.option("--plot", "plot_file", default=None, type=click.Path(dir_okay=False),
              help="also plot the swept parameter against days and dollars (pip install 'plan-search[plot]')")
@click.option("--plot-x", default=None, help="the axis on the plot's x axis [default: the numeric axis "
              "with the most values]")
@click.option("--overwrite", is_flag=True, default=False,
              help="start over: ignore the output and its journal; the output is replaced only once every "
              "scenario has finished (an interrupted run leaves it as it was)")
@click.option("--summary", is_flag=True, default=False,
              help="print each scenario's recommended plan (or why it has none), one line each")
@click.option("--quiet", "-q", is_flag=True, default=False, help="no progress bar")
@click.option("--list", "list_only", is_flag=True, default=False,
              help="print the scenarios (index, key, parameters) and exit")
@guarded
def main(sweep_file, output, fmt, executor, workers, ray_address, plot_file, plot_x, overwrite, summary,
         quiet, list_only) -> None:
    """Run every scenario of SWEEP_FILE (a base request and axes over models, GPU types and counts,
    sequence lengths, global batches, token budgets and --set what-ifs, combined as a product
    or zipped) through the plan search, and write one row per scenario and front point.

    Resumable: rerun with the same output and finished scenarios are skipped. Exit 0 with a
    table, 2 on bad input, 3 when no scenario is feasible, 130 when interrupted.
    """
    from plan_search.models.io import short_repr
    from plan_search.models.output import check_output
    from plan_search.planner.sweep import WorkerLost, check_sweep_output, load_sweep, run_sweep

    sweep = load_sweep(sweep_file)
    if list_only:
        for s in sweep.scenarios:
            click.echo(f"{s.index:5d} {s.key} {s.label()}")
        return
    if output is None:
        f = (fmt or "csv").lower()
        output = str(Path(sweep_file).with_suffix(".parquet" if f == "parquet" else ".csv"))
    # every output is checked before anything runs: a regular file or none, never an input
    out_path, f = check_sweep_output(sweep, output, fmt)
    if plot_file:  # fail before running, not after
        from plan_search.planner.plots import plot_format, require_matplotlib

        require_matplotlib()
        if plot_x is not None and plot_x not in sweep.axes:
            raise click.BadParameter(f"{short_repr(plot_x)} is not an axis of the sweep "
                                     f"({', '.join(sweep.axes) or 'none'})", param_hint="--plot-x")
        plot_format(plot_file)
        plot_path = check_output(plot_file, "--plot", list(sweep.inputs) + [out_path], make_parents=True)
        if os.path.abspath(plot_path) in (os.path.abspath(out_path), os.path.abspath(str(out_path) + ".journal")):
            raise click.BadParameter("the plot and the table must be different files", param_hint="--plot")
    try:
        run = run_sweep(sweep, output, fmt=f, executor=executor, workers=workers, overwrite=overwrite,
                        progress=not quiet, ray_address=ray_address)
    except WorkerLost as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    c = run.counts
    done = sum(c.values())
    if run.dropped:
        click.echo(f"resume: {run.dropped} damaged scenario(s) in {short_repr(str(output))} or its journal (a line cut "
                   "short, rows missing or unreadable) were dropped and run again", err=True)
    if summary and len(run.frame) and not run.kept_previous:
        click.echo(format_summary(run.frame, sweep.axes))
    import textwrap

    if not run.interrupted:  # else nothing 'wrote': the table is partial, or the previous one untouched
        click.echo("\n".join(textwrap.wrap(
            f"wrote {run.output}: {len(run.frame)} rows, {done} of {run.scenarios} scenarios "
            f"({c.get('ok', 0)} feasible, {c.get('infeasible', 0)} infeasible, {c.get('error', 0)} errors); "
            f"ran {run.ran}, resumed {run.resumed}; {run.elapsed_s:.1f} s", width=80, subsequent_indent="  ",
            break_long_words=False, break_on_hyphens=False)))
    if c.get("error"):
        df = run.frame
        for _, r in df[df["status"] == "error"].drop_duplicates("scenario").head(5).iterrows():
            # the message whole up to 300 characters (short_repr quoted it and cut it at ~30)
            click.echo(f"  scenario {r['scenario']}: error: {clip_middle(' '.join(str(r['message']).split()), 300)}",
                       err=True)
    if run.interrupted:
        if run.kept_previous:
            click.echo(f"interrupted: {short_repr(str(run.output))} is left as it was (the previous table); this "
                       f"--overwrite run's {done} finished of {run.scenarios} scenarios are dropped: rerun the same "
                       "command to start over", err=True)
        else:
            click.echo(f"interrupted: {done} of {run.scenarios} scenarios kept in {run.output}; rerun the same "
                       "command to resume", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if plot_file:
        from plan_search.planner.plots import plot_sweep

        plot_sweep(run.frame, plot_file, axes=sweep.axes, x=plot_x)
        click.echo(f"wrote {plot_file}")
    if not c.get("ok") and not c.get("infeasible") and run.input_errors and run.input_errors == c.get("error"):
        click.echo("error: every scenario is bad input (see the message column); nothing was feasible to plan",
                   err=True)
        sys.exit(2)
    if not c.get("ok"):
        click.echo("infeasible: no scenario has a feasible plan (see the status, reason and message columns)",
                   err=True)
        sys.exit(EXIT_INFEASIBLE)


if __name__ == "__main__":  # pragma: no cover
    main()
