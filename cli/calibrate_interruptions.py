"""``plan-calibrate LOG.csv --interruptions --gpu SYSTEM -o FILE``: a cluster's failure rate and restart
time fitted from its run log of interruptions (:mod:`planner.interruptions`), written as a cluster file
(``base:`` + ``failures_per_1000_gpu_days`` + ``restart_minutes``) that every command prices with."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Sequence

import click
import yaml


def fit_command(log: Path, gpu_ref: str, output: Path, sets: Sequence[str], resolve_gpu, nested_overrides) -> None:
    from plan_search.hardware.resolve import deep_merge, load_cluster_file
    from plan_search.models.io import InputError
    from plan_search.models.output import check_output, write_text_atomic
    from plan_search.planner.costmodel import goodput
    from plan_search.planner.interruptions import read_log

    base_name, cluster, doc = resolve_gpu(gpu_ref, sets)
    check_output(output, "--output", [log] + ([Path(gpu_ref)] if doc is not None else []), make_parents=True)
    rows = read_log(log)
    try:
        fit = goodput.fit_interruptions(rows)
    except ValueError as exc:
        raise InputError(f"interruptions: {log.name}: {exc}") from None
    before, source = goodput.failure_rate_of(cluster)
    rate = fit["failures_per_1000_gpu_days"]
    lines = [f"{cluster.name} ({cluster.gpu.name}): {fit['interruptions']} interruption(s) in "
             f"{fit['gpu_days']:,.0f} GPU-days of {log.name}", ""]
    band = (f"90% interval {fit['rate_low']:.3g} to {fit['rate_high']:.3g} (normal approximation)"
            if "rate_low" in fit else "no interruption seen: 0, an optimistic figure from a short log")
    lines.append(f"failure rate     {rate:.3g} per 1,000 GPU-days; was {before:.3g} ({source.split(':')[0]})")
    lines.append(f"                 {band}")
    if fit["restart_minutes"] is None:
        lines.append("restart          no lost_minutes given: the system's restart time is kept")
    else:
        lines.append(f"restart          {fit['restart_minutes']:.3g} minutes, the mean lost_minutes (was "
                     f"{goodput.restart_s_of(cluster) / 60:.3g})")
    data: dict[str, Any] = {"base": base_name}
    if doc is not None:
        data.update({k: v for k, v in doc.items() if k not in ("base", "name")})
    data = deep_merge(data, nested_overrides(sets))
    data["failures_per_1000_gpu_days"] = float(rate)
    if fit["restart_minutes"] is not None:
        data["restart_minutes"] = float(fit["restart_minutes"])
    header = [f"# Written by plan-calibrate --interruptions on {datetime.date.today().isoformat()}: failure rate "
              f"and restart time of {base_name}", f"# fitted to {fit['interruptions']} interruption(s) in "
              f"{fit['gpu_days']:,.0f} GPU-days of {log.name}; use it as --gpu {output.name}."]
    header += [f"# --set {s}" for s in sets]
    text = "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    write_text_atomic(output, text, "--output")
    back = load_cluster_file(output)
    if back.failures_per_1000_gpu_days != data["failures_per_1000_gpu_days"]:  # pragma: no cover
        raise InputError(f"output: {output.name} does not read back with the fitted failure rate")
    lines += ["", f"wrote {output} (base {base_name})", f"use it as: plan-estimate --gpu {output} ..."]
    click.echo("\n".join(lines))
