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

from plan_search import __version__

from plan_search.cli.common import guarded, Infeasible, OneLineCommand, short_days, short_money, align_row, column_widths, rule_row, moe_kernel_words
from plan_search.cli.knobs import _int, collect, knob_options, parse_int_set

WIDTH = 80
FORMATS = click.Choice(["table", "json", "csv"], case_sensitive=False)


# ------------------------------------------------------------------ value parsing
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


def split_batch_tolerance(text: str) -> tuple[str, float | None]:
    """``1536~5%`` (or ``1536~0.05``) -> (``"1536"``, 0.05): a target batch and its relative
    tolerance (each plan then uses the batch nearest the target that its dp divides)."""
    t = str(text).strip()
    if "~" not in t:
        return t, None
    base, _, tol = t.partition("~")
    tol = tol.strip()
    try:
        v = float(tol[:-1]) / 100 if tol.endswith("%") else float(tol)
    except ValueError:
        raise click.BadParameter(f"tolerance {tol!r} is not a number; e.g. 1536~5%", param_hint="--global-batch") \
            from None
    if not (math.isfinite(v) and 0 <= v < 0.5):
        raise click.BadParameter(f"tolerance {tol!r} must be at least 0 and below 50%; e.g. 1536~5%",
                                 param_hint="--global-batch")
    return base.strip(), v


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


def parse_tokens(text: str) -> float:
    from plan_search.models.io import parse_token_count

    return parse_token_count(text, "--tokens")


def _positive(value: float | None, name: str, most: float | None = None) -> float | None:
    """A positive finite number; with ``most`` the accepted range is stated (``--time-limit inf`` said only
    'must be a positive number')."""
    if value is not None and not (math.isfinite(value) and value > 0 and (most is None or value <= most)):
        what = f"must be a number of seconds in (0, {most:g}]" if most else "must be a positive number"
        raise click.BadParameter(f"{value:g} {what}", param_hint=f"--{name}")
    return value


# ------------------------------------------------------------------ formatting
def _wrap(text: str, indent: str = "  ", first: str | None = None) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width=WIDTH, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_on_hyphens=False) or [""]


def _rc(p) -> str:
    if p.recompute == "full" and p.recompute_layers is not None:
        return f"f{p.recompute_layers}"
    return {"none": "none", "selective": "sel", "full": "full"}[p.recompute]


def _ends(p, num_layers: int | None) -> tuple[int, int] | None:
    """(first, last) stage layers of an uneven pipeline split, None when every stage is equal."""
    if num_layers and p.pp > 1:
        split = p.split(num_layers)
        return None if len(set(split)) == 1 else (split[0], split[-1])
    if p.first_stage_layers is not None or p.last_stage_layers is not None:
        return (p.first_stage_layers or 0, p.last_stage_layers or 0)
    return None


def _pp(p, num_layers: int | None = None) -> str:
    """Pipeline stages, with the end stages' layers when the split is uneven: ``20:3`` (first
    and last 3 layers), ``14:7/6`` (first 7, last 6)."""
    ends = _ends(p, num_layers)
    if ends is None:
        return str(p.pp)
    return f"{p.pp}:{ends[0]}" if ends[0] == ends[1] else f"{p.pp}:{ends[0]}/{ends[1]}"


def _num_layers(res) -> int | None:
    try:
        from plan_search.models.resolve import resolve_model

        return resolve_model(res.request.model).num_layers
    except Exception:  # a spec passed to search() directly: the plans' own fields are all there is
        return None


def _tokens(x: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if x >= div:
            return f"{x / div:.4g}{suffix}"
    return f"{x:.4g}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _plan_line(p, num_layers: int | None = None) -> str:
    rc = p.recompute + (f" on {p.recompute_layers} layers/stage" if p.recompute_layers is not None else "")
    rc += f"({p.recompute_modules})" if p.recompute_modules else ""  # Megatron's --recompute-modules (issue 29)
    rc += f" offload({p.offload_modules})" if p.offload_modules else ""
    split = ""
    ends = _ends(p, num_layers)
    if ends is not None:
        split = f"; uneven stages: first {ends[0]}, last {ends[1]} layers"
    # the knobs that make the split (plan-estimate's options): re-estimating the line's knobs without
    # them prices the balanced split instead (GPT-3 on 56 A100s: 14x5|13x2 layers, +0.044%)
    counted = [w for w, on in (("embedding", p.account_for_embedding_in_pipeline_split),
                               ("loss", p.account_for_loss_in_pipeline_split)) if on and p.pp > 1]
    if counted:
        split += f" ({' and '.join(counted)} counted as layers: account_for_{'/'.join(counted)}_in_pipeline_split)"
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp} mb{p.micro_batch} gb{p.global_batch} "
            f"(grad-accum {p.grad_accum}) zero{p.zero} {rc} {'SP' if p.sequence_parallel else 'no-SP'} "
            f"{p.precision}" + (f" ep{p.ep} etp{p.etp} {p.moe_dispatcher}"
                                + "".join(f" {w}" for w in moe_kernel_words(p)) if p.ep * p.etp > 1 else "")
            + (f" {p.pp_schedule}" if p.pp_schedule != "1f1b" else "") + split)


#: Names of the landmarks in the table's last column (SearchResult.landmarks).
MARK_NAMES = {"fewest-gpus": "fewest GPUs", "cheapest": "cheapest", "balanced": "balanced", "fastest": "fastest"}
#: The front table's short names of the frameworks (column fw).
FW_SHORT = {"megatron": "mlm", "nemo": "nemo", "torchtitan": "titan", "deepspeed": "ds"}
#: Rows of the short front: the landmarks, topped up with points spread over the GPU counts.
SHORT_ROWS = 7


def short_front(res) -> list[int]:
    """Indices of the front shown by default: the landmarks (fewest GPUs, cheapest, balanced,
    fastest, recommended) and points spread evenly in log GPU count, at most SHORT_ROWS rows."""
    front = res.front
    if len(front) <= SHORT_ROWS + 2:  # hiding one or two points saves nothing
        return list(range(len(front)))
    keep = set(res.landmarks.values()) if res.landmarks else {0, len(front) - 1}
    if res.recommended_index is not None:
        keep.add(res.recommended_index)
    logs = [math.log(fp.num_gpus) for fp in front]
    lo, hi = min(logs), max(logs)
    # fill from the points no other beats on days and dollars both (per GPU type): the rest are on
    # the front only for using fewer GPUs, often a count the batch divides awkwardly
    pool = []
    for name in {fp.gpu for fp in front}:
        best = math.inf
        for i in sorted((i for i, fp in enumerate(front) if fp.gpu == name),
                        key=lambda i: (front[i].days, front[i].cost_usd)):
            if front[i].cost_usd < best:
                pool.append(i)
                best = front[i].cost_usd
    k = 1
    while len(keep) < SHORT_ROWS and k < 4 * SHORT_ROWS:
        # the point farthest (in log GPUs) from those kept
        far = max((i for i in pool if i not in keep),
                  key=lambda i: (min(abs(logs[i] - logs[j]) for j in keep), -i), default=None)
        if far is None or (hi > lo and min(abs(logs[far] - logs[j]) for j in keep) < 0.05 * (hi - lo)):
            break
        keep.add(far)
        k += 1
    return sorted(keep)


def _front_table(res, shown: list[int]) -> list[str]:
    front = res.front
    multi = len(res.inputs.systems) > 1
    gbs = {fp.plan.global_batch for fp in front}
    tags: dict[int, list[str]] = {}
    for name, i in (res.landmarks or {}).items():
        if name in MARK_NAMES:
            tags.setdefault(i, []).append(MARK_NAMES[name])
    for i in shown:  # on the front only for using fewer GPUs: name the larger count that beats it
        fp = front[i]
        better = [q for q in front if q.gpu == fp.gpu and q.num_gpus > fp.num_gpus and q.days <= fp.days
                  and q.cost_usd <= fp.cost_usd]
        if better and i not in tags:
            tags[i] = [f"beaten by {min(q.num_gpus for q in better):,}"]
    cols = [("GPUs", lambda fp: f"{fp.num_gpus:,}" if fp.num_gpus < 100_000 else str(fp.num_gpus))]
    if multi:
        cols.append(("system", lambda fp: fp.gpu + ("" if fp.fitted else "~")))
    layers = _num_layers(res)
    cols += [("tp", lambda fp: str(fp.plan.tp)), ("pp", lambda fp: _pp(fp.plan, layers)),
             ("dp", lambda fp: str(fp.plan.dp)),
             ("cp", lambda fp: str(fp.plan.cp)), ("v", lambda fp: str(fp.plan.vpp)),
             ("mb", lambda fp: str(fp.plan.micro_batch)), ("z", lambda fp: str(fp.plan.zero)),
             ("rc", lambda fp: _rc(fp.plan))]
    if res.inputs.moe or any(fp.plan.ep > 1 for fp in front):  # a MoE front: its expert layout
        cols.insert(4, ("ep", lambda fp: str(fp.plan.ep)))
        if any(fp.plan.etp != 1 for fp in front):
            cols.insert(5, ("etp", lambda fp: str(fp.plan.etp)))
    fws = {tuple(front[i].framework) for i in shown}
    if len(fws) > 1:  # points of several frameworks: who runs each (one framework for all: said in the legend)
        cols.append(("fw", lambda fp: "/".join(FW_SHORT.get(f, f) for f in fp.framework) or "none"))
    if len(gbs) > 1 or res.request.global_batch_tolerance:
        cols.append(("gb", lambda fp: str(fp.plan.global_batch)))
    cols += [("step s", lambda fp: f"{fp.step_time_s:.2f}" if fp.step_time_s < 100 else f"{fp.step_time_s:.0f}"),
             ("MFU", lambda fp: f"{100 * fp.mfu:.0f}%"), ("GiB", lambda fp: f"{fp.memory_gib:.0f}"),
             ("days", lambda fp: short_days(fp.days)), ("$", lambda fp: short_money(fp.cost_usd)),
             ("eff", lambda fp: f"{100 * fp.scaling_efficiency:.0f}%")]
    rows = [[f(front[i]) for _, f in cols] for i in shown]
    head = [h for h, _ in cols]
    # drop the least telling columns until the row and its tag fit in WIDTH
    tag_w = max([len(", ".join(tags.get(i, []))) + 2 for i in shown] + [0])
    for drop in ("step s", "mb", "GiB", "v", "eff"):
        widths = column_widths(head, rows)
        if sum(widths) + len(widths) - 1 + tag_w <= WIDTH:
            break
        j = head.index(drop)
        head.pop(j)
        for r in rows:
            r.pop(j)
    widths = column_widths(head, rows)
    left = {1} if multi else set()
    out = [align_row(head, widths, left, " "), rule_row(widths, " ")]
    for i, r in zip(shown, rows):
        mark = "*" if res.recommended_index == i else " "
        note = ", ".join(tags.get(i, []))
        out.append((align_row(r, widths, left, " ") + f" {mark}{note}").rstrip())
    uneven = [(front[i].plan, _ends(front[i].plan, layers)) for i in shown
              if _ends(front[i].plan, layers) is not None]
    legend = ""
    if uneven:
        p, (a, b) = uneven[0]
        legend = (f"pp {_pp(p, layers)}: {p.pp} stages, the first and last of {a} layers (uneven split); " if a == b
                  else f"pp {_pp(p, layers)}: {p.pp} stages, the first of {a} layers, the last of {b}; ")
    legend += ("v: virtual stages; " if "v" in head else "") + "z: ZeRO stage; rc: recomputation"
    legend += " (fK: full on K layers/stage)" if any(_rc(front[i].plan).startswith("f") and
                                                     _rc(front[i].plan) != "full" for i in shown) else ""
    legend += "; gb: global batch of the plan" if "gb" in head else ""
    legend += "; MFU: attention counted causal" if "MFU" in head else ""
    legend += "; GiB: peak memory per GPU" if "GiB" in head else ""
    ref = [fp for fp in front if fp.scaling_efficiency >= 1.0 - 1e-9]
    if any(t[0].startswith("beaten by") for t in tags.values()):
        legend += "; beaten by N: N GPUs are both faster and cheaper (the point is here for using fewer)"
    legend += ("; eff: scaling efficiency, GPU-hours of the cheapest plan of the GPU type"
               + (f" ({ref[0].num_gpus:,} GPUs)" if len(ref) == 1 else "") + " / the plan's; *: recommended")
    unfit = [fp for fp in front if not fp.fitted]
    if unfit:
        legend += (f"; {'~: ' if multi else ''}{', '.join(dict.fromkeys(fp.gpu for fp in unfit))} has no fitted "
                   f"efficiency terms (priors): its figures +-{100 * unfit[0].band:.0f}%")
    if len(fws) > 1:
        legend += "; fw: the frameworks that run the plan as it is (" + ", ".join(
            f"{s}: {f}" for f, s in FW_SHORT.items() if any(f in fw for fw in fws)) + ")"
    elif fws:
        only = next(iter(fws))
        legend += ("; every point runs under " + " and ".join(only) if only else
                   "; framework: none (a framework-free what-if)")
    return out + _wrap(legend, first="")


def format_table(res, show_all: bool = False) -> str:
    inp, st, front = res.inputs, res.stats, res.front
    tol = res.request.global_batch_tolerance
    batch = "/".join(map(str, inp.global_batch)) + (f" (+-{100 * tol:g}%, per plan below)" if tol else "")
    lines = _wrap(
        f"plan-search: {inp.model} ({inp.params / 1e9:.1f}B params) on {', '.join(inp.systems)}; "
        f"{_tokens(inp.tokens)} tokens, global batch {batch} x {inp.seq_len:,} tokens", first="")
    if getattr(inp, "seq_len_source", None):  # HF import: the length trained at, stated (--seq-len sets it)
        lines += _wrap(f"seq_len {inp.seq_len:,}: {inp.seq_len_source}; --seq-len sets it", first="  ")
    lines.append("")
    lines += _recommended(res)
    lines.append("")
    shown = list(range(len(front))) if show_all else short_front(res)
    what = (f"front of GPU count, days and dollars: {_plural(len(front), 'non-dominated point')} "
            f"(of {_plural(st.feasible, 'feasible plan')})")
    if len(shown) < len(front):
        what += f"; {len(shown)} shown, every point with --all or --format csv/json"
    lines += _wrap(what, first="")
    if front:
        lines += _front_table(res, shown)
    else:
        lines += _wrap("no front point was found within the time limit (raise --time-limit); the recommended "
                       "plan above is the best found", first="")
    others = getattr(res, "other_fronts", None) or []
    for name in inp.systems:
        if others and not any(fp.gpu == name for fp in front):
            own = [fp for fp in others if fp.gpu == name]
            if own:
                best = min(own, key=lambda fp: fp.days)
                cheap = min(own, key=lambda fp: fp.cost_usd)
                lines += _wrap(f"{name}: dominated, no point on the front; its own fastest is "
                               f"{short_days(best.days)} days for ${short_money(best.cost_usd)} on "
                               f"{best.num_gpus:,} GPUs, its cheapest ${short_money(cheap.cost_usd)} in "
                               f"{short_days(cheap.days)} days on {cheap.num_gpus:,}", first="")
    lines.append("")
    proven = "proven optimal" if st.proven_optimal else "NOT proven optimal (time limit)"
    lines += _wrap(
        f"search: {st.candidates:,} candidates over {_plural(st.gpu_counts, 'GPU count')}, {st.memory_rejected:,} "
        f"over memory, {st.comm_rejected:,} over the comm ratio, {st.feasible:,} feasible; "
        f"{st.solver_candidates:,} to {st.solver} after pruning ({_plural(st.solves, 'solve')}); {proven}",
        first="")
    lines.append(f"took {st.total_s:.2f} s (enumerate {st.enumerate_s:.2f}, evaluate {st.evaluate_s:.2f}, "
                 f"solve {st.solve_s:.2f})")
    if getattr(st, "cut", None):  # what the time limit (or max_candidates) cut short
        lines += _wrap("cut: " + "; ".join(st.cut), first="")
    return "\n".join(lines)


def _recommended(res) -> list[str]:
    e = res.recommended
    p = e.plan
    run = e.run
    head = f"recommended: {p.num_gpus:,} x {e.cluster}"
    if run is not None:
        head += f", {run.days:,.1f} days, ${run.cost_usd:,.0f}"
    lines = _wrap(head + f" ({res.objective})", first="")
    lines += _wrap(res.reason)
    lines += _wrap("plan: " + _plan_line(p, _num_layers(res)))
    lines += _wrap(
        f"step {e.step_time_s:.3f} s, {e.tokens_per_s:,.0f} tokens/s ({e.tokens_per_s_per_gpu:,.0f}/GPU), MFU "
        f"{100 * e.mfu:.1f}% (causal attention; {100 * e.mfu_full_attention:.1f}% counting it full), exposed comm "
        f"{100 * e.comm_ratio:.1f}% of the step")
    if run is not None:
        lines += _wrap(f"run: {run.days:,.2f} days, {run.gpu_hours:,.0f} GPU-hours, ${run.cost_usd:,.0f}, "
                       f"{run.energy_kwh:,.0f} kWh ({e.power_kw:,.1f} kW)")
    if getattr(res, "low_precision", None) is not None:  # issue 23: the same layout in the GPU's low-precision recipe
        lines += _wrap(res.low_precision.text)
    t, m = e.time, e.memory
    step = e.step_time_s or 1.0
    trows = [("compute", t.compute_s), ("memory-bound", t.memory_bound_s), ("recompute", t.recompute_s),
             ("TP comm", t.tp_comm_s), ("CP comm", t.cp_comm_s), ("PP comm", t.pp_comm_s),
             ("EP all-to-all", t.ep_comm_s),
             ("bubble", t.bubble_s), ("DP comm", t.dp_comm_s), ("optimizer", t.optimizer_s),
             ("overhead", t.overhead_s)]
    mrows = [("weights", m.weights_gib), ("gradients", m.gradients_gib), ("optimizer", m.optimizer_gib),
             ("activations", m.activations_gib), ("ZeRO-3 buffer", m.zero3_gather_buffer_gib),
             ("framework", m.framework_overhead_gib)]
    # rows that are zero say nothing: the step's and the memory's parts that are there
    trows = [(k, v) for k, v in trows if v >= 0.0005] + [("step", e.step_time_s)]
    mrows = [(k, v) for k, v in mrows if v >= 0.005] + [("peak", m.peak_gib), ("usable", m.usable_gib)]
    left = [f"  {'time per step':<14} {'s':>8} {'%':>6}"] + [
        f"  {k:<14} {v:8.3f} {100 * v / step:5.1f}%" for k, v in trows]
    right = [f"{'memory/GPU (' + m.worst_stage + ')':<20} {'GiB':>7}"] + [f"{k:<20} {v:7.2f}" for k, v in mrows]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        lines.append(f"{a:<36}  {b}".rstrip())
    cmd = getattr(res, "recommended_command", None)
    if cmd:
        lines.append("  the same plan in plan-estimate:")
        lines += _command_lines(cmd)
    return lines


def _command_lines(cmd: str, indent: str = "    ") -> list[str]:
    """A shell command folded at WIDTH with ``\\`` continuations, so it still pastes."""
    out, cur = [], indent
    for word in cmd.split():
        if cur.strip() and len(cur) + 1 + len(word) + 2 > WIDTH:
            out.append(cur + " \\")
            cur = indent + "  " + word
        else:
            cur = (cur + " " + word) if cur.strip() else cur + word
    return out + [cur]


def format_csv(res) -> str:
    """One row per front point: the columns of :meth:`SearchResult.front_rows` (the same as
    :func:`plan_search.front_dataframe`), empty cells for None."""
    from plan_search.planner.search.request import FRONT_COLUMNS

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FRONT_COLUMNS)
    for row in res.front_rows():
        w.writerow(["" if row[k] is None else row[k] for k in FRONT_COLUMNS])
    return buf.getvalue().rstrip("\n")


# ------------------------------------------------------------------ command
@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="plan-search", message="%(prog)s %(version)s")
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
@click.option("--global-batch", default=None, help="sequences per step: 1536, 1024,2048 or 1024..2048; "
              "1536~5% lets each plan use the batch nearest 1536 (within 5%) that its dp divides "
              "[default: the model's, exactly]")
@click.option("--seq-len", type=int, default=None, help="sequence length [default: the model's]")
@click.option("--tokens", default=None, help="training tokens, e.g. 300e9 or 300B [default: 300B]")
@click.option("--deadline-days", type=float, default=None, help="the run must finish within this many days")
@click.option("--budget-usd", type=float, default=None, help="the run may cost at most this (GPU-hours x price)")
@click.option("--max-power-kw", type=float, default=None, help="power cap of the GPUs at the wall (TDP x PUE)")
@click.option("--memory-headroom", type=float, default=None, help="fraction of GPU memory kept free [default: 0.07, the SearchRequest default]")
@click.option("--max-comm-ratio", type=float, default=None,
              help="max exposed (not hidden) communication as a share of the step, e.g. 0.1")
@click.option("--failure-rate", type=float, default=None,
              help="job-interrupting failures per 1,000 GPU-days, priced into days and dollars (goodput); 0 turns "
                   "failures off [default: the cluster file's, else the GPU type's preset: H100 0.47, A100 0.81]")
@click.option("--restart-minutes", type=float, default=None,
              help="minutes to detect a failure and restart, before the checkpoint is read [default: 10]")
@click.option("--async-checkpoint/--no-async-checkpoint", default=None,
              help="save checkpoints asynchronously (only the device-to-host copy blocks) [default: on]")
@knob_options(multi=True)
@click.option("--allow-cross-node-tp", is_flag=True, default=False, help="let tp groups span NVLink domains")
@click.option("--max-cp", type=int, default=None, help="default cp domain cap [default: seq_len/4096, at least 4,096 tokens per rank]")
@click.option("--max-vpp", type=int, default=None, help="default vpp domain cap [default: none]")
@click.option("--max-micro-batch", type=int, default=None, help="default micro-batch cap [default: 8]")
@click.option("--objective", type=click.Choice(["balanced", "fastest", "cheapest", "fewest-gpus", "least-energy",
                                                "best-mfu"]), default=None,
              help="what the recommended plan optimises [default: balanced: with --deadline-days the cheapest "
              "plan that meets it, with --budget-usd the fastest within it, else the fastest plan whose scaling "
              "efficiency is at least --min-efficiency]")
@click.option("--min-efficiency", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=None,
              help="balanced objective: lowest scaling efficiency accepted for speed, e.g. 0.9 [default: 0.8]")
@click.option("--all", "show_all", is_flag=True, default=False,
              help="table: every point of the front (default: the landmarks and a few points between)")
@click.option("--solver", type=click.Choice(["cpsat", "exhaustive"]), default=None, help="[default: cpsat]")
@click.option("--time-limit", type=float, default=None, help="seconds for the whole search [default: 10]")
@click.option("--solver-threads", "workers", type=int, default=None, help="CP-SAT worker threads [default: 1]")
@click.option("--seed", type=int, default=None, help="CP-SAT random seed [default: 0]")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="what-if override of every system, e.g. gpu.hbm_bandwidth_gbps=3000 (repeatable)")
@click.option("--format", "fmt", type=FORMATS, default=None,
              help="output format [default: table; json for a --request file, or the request's format]")
@click.option("--schema", type=click.Choice(["request", "result"]), default=None,
              help="print the JSON Schema of the request or the result and exit")
@click.option("--framework", type=click.Choice(["megatron", "deepspeed", "torchtitan", "nemo", "none"],
                                               case_sensitive=False),
              default=None,
              help="only plans this framework can run (planner/frameworks/rules.py); none: a framework-free what-if "
                   "(the knobs as given, no framework's rules) [default: every framework searched, each point "
                   "naming those that run it]")
@click.option("--allow-unfitted", is_flag=True, default=False,
              help="let a GPU type without fitted efficiency terms (priced on priors: plan-estimate's 'defaults (not "
                   "fitted)') be recommended over a fitted one; its points are on the front, marked ~, either way")
@click.option("--emit", is_flag=True, default=False,
              help="print the recommended plan's launch configuration for the framework that runs it (in JSON: "
                   "'launch')")
@click.option("--plot", "plot_file", default=None, type=click.Path(dir_okay=False),
              help="also draw the front (GPUs against days and dollars) to this .png/.svg/.pdf "
              "(pip install 'plan-search[plot]')")
@guarded
def main(model_ref, gpu_ref, request_file, gpus, max_gpus, min_gpus, max_nodes, global_batch, seq_len, tokens,
         deadline_days, budget_usd, max_power_kw, memory_headroom, max_comm_ratio,
         failure_rate, restart_minutes, async_checkpoint,
         allow_cross_node_tp, max_cp, max_vpp,
         max_micro_batch, objective, solver,
         time_limit, workers, seed, sets, fmt, schema, framework=None, emit=False, plot_file=None, min_efficiency=None, show_all=False,
         allow_unfitted=False, **knob_args) -> None:
    """Search parallel plans (tp, pp, dp, cp, vpp, micro-batch, ZeRO, recomputation, SP) and GPU
    counts for the Pareto front of GPU count, training days and dollars, under memory,
    communication, deadline, budget and power limits; recommend one plan.

    Exit 0 with a result, 2 on bad input, 3 when nothing is feasible.
    """
    from plan_search.planner.search.request import MAX_TIME_LIMIT_S, Knobs, NoFeasiblePlan, SearchRequest, SearchResult

    if schema:
        from plan_search.planner.search.request import json_schema

        doc = json_schema(schema)
        click.echo(json.dumps(doc, indent=2))
        return
    data: dict = {}
    if request_file:
        from plan_search.models.io import read_document

        data = dict(read_document(request_file, "request"))
        if "from" in data:  # the search around a launch file's plan (planner/frameworks/read/request.py)
            from plan_search.planner.frameworks.read.request import expand_from

            data = expand_from(dict(data, model=model_ref) if model_ref else data)
    from pydantic import ValidationError

    from plan_search.models.io import InputError, short_repr, validation_message

    for key, kind, what in (("knobs", dict, "a mapping of knob bounds"), ("sets", list, "a list of KEY=VALUE strings")):
        if data.get(key) is not None and not isinstance(data[key], kind):  # merged with the options below
            raise InputError(f"request: {key}: expected {what} (got {short_repr(data[key])}); see --schema request")
    knobs = dict(data.get("knobs") or {})
    if model_ref:
        data["model"] = model_ref
    if not data.get("model"):
        if data:  # an unknown key (a misspelt model:) is named before the missing model
            try:
                SearchRequest.model_validate(dict(data, model="-"))
            except ValueError as exc:
                if isinstance(exc, ValidationError) and any(e["type"] == "extra_forbidden" for e in exc.errors()):
                    raise InputError(f"request: {validation_message(exc)}") from None
        raise click.UsageError("--model is required (or a --request file with model:)")
    if gpu_ref is not None:  # --gpu "" is an empty name, not the default
        data["gpu"] = [g.strip() for g in gpu_ref.split(",") if g.strip()]
    if gpus:
        parsed = parse_gpus(gpus)
        if "gpus" not in parsed:  # a range replaces a request file's explicit list
            data.pop("gpus", None)
        data.update({k: v for k, v in parsed.items() if v is not None})
    for key, val in (("max_gpus", max_gpus), ("min_gpus", min_gpus), ("max_nodes", max_nodes),
                     ("seq_len", seq_len), ("solver_threads", workers), ("seed", seed)):
        if val is not None:
            data[key] = val
    if global_batch:
        text, tol = split_batch_tolerance(global_batch)
        data["global_batch"] = parse_global_batch(text)
        if tol is not None:
            data["global_batch_tolerance"] = tol
    if min_efficiency is not None:
        data["min_scaling_efficiency"] = min_efficiency
    if tokens:
        data["tokens"] = parse_tokens(tokens)
    for key, val in (("deadline_days", deadline_days), ("budget_usd", budget_usd), ("max_power_kw", max_power_kw),
                     ("time_limit_s", time_limit)):
        if val is not None:
            most = MAX_TIME_LIMIT_S if key == "time_limit_s" else None
            data[key] = _positive(val, key.removesuffix("_s").replace("_", "-"), most)  # the option: --time-limit
    for key, val in (("memory_headroom", memory_headroom), ("max_comm_ratio", max_comm_ratio),
                     ("failure_rate", failure_rate), ("restart_minutes", restart_minutes)):
        if val is not None:
            if not math.isfinite(val):
                raise click.BadParameter(f"{val} is not a number", param_hint=f"--{key.replace('_', '-')}")
            data[key] = val
    if async_checkpoint is not None:
        data["async_checkpoint"] = async_checkpoint
    if emit and (framework or data.get("framework") or "").lower() == "none":
        raise click.UsageError("--emit needs a framework: a framework-free what-if (--framework none) runs on none")
    for key, val in (("objective", objective), ("solver", solver),
                     ("framework", framework)):
        if val is not None:
            data[key] = val
    given = collect(knob_args, multi=True)
    for key in given:
        if key in data:  # a request file's top-level knob: the option replaces it
            data.pop(key)
    knobs.update(given)
    if allow_unfitted:
        data["allow_unfitted"] = True
    if allow_cross_node_tp:
        knobs["allow_cross_node_tp"] = True
    for key, val in (("max_cp", max_cp), ("max_vpp", max_vpp), ("max_micro_batch", max_micro_batch)):
        if val is not None:
            knobs[key] = val
    data["knobs"] = Knobs(**knobs)
    if sets:
        data["sets"] = list(data.get("sets") or []) + list(sets)
    request = SearchRequest(**data)

    from plan_search.planner.search.front import preload_cp_model, search

    if request.solver == "cpsat":
        preload_cp_model()  # the solver's import overlaps the pricing (a thread; this process never forks)
    if plot_file:  # fail before searching when matplotlib is missing or the file cannot be written
        from plan_search.models.output import check_output
        from plan_search.planner.plots import plot_format, require_matplotlib

        require_matplotlib()
        plot_format(plot_file)
        check_output(plot_file, "--plot", [f for f in (request_file, request.model, *request.gpu) if f and f != "-"],
                     make_parents=True)
    try:
        result = search(request)
    except NoFeasiblePlan as exc:
        raise Infeasible(str(exc)) from None
    f = (fmt or request.format or ("json" if request_file else "table")).lower()
    launch = None
    if emit:
        from plan_search.models.resolve import resolve_model
        from plan_search.planner.frameworks.emit import emit as emit_config

        from plan_search.hardware.resolve import resolve_cluster

        rec = result.recommended
        ref = next((g for g in request.gpu if resolve_cluster(g, request.sets).name == rec.cluster), request.gpu[0])
        launch_fw = result.recommended_framework[0] if result.recommended_framework else request.framework
        launch = emit_config(launch_fw, rec.plan, resolve_model(request.model), resolve_cluster(ref, request.sets))
        from plan_search.planner.frameworks.emit import with_checkpointing

        launch = with_checkpointing(launch, rec.checkpoint_interval_steps, rec.recovery.async_checkpoint)
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
        click.echo(format_table(result, show_all=show_all))
    if launch is not None and f != "json":
        click.echo(f"\n{launch_fw} launch configuration of the recommended plan:")
        click.echo(launch.text)
        for n in launch.notes:
            click.echo(f"  note: {n}")
    if plot_file:
        from plan_search.planner.plots import plot_front

        plot_front(result, plot_file)
        click.echo(f"wrote {plot_file}", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
