"""Loading input documents (YAML, JSON) safely, and turning validation errors into one line.

Every input document of the project (model specs, hardware specs, requests, sweeps) is read
through :func:`load_document`, so that the rules hold everywhere: ``yaml.safe_load`` only, a size
bound, a mapping at the top, and errors that name the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


class InputError(ValueError):
    """Bad input: the message is one line that names the field and the fix."""


def validation_message(exc: ValidationError, where: str = "") -> str:
    """First error of a pydantic ValidationError as ``where: field.path: message``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    msg = err.get("msg", str(exc)).removeprefix("Value error, ")
    inp = err.get("input")
    shown = ""
    if err.get("type") not in ("missing", "value_error") and not isinstance(inp, (dict, list)):
        text = repr(inp)
        shown = f" (got {text[:60]})"
    more = len(exc.errors()) - 1
    tail = f" [+{more} more]" if more > 0 else ""
    prefix = f"{where}: " if where else ""
    field = f"{loc}: " if loc and not msg.startswith(loc) else ""
    return f"{prefix}{field}{msg}{shown}{tail}".replace("\n", " ")


def load_document(path: str | Path, what: str = "document") -> dict[str, Any]:
    """Read a YAML or JSON mapping from ``path`` (``yaml.safe_load``; JSON is YAML's subset)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what}: file {str(p)!r} not found")
    size = p.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(f"{what}: {p.name} is {size} bytes; the limit is {MAX_DOCUMENT_BYTES}")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what}: {p.name} is not UTF-8 text") from None
    return parse_document(text, f"{what} {p.name}")


def parse_document(text: str, what: str = "document") -> dict[str, Any]:
    """Parse YAML/JSON text into a mapping with one-line errors."""
    try:
        if text.lstrip().startswith(("{", "[")):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{what}: not valid YAML/JSON ({first})") from None
    if not isinstance(data, dict):
        raise InputError(f"{what}: expected a mapping of fields at the top, got {type(data).__name__}")
    return data
