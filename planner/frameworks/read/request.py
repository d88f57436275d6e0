"""``"from": FILE`` in a search request (``plan-search --request``, :func:`plan_search.search`): the search around a
launch file's plan.

:func:`expand_from` reads the file (:func:`planner.frameworks.read.read_launch`) and fills what the request leaves
out: the model, the GPU type the file names, the GPU count (``gpus: [n]``, unless the request gives counts or a
range), the global batch, the sequence length, the framework and the precision knob. What the request sets wins.
"""

from __future__ import annotations

from plan_search.models.io import InputError


def expand_from(data: dict) -> dict:
    from plan_search.models.catalog import lookup
    from plan_search.models.resolve import resolve_model
    from plan_search.planner.frameworks.read import read_launch

    data = dict(data)
    path = data.pop("from")
    launch = data.pop("from_launch", None)
    if not isinstance(path, str) or not path.strip():
        raise InputError("request: from: expected the path of a launch file")
    given = resolve_model(data["model"]) if isinstance(data.get("model"), str) and data["model"].strip() else None
    r = read_launch(path, model=given, launch=launch)
    if given is None:
        if lookup(r.model.name) is None:
            raise InputError(f"request: from: the file's model ({r.model.name}) is not a catalog model: give model:")
        data["model"] = r.model.name
    if not any(data.get(k) for k in ("gpus", "min_gpus", "max_gpus")):
        data["gpus"] = [r.plan.num_gpus]
    if r.gpu_ref and not data.get("gpu"):
        data["gpu"] = [r.gpu_ref]
    data.setdefault("global_batch", [r.plan.global_batch])
    data.setdefault("seq_len", r.plan.seq_len)
    data.setdefault("framework", r.framework)
    knobs = data.get("knobs")
    knobs = dict(knobs) if isinstance(knobs, dict) else knobs
    if isinstance(knobs, dict) or knobs is None:
        knobs = knobs or {}
        knobs.setdefault("precision", [r.plan.precision])
        data["knobs"] = knobs
    return data
