"""The one resolver behind every ``--model`` option.

``resolve_model(ref)`` accepts, in this order:

1. a path to an existing file (or a directory holding ``config.json``):

   - a HuggingFace ``config.json`` (it has ``num_hidden_layers``, ``n_layer``, ``model_type``,
     ``architectures`` or ``text_config``) goes through :func:`models.hf.from_hf_config`;
   - otherwise the document is our own schema, the fields of :class:`~models.spec.ModelSpec`
     (``name`` defaults to the file stem), optionally ``base: <catalog name>`` plus the fields
     to override (derived fields such as ``ffn_hidden_size = 4h`` are recomputed unless the base
     entry states them);

2. a catalog name or alias (:func:`models.catalog.get_model`), where a ``.yaml``/``.yml``/``.json``
   suffix is ignored, so ``gpt3.yaml`` means GPT-3 when there is no such file.

Every failure is a one-line :class:`~models.io.InputError` naming the file and the field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from plan_search.models.catalog import DOCUMENT_SUFFIXES, get_model, lookup, raw_entry, suggestions
from plan_search.models.hf import from_hf_config, hf_model_name
from plan_search.models.io import InputError, closest, expand_path, field_name, load_document, short_repr, validation_message
from plan_search.models.spec import ModelSpec

HF_MARKERS = ("num_hidden_layers", "n_layer", "model_type", "architectures", "text_config")
SPEC_FIELDS = tuple(ModelSpec.model_fields)


def looks_like_hf_config(doc: dict[str, Any]) -> bool:
    return "base" not in doc and any(k in doc for k in HF_MARKERS)


def _check_fields(doc: dict[str, Any], where: str) -> None:
    for key in doc:
        if key not in SPEC_FIELDS:
            close = closest(str(key), list(SPEC_FIELDS), n=1)
            hint = f"did you mean {close[0]}?" if close else "see models/spec.py for the fields"
            raise InputError(f"{where}: {field_name(key)}: unknown field; {hint}")


def spec_from_document(doc: dict[str, Any], default_name: str, where: str) -> ModelSpec:
    """Our YAML/JSON schema (optionally ``base:`` + overrides) -> ModelSpec."""
    doc = dict(doc)
    base = doc.pop("base", None)
    _check_fields(doc, where)
    if base is not None:
        if not isinstance(base, str):
            raise InputError(f"{where}: base: must be a catalog model name (got {short_repr(base)})")
        base_spec = lookup(base)
        if base_spec is None:
            close = ", ".join(suggestions(base))
            raise InputError(f"{where}: base: unknown model {short_repr(base)}; closest: {close}; see 'plan-catalog models'")
        fields = raw_entry(base_spec.name)
        fields.pop("aliases", None)
        fields.pop("name", None)
        overridden = ", ".join(str(k) for k in doc) or "no fields"
        fields["source"] = f"{base_spec.name} ({base_spec.source}) with {overridden} overridden by {where}"
        fields.update(doc)
        doc = fields
    doc.setdefault("name", default_name)
    try:
        return ModelSpec(**doc)
    except ValidationError as exc:
        raise InputError(validation_message(exc, where=where)) from None


def load_model_file(path: str | os.PathLike[str]) -> ModelSpec:
    """A model file: HF ``config.json`` or our schema."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise InputError(f"model: {str(p)!r} is a directory without a config.json")
        p = p / "config.json"
    where = f"model {p.name}"
    doc = load_document(p, what="model")
    if looks_like_hf_config(doc):
        return from_hf_config(doc, hf_model_name(doc, p.absolute()) or p.stem, where=where)
    return spec_from_document(doc, p.stem, where)


def resolve_model(ref: str | os.PathLike[str] | ModelSpec) -> ModelSpec:
    """A model spec from a file path, a HF config, or a catalog name/alias."""
    if isinstance(ref, ModelSpec):
        return ref
    if not isinstance(ref, (str, os.PathLike)):
        raise InputError(f"model: expected a catalog name or a file path, got {type(ref).__name__}")
    text = os.fspath(ref).strip()
    if not text:
        raise InputError("model: empty; give a catalog name or a model file (see 'plan-catalog models')")
    p = expand_path(text)
    try:
        exists = p.exists()
    except (OSError, ValueError):  # over-long or NUL-containing names are not files
        exists = False
    if exists:
        return load_model_file(p)
    spec = lookup(text)
    if spec is not None:
        return spec
    if any(sep in text for sep in ("/", os.sep)) or p.suffix.lower() in DOCUMENT_SUFFIXES:
        close = ", ".join(suggestions(text))
        raise InputError(
            f"model: file {text!r} not found and {p.stem!r} is not a catalog model; closest: {close}; "
            "see 'plan-catalog models'"
        )
    return get_model(text)  # raises with suggestions
