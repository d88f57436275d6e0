"""What-if overrides of a cluster spec: ``--set gpu.hbm_bandwidth_gbps=3000``.

Each override is ``dotted.path=value``. The path goes into the :class:`ClusterSpec` dump
(``gpu.``, ``node.``, ``efficiency.`` or a top-level field such as ``price_per_gpu_hour_usd``;
``gpu.peak_tflops.<precision>`` may add a precision); the value is parsed as one YAML scalar
(``yaml.safe_load``) and the spec is validated again after every override, so an error names the
override that caused it. An overridden figure's provenance is rewritten to say so (the ``sources``
entry, or ``efficiency.source``), so no datasheet is credited with a what-if number.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence, get_args

import yaml
from pydantic import BaseModel, ValidationError

from plan_search.hardware.spec import ClusterSpec, Precision
from plan_search.models.io import InputError, closest, short_repr, validation_message

PRECISIONS: tuple[str, ...] = get_args(Precision)
MAX_SET_LENGTH = 1000


def _leaf_paths(data: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v and not path.endswith("sources"):
                out.extend(_leaf_paths(v, path))
            else:
                out.append(path)
    return out


def valid_keys(cluster: ClusterSpec) -> list[str]:
    """Every dotted key ``--set`` accepts for ``cluster`` (plus missing ``gpu.peak_tflops.*``)."""
    keys = _leaf_paths(cluster.model_dump())
    for p in PRECISIONS:
        k = f"gpu.peak_tflops.{p}"
        if k not in keys:
            keys.append(k)
    return keys


def _split(item: str) -> tuple[str, str]:
    if not isinstance(item, str):
        raise InputError(f"--set {item!r}: expected KEY=VALUE, e.g. gpu.hbm_bandwidth_gbps=3000")
    if len(item) > MAX_SET_LENGTH:
        raise InputError(f"--set {item[:40]!r}...: longer than {MAX_SET_LENGTH} characters")
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"--set {item!r}: expected KEY=VALUE, e.g. gpu.hbm_bandwidth_gbps=3000")
    return key, raw.strip()


def _parse_value(key: str, raw: str) -> Any:
    if raw == "":
        raise InputError(f"--set {key}: no value after '='")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "not valid YAML"
        raise InputError(f"--set {key}: cannot parse value {raw!r} ({first})") from None
    if value is None:
        raise InputError(f"--set {key}: value {raw!r} is empty (null)")
    from plan_search.models.io import check_expansion

    check_expansion(value, f"--set {key}")  # YAML aliases bounded before anything walks the value
    return value


def parse_set(item: str) -> tuple[str, Any]:
    """``'gpu.memory_gib=96'`` -> ``('gpu.memory_gib', 96)``; one-line InputError if malformed."""
    key, raw = _split(item)
    return key, _parse_value(key, raw)


def _no_such_field(key: str, cluster: ClusterSpec) -> InputError:
    keys = valid_keys(cluster)
    close = closest(key, keys, 3)
    if not close:
        last = key.rsplit(".", 1)[-1]
        close = [k for k in keys if k.rsplit(".", 1)[-1] == last][:3]
    hint = f"; closest: {', '.join(close)}" if close else "; see 'plan-catalog show NAME' for the fields"
    return InputError(f"--set {key}: no such field{hint}")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _assign(data: dict[str, Any], key: str, value: Any, cluster: ClusterSpec) -> Any:
    """Set ``key`` in the dumped ``data``; return the previous value (``None`` if new)."""
    parts = key.split(".")
    if any(not p for p in parts):
        raise _no_such_field(key, cluster)
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
            raise _no_such_field(key, cluster)
        node = node[part]
    leaf = parts[-1]
    parent = ".".join(parts[:-1])
    if leaf not in node:
        if parent == "gpu.peak_tflops" and leaf in PRECISIONS:
            pass
        elif parent.endswith("sources") or parent == "sources":
            pass
        else:
            raise _no_such_field(key, cluster)
    old = node.get(leaf)
    if isinstance(old, dict):
        if not isinstance(value, dict):
            example = next(iter(old), "field")
            raise InputError(f"--set {key}: is a section, not a value; set one of its fields, e.g. {key}.{example}")
        merged = copy.deepcopy(old)
        merged.update(value)
        value = merged
    elif (_is_number(old) or parent == "gpu.peak_tflops") and not _is_number(value):
        if isinstance(value, bool) or not isinstance(value, str):
            raise InputError(f"--set {key}: expected a number, got {short_repr(value)}")
    node[leaf] = value
    return old


def _record_provenance(data: dict[str, Any], key: str, raw: str, old: Any) -> None:
    """Say in the spec that ``key`` is a what-if value now (unless a source itself was set)."""
    parts = key.split(".")
    if any(p in ("sources", "source", "price_source", "price_date") for p in parts):
        return
    note = f"what-if override --set {key}={raw}" + (f" (catalog value {old:.6g})" if isinstance(old, float) else
                                                    f" (catalog value {short_repr(old)})" if old is not None else "")
    if parts[0] in ("gpu", "node") and len(parts) >= 2:
        sources = data[parts[0]].setdefault("sources", {})
        field = ".".join(parts[1:])
        if field.startswith("peak_tflops.") and field not in sources and "peak_tflops" in sources:
            sources[field] = f"{note}; other peaks: {sources['peak_tflops']}"
        else:
            sources[field] = note
    elif parts[0] == "efficiency" and len(parts) == 2:
        eff = data["efficiency"]
        eff["source"] = f"{eff.get('source', '')}; {note}".lstrip("; ")
    elif len(parts) == 1:
        data.setdefault("sources", {})[key] = note


def _strip_key_prefix(msg: str, key: str) -> str:
    return msg[len(key) + 2:] if msg.startswith(f"{key}: ") else msg


def apply_overrides(cluster: ClusterSpec, sets: Sequence[str]) -> ClusterSpec:
    """A new spec with every ``KEY=VALUE`` of ``sets`` applied in order, validated after each."""
    if isinstance(sets, str):
        sets = [sets]
    spec = cluster
    for item in sets:
        key, raw = _split(item)
        value = _parse_value(key, raw)
        data = spec.model_dump()
        old = _assign(data, key, value, spec)
        _record_provenance(data, key, raw, old)
        try:
            spec = ClusterSpec.model_validate(data)
        except ValidationError as exc:
            msg = _strip_key_prefix(validation_message(exc), key)
            raise InputError(f"--set {key}={raw}: {msg}") from None
    return spec


def describe_overrides(sets: Sequence[str], base: ClusterSpec | None = None) -> list[str]:
    """One line per override for reports: ``gpu.hbm_bandwidth_gbps = 3000 (was 2039)``.

    Without ``base`` the previous values are not shown. Malformed items raise InputError.
    """
    if isinstance(sets, str):
        sets = [sets]
    lines: list[str] = []
    spec = base
    for item in sets:
        key, value = parse_set(item)
        was = ""
        if spec is not None:
            old = _lookup(spec, key)
            if old is not None:
                was = f" (was {short_repr(old)})"
            spec = apply_overrides(spec, [item])
        lines.append(f"{key} = {short_repr(value)}{was}")
    return lines


def _lookup(spec: BaseModel, key: str) -> Any:
    node: Any = spec.model_dump()
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
