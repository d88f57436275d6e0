"""A launch file read and priced: what ``plan-estimate --from FILE``, ``plan-calibrate --from`` and
:func:`plan_search.estimate_from` share (the file read by :func:`planner.frameworks.read.read_launch`, the plan as
the file's framework runs it by :func:`planner.frameworks.rules.as_run`, priced by
:func:`planner.costmodel.estimate`). It lives in the planner so that the API does not import the CLI."""

from __future__ import annotations


def read_and_price(from_path: str, *, model_ref: str | None, gpu_ref: str | None, num_gpus: int | None,
                   launch: int | None, sets, memory_headroom: float, tokens, checkpoint_interval_h: float,
                   seq_len: int | None = None):
    """(LaunchRead, the plan as run, cluster, estimate) of a launch file."""
    from plan_search.hardware.overrides import apply_overrides
    from plan_search.hardware.profiles import for_framework
    from plan_search.hardware.resolve import resolve_cluster
    from plan_search.models.io import InputError
    from plan_search.models.resolve import resolve_model
    from plan_search.planner.costmodel.estimate import estimate
    from plan_search.planner.frameworks import rules
    from plan_search.planner.frameworks.read import read_launch

    from plan_search.models.spec import ModelSpec

    given = model_ref if isinstance(model_ref, ModelSpec) else resolve_model(model_ref) if model_ref else None
    r = read_launch(from_path, model=given, num_gpus=num_gpus, launch=launch, seq_len=seq_len)
    if seq_len is not None and r.framework != "deepspeed":
        raise InputError(f"from: the {r.framework} file sets the sequence length; leave out --seq-len")
    if not gpu_ref:
        gpu_ref = r.gpu_ref
    if not gpu_ref:
        raise InputError("gpu: the launch file does not name the GPU type: give --gpu (e.g. --gpu h100)")
    cluster = apply_overrides(for_framework(resolve_cluster(gpu_ref), r.framework, r.compiled), sets)
    plan = rules.as_run(r.framework, r.plan, r.model, cluster)
    est = estimate(r.model, cluster, plan, memory_headroom=memory_headroom, tokens=tokens,
                   checkpoint_interval_h=checkpoint_interval_h)
    return r, plan, cluster, est
