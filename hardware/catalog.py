"""The built-in hardware catalog: ``hardware/catalog.yaml`` as validated :class:`ClusterSpec` objects.

Names and aliases are matched case-insensitively (``_`` and spaces count as ``-``); an unknown name raises :class:`InputError` with
the closest catalog names. The YAML file is read through :mod:`importlib.resources`, so the catalog
works from an installed package as well as from a source checkout.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

from pydantic import ValidationError

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.io import InputError, closest, parse_document, short_repr, validation_message

CATALOG_RESOURCE = "catalog.yaml"


def _normalize(name: str) -> str:
    """Lookup key: lower case, runs of ``_`` and spaces read as ``-`` (``"A100 80GB"`` -> ``a100-80gb``)."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@functools.lru_cache(maxsize=1)
def _raw_catalog() -> Mapping[str, Mapping[str, Any]]:
    """The catalog file as parsed YAML: name -> raw field mapping (read once)."""
    text = resources.files("plan_search.hardware").joinpath(CATALOG_RESOURCE).read_text(encoding="utf-8")
    data = parse_document(text, f"hardware catalog {CATALOG_RESOURCE}", fast=True)
    out: dict[str, Mapping[str, Any]] = {}
    for name, fields in data.items():
        if not isinstance(fields, dict):
            raise InputError(f"hardware catalog: {name}: expected a mapping of ClusterSpec fields")
        out[str(name)] = MappingProxyType(dict(fields))
    return MappingProxyType(out)


PROFILES_RESOURCE = "efficiency_profiles.yaml"


@functools.lru_cache(maxsize=1)
def profiles_document() -> Mapping[str, Any]:
    """``efficiency_profiles.yaml`` parsed once (empty if absent): the megatron overlays below and
    every framework's profiles (:func:`plan_search.hardware.profiles.load_profiles`)."""
    f = resources.files("plan_search.hardware").joinpath(PROFILES_RESOURCE)
    if not f.is_file():
        return MappingProxyType({})
    return parse_document(f.read_text(encoding="utf-8"), f"efficiency profiles {PROFILES_RESOURCE}", fast=True) or {}


@functools.lru_cache(maxsize=1)
def _megatron_profiles() -> Mapping[str, Mapping[str, Any]]:
    """``systems.<name>.megatron`` of ``efficiency_profiles.yaml``: efficiency terms fitted by
    ``bench/moe_fidelity.py --refit --write`` (dense + MoE rows), laid over the catalog's own
    ``efficiency`` block of that system (each term listed replaces the catalog's; the entry's
    ``source`` names the rows each term saw)."""
    doc = profiles_document()
    out = {}
    for name, profs in (doc.get("systems") or {}).items():
        if isinstance(profs, dict) and isinstance(profs.get("megatron"), dict):
            out[str(name)] = MappingProxyType(dict(profs["megatron"]))
    return MappingProxyType(out)


@functools.lru_cache(maxsize=1)
def _catalog() -> Mapping[str, ClusterSpec]:
    specs: dict[str, ClusterSpec] = {}
    overlay = _megatron_profiles()
    for name, fields in _raw_catalog().items():
        data = dict(fields)
        if name in overlay:
            data["efficiency"] = {**dict(data.get("efficiency") or {}), **overlay[name]}
        data.setdefault("name", name)
        if data["name"] != name:
            raise InputError(f"hardware catalog: {name}: name field {data['name']!r} differs from its key")
        try:
            specs[name] = ClusterSpec.model_validate(data)
        except ValidationError as exc:
            raise InputError(validation_message(exc, f"hardware catalog {name}")) from None
    _check_unique_names(specs)
    return MappingProxyType(specs)


def _check_unique_names(specs: Mapping[str, ClusterSpec]) -> None:
    seen: dict[str, str] = {}
    for name, spec in specs.items():
        for key in (name, *spec.aliases):
            k = _normalize(key)
            if k in seen and seen[k] != name:
                raise InputError(f"hardware catalog: {name}: alias {key!r} is already used by {seen[k]}")
            seen[k] = name


@functools.lru_cache(maxsize=1)
def _index() -> Mapping[str, str]:
    """Lower-cased name or alias -> catalog name."""
    idx: dict[str, str] = {}
    for name, spec in _catalog().items():
        for key in (name, *spec.aliases):
            idx[_normalize(key)] = name
    return MappingProxyType(idx)


def load_catalog() -> dict[str, ClusterSpec]:
    """Every catalog system by its canonical name (a fresh dict; the specs are immutable)."""
    return dict(_catalog())


def catalog_names() -> list[str]:
    """Canonical names, in catalog order."""
    return list(_catalog())


def canonical_name(name: str) -> str | None:
    """The catalog name that ``name`` (a name or alias, any case) refers to, else ``None``."""
    if not isinstance(name, str):
        return None
    return _index().get(_normalize(name))


def closest_names(name: str, n: int = 3) -> list[str]:
    """Catalog names whose name or an alias is close to ``name`` (best first, no duplicates)."""
    key = _normalize(str(name))
    idx = _index()
    return closest(key, idx, n)


def get_cluster(name: str, field: str = "gpu") -> ClusterSpec:
    """The catalog system called ``name`` (or one of its aliases), case-insensitively.

    ``field`` names the input in the error message (``gpu`` for ``--gpu``).
    """
    canon = canonical_name(name)
    if canon is not None:
        return _catalog()[canon]
    close = closest_names(str(name))
    hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(catalog_names())}"
    raise InputError(f"{field}: unknown {short_repr(str(name))}; {hint}; see 'plan-catalog gpus'")

