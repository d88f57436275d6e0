"""``plan-estimate --from FILE``: price the launch configuration a team already runs.

The file is read by :func:`planner.frameworks.read.read_launch` (Megatron-LM scripts and argument lists, NeMo
2.0 / Megatron-Bridge overrides, torchtitan TOML, DeepSpeed JSON); the plan is priced as ``plan-estimate
--framework`` prices it (:func:`planner.frameworks.rules.as_run`, then :func:`planner.costmodel.estimate`), and the
account of the file (used / not priced / not understood / defaulted) is printed before the table.
"""

from __future__ import annotations

import json

import click

from plan_search.planner.frameworks.read.price import read_and_price  # noqa: F401  (cli.calibrate_from's name)


def account_lines(r, width: int = 80) -> list[str]:
    """The account of every line of the file, grouped (used, not priced, not understood, defaulted)."""
    import textwrap

    def rows(entries, show_what=True):
        out = []
        for e in entries:
            at = f"{e.line:>4d}" if e.line else "   -"
            body = f"{e.text}" + (f"  [{e.what}]" if show_what and e.what else "")
            out += textwrap.wrap(body, width=width - 8, initial_indent=f"  {at}  ", subsequent_indent=" " * 10,
                                 break_on_hyphens=False) or [f"  {at}"]
        return out

    lines = textwrap.wrap(f"from {r.path}: {r.framework} ({r.dialect}); defaults: {r.version}", width=width,
                          subsequent_indent="  ")
    lines += textwrap.wrap(f"model {r.model.name}; GPUs: {r.gpus_from}", width=width, initial_indent="  ",
                           subsequent_indent="  ")
    lines.append(f"used ({len(r.used)})")
    lines += rows(r.used)
    groups: dict[str, list] = {}
    for e in r.unpriced:
        groups.setdefault(e.what, []).append(e)
    lines.append(f"not priced ({len(r.unpriced)}): understood, no effect on what is priced")
    for why, es in groups.items():
        lines += textwrap.wrap(f"{why}:", width=width, initial_indent="  ", subsequent_indent="    ")
        lines += rows(es, show_what=False)
    lines.append(f"not understood ({len(r.not_understood)})" + (": the estimate is made without them"
                                                              if r.not_understood else ""))
    lines += rows(r.not_understood, show_what=False)
    lines.append(f"defaulted ({len(r.defaulted)}): not in the file")
    lines += rows(r.defaulted)
    notes = [e for e in r.notes if e.what != "model"]
    if notes:
        lines.append(f"notes ({len(notes)})")
        lines += rows(notes)
    return lines


def run(from_path: str, *, model_ref, gpu_ref, num_gpus, launch, sets, memory_headroom, tokens,
        checkpoint_interval_h, fmt: str, improve: bool = False, output=None, gpus_move: str | None = None,
        top: int = 3, time_limit_s: float = 10.0, seq_len: int | None = None, format_table) -> None:
    """The body of ``plan-estimate --from``; ``format_table`` is plan-estimate's table (cli.estimate hands it in:
    that module imports this one, so this one does not import it back)."""
    from plan_search.cli.common import Infeasible
    from plan_search.hardware.overrides import describe_overrides

    r, plan, cluster, est = read_and_price(from_path, model_ref=model_ref, gpu_ref=gpu_ref, num_gpus=num_gpus,
                                           launch=launch, sets=sets, memory_headroom=memory_headroom, tokens=tokens,
                                           checkpoint_interval_h=checkpoint_interval_h, seq_len=seq_len)
    better = None
    if improve or output is not None:
        from plan_search.cli import improve as imp

        from plan_search.models.output import check_output

        if output is not None:  # before the search: never the input, a regular file or none
            from pathlib import Path

            check_output(Path(output), "--output", [Path(from_path)])
        r.settings["cluster"] = cluster
        better = imp.alternatives(r, plan, cluster, est, memory_headroom=memory_headroom, tokens=tokens,
                                  checkpoint_interval_h=checkpoint_interval_h, gpus_move=gpus_move, top=top,
                                  sets=sets, time_limit_s=time_limit_s)
    if fmt.lower() == "json":
        doc = json.loads(est.model_dump_json())
        doc["from"] = r.as_json()
        if better is not None:
            doc["improve"] = [a.as_json() for a in better]
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo("\n".join(account_lines(r)))
        click.echo("")
        if better is not None:  # before the table: the account and the changes read together
            from plan_search.cli import improve as imp

            click.echo("\n".join(imp.format_alternatives(r, est, better)))
            click.echo("")
        overrides = describe_overrides(sets, cluster) if sets else []
        click.echo(format_table(est, cluster, r.model, memory_headroom, overrides))
    if output is not None:
        from plan_search.cli import improve as imp

        imp.write_improved(r, better, output, from_path)  # after the alternatives are printed: a refusal names them
        click.echo(f"wrote {output} (the first alternative; {from_path} unchanged)", err=fmt.lower() == "json")
    if not est.feasible:
        raise Infeasible(est.reasons[0] if est.reasons else "the plan does not fit")
