"""``--gpu`` resolution: a catalog name or a cluster YAML file, then ``--set`` overrides.

A cluster file is either a full :class:`ClusterSpec` document or a partial one on top of a
catalog system::

    base: h100-sxm            # any catalog name or alias
    name: my-h100-cluster     # optional; defaults to the file name
    node:
      inter_node_gbps: 25     # only the fields that differ; nested mappings merge
    gpu:
      peak_tflops: {bf16: 900}
    price_per_gpu_hour_usd: 2.1

Errors are one line naming the file and the field.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from plan_search.hardware.catalog import canonical_name, get_cluster
from plan_search.hardware.overrides import apply_overrides
from plan_search.hardware.spec import ClusterSpec
from plan_search.models.io import InputError, closest, expand_path, field_name, load_document, validation_message

FILE_SUFFIXES = (".yaml", ".yml", ".json")


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` merged over ``base`` key by key (nested mappings merged, everything else replaced)."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _check_fields(data: Any, model: type[BaseModel], where: str, prefix: str = "") -> None:
    """Unknown keys -> one line with the closest field names (before pydantic's generic message)."""
    if not isinstance(data, dict):
        return
    fields = model.model_fields
    for key, value in data.items():
        path = f"{prefix}{field_name(key)}"
        if key not in fields:
            close = closest(str(key), list(fields), n=3)
            hint = f"; closest: {', '.join(prefix + c for c in close)}" if close else ""
            raise InputError(f"{where}: {path}: no such field{hint}")
        ann = fields[key].annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            _check_fields(value, ann, where, f"{path}.")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _credit_file(merged: dict[str, Any], data: dict[str, Any], note: str) -> None:
    """Figures the file changes on top of a base get the file as their source (unless it gives one)."""
    for section in ("gpu", "node"):
        part = data.get(section)
        if not isinstance(part, dict) or not isinstance(merged.get(section), dict):
            continue
        given = part.get("sources") if isinstance(part.get("sources"), dict) else {}
        sources = merged[section].setdefault("sources", {})
        if not isinstance(sources, dict):
            continue
        for key, value in part.items():
            if key in ("sources", "name"):
                continue
            if isinstance(value, dict):
                names = [f"{key}.{k}" for k, v in value.items() if _is_number(v)]
            else:
                names = [key] if _is_number(value) else []
            for name in names:
                if name not in given and key not in given:
                    sources[name] = note
    top = merged.get("sources")
    if isinstance(top, dict):
        for key, value in data.items():
            if key not in ("gpu", "node", "efficiency", "sources") and _is_number(value):
                if key not in (data.get("sources") or {}):
                    top[key] = note


#: Prefix of the ``sources`` keys naming the efficiency terms a cluster file sets itself: a framework's
#: profile (``hardware.profiles.for_framework``) keeps them instead of its own values.
FILE_EFFICIENCY_PREFIX = "efficiency."


def _mark_efficiency(merged: dict[str, Any], data: dict[str, Any], file_name: str, restates: Any = None) -> None:
    """Credit the efficiency terms the file gives explicitly to the file (``sources["efficiency.<term>"]``):
    an explicit value of the user's wins over a framework profile's default. A term at the value of the
    catalog system the file restates (``restates``: the system of the same name, e.g. ``plan-catalog
    show``'s output, or the ``base:`` it builds on, e.g. ``plan-calibrate -o``'s complete section)
    overrides nothing: that system, profiles included."""
    eff = data.get("efficiency")
    if not isinstance(eff, dict) or not isinstance(merged.get("sources", {}), dict):
        return
    same = restates.efficiency.model_dump() if restates is not None else {}
    sources = merged.setdefault("sources", {})
    for key, value in eff.items():
        if key != "source" and not (key in same and same[key] == value):
            sources[f"{FILE_EFFICIENCY_PREFIX}{key}"] = f"cluster file {file_name}"


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """A :class:`ClusterSpec` from a YAML/JSON file, with optional ``base: <catalog name>``."""
    p = expand_path(path)
    data = load_document(p, "cluster")
    where = f"cluster {p.name}"
    if "base" in data:
        base_name = data.pop("base")
        if not isinstance(base_name, str) or not base_name.strip():
            raise InputError(f"{where}: base: expected a catalog name, e.g. base: h100-sxm")
        base = get_cluster(base_name, field=f"{where}: base")
        _check_fields(data, ClusterSpec, where)
        merged = base.model_dump()
        merged["aliases"] = ()  # the catalog aliases name the catalog entry, not this cluster
        merged["name"] = p.stem
        merged["sources"] = dict(merged.get("sources", {}), base=f"catalog {base.name} + {p.name}")
        merged = deep_merge(merged, data)
        _credit_file(merged, data, f"{p.name} (overrides catalog {base.name})")
        # a term it gives at the base's own value restates the base (plan-calibrate writes the whole
        # efficiency section): it overrides no framework profile; every other term is the user's
        restates = base
    else:
        _check_fields(data, ClusterSpec, where)
        merged = dict(data)
        merged.setdefault("name", p.stem)
        name = merged.get("name")
        restates = get_cluster(name) if isinstance(name, str) and canonical_name(name) is not None else None
    _mark_efficiency(merged, data, p.name, restates)
    try:
        return ClusterSpec.model_validate(merged)
    except ValidationError as exc:
        raise InputError(validation_message(exc, where)) from None


def _looks_like_path(ref: str) -> bool:
    return ref.lower().endswith(FILE_SUFFIXES) or os.sep in ref or (os.altsep or "\0") in ref


def _is_file(ref: str) -> bool:
    try:
        return expand_path(ref).is_file()
    except (OSError, ValueError):  # over-long or NUL-containing names are not files
        return False


def resolve_cluster(ref: str, sets: Sequence[str] = ()) -> ClusterSpec:
    """``--gpu`` value -> :class:`ClusterSpec`: a catalog name/alias or a cluster file; then ``sets``.

    A reference with a YAML/JSON suffix or a path separator is a file; otherwise a catalog name
    wins over a same-named file in the working directory.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise InputError("gpu: empty; give a catalog name (see 'plan-catalog gpus') or a cluster YAML file")
    ref = ref.strip()
    if _looks_like_path(ref):
        cluster = load_cluster_file(ref)
    elif canonical_name(ref) is not None:
        cluster = get_cluster(ref)
    elif _is_file(ref):
        cluster = load_cluster_file(ref)
    else:
        cluster = get_cluster(ref)  # raises: unknown name, with the closest ones
    return apply_overrides(cluster, sets)
