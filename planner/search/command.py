"""The ``plan-estimate`` command line that reproduces one plan of a search.

Every front point and the recommended plan carry it (``estimate_command``, in the table, JSON and
CSV): run it and ``plan-estimate`` prints the same step time, memory, days and dollars, because
the search and ``plan-estimate`` evaluate the same functions with the same knobs. Knobs are
spelled as the generated options spell them (:mod:`plan_search.cli.knobs`); only those that differ
from the Plan's defaults are written, besides the degrees, which are always written (with
``--framework``, every knob: that framework's defaults need not be the Plan's).
"""

from __future__ import annotations

import shlex

from plan_search.planner.costmodel.knobs import knob_specs
from plan_search.planner.costmodel.plan import Plan

#: Knobs always written, even at their default, so the command reads as a plan.
ALWAYS = ("tp", "pp", "cp", "vpp", "micro_batch", "zero", "recompute")


def _value(spec, v) -> str:
    if spec.kind == "bool":
        return "on" if v else "off"
    return str(v)


def tokens_text(tokens: float) -> str:
    """A token count as a person writes it, exactly: ``300B``, ``1.5T``, else the number."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        q = tokens / div
        if q >= 1 and float(repr(q)) * div == tokens and len(repr(q)) <= 8:
            return (repr(q)[:-2] if repr(q).endswith(".0") else repr(q)) + suffix
    return repr(float(tokens))


def estimate_command(request, gpu_ref: str, plan: Plan, framework: str | None = None) -> str:
    """``plan-estimate --model ... --gpu ... --gpus N --tp .. ...`` for ``plan`` of ``request``, run under
    ``framework`` (default: the request's, unless it spans them or is the framework-free what-if)."""
    args = ["plan-estimate", "--model", request.model, "--gpu", gpu_ref, "--gpus", str(plan.num_gpus),
            "--global-batch", str(plan.global_batch), "--seq-len", str(plan.seq_len)]
    if framework is None:
        framework = getattr(request, "framework", None)
    if framework == "none":
        framework = None
    for spec in knob_specs():
        v = getattr(plan, spec.name)
        # with a framework, every knob is written: plan-estimate --framework fills the knobs a
        # user leaves unset with that framework's defaults, which need not be the Plan's
        if v is None or (spec.name not in ALWAYS and v == spec.default and not framework):
            continue
        if spec.kind == "bool":
            args.append(spec.option if v else f"--no-{spec.option[2:]}")
        else:
            args += [spec.option, _value(spec, v)]
    args += ["--memory-headroom", repr(float(request.memory_headroom)), "--tokens", tokens_text(request.tokens)]
    if request.checkpoint_interval_h is not None:
        args += ["--checkpoint-interval-h", repr(float(request.checkpoint_interval_h))]
    for opt, v in (("--failure-rate", getattr(request, "failure_rate", None)),
                   ("--restart-minutes", getattr(request, "restart_minutes", None))):
        if v is not None:
            args += [opt, repr(float(v))]
    if not getattr(request, "async_checkpoint", True):
        args.append("--no-async-checkpoint")
    for s in request.sets:
        args += ["--set", s]
    if framework:
        args += ["--framework", framework]
    return " ".join(shlex.quote(a) for a in args)
