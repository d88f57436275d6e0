"""``plan-search``: the Pareto front of GPU count, training days and dollars, and a recommended plan.

Thin on purpose: parse the options into a :class:`planner.request.SearchRequest`, call
:func:`planner.search.search`, format the :class:`planner.request.SearchResult` as an 80-column
table, CSV (one row per front point) or its JSON. Exit codes (``cli.common``): 0 a result,
2 bad input, 3 nothing feasible (with the smallest memory footprint found and the cheapest
changes that would make a plan fit).

Value syntax: lists ``256,512,1024``; integer ranges ``1..16`` (every integer) or
``64..1024:64`` (a step). ``--gpus LO..HI`` means the node multiples in the range (the step
defaults to the system's GPUs per node). ``--global-batch LO..HI`` without a step takes ``LO``,
``HI`` and the multiples of the smallest power of two that cuts the range into at most 8 parts.

Default GPU counts (no ``--gpus``/``--max-gpus``/``--max-nodes``): every node multiple from one
node up to a range that starts at 8 nodes and is doubled while doubling the GPUs still shortens
the fastest feasible run by at least a third, a 1.5x speed-up (``planner.search.default_max_gpus``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import textwrap
import click

from plan_search.cli.common import guarded, Infeasible, OneLineCommand, short_days, short_money

WIDTH = 80
FORMATS = click.Choice(["table", "json", "csv"], case_sensitive=False)


# ------------------------------------------------------------------ value parsing
def _int(text: str, name: str, minimum: int = 1) -> int:
    t = text.strip().replace("_", "")
    try:
        v = float(t) if re.fullmatch(r"[0-9.]+[eE][+-]?[0-9]+", t) else int(t)
    except (ValueError, OverflowError):
        raise click.BadParameter(f"{text!r} is not an integer", param_hint=f"--{name}") from None
    if not math.isfinite(v) or v != int(v) or v < minimum:
        raise click.BadParameter(f"{text!r} must be an integer >= {minimum}", param_hint=f"--{name}")
    return int(v)


def parse_int_set(text: str, name: str, limit: int = 10_000_000, minimum: int = 1) -> list[int]:
    """``8``, ``1,2,4``, ``1..16``, ``64..1024:64`` (and combinations) -> sorted unique ints."""
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(.+?)\.\.(.+?)(?::(.+))?", part)
        if m:
            lo, hi = _int(m.group(1), name, minimum), _int(m.group(2), name, minimum)
            step = _int(m.group(3), name) if m.group(3) else 1
            if lo > hi:
                raise click.BadParameter(f"range {part!r} is empty (low above high)", param_hint=f"--{name}")
            if (hi - lo) // step > 1_000_000:
                raise click.BadParameter(f"range {part!r} has too many values", param_hint=f"--{name}")
            out.update(range(lo, hi + 1, step))
        else:
            out.add(_int(part, name, minimum))
    if not out:
        raise click.BadParameter("empty", param_hint=f"--{name}")
    if max(out) > limit:
        raise click.BadParameter(f"{max(out)} is too large (max {limit:,})", param_hint=f"--{name}")
    return sorted(out)


def parse_gpus(text: str) -> dict:
    """``--gpus``: a list -> explicit counts; one range ``LO..HI[:STEP]`` -> bounds + step."""
    t = str(text).strip()
    m = re.fullmatch(r"(.+?)\.\.(.+?)(?::(.+))?", t)
    if m and "," not in t:
        lo, hi = _int(m.group(1), "gpus"), _int(m.group(2), "gpus")
        if lo > hi:
            raise click.BadParameter(f"range {t!r} is empty (low above high)", param_hint="--gpus")
        return {"min_gpus": lo, "max_gpus": hi, "gpus_step": _int(m.group(3), "gpus") if m.group(3) else None}
    return {"gpus": parse_int_set(t, "gpus")}


def parse_global_batch(text: str) -> list[int]:
    t = str(text).strip()
    m = re.fullmatch(r"(.+?)\.\.(.+?)", t)
    if m and "," not in t and ":" not in t:
        lo, hi = _int(m.group(1), "global-batch"), _int(m.group(2), "global-batch")
        if lo > hi:
            raise click.BadParameter(f"range {t!r} is empty", param_hint="--global-batch")
        p = 1
        while (hi - lo) / p > 8:
            p *= 2
        vals = {lo, hi} | set(range(-(-lo // p) * p, hi + 1, p))
        return sorted(v for v in vals if lo <= v <= hi)
    return parse_int_set(t, "global-batch", limit=100_000_000)


_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_tokens(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", str(text))
    if not m:
        raise click.BadParameter(f"{text!r} is not a token count (e.g. 300e9 or 300B)", param_hint="--tokens")
    v = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not (math.isfinite(v) and v > 0):
        raise click.BadParameter(f"{text!r} is not a positive token count", param_hint="--tokens")
    return v


def _positive(value: float | None, name: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value} must be a positive number", param_hint=f"--{name}")
    return value


# ------------------------------------------------------------------ formatting
def _wrap(text: str, indent: str = "  ", first: str | None = None) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width=WIDTH, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_on_hyphens=False) or [""]


def _rc(p) -> str:
    if p.recompute == "full" and p.recompute_layers is not None:
        return f"f{p.recompute_layers}"
    return {"none": "none", "selective": "sel", "full": "full"}[p.recompute]


def _tokens(x: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if x >= div:
            return f"{x / div:.4g}{suffix}"
    return f"{x:.4g}"


def _plan_line(p) -> str:
    rc = p.recompute + (f"({p.recompute_layers}/stage)" if p.recompute_layers is not None else "")
    split = ""
    if p.first_stage_layers is not None:
        split = f" layers {p.first_stage_layers}|..|{p.last_stage_layers}"
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp} mb{p.micro_batch} gb{p.global_batch} "
            f"(grad-accum {p.grad_accum}) zero{p.zero} {rc} {'SP' if p.sequence_parallel else 'no-SP'} "
            f"{p.precision}{split}")


def format_table(res) -> str:
    inp, st, front = res.inputs, res.stats, res.front
    multi = len(inp.systems) > 1
    lines = _wrap(
        f"plan-search: {inp.model} ({inp.params / 1e9:.1f}B params) on {', '.join(inp.systems)}; "
        f"{_tokens(inp.tokens)} tokens, global batch {'/'.join(map(str, inp.global_batch))} x {inp.seq_len}",
        first="")
    lines += _wrap(f"front of GPU count, days and dollars: {len(front)} non-dominated points "
                   f"(of {st.feasible:,} feasible plans)", first="")
    lines.append("")
    sysw = max([len(s) for s in inp.systems] + [6]) if multi else 0
    head = ["GPUs"] + (["system"] if multi else []) + ["tp", "pp", "dp", "cp", "v", "mb", "z", "rc",
                                                        "step s", "MFU", "GiB", "days", "$", "eff", "b"]
    rows = []
    for fp in front:
        p = fp.plan
        row = [str(fp.num_gpus)] + ([fp.gpu] if multi else []) + [
            str(p.tp), str(p.pp), str(p.dp), str(p.cp), str(p.vpp), str(p.micro_batch), str(p.zero), _rc(p),
            f"{fp.step_time_s:.2f}" if fp.step_time_s < 100 else f"{fp.step_time_s:.0f}",
            f"{100 * fp.mfu:.1f}", f"{fp.memory_gib:.1f}", short_days(fp.days), short_money(fp.cost_usd),
            f"{fp.scaling_efficiency:.2f}", "".join(b[0] for b in fp.binding) or "-",
        ]
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    left = {1} if multi else set()

    def fmt(cells):
        return " ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(cells)).rstrip()

    lines.append(fmt(head))
    lines.append(" ".join("-" * w for w in widths))
    for i, r in enumerate(rows):
        mark = "*" if res.recommended_index == i else ""
        lines.append(fmt(r) + (" " + mark if mark else ""))
    lines += _wrap("v: virtual stages; z: ZeRO stage; rc: recomputation (fK: full on K layers/stage); GiB: peak "
                   "memory per GPU; eff: tokens/s per GPU vs the smallest count on the front; b: binding "
                   "constraint at that count (m memory, c comm ratio); *: recommended", first="")
    lines.append("")
    lines += _recommended(res)
    lines.append("")
    proven = "proven optimal" if st.proven_optimal else "NOT proven optimal (time limit)"
    lines += _wrap(
        f"search: {st.candidates:,} candidates over {st.gpu_counts:,} GPU counts, {st.memory_rejected:,} over "
        f"memory, {st.comm_rejected:,} over the comm ratio, {st.feasible:,} feasible; {st.solver_candidates:,} "
        f"to {st.solver} after pruning ({st.solves} solves); enumerate {st.enumerate_s:.2f} s, evaluate "
        f"{st.evaluate_s:.2f} s, solve {st.solve_s:.2f} s, total {st.total_s:.2f} s; {proven}", first="")
    return "\n".join(lines)


def _recommended(res) -> list[str]:
    e = res.recommended
    p = e.plan
    lines = _wrap(f"recommended ({res.objective}): {p.num_gpus} x {e.cluster}", first="")
    lines += _wrap(res.reason)
    lines += _wrap(_plan_line(p))
    run = e.run
    lines += _wrap(
        f"step {e.step_time_s:.3f} s, {e.tokens_per_s:,.0f} tokens/s ({e.tokens_per_s_per_gpu:,.0f}/GPU), MFU "
        f"{100 * e.mfu:.1f}%, exposed comm {100 * e.comm_ratio:.1f}% of the step, bottleneck {e.bottleneck}")
    if run is not None:
        lines += _wrap(f"run: {run.days:,.2f} days, {run.gpu_hours:,.0f} GPU-hours, ${run.cost_usd:,.0f}, "
                       f"{run.energy_kwh:,.0f} kWh ({e.power_kw:,.1f} kW)")
    t, m = e.time, e.memory
    step = e.step_time_s or 1.0
    trows = [("compute", t.compute_s), ("memory-bound", t.memory_bound_s), ("recompute", t.recompute_s),
             ("TP comm", t.tp_comm_s), ("CP comm", t.cp_comm_s), ("PP comm", t.pp_comm_s),
             ("bubble", t.bubble_s), ("DP comm", t.dp_comm_s), ("optimizer", t.optimizer_s),
             ("overhead", t.overhead_s), ("step", e.step_time_s)]
    mrows = [("weights", m.weights_gib), ("gradients", m.gradients_gib), ("optimizer", m.optimizer_gib),
             ("activations", m.activations_gib), ("ZeRO-3 buffer", m.zero3_gather_buffer_gib),
             ("framework", m.framework_overhead_gib), ("peak", m.peak_gib),
             ("usable", m.usable_gib), ("capacity", m.capacity_gib)]
    left = [f"  {'time per step':<14} {'s':>8} {'%':>6}"] + [
        f"  {k:<14} {v:8.3f} {100 * v / step:5.1f}%" for k, v in trows]
    right = [f"{'memory/GPU (' + m.worst_stage + ')':<20} {'GiB':>7}"] + [f"{k:<20} {v:7.2f}" for k, v in mrows]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        lines.append(f"{a:<36}  {b}".rstrip())
    return lines


CSV_FIELDS = ("gpu", "num_gpus", "nodes", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch",
              "grad_accum", "zero", "recompute", "recompute_layers", "sequence_parallel", "precision",
              "first_stage_layers", "last_stage_layers", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
              "mfu", "memory_gib", "memory_usable_gib", "comm_ratio", "days", "gpu_hours", "cost_usd",
              "energy_kwh", "power_kw", "scaling_efficiency", "bottleneck", "binding", "recommended")


def format_csv(res) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for i, fp in enumerate(res.front):
        d = fp.model_dump()
        plan = d.pop("plan")
        d.update(plan)
        d["binding"] = "+".join(fp.binding)
        d["recommended"] = res.recommended_index == i
        w.writerow(["" if d.get(k) is None else d.get(k) for k in CSV_FIELDS])
    return buf.getvalue().rstrip("\n")


# ------------------------------------------------------------------ command
@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--model", "model_ref", default=None, help="catalog model name/alias or model file")
@click.option("--gpu", "gpu_ref", default=None, help="system(s): catalog names or cluster files, comma separated "
              "(one front across them)")
@click.option("--request", "request_file", default=None, type=click.Path(dir_okay=False, allow_dash=True),
              help="a SearchRequest YAML/JSON file, or - for stdin (see --schema request); other options "
              "override its fields")
@click.option("--gpus", default=None, help="GPU counts: 256,512,1024 or 64..1024[:step] (node multiples)")
@click.option("--max-gpus", type=int, default=None, help="every node multiple up to N")
@click.option("--min-gpus", type=int, default=None, help="smallest GPU count")
@click.option("--max-nodes", type=int, default=None, help="cap GPU counts at N nodes")
@click.option("--global-batch", default=None, help="sequences per step: 1536, 1024,2048 or 1024..2048 "
              "[default: the model's]")
@click.option("--seq-len", type=int, default=None, help="sequence length [default: the model's]")
@click.option("--tokens", default=None, help="training tokens, e.g. 300e9 or 300B [default: 300B]")
@click.option("--deadline-days", type=float, default=None, help="the run must finish within this many days")
@click.option("--budget-usd", type=float, default=None, help="the run may cost at most this (GPU-hours x price)")
@click.option("--max-power-kw", type=float, default=None, help="power cap of the GPUs at the wall (TDP x PUE)")
@click.option("--memory-headroom", type=float, default=None, help="fraction of GPU memory kept free [default: 0.1]")
@click.option("--max-comm-ratio", type=float, default=None,
              help="max exposed (not hidden) communication as a share of the step, e.g. 0.1")
@click.option("--tp", default=None, help="tensor-parallel degrees, e.g. 8 or 1,2,4,8")
@click.option("--pp", default=None, help="pipeline stages, e.g. 1..16")
@click.option("--cp", default=None, help="context-parallel degrees (powers of two)")
@click.option("--vpp", default=None, help="virtual stages per GPU")
@click.option("--micro-batch", default=None, help="micro-batch sizes")
@click.option("--zero", default=None, help="ZeRO stages, e.g. 0,1")
@click.option("--recompute", default=None, help="none,selective,full,partial (any subset)")
@click.option("--recompute-layers", default=None, help="k values of partial recomputation (layers/stage)")
@click.option("--sequence-parallel", type=click.Choice(["on", "off", "both"]), default=None,
              help="sequence parallelism when tp > 1 [default: on]")
@click.option("--allow-cross-node-tp", is_flag=True, default=False, help="let tp groups span NVLink domains")
@click.option("--max-cp", type=int, default=None, help="default cp domain cap [default: seq_len/1024]")
@click.option("--max-vpp", type=int, default=None, help="default vpp domain cap [default: none]")
@click.option("--max-micro-batch", type=int, default=None, help="default micro-batch cap [default: 8]")
@click.option("--bf16-grads", is_flag=True, default=False, help="half-precision gradient reduction (default fp32)")
@click.option("--no-overlap-tp-comm", is_flag=True, default=False, help="no TP communication overlap")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp8"]), default=None, help="GEMM precision")
@click.option("--objective", type=click.Choice(["fastest", "cheapest", "fewest-gpus", "least-energy", "best-mfu"]),
              default=None, help="what the recommended plan optimises [default: fastest]")
@click.option("--solver", type=click.Choice(["cpsat", "exhaustive"]), default=None, help="[default: cpsat]")
@click.option("--time-limit", type=float, default=None, help="seconds for the whole search [default: 10]")
@click.option("--workers", type=int, default=None, help="CP-SAT workers [default: 1]")
@click.option("--seed", type=int, default=None, help="CP-SAT random seed [default: 0]")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="what-if override of every system, e.g. gpu.hbm_bandwidth_gbps=3000 (repeatable)")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help="output format")
@click.option("--schema", type=click.Choice(["request", "result"]), default=None,
              help="print the JSON Schema of the request or the result and exit")
@click.option("--framework", type=click.Choice(["megatron", "deepspeed", "torchtitan", "nemo"]), default=None,
              help="only plans this framework can run (planner/frameworks.py)")
@click.option("--emit", is_flag=True, default=False,
              help="with --framework: print the recommended plan's launch configuration (in JSON: 'launch')")
@click.option("--plot", "plot_file", default=None, type=click.Path(dir_okay=False),
              help="also draw the front (GPUs against days and dollars) to this .png/.svg/.pdf "
              "(pip install 'plan-search[plot]')")
@guarded
def main(model_ref, gpu_ref, request_file, gpus, max_gpus, min_gpus, max_nodes, global_batch, seq_len, tokens,
         deadline_days, budget_usd, max_power_kw, memory_headroom, max_comm_ratio, tp, pp, cp, vpp, micro_batch,
         zero, recompute, recompute_layers, sequence_parallel, allow_cross_node_tp, max_cp, max_vpp,
         max_micro_batch, bf16_grads, no_overlap_tp_comm, precision, objective, solver,
         time_limit, workers, seed, sets, fmt, schema, framework=None, emit=False, plot_file=None) -> None:
    """Search parallel plans (tp, pp, dp, cp, vpp, micro-batch, ZeRO, recomputation, SP) and GPU
    counts for the Pareto front of GPU count, training days and dollars, under memory,
    communication, deadline, budget and power limits; recommend one plan.

    Exit 0 with a result, 2 on bad input, 3 when nothing is feasible.
    """
    from plan_search.planner.search.request import Knobs, NoFeasiblePlan, SearchRequest, SearchResult

    if schema:
        doc = (SearchRequest if schema == "request" else SearchResult).model_json_schema()
        click.echo(json.dumps(doc, indent=2))
        return
    data: dict = {}
    if request_file:
        from plan_search.models.io import InputError, load_document, load_stream

        if request_file == "-":  # same size bound as a file, read without reading past it
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin is None:
                raise InputError("request: -: there is no standard input to read")
            data = dict(load_stream(stdin, "request"))
        else:
            data = dict(load_document(request_file, "request"))
    from plan_search.models.io import InputError, short_repr

    for key, kind, what in (("knobs", dict, "a mapping of knob bounds"), ("sets", list, "a list of KEY=VALUE strings")):
        if data.get(key) is not None and not isinstance(data[key], kind):  # merged with the options below
            raise InputError(f"request: {key}: expected {what} (got {short_repr(data[key])}); see --schema request")
    knobs = dict(data.get("knobs") or {})
    if model_ref:
        data["model"] = model_ref
    if not data.get("model"):
        raise click.UsageError("--model is required (or a --request file with model:)")
    if gpu_ref:
        data["gpu"] = [g.strip() for g in gpu_ref.split(",") if g.strip()]
    if gpus:
        parsed = parse_gpus(gpus)
        if "gpus" not in parsed:  # a range replaces a request file's explicit list
            data.pop("gpus", None)
        data.update({k: v for k, v in parsed.items() if v is not None})
    for key, val in (("max_gpus", max_gpus), ("min_gpus", min_gpus), ("max_nodes", max_nodes),
                     ("seq_len", seq_len), ("workers", workers), ("seed", seed)):
        if val is not None:
            data[key] = val
    if global_batch:
        data["global_batch"] = parse_global_batch(global_batch)
    if tokens:
        data["tokens"] = parse_tokens(tokens)
    for key, val in (("deadline_days", deadline_days), ("budget_usd", budget_usd), ("max_power_kw", max_power_kw),
                     ("time_limit_s", time_limit)):
        if val is not None:
            data[key] = _positive(val, key.replace("_", "-"))
    for key, val in (("memory_headroom", memory_headroom), ("max_comm_ratio", max_comm_ratio)):
        if val is not None:
            if not math.isfinite(val):
                raise click.BadParameter(f"{val} is not a number", param_hint=f"--{key.replace('_', '-')}")
            data[key] = val
    if emit and not (framework or data.get("framework")):
        raise click.UsageError("--emit needs --framework megatron|deepspeed|torchtitan|nemo")
    for key, val in (("precision", precision), ("objective", objective), ("solver", solver),
                     ("framework", framework)):
        if val is not None:
            data[key] = val
    for key, val in (("tp", tp), ("pp", pp), ("cp", cp), ("vpp", vpp), ("micro_batch", micro_batch),
                     ("zero", zero), ("recompute_layers", recompute_layers)):
        if val is not None:
            knobs[key] = (parse_int_set(val, "zero", limit=3, minimum=0) if key == "zero"
                          else parse_int_set(val, key.replace("_", "-")))
    if recompute:
        knobs["recompute"] = [r.strip() for r in recompute.split(",") if r.strip()]
    if sequence_parallel:
        knobs["sequence_parallel"] = {"on": [True], "off": [False], "both": [True, False]}[sequence_parallel]
    if allow_cross_node_tp:
        knobs["allow_cross_node_tp"] = True
    for key, val in (("max_cp", max_cp), ("max_vpp", max_vpp), ("max_micro_batch", max_micro_batch)):
        if val is not None:
            knobs[key] = val
    if bf16_grads:
        data["fp32_grads"] = False
    if no_overlap_tp_comm:
        data["overlap_tp_comm"] = False
    data["knobs"] = Knobs(**knobs)
    if sets:
        data["sets"] = list(data.get("sets") or []) + list(sets)
    request = SearchRequest(**data)

    from plan_search.planner.search.front import search

    if plot_file:  # fail before searching when matplotlib is missing
        from plan_search.planner.plots import require_matplotlib

        require_matplotlib()
    try:
        result = search(request)
    except NoFeasiblePlan as exc:
        raise Infeasible(str(exc)) from None
    f = fmt.lower()
    launch = None
    if emit:
        from plan_search.models.resolve import resolve_model
        from plan_search.planner.frameworks.emit import emit as emit_config

        from plan_search.hardware.resolve import resolve_cluster

        rec = result.recommended
        ref = next((g for g in request.gpu if resolve_cluster(g, request.sets).name == rec.cluster), request.gpu[0])
        launch = emit_config(request.framework, rec.plan, resolve_model(request.model),
                             resolve_cluster(ref, request.sets))
    if f == "json":
        if launch is not None:
            doc = json.loads(result.model_dump_json())
            doc["launch"] = launch.as_json()
            click.echo(json.dumps(doc, indent=2))
        else:
            click.echo(result.model_dump_json(indent=2))
    elif f == "csv":
        click.echo(format_csv(result))
    else:
        click.echo(format_table(result))
    if launch is not None and f != "json":
        click.echo(f"\n{request.framework} launch configuration of the recommended plan:")
        click.echo(launch.text)
        for n in launch.notes:
            click.echo(f"  note: {n}")
    if plot_file:
        from plan_search.planner.plots import plot_front

        plot_front(result, plot_file)
        click.echo(f"wrote {plot_file}", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
