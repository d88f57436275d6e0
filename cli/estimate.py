"""``plan-estimate``: step time, memory, throughput and run cost of one parallel plan.

Thin on purpose: parse the options into a :class:`~planner.plan.Plan`, call
:func:`planner.estimate.estimate`, format the :class:`~planner.estimate.Estimate` as an
80-column table or as its JSON. Exit codes (``cli.common``): 0 the plan fits, 2 bad input (one
line naming the rule), 3 the plan does not fit in memory (the estimate is still printed, the
reason goes to stderr).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from typing import Sequence

import click

from plan_search import __version__

from plan_search.cli.common import OneLineCommand, Infeasible, guarded, align_row, column_widths, rule_row, moe_kernel_words
from plan_search.cli.knobs import collect, knob_options

TABLE_WIDTH = 80
LABEL = 18  # width of the label column of the summary lines
FORMATS = click.Choice(["table", "json"], case_sensitive=False)
FRAMEWORK_NAMES = ["megatron", "deepspeed", "torchtitan", "nemo"]  # planner/frameworks/rules.py FRAMEWORKS


class TokenCount(click.ParamType):
    """A token count: ``300e9``, ``300000000000``, ``300B``, ``1.5T``, ``250M`` (models.io)."""

    name = "tokens"

    def convert(self, value, param, ctx):
        from plan_search.models.io import InputError, parse_token_count

        try:
            return parse_token_count(value, "--tokens")
        except InputError as exc:
            self.fail(str(exc).split(": ", 1)[-1], param, ctx)


# ------------------------------------------------------------------ formatting helpers


def _plan_line(p, is_moe: bool = False) -> str:
    """``tp8 pp12 dp16 cp1 vpp1 zero1 mb1 gb1536 seq2048 selective SP FA bf16`` (a MoE model's plan: its
    expert layout and the kernel knobs not at their defaults, :func:`cli.common.moe_kernel_words`)."""
    rc = p.recompute
    if rc == "full" and p.recompute_layers is not None:
        rc = f"full({p.recompute_layers}/stage)"
    if rc == "selective" and getattr(p, "recompute_modules", None):  # Megatron's --recompute-modules (issue 29)
        rc = f"selective({p.recompute_modules})"
    if getattr(p, "offload_modules", None):
        rc += f" offload({p.offload_modules})"
    parts = [
        f"tp{p.tp}", f"pp{p.pp}", f"dp{p.dp}", f"cp{p.cp}", f"vpp{p.vpp}", f"zero{p.zero}",
        f"mb{p.micro_batch}", f"gb{p.global_batch}", f"seq{p.seq_len}", rc,
        "SP" if p.sequence_parallel else "no-SP",
        "FA" if p.flash_attention else "no-FA",
        p.precision,
    ]
    if p.ep * p.etp > 1:  # mixture of experts: the expert layout and its dispatcher
        parts += [f"ep{p.ep}", f"etp{p.etp}", p.moe_dispatcher] + (["a2a-overlap"] if p.moe_overlap else [])
    if is_moe:
        parts += moe_kernel_words(p)
    if p.pp_schedule != "1f1b":
        parts.append(p.pp_schedule)
    return " ".join(parts)


def _knobs_line(p, num_layers: int) -> str:
    overlaps = [name for name, on in (("grad-reduce", p.overlap_grad_reduce),
                                      ("param-gather", p.overlap_param_gather),
                                      ("tp-comm", p.overlap_tp_comm)) if on]
    bits = [f"grad-accum {p.grad_accum}", f"{'fp32' if p.fp32_grads else 'half-precision'} grads",
            f"overlap: {', '.join(overlaps) if overlaps else 'none'}"]
    if p.pp > 1:
        bits.append(f"pipeline split {split_text(p, num_layers)}")
    if p.dp > 1 and p.zero >= 1:
        per = "every micro-batch" if p.grad_reduce_per_microbatch() else "once per step"
        shard = f"shard groups of {p.dp_shard} x {p.dp // p.dp_shard} replicas" if p.dp_shard and p.dp_shard < p.dp \
            else f"sharded over dp {p.dp}"
        bits.append(f"ZeRO-{p.zero} {shard}, gradients reduced {per}"
                    + ("" if p.zero != 3 else "; params resharded after forward" if p.reshard_after_forward
                       else "; params kept gathered after forward"))
    return "; ".join(bits)


def split_text(p, num_layers: int) -> str:
    """The pipeline split as printed: layers per stage, runs of equal stages collapsed
    (``7|8x14|7``), and what decided it (even, balanced uneven, given, embedding/loss counted)."""
    s = p.split(num_layers)
    runs: list[list[int]] = []
    for n in s:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    text = "|".join(f"{n}x{k}" if k > 1 else f"{n}" for n, k in runs)
    if p.first_stage_layers is not None or p.last_stage_layers is not None:
        how = "first/last stage layers given"
    elif p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split:
        what = " and ".join(w for w, on in (("embedding", p.account_for_embedding_in_pipeline_split),
                                            ("loss", p.account_for_loss_in_pipeline_split)) if on)
        how = f"{what} counted as a layer"
    elif num_layers % p.pp:
        how = f"balanced: {p.pp} does not divide {num_layers}"
    else:
        how = "even"
    return f"{text} layers ({how})"


def _num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _secs(x: float) -> str:
    if x >= 100:
        return f"{x:,.1f} s"
    if x >= 1:
        return f"{x:.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def _sig(x: float) -> str:
    """Three significant digits, thousands separated: 3.84, 737, 1,470."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _tokens(x: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= div:
            return f"{x / div:.4g}{suffix}"
    return f"{x:.4g}"


def _money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _wrap(text: str, indent: str = "  ", first: str = "") -> list[str]:
    return textwrap.wrap(
        " ".join(text.split()), width=TABLE_WIDTH, initial_indent=first or indent, subsequent_indent=indent,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def _kv(label: str, value: str) -> list[str]:
    return _wrap(value, indent=" " * LABEL, first=f"{label:<{LABEL}s}")


def _rows(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """A left-aligned first column and right-aligned numbers."""
    widths = column_widths(headers, rows)
    fmt = lambda cells: align_row(cells, widths, {0}, indent=indent)  # noqa: E731
    rule = rule_row(widths, indent=indent)
    out = [fmt(headers), rule]
    for r in rows:
        out.append(rule if r is None else fmt(r))
    return out


def _efficiency_lines(e) -> list[str]:
    terms = (
        f"gemm max {e.gemm_eff_max:.3g} (dim scale {e.gemm_dim_scale:.4g}), attention {e.attention_eff:.3g} (unfused {e.bmm_attention_eff:.3g}), "
        f"fp8/bf16 {e.fp8_gemm_eff_ratio:.3g}, HBM {e.hbm_eff:.3g}, bus bw intra {e.intra_bw_eff:.3g} "
        f"inter {e.inter_bw_eff:.3g}, zero3 {e.zero3_bw_eff:.3g}; overlap dp {e.dp_overlap:.3g} "
        f"tp {e.tp_overlap:.3g} pp {e.pp_overlap:.3g} cp {e.cp_overlap:.3g}; step overhead "
        f"{e.step_overhead_s:.3g} s, framework {e.framework_overhead_gib:.3g} GiB, fragmentation "
        f"{e.fragmentation:.3g}; kernel fusion {e.kernel_fusion}"
    )
    return ["efficiency terms"] + _wrap(terms) + _wrap(f"source: {_row_runs(e.source)}")


def _row_runs(text: str) -> str:
    """``text`` with each list of row ids (``[1001,1002,1003,1010]``) as runs, ``[1001-1003, 1010]``:
    the table wraps between them, not inside a number."""
    def runs(m):
        ids, out = [int(v) for v in m.group(1).split(",")], []
        for v in ids:
            if out and v == out[-1][1] + 1:
                out[-1][1] = v
            else:
                out.append([v, v])
        return "[" + ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out) + "]"

    return re.sub(r"\[(\d+(?:,\d+)+)\]", runs, text)


#: Short form of planner.estimate.FLOPS_CONVENTION for the table.
FLOPS_NOTE = ("model FLOPs: 6N-style, causal attention as Megatron-Bridge's tables count it, no recompute; HFU "
              "adds recompute; vs dense bf16 peak")

TIME_ROWS = (
    ("compute", "compute_s"),
    ("memory-bound kernels", "memory_bound_s"),
    ("recompute", "recompute_s"),
    ("TP comm (exposed)", "tp_comm_s"),
    ("CP comm (exposed)", "cp_comm_s"),
    ("PP comm (exposed)", "pp_comm_s"),
    ("EP all-to-all (exposed)", "ep_comm_s"),
    ("pipeline bubble", "bubble_s"),
    ("DP comm (exposed)", "dp_comm_s"),
    ("optimizer", "optimizer_s"),
    ("fixed overhead", "overhead_s"),
)

MEMORY_ROWS = (
    ("weights", "weights_gib"),
    ("gradients", "gradients_gib"),
    ("optimizer states", "optimizer_gib"),
    ("activations", "activations_gib"),
    ("transient (loss / re-run layer / step)", "transient_gib"),
    ("ZeRO-3 gather buffer", "zero3_gather_buffer_gib"),
    ("allocator slack (unreleasable)", "allocator_slack_gib"),
    ("outside allocator (CUDA, NCCL)", "framework_overhead_gib"),
)


def format_table(est, cluster, model, headroom: float, overrides: Sequence[str] = (), seq_len_source: str | None = None) -> str:
    """The human-readable report of one :class:`~planner.estimate.Estimate`."""
    p, m, t = est.plan, est.memory, est.time
    gpu_name = cluster.gpu.name
    lines = _wrap(
        f"{est.model} ({est.params / 1e9:.1f} B params) on {p.num_gpus} x {est.cluster} ({gpu_name})",
        indent="  ", first=" ",
    )
    lines[0] = lines[0][1:]
    lines += ["  " + _plan_line(p, model.is_moe)]
    lines += _wrap(_knobs_line(p, model.num_layers))
    for o in overrides:
        lines += _wrap(f"what-if: {o}")
    if seq_len_source:  # HF import without --seq-len: the length trained at, stated
        lines += _wrap(f"seq_len {p.seq_len:,}: {seq_len_source}; --seq-len sets it")
    lines.append("")

    lines += _kv("step time", f"{_secs(est.step_time_s)} ({_num(p.global_batch * p.seq_len)} tokens; pipeline "
                 f"bubble fraction {_pct(t.bubble_fraction)})")
    lines += _kv("tokens/s", f"{_num(est.tokens_per_s)} total, {_num(est.tokens_per_s_per_gpu, 1)} per GPU")
    lines += _kv("TFLOP/s per GPU",
                 f"model {est.model_tflops_per_gpu:.1f}, hardware {est.hardware_tflops_per_gpu:.1f}")
    lines += _kv("MFU / HFU", f"{_pct(est.mfu)} causal / {_pct(est.hfu)}; full-attention MFU "
                 f"{_pct(est.mfu_full_attention)} (torchtitan's count)")
    lines += _wrap(f"({FLOPS_NOTE})", indent=" " * LABEL, first=" " * LABEL)
    verdict = "feasible" if est.feasible else ("TIGHT (fits the device, not the headroom)" if est.fits_device
                                               else "INFEASIBLE")
    lines += _kv("verdict", f"{verdict}; bottleneck: {est.bottleneck}; exposed comm {_pct(est.comm_ratio)} of step")
    for r in est.reasons:
        lines += _wrap(f"- {r}", indent=" " * (LABEL + 2), first=" " * LABEL)
    lines.append("")

    # Memory.
    rows = [[label, f"{getattr(m, key):.2f}", _pct(getattr(m, key) / m.peak_gib if m.peak_gib else 0.0)]
            for label, key in MEMORY_ROWS]
    rows += [None, ["peak", f"{m.peak_gib:.2f}", "100.0%"]]
    lines.append(f"memory per GPU, GiB (worst stage: {m.worst_stage})")
    lines += _rows(["", "GiB", "% peak"], rows)
    lines.append(f"  allocated {m.allocated_peak_gib:.2f} (torch max_memory_allocated)")
    lines.append(f"  with room: reserved {m.reserved_peak_gib:.2f} (max_memory_reserved), "
                 f"device {m.device_peak_gib:.2f} (nvidia-smi)")
    lines.append(f"  at capacity: reserved {m.reserved_at_capacity_gib:.2f} (the allocator frees "
                 f"{m.releasable_slack_gib:.2f} of cached")
    lines.append("  segments before failing); peak = it + outside the allocator: judged on")
    fits = "fits" if est.feasible else ("TIGHT: fits the device only" if est.fits_device else "DOES NOT FIT")
    lines.append(
        f"  usable {m.usable_gib:.2f} of capacity {m.capacity_gib:.2f} (headroom {_pct(headroom, 0)}): "
        f"{fits}, {m.usable_gib - m.peak_gib:+.2f} spare"
    )
    lines.append("")

    # Time.
    step = est.step_time_s
    rows = [[label, f"{getattr(t, key):.4f}", _pct(getattr(t, key) / step if step else 0.0)]
            for label, key in TIME_ROWS]
    rows += [None, ["step", f"{step:.4f}", "100.0%"]]
    lines.append("time per step (rows sum to the step)")
    lines += _rows(["", "seconds", "% step"], rows)
    lines.append(f"  hidden by overlap (not in the step): {t.hidden_comm_s:.4f} s of communication")
    lines.append("")

    # Run.
    if est.run is not None:
        r = est.run
        lines.append(f"run of {_tokens(r.tokens)} tokens")
        lines += _kv("  steps / days", f"{_num(r.steps)} steps, {r.days:,.1f} days")
        lines += _kv("  GPU-hours", f"{_num(r.gpu_hours)} at {_money(cluster.price_per_gpu_hour_usd)}/GPU-h: "
                     f"{_money(r.cost_usd)}")
        lines += _kv("  energy", f"{_num(r.energy_kwh)} kWh ({_sig(est.power_kw)} kW with PUE {cluster.pue:g}), "
                     f"{_money(r.energy_cost_usd)}")
        lines += _kv("  no failures", f"{r.days_without_failures:,.1f} days, "
                     f"{_money(r.cost_usd_without_failures)} (failures add {r.days - r.days_without_failures:,.1f} "
                     f"days, {_money(r.cost_usd - r.cost_usd_without_failures)}; ~{_num(r.expected_interruptions)} "
                     "interruptions)")
        lines += _kv("  checkpoints", f"{_secs(r.checkpoint_write_s)} per write, "
                     f"{_pct(r.checkpoint_overhead_fraction, 2)} of the run")
        loading = "ok" if r.data_loading_ok else "STALLS"
        lines += _kv("  data loading", f"{loading} ({_secs(r.data_read_s_per_step)} read per step)")
        lines.append("")
    lines += goodput_lines(est)
    lines.append("")

    lines += _efficiency_lines(est.efficiency)
    return "\n".join(lines)


def format_launch(launch) -> str:
    """The launch configuration after the table: a header, the text as it is pasted, the notes."""
    kinds = {"argv": "pretrain_gpt.py flags", "json": "config JSON", "toml": "job TOML sections",
             "overrides": "recipe overrides (key=value)"}
    lines = [f"launch configuration: {launch.framework} {kinds[launch.kind]}", f"# for {launch.version}"]
    lines += launch.text.rstrip("\n").splitlines()
    lines += [f"# note: {n}" for n in launch.notes]
    return "\n".join(lines)


def _as_run(framework: str | None, emit: bool, plan, model, cluster):
    """(the plan ``framework`` runs, its launch config with --emit): the knobs left unset at the
    framework's defaults, a plan it cannot run refused (InputError naming the rule):
    :func:`plan_search.planner.frameworks.rules.as_run`, as ``plan_search.estimate`` prices it."""
    from plan_search.models.io import InputError

    if emit and framework is None:
        raise InputError("emit: --emit needs --framework megatron|deepspeed|torchtitan|nemo")
    if framework is None:
        return plan, None
    from plan_search.planner.frameworks import emit as emitters
    from plan_search.planner.frameworks import rules as frameworks

    plan = frameworks.as_run(framework, plan, model, cluster)
    return plan, (emitters.emit(framework, plan, model, cluster) if emit else None)


def goodput_lines(est) -> list[str]:
    """Goodput, its badput split, what it assumed and the interval in the frameworks' terms."""
    rc, b = est.recovery, est.badput
    lines = ["goodput (failures, restarts and checkpoint saves: planner/costmodel/goodput.py)"]
    lines += _kv("  goodput", f"{_pct(est.goodput)} of the wall time trains; badput: checkpoint save "
                 f"{_pct(b.checkpoint_save, 2)}, lost progress {_pct(b.lost_progress, 2)}, restart "
                 f"{_pct(b.restart, 2)}, restore {_pct(b.restore, 2)}")
    if rc.mtbf_h is None:
        lines += _kv("  failures", "off (failure rate 0)")
    else:
        lines += _wrap(f"{rc.failure_rate_per_1000_gpu_days:.3g} per 1,000 GPU-days ({rc.failure_rate_source}): "
                       f"one every {rc.mtbf_h:.2f} h on {est.plan.num_gpus} GPUs; restart {_secs(rc.restart_s)}, "
                       f"restore {_secs(rc.restore_s)}", indent=" " * LABEL, first=f"{'  failures':<{LABEL}}")
    mode = "asynchronous (only the device-to-host copy blocks)" if rc.async_checkpoint else "synchronous"
    how = "as given" if rc.checkpoint_interval_given else "maximises goodput"
    lines += _kv("  save every", f"{_num(est.checkpoint_interval_steps)} steps ({_secs(est.checkpoint_interval_s)}, "
                 f"{how}); {mode}, blocks {_secs(rc.checkpoint_save_blocking_s)} a save")
    for fw in ("megatron", "torchtitan", "nemo"):
        lines += _wrap(rc.framework_settings[fw], indent=" " * LABEL, first=f"{'    ' + fw:<{LABEL}}")
    return lines


# ------------------------------------------------------------------ command


@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="plan-estimate", message="%(prog)s %(version)s")
@click.option("--model", "model_ref", default=None,
              help="catalog model name/alias or model file (HF config.json or YAML)  [required without --from]")
@click.option("--gpu", "gpu_ref", default=None,
              help="catalog system name/alias or cluster YAML (base: + overrides)  [required]")
@click.option("--gpus", "--num-gpus", "num_gpus", type=int, default=None,
              help="total GPUs (= tp*pp*dp*cp)  [required without --from; with it: overrides the file's count]")
@click.option("--dp", type=int, default=None, help="data-parallel degree  [default: num_gpus/(tp*pp*cp)]")
@click.option("--global-batch", type=int, default=None, help="sequences per step  [default: the model's global_batch]")
@click.option("--seq-len", type=int, default=None, help="sequence length  [default: the model's seq_len]")
@knob_options(multi=False)
@click.option("--memory-headroom", type=float, default=0.07, show_default=True,  # = memory.DEFAULT_MEMORY_HEADROOM (tested)
              help="fraction of GPU memory kept free when judging fit")
@click.option("--tokens", type=TokenCount(), default=None, help="token budget for run figures, e.g. 300e9 or 300B")
@click.option("--checkpoint-interval-h", type=float, default=None,
              help="hours between checkpoints  [default: the interval that maximises goodput; 1 without failures]")
@click.option("--failure-rate", type=float, default=None,
              help="job-interrupting failures per 1,000 GPU-days; 0 turns failures off  [default: the cluster "
                   "file's, else the GPU type's preset: H100 0.47 (Llama 3), A100 0.81 (Meta RSC-1)]")
@click.option("--restart-minutes", type=float, default=None,
              help="minutes to detect a failure and restart, before the checkpoint is read  [default: the "
                   "cluster file's, else 10]")
@click.option("--async-checkpoint/--no-async-checkpoint", default=True, show_default=True,
              help="save checkpoints asynchronously (only the device-to-host copy blocks)")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="what-if override of the cluster, e.g. gpu.hbm_bandwidth_gbps=3000 (repeatable)")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help="output format")
@click.option("--framework", type=click.Choice(FRAMEWORK_NAMES, case_sensitive=False), default=None,
              help="check the plan against this framework's rules (planner/frameworks/rules.py); a plan it cannot run "
                   "exits 2 with one line naming the rule")
@click.option("--emit", is_flag=True, default=False,
              help="also print the --framework launch configuration (Megatron-LM flags, DeepSpeed config JSON, "
                   "torchtitan TOML sections, NeMo 2.0 recipe overrides): after the table, or with --format json "
                   "as the 'launch' key of the one JSON document")
@click.option("--from", "from_path", default=None, metavar="FILE",
              help="price a launch file: Megatron-LM script or flags, NeMo overrides, torchtitan TOML, DeepSpeed JSON "
                   "(cli/from_file.py); prints which lines were used, not priced, not understood and defaulted")
@click.option("--launch", "launch", type=click.IntRange(1, 10_000), default=None,
              help="with --from: which launch command of a script with several (1-based)  [default: the first]")
@click.option("--improve", is_flag=True, default=False,
              help="with --from: search around the file's plan (same model, GPU type and count, batch, sequence) "
                   "and print the best alternatives as changes to the file")
@click.option("--improve-gpus", "improve_gpus", default=None, metavar="SET",
              help="with --improve: GPU counts the alternatives may use, e.g. 256..1024:256  [default: the file's]")
@click.option("-o", "--output", "output", default=None, metavar="FILE",
              help="with --from: write the file with the best alternative applied (atomically; never the input)")
@guarded
def main(model_ref: str, gpu_ref: str, num_gpus: int, dp: int | None, global_batch: int | None,
         seq_len: int | None, memory_headroom: float, tokens: float | None, checkpoint_interval_h: float | None,
         failure_rate: float | None, restart_minutes: float | None, async_checkpoint: bool,
         sets: tuple[str, ...], fmt: str, framework: str | None, emit: bool, from_path: str | None = None,
         launch: int | None = None, improve: bool = False, improve_gpus: str | None = None,
         output: str | None = None, **knob_args) -> None:
    """Estimate step time, memory, throughput and cost of one parallel plan.

    Exit 0 when the plan fits, 3 when it does not fit in memory (the estimate is still printed),
    2 on bad input. With --framework, 2 also when that framework cannot run the plan (nothing is
    printed but the rule); with --emit the launch configuration follows the estimate (it is printed
    for a plan that does not fit too, with exit 3).
    """
    from plan_search.hardware.overrides import apply_overrides, describe_overrides
    from plan_search.hardware.resolve import resolve_cluster
    from plan_search.models.io import InputError
    from plan_search.models.resolve import resolve_model
    from plan_search.planner.costmodel.estimate import estimate, plan_for_model

    if checkpoint_interval_h is not None and not (math.isfinite(checkpoint_interval_h) and checkpoint_interval_h > 0):
        raise InputError(f"checkpoint_interval_h: {checkpoint_interval_h} must be a positive number of hours")
    if not math.isfinite(memory_headroom):
        raise InputError(f"memory_headroom: {memory_headroom} must be in [0, 1)")
    if from_path is not None:
        knobs = collect(knob_args, multi=False)
        given = [f"--{k.replace('_', '-')}" for k in knobs] + [o for o, v in (
            ("--dp", dp), ("--global-batch", global_batch), ("--framework", framework),
            ("--emit", emit or None)) if v is not None]
        if given:
            raise InputError(f"from: the plan is the file's; leave out {', '.join(given)} (use --improve to search "
                             "around it)")
        recovery = [o for o, v in (("--failure-rate", failure_rate), ("--restart-minutes", restart_minutes),
                                   ("--no-async-checkpoint", None if async_checkpoint else True)) if v is not None]
        if recovery:  # priced at the cluster's (or the defaults') failure rate, restart and saving
            raise InputError(f"from: {', '.join(recovery)} is not read with --from yet; set the cluster file's "
                             "failures_per_1000_gpu_days / restart_minutes instead")
        from plan_search.cli import from_file

        from_file.run(from_path, model_ref=model_ref, gpu_ref=gpu_ref, num_gpus=num_gpus, launch=launch, sets=sets,
                      memory_headroom=memory_headroom, tokens=tokens, checkpoint_interval_h=checkpoint_interval_h,
                      fmt=fmt, improve=improve, output=output, gpus_move=improve_gpus, seq_len=seq_len,
                      format_table=format_table)
        return
    for opt, v in (("--launch", launch), ("--improve", improve or None), ("--improve-gpus", improve_gpus),
                   ("-o/--output", output)):
        if v is not None:
            raise InputError(f"{opt.lstrip('-')}: {opt} needs --from FILE")
    for opt, v in (("--model", model_ref), ("--gpu", gpu_ref), ("--gpus", num_gpus)):
        if v is None:
            raise click.UsageError(f"Missing option '{opt}'.")
    model = resolve_model(model_ref)
    from plan_search.hardware.profiles import for_framework

    base = for_framework(resolve_cluster(gpu_ref), framework)  # the framework's kernel-efficiency profile
    cluster = apply_overrides(base, sets)
    overrides = describe_overrides(sets, base) if sets else []
    knobs = collect(knob_args, multi=False)
    # a degree the model cannot take is named before the GPU-grid arithmetic, as plan_search.estimate names it
    plan = plan_for_model(model, dict(
        num_gpus=num_gpus, dp=dp,
        global_batch=global_batch if global_batch is not None else model.global_batch,
        seq_len=seq_len if seq_len is not None else model.seq_len, **knobs,
    ))
    plan, launch = _as_run(framework, emit, plan, model, cluster)
    est = estimate(model, cluster, plan, memory_headroom=memory_headroom, tokens=tokens,
                   checkpoint_interval_h=checkpoint_interval_h, failure_rate=failure_rate,
                   restart_minutes=restart_minutes, async_checkpoint=async_checkpoint)
    if launch is not None:  # the interval that maximises goodput, and asynchronous saving, in its terms
        from plan_search.planner.frameworks.emit import with_checkpointing

        launch = with_checkpointing(launch, est.checkpoint_interval_steps, est.recovery.async_checkpoint)
    if fmt.lower() == "json":
        if launch is None:
            click.echo(est.model_dump_json(indent=2))
        else:
            doc = json.loads(est.model_dump_json())
            doc["launch"] = launch.as_json()
            click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(format_table(est, cluster, model, memory_headroom, overrides,
                                model.seq_len_source if seq_len is None else None))
        if launch is not None:
            click.echo("")
            click.echo(format_launch(launch))
    if not est.feasible:
        raise Infeasible(est.reasons[0] if est.reasons else "the plan does not fit")


if __name__ == "__main__":  # pragma: no cover
    main()
