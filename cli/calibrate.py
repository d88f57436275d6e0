"""``plan-calibrate``: fit a system's efficiency terms to measured runs; write a cluster file.

    plan-calibrate runs.csv --gpu a100 -o my-a100.yaml [--set node.inter_node_gbps=12.5] [--iters 200]
    plan-calibrate log.csv --interruptions --gpu h100 -o my-h100.yaml   # failure rate and restart time

Reads the runs of that system from a CSV in the layout of ``planner/published_runs.csv``
(:func:`planner.calibration.load_runs`), fits the :class:`~hardware.spec.EfficiencySpec` terms
(:func:`planner.calibration.fit_efficiency`), prints every run's measured and predicted step time
before and after the fit with the median / p90 absolute error, and writes a cluster YAML
(``base: <catalog name>`` + ``efficiency:``) that ``--gpu my-a100.yaml`` accepts everywhere.

``--gpu`` is a catalog system, or a cluster file with ``base:`` (its rows are those of the base
system; its other fields, and any ``--set``, are kept in the written file, since the fitted terms
belong to that hardware description).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any, Sequence

import click

from plan_search import __version__
import yaml

from plan_search.cli.common import OneLineCommand, guarded
from plan_search.hardware.resolve import deep_merge

TABLE_WIDTH = 80
LABEL_WIDTH = 26


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 2] + ".."


def _label(label: str, width: int = LABEL_WIDTH) -> str:
    """Clip a run label but keep its ``@GPUs`` tail: ``GPT-1.7B (Megatron w.. @32``."""
    name, sep, n = " ".join(label.split()).rpartition(" @")
    if not sep or len(label) <= width:
        return _clip(label, width)
    tail = f" @{n}"
    return _clip(name, width - len(tail)) + tail


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _abs_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _g(x: float) -> str:
    return f"{x:.4g}"


def _resolve_gpu(ref: str, sets: Sequence[str]):
    """(catalog name whose rows to fit, starting cluster, the file's document or None)."""
    from plan_search.hardware.catalog import canonical_name, get_cluster
    from plan_search.hardware.resolve import FILE_SUFFIXES, resolve_cluster
    from plan_search.models.io import InputError, load_document

    ref = (ref or "").strip()
    cluster = resolve_cluster(ref, sets)  # every error of --gpu / --set, one line
    # The same rule as resolve_cluster: a suffix or a path separator means a file; else a catalog name.
    path_like = ref.lower().endswith(FILE_SUFFIXES) or os.sep in ref or bool(os.altsep and os.altsep in ref)
    if not path_like and canonical_name(ref) is not None:
        return canonical_name(ref), cluster, None
    doc = load_document(Path(ref), "cluster")
    base = doc.get("base")
    if not isinstance(base, str):
        raise InputError(
            f"gpu: cluster file {Path(ref).name} has no 'base: <catalog name>'; plan-calibrate needs the "
            "catalog system to pick its rows of the runs file"
        )
    return get_cluster(base, field=f"cluster {Path(ref).name}: base").name, cluster, doc


def _nested_overrides(sets: Sequence[str]) -> dict[str, Any]:
    """``gpu.peak_tflops.bf16=290`` -> ``{"gpu": {"peak_tflops": {"bf16": 290}}}`` (efficiency.* left out:
    the written efficiency section is complete)."""
    from plan_search.hardware.overrides import parse_set

    out: dict[str, Any] = {}
    for item in sets:
        key, value = parse_set(item)
        parts = key.split(".")
        if parts[0] == "efficiency":
            continue
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _row_table(before, after) -> list[str]:
    head = (f"{'row':>4s}  {'run':<{LABEL_WIDTH}s}  {'measured':>8s}  {'before':>8s} {'error':>7s}"
            f"  {'after':>8s} {'error':>7s}")
    lines = [head, "-" * len(head)]
    flagged = False
    for b, a in zip(before, after):
        r = b.record
        mark_b = " " if b.feasible else "*"
        mark_a = " " if a.feasible else "*"
        flagged = flagged or not (a.feasible and b.feasible)
        lines.append(
            f"{r.index + 1:>4d}  {_label(r.label):<{LABEL_WIDTH}s}  {r.measured_step_s:8.3f}  "
            f"{b.predicted_step_s:8.3f} {_pct(b.error):>7s}{mark_b} {a.predicted_step_s:8.3f} {_pct(a.error):>7s}{mark_a}"
            .rstrip()
        )
    lines.append("step times in seconds; row = data row of the CSV (1 = first after the header)")
    if flagged:
        lines.append("* no candidate plan fits in memory; the fastest one was used")
    return lines


def _summary(before, after) -> list[str]:
    from plan_search.planner.calibration import error_summary

    sb, sa = error_summary(before), error_summary(after)
    return [
        f"{'|error|':<8s}  {'median':>8s}  {'p90':>8s}",
        f"{'before':<8s}  {_abs_pct(sb['median']):>8s}  {_abs_pct(sb['p90']):>8s}",
        f"{'after':<8s}  {_abs_pct(sa['median']):>8s}  {_abs_pct(sa['p90']):>8s}",
    ], sb, sa


def _term_changes(old, new) -> list[str]:
    o, n = old.model_dump(), new.model_dump()
    changed = [k for k in o if k != "source" and o[k] != n[k]]
    if not changed:
        return ["efficiency terms: unchanged by the fit"]
    width = max(len(k) for k in changed)
    lines = ["efficiency terms (before -> after)"]
    for k in changed:
        lines.append(f"  {k:<{width}s}  {_g(o[k]):>8s} -> {_g(n[k])}")
    return lines


@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="plan-calibrate", message="%(prog)s %(version)s")
@click.argument("runs", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--gpu", "gpu_ref", required=True,
              help="catalog system whose rows to fit, or a cluster file with base: (its rows are the base's)")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="cluster YAML to write (base: + fitted efficiency)")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="override of the cluster before fitting, e.g. node.inter_node_gbps=12.5 (kept in the file)")
@click.option("--iters", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Nelder-Mead iterations per start (bounds the fit's run time)")
@click.option("--from", "from_path", default=None, metavar="FILE",
              help="a measured run as its launch file (Megatron-LM script, NeMo overrides, torchtitan TOML, DeepSpeed "
                   "JSON; read as plan-estimate --from reads it), with --step-time or --tokens-per-s")
@click.option("--step-time", "step_time_s", type=float, default=None, help="with --from: measured seconds per step")
@click.option("--tokens-per-s", "tokens_per_s", type=float, default=None,
              help="with --from: measured tokens per second of the whole job")
@click.option("--memory-gib", "memory_gib", type=float, default=None, help="with --from: measured peak memory per GPU")
@click.option("--model", "model_ref", default=None, help="with --from: the model when the file does not define it")
@click.option("--gpus", "num_gpus", type=int, default=None, help="with --from: the GPU count when the file does not say")
@click.option("--interruptions", is_flag=True, default=False,
              help="RUNS is a run log of interruptions (timestamp,event,gpus,lost_minutes: planner/interruptions.py): "
                   "fit the failure rate and restart time instead, written as failures_per_1000_gpu_days and "
                   "restart_minutes")
@guarded
def main(runs: Path | None, gpu_ref: str, output: Path, sets: tuple[str, ...], iters: int, from_path: str | None = None,
         step_time_s: float | None = None, tokens_per_s: float | None = None, memory_gib: float | None = None,
         model_ref: str | None = None, num_gpus: int | None = None, interruptions: bool = False) -> None:
    """Fit the efficiency terms of a system to measured runs (CSV in the layout of
    planner/published_runs.csv) and write a cluster YAML usable as --gpu; with --interruptions, fit
    the failure rate and restart time from a run log of interruptions."""
    if interruptions:
        from plan_search.cli.calibrate_interruptions import fit_command

        if runs is None or from_path is not None:
            raise click.UsageError("--interruptions reads RUNS as the interruption log (and no --from)")

        return fit_command(runs, gpu_ref, output, sets, _resolve_gpu, _nested_overrides)
    from plan_search.models.io import InputError
    from plan_search.planner.calibration import MOE_ROWS_SKIPPED, error_summary, fit_efficiency, load_runs, predict

    from plan_search.models.output import check_output, write_text_atomic

    base_name, cluster, doc = _resolve_gpu(gpu_ref, sets)
    # before the fit (tens of seconds): a regular file or none, in a directory that exists or can be made, and
    # not the runs file nor the cluster file read (by device and inode: a hard link is caught)
    # a missing directory is created on write, as plan-sweep's and plan-search --plot's (one rule)
    if runs is None and from_path is None:
        raise click.UsageError("Missing argument 'RUNS' (or --from FILE).")
    inputs = ([runs] if runs is not None else []) + ([Path(from_path)] if from_path else [])
    check_output(output, "--output", inputs + ([Path(gpu_ref)] if doc is not None else []), make_parents=True)
    skipped: dict[str, int] = {}
    records = load_runs(runs, gpu=base_name, skipped=skipped) if runs is not None else []
    if from_path is not None:  # a measured run given as its launch file (cli/calibrate_from.py)
        from plan_search.cli.calibrate_from import record

        records.append(record(from_path, gpu_ref=gpu_ref, model_ref=model_ref, num_gpus=num_gpus, launch=None,
                              step_time_s=step_time_s, tokens_per_s=tokens_per_s, memory_gib=memory_gib, sets=sets,
                              index=len(records)))
        runs = Path(runs.name + " + " + Path(from_path).name) if runs is not None else Path(from_path)
    elif any(v is not None for v in (step_time_s, tokens_per_s, memory_gib, model_ref, num_gpus)):
        raise InputError("from: --step-time, --tokens-per-s, --memory-gib, --model and --gpus go with --from FILE")
    moe = skipped.get("moe", 0)
    why_moe = f"{moe} mixture-of-experts row(s) of {base_name} skipped: {MOE_ROWS_SKIPPED}"
    if not records:
        others = sorted({r.gpu for r in load_runs(runs)})
        found = f"complete rows are for: {', '.join(others)}" if others else "it has no complete rows"
        raise InputError(f"runs: no complete rows for {base_name} in {runs.name} ({found})"
                         + (f"; {why_moe}" if moe else ""))
    if moe:
        click.echo(f"plan-calibrate: {why_moe}", err=True)

    click.echo(f"plan-calibrate: fitting {len(records)} run(s) of {base_name} from {runs.name} "
               f"(iters {iters})...", err=True)
    before = [predict(r, cluster) for r in records]
    # pulled towards the system's own terms (the catalog's fit or the file's), not the generic defaults:
    # a few rows move what they see and leave the rest as the system had it
    fitted = fit_efficiency(records, cluster, iters=iters, prior=cluster.efficiency)
    fitted = fitted.model_copy(update={"source": f"{fitted.source}; file {runs.name}"})
    after_cluster = cluster.model_copy(update={"efficiency": fitted})
    after = [predict(r, after_cluster) for r in records]
    kept = ""
    if error_summary(after)["median"] > error_summary(before)["median"]:
        # the fit minimises the squared log error, which can move the median |error| up: the terms
        # written never fit the rows worse, by the median printed, than the system's own
        fitted = cluster.efficiency.model_copy(update={"source": f"{cluster.efficiency.source}; kept by plan-calibrate: "
                                                                 f"a fit on {runs.name} raised the median |error|"})
        after = before
        kept = "the fit raised the median |error|: the system's terms are kept"

    summary, sb, sa = _summary(before, after)
    lines = [f"{cluster.name} ({cluster.gpu.name}): {len(records)} run(s) from {runs.name}", ""]
    lines += _row_table(before, after) + [""] + summary + [""] + _term_changes(cluster.efficiency, fitted)
    if kept:
        lines += [kept]

    # The cluster document: base + the file's own fields + --set overrides + the fitted terms.
    data: dict[str, Any] = {"base": base_name}
    if doc is not None:
        data.update({k: v for k, v in doc.items() if k not in ("base", "name", "efficiency")})
    data = deep_merge(data, _nested_overrides(sets))
    data["efficiency"] = fitted.model_dump()
    today = datetime.date.today().isoformat()
    header = [
        f"# Written by plan-calibrate on {today}: efficiency of {base_name} fitted to {len(records)} run(s)",
        f"# of {runs.name} ({iters} iterations); use it as --gpu {output.name}.",
        f"# |error| median {_abs_pct(sb['median'])} -> {_abs_pct(sa['median'])}, "
        f"p90 {_abs_pct(sb['p90'])} -> {_abs_pct(sa['p90'])}",
    ]
    if doc is not None:
        header.append(f"# Starting point: cluster file {Path(gpu_ref).name}.")
    header += [f"# --set {s}" for s in sets]
    text = "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    write_text_atomic(output, text, "--output")  # a full disk leaves the previous file whole

    # Check the file reads back as the cluster just fitted (so --gpu FILE means what we printed).
    from plan_search.hardware.resolve import load_cluster_file

    back = load_cluster_file(output)
    if back.efficiency != fitted:  # pragma: no cover - a resolver/format mismatch, not user input
        raise InputError(f"output: {output.name} does not read back with the fitted efficiency terms")

    lines += ["", f"wrote {output} (base {base_name})", f"use it as: plan-estimate --gpu {output} ..."]
    click.echo("\n".join(lines))


if __name__ == "__main__":  # pragma: no cover
    main()
