"""The built-in model catalog (``models/catalog.yaml``) and name lookup.

The catalog is read with :mod:`importlib.resources`, so it works from an installed wheel as well
as from the source tree. Names and aliases are matched case-insensitively, with ``_`` and runs
of spaces read as ``-`` (``"LLAMA3 70B"`` finds ``llama3.1-70b``). A trailing ``.yaml`` /
``.yml`` / ``.json`` is dropped for the lookup, so ``--model gpt3.yaml`` still finds GPT-3 when
no such file exists (the file check itself is :func:`models.resolve.resolve_model`'s job).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import PurePath
from typing import Any

from pydantic import ValidationError

from plan_search.models.io import InputError, closest, parse_document, short_repr, validation_message
from plan_search.models.spec import ModelSpec

CATALOG_RESOURCE = "catalog.yaml"
DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")


def normalize_name(name: str) -> str:
    """The lookup key of a model name: lower case, ``_`` and spaces as ``-``."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@functools.lru_cache(maxsize=1)
def _raw_entries() -> dict[str, dict[str, Any]]:
    """The catalog as written: name -> field mapping (no defaults filled in)."""
    text = resources.files(__package__).joinpath(CATALOG_RESOURCE).read_text(encoding="utf-8")
    doc = parse_document(text, f"catalog {CATALOG_RESOURCE}", fast=True)
    entries: dict[str, dict[str, Any]] = {}
    for name, fields in doc.items():
        if not isinstance(name, str) or not isinstance(fields, dict):
            raise InputError(f"catalog {CATALOG_RESOURCE}: entry {name!r} must map a name to fields")
        if fields.get("name", name) != name:
            raise InputError(f"catalog {CATALOG_RESOURCE}: entry {name!r} has name {fields['name']!r}")
        entries[name] = {**fields, "name": name}
    return entries


def raw_entry(name: str) -> dict[str, Any]:
    """A copy of one catalog entry's fields as written (for ``base:`` documents)."""
    entry = _raw_entries()[name]
    return {k: (list(v) if isinstance(v, list) else v) for k, v in entry.items()}


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {}
    for name, fields in _raw_entries().items():
        try:
            specs[name] = ModelSpec(**fields)
        except ValidationError as exc:
            raise InputError(validation_message(exc, where=f"catalog {name}")) from None
    return specs


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Normalised name or alias -> catalog name; names and aliases must not collide."""
    index: dict[str, str] = {}
    for name, spec in _catalog().items():
        for key in (name, *spec.aliases):
            k = normalize_name(key)
            if k in index and index[k] != name:
                raise InputError(
                    f"catalog {CATALOG_RESOURCE}: {key!r} names both {index[k]!r} and {name!r}"
                )
            index[k] = name
    return index


def load_catalog() -> dict[str, ModelSpec]:
    """Every catalog model by name (a fresh dict; the specs themselves are immutable)."""
    return dict(_catalog())


def model_names() -> list[str]:
    """Catalog names in catalog order."""
    return list(_catalog())


def lookup(name: str) -> ModelSpec | None:
    """The catalog model called ``name`` (or one of its aliases), else ``None``."""
    index = _index()
    key = normalize_name(name)
    found = index.get(key)
    if found is None and "/" not in key and "\\" not in key:  # a bare "gpt3.yaml", not a path
        base = PurePath(key)
        if base.suffix in DOCUMENT_SUFFIXES:
            found = index.get(normalize_name(base.stem))
    return _catalog()[found] if found else None


def suggestions(name: str, n: int = 4) -> list[str]:
    """Catalog names closest to ``name`` (matching against names and aliases)."""
    index = _index()
    key = normalize_name(name)
    base = PurePath(key)
    if base.suffix in DOCUMENT_SUFFIXES:
        key = normalize_name(base.stem)
    # always something to try: the closest names, else the first catalog names
    return closest(key, index, n) or list(dict.fromkeys(index.values()))[:n]


def get_model(name: str) -> ModelSpec:
    """The catalog model called ``name``; an unknown name raises :class:`InputError` with suggestions."""
    if not isinstance(name, str) or not name.strip():
        raise InputError("model: empty name; give a catalog name or a model file (see 'plan-catalog models')")
    spec = lookup(name)
    if spec is not None:
        return spec
    close = ", ".join(suggestions(name))
    raise InputError(f"model: unknown {short_repr(name.strip())}; closest: {close}; see 'plan-catalog models'")
