"""``plan-calibrate --from FILE --step-time S [--memory-gib M]``: a measured run given as the launch file it ran.

The file is read as ``plan-estimate --from`` reads it (:func:`cli.from_file.read_and_price`: model, GPU count and
the plan as the framework runs it); the measurement (a step time, or tokens/s for the whole job, and the peak
memory) makes it one :class:`planner.calibration.RunRecord` beside the rows of a runs CSV, if one is given too.
"""

from __future__ import annotations

import math
from pathlib import Path


def record(from_path: str, *, gpu_ref: str, model_ref: str | None, num_gpus: int | None, launch: int | None,
           step_time_s: float | None, tokens_per_s: float | None, memory_gib: float | None, sets=(), index: int = 0):
    from plan_search.models.io import InputError
    from plan_search.planner.calibration import PlanArrays, RunRecord
    from plan_search.cli.from_file import read_and_price

    if (step_time_s is None) == (tokens_per_s is None):
        raise InputError("from: give the measurement as --step-time SECONDS or --tokens-per-s TOKENS (the whole job's)")
    for name, v in (("--step-time", step_time_s), ("--tokens-per-s", tokens_per_s), ("--memory-gib", memory_gib)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InputError(f"from: {name} {v} must be a positive number")
    r, plan, cluster, est = read_and_price(from_path, model_ref=model_ref, gpu_ref=gpu_ref, num_gpus=num_gpus,
                                           launch=launch, sets=sets, memory_headroom=0.07, tokens=None,
                                           checkpoint_interval_h=1.0)
    if r.framework not in ("megatron", "nemo"):
        # the fit prices every run with the system's own terms (the Megatron profile, planner.calibration.predict);
        # a torchtitan or DeepSpeed run is priced through its framework's profile, which the fit would not apply
        raise InputError(f"from: plan-calibrate fits the system's Megatron-profile terms; a {r.framework} run is priced "
                         f"through the {r.framework} profile, which the fit does not apply: calibrate from a "
                         "Megatron-LM or NeMo launch file")
    tokens = plan.global_batch * plan.seq_len
    if step_time_s is None:
        step_time_s, how = tokens / tokens_per_s, f"{tokens_per_s:g} tokens/s"
    else:
        how = f"step time {step_time_s:g} s"
    label = f"{Path(from_path).name} @{plan.num_gpus}"
    rec = RunRecord(index, f"launch file {Path(from_path).name}", "launch-file", label, r.model, cluster.name, [plan],
                    [], float(step_time_s), how)
    rec.arrays = PlanArrays.from_plans([plan], r.model.num_layers)
    rec.measured_memory_gb = memory_gib
    return rec
