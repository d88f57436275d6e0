"""``plan-allocate``: share a pool of free GPUs among training jobs (``planner.allocate``).

Every job is searched (``plan-search``'s search and cost model) on every GPU type it allows;
CP-SAT chooses for each job one GPU type, count and plan from those fronts so that no type's
pool is oversubscribed, optimising ``--objective``. All chosen jobs run concurrently, from now.

Exit codes (``cli.common``): 0 a result (jobs that cannot meet their deadline, or fit nowhere,
are listed with the reason), 2 bad input, 3 nothing feasible (no job has an option, or the
pool cannot run every job and ``--allow-unscheduled`` is not given).
"""

from __future__ import annotations

import json
import sys
import textwrap

import click

from plan_search import __version__

from plan_search.cli.common import guarded, Infeasible, OneLineCommand, short_days, short_money, align_row, column_widths, rule_row

WIDTH = 80


def _read(path: str, what: str) -> dict:
    from plan_search.models.io import read_document

    return read_document(path, what)


def _validate(cls, data: dict, what: str):
    from pydantic import ValidationError

    from plan_search.models.io import InputError, validation_message

    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_message(exc, what)) from None


def _wrap(text: str, indent: str = "  ", first: str = "") -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width=WIDTH, initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False) or [""]


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "~"


def _plan(p) -> str:
    if p is None:
        return ""
    rc = p.recompute + (f"({p.recompute_layers}/stage)" if p.recompute_layers is not None else "")
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp} mb{p.micro_batch} gb{p.global_batch} "
            f"zero{p.zero} {rc} {'SP' if p.sequence_parallel else 'no-SP'} {p.precision}")


def _capacity(u) -> str:
    if u.nodes_free is None:
        return f"{u.gpus_free} GPUs"
    gpus = u.nodes_free * u.gpus_per_node
    if u.gpus_free is not None and u.gpus_free < gpus:
        return f"{u.gpus_free} GPUs on {u.nodes_free} nodes"
    return f"{u.nodes_free} nodes ({gpus} GPUs)"


def format_table(res) -> str:
    pool = ", ".join(f"{u.gpu} {_capacity(u)}" for u in res.pool)
    t = res.totals
    lines = _wrap(f"plan-allocate: {t.jobs} jobs on {pool}; objective {res.objective}", first="")
    lines += _wrap("all scheduled jobs run concurrently from now, each on its own GPUs", first="")
    lines.append("")
    head = ["job", "weight", "gpu", "GPUs", "nodes", "days", "deadline", "$"]
    rows = [[_cut(a.job, 20), f"{a.weight:g}", _cut(a.gpu, 12), str(a.num_gpus), str(a.nodes), short_days(a.days),
             "-" if a.deadline_days is None else f"{a.deadline_days:g}", short_money(a.cost_usd)]
            for a in res.assignments]
    if rows:
        widths = column_widths(head, rows)
        left = {0, 2}
        lines.append(align_row(head, widths, left))
        lines.append(rule_row(widths))
        for a, r in zip(res.assignments, rows):
            lines.append(align_row(r, widths, left))
            if a.plan is not None:
                lines += _wrap(_plan(a.plan), indent="    ", first="    ")
    else:
        lines.append("no job scheduled")
    if res.unscheduled:
        lines.append("")
        lines.append(f"unscheduled ({len(res.unscheduled)}):")
        for u in res.unscheduled:
            lines += _wrap(f"{u.job} (weight {u.weight:g}): {u.reason}", indent="    ", first="  ")
    lines.append("")
    use = "; ".join(
        f"{u.gpu} {u.gpus_used}" + (f"/{u.gpus_free}" if u.gpus_free is not None else "") + " GPUs"
        + (f" on {u.nodes_used}/{u.nodes_free} nodes" if u.nodes_free is not None else "")
        for u in res.pool)
    lines += _wrap(f"pool used: {use}", first="")
    lines += _wrap(f"totals: {t.scheduled} of {t.jobs} jobs scheduled; weighted completion "
                   f"{t.weighted_completion_days:,.2f} weight-days; cost ${t.cost_usd:,.0f}; makespan "
                   f"{t.makespan_days:,.2f} days", first="")
    s = res.solver
    proven = "proven optimal" if s.proven_optimal else (
        "NOT proven optimal (" + ("a search hit its time limit" if not s.searches_proven else "time limit") + ")")
    if s.time_limited_jobs:
        names = ", ".join(s.time_limited_jobs[:5]) + (f" and {len(s.time_limited_jobs) - 5} more"
                                                      if len(s.time_limited_jobs) > 5 else "")
        lines += _wrap(f"time limit: the searches of {len(s.time_limited_jobs)} job(s) were stopped or skipped "
                       f"({names}): their options may be incomplete; raise --time-limit", first="")
    how = ("the greedy start (CP-SAT found nothing better within the time limit)" if s.status == "greedy"
           else f"CP-SAT {s.status}")
    lines += _wrap(f"solver: {how} over {s.options} options, tiers {' > '.join(s.tiers)}; "
                   f"search {s.search_s:.2f}s, solve {s.solve_s:.2f}s; {proven}", first="")
    return "\n".join(lines)


SCHEMAS = ("pool", "jobs", "result")
#: Exit code of an allocation the time limit cut (a result on stdout, not proven optimal).
EXIT_CUT = 4


@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="plan-allocate", message="%(prog)s %(version)s")
@click.option("--pool", "pool_file", default=None, help="free GPUs by type, YAML/JSON ('-' for stdin)")
@click.option("--jobs", "jobs_file", default=None, help="the jobs, YAML/JSON ('-' for stdin)")
@click.option("--objective", type=click.Choice(["weighted-completion", "cost", "makespan"]),
              default="weighted-completion", show_default=True,
              help="sum of weight x days | sum of dollars | the longest job's days")
@click.option("--allow-unscheduled", is_flag=True, default=False,
              help="jobs may be left out when the pool cannot hold them all (fewest weight left out first)")
@click.option("--time-limit", type=float, default=10.0, show_default=True,
              help="seconds for the whole allocation: the jobs' searches (70%, each at most its own "
              "time_limit_s) and the CP-SAT solve (the rest)")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True, help="output format")
@click.option("--schema", type=click.Choice(SCHEMAS), default=None,
              help="print the JSON Schema of the pool, jobs or result document and exit")
@guarded
def main(pool_file, jobs_file, objective, allow_unscheduled, time_limit, fmt, schema) -> None:
    """Choose a GPU type, GPU count and parallel plan for every job so that the pool of free
    GPUs is not oversubscribed and the objective is optimal (CP-SAT over each job's fronts).

    Exit 0 with a result, 2 on bad input, 3 when nothing is feasible, 4 with a result the time limit
    cut (printed as usual, not proven optimal: one ``cut:`` line on stderr says what stopped).
    """
    import math

    from plan_search.planner.allocate import AllocationInfeasible, AllocationResult, Jobs, Pool, allocate

    if schema:
        doc = {"pool": Pool, "jobs": Jobs, "result": AllocationResult}[schema].model_json_schema()
        click.echo(json.dumps(doc, indent=2))
        return
    if not pool_file or not jobs_file:
        raise click.UsageError("--pool and --jobs are required")
    if pool_file == "-" and jobs_file == "-":
        raise click.UsageError("only one of --pool and --jobs can be read from stdin")
    if not (math.isfinite(time_limit) and 0 < time_limit <= 86_400):
        raise click.BadParameter(f"{time_limit} must be in (0, 86400] seconds", param_hint="--time-limit")
    pool = _validate(Pool, _read(pool_file, "pool"), "pool")
    jobs = _validate(Jobs, _read(jobs_file, "jobs"), "jobs")
    try:
        res = allocate(pool, jobs, objective=objective, allow_unscheduled=allow_unscheduled,
                       time_limit_s=time_limit)
    except AllocationInfeasible as exc:
        raise Infeasible(str(exc)) from None
    if fmt.lower() == "json":
        click.echo(res.model_dump_json(indent=2))
    else:
        click.echo(format_table(res))
    if not res.solver.proven_optimal:  # an answer, but the limit cut it: a scheduler must not take it as final
        s = res.solver
        what = (f"the searches of {len(s.time_limited_jobs)} job(s) stopped or skipped" if s.time_limited_jobs
                else "a job's search not proven" if not s.searches_proven else f"CP-SAT stopped ({s.status})")
        click.echo(f"cut: the allocation is not proven optimal ({what}); raise --time-limit", err=True)
        sys.exit(EXIT_CUT)


if __name__ == "__main__":  # pragma: no cover
    main()
