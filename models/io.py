"""Loading input documents (YAML, JSON) safely, and turning validation errors into one line.

Every input document of the project (model specs, hardware specs, requests, sweeps) is read
through :func:`load_document`, so that the rules hold everywhere: ``yaml.safe_load`` only, a size
bound, a mapping at the top, and errors that name the file and the field.
"""

from __future__ import annotations

import itertools
import json
import os
import reprlib
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 60, 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


class InputError(ValueError):
    """Bad input: the message is one line that names the field and the fix (whitespace runs,
    newlines included, are collapsed, so a field name or value with a line break cannot split it)."""

    def __init__(self, message: object = "") -> None:
        super().__init__(" ".join(str(message).split()))


def expand_path(path: str | Path) -> Path:
    """``Path(path)`` with a leading ``~`` or ``~user`` expanded when it can be (an unknown
    user or no home directory leaves the path as written, for the caller's "not found")."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise InputError(f"path: {short_repr(path)} is not a file path")
    p = Path(path)
    try:
        return p.expanduser()
    except RuntimeError:
        return p


def field_name(key: object) -> str:
    """A document key as shown in a message: as written when it looks like a field name, else
    its (bounded) repr, so odd keys (empty, spaces, control characters) stay visible."""
    if isinstance(key, str) and key and all(c.isalnum() or c in "_-." for c in key) and len(key) <= 60:
        return key
    return short_repr(key)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` of a user value for an error message, in bounded time and length.

    Plain ``repr`` (also under a ``!r:.60`` format, which truncates only afterwards) walks the
    whole value: a YAML document whose aliases nest ten lists of ten lists thirty levels deep
    is a few hundred bytes but 10**30 elements when printed. :mod:`reprlib` stops at depth 2 and
    4 items per container.
    """
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TOKEN_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_TOKEN_RE = None


def parse_token_count(value: Any, where: str = "tokens") -> float:
    """A token count as every interface takes it: ``3e11``, ``300e9``, ``300000000000``,
    ``300B``, ``1.4T``, ``250M``, ``50k`` (a number, or text; YAML reads ``300e9`` as text).
    Raises :class:`InputError` naming ``where``; a boolean is not a count."""
    import math
    import re

    global _TOKEN_RE
    if isinstance(value, bool):
        raise InputError(f"{where}: {value!r} is not a token count (e.g. 300e9 or 300B)")
    if isinstance(value, (int, float)):
        v = float(value)
    else:
        if _TOKEN_RE is None:
            _TOKEN_RE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*")
        m = _TOKEN_RE.fullmatch(str(value)[:100])
        if not m:
            raise InputError(f"{where}: {short_repr(value)} is not a token count (e.g. 300e9 or 300B)")
        v = float(m.group(1)) * _TOKEN_SUFFIX[m.group(2).lower()]
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"{where}: {short_repr(value)} must be a positive, finite token count")
    return v


def parse_int(text: Any, minimum: int = 1) -> int:
    """One integer of a knob's text: ``8``, `` 1_024 ``, ``1e3``; ValueError (the message names
    the value, not the field: the caller adds it) when it is no integer or below ``minimum``."""
    import math
    import re

    t = str(text).strip().replace("_", "")
    try:
        v = float(t) if re.fullmatch(r"[0-9.]+[eE][+-]?[0-9]+", t) else int(t)
    except (ValueError, OverflowError):
        raise ValueError(f"{str(text)!r} is not an integer") from None
    if not math.isfinite(v) or v != int(v) or v < minimum:
        raise ValueError(f"{str(text)!r} must be an integer >= {minimum}")
    return int(v)


def parse_int_set(text: Any, limit: int = 10_000_000, minimum: int = 1) -> list[int]:
    """A set of integers as every interface writes it (plan-search's options, a request's or a
    sweep's knob given as text): ``8``, ``1,2,4``, ``1..16``, ``64..1024:64`` and combinations ->
    sorted unique ints. ValueError naming the value (the caller adds the field)."""
    import re

    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(.+?)\.\.(.+?)(?::(.+))?", part)
        if m:
            lo, hi = parse_int(m.group(1), minimum), parse_int(m.group(2), minimum)
            step = parse_int(m.group(3)) if m.group(3) else 1
            if lo > hi:
                raise ValueError(f"range {part!r} is empty (low above high)")
            if (hi - lo) // step > 1_000_000:
                raise ValueError(f"range {part!r} has too many values")
            out.update(range(lo, hi + 1, step))
        else:
            out.add(parse_int(part, minimum))
    if not out:
        raise ValueError("empty")
    if max(out) > limit:
        raise ValueError(f"{max(out)} is too large (max {limit:,})")
    return sorted(out)


def closest(key: str, candidates, n: int = 3) -> list[str]:
    """The ``n`` names of ``candidates`` closest to ``key``, best first, for "did you mean"
    hints everywhere (model and system names, spec fields, ``--set`` keys). ``candidates`` is a
    list of names or a mapping of spellings (aliases) to the name to suggest. Order: names that
    start with ``key`` or whose last dotted part is ``key``, then close matches (difflib ratio >= 0.5, longest shared prefix first),
    then names containing ``key`` or contained in it, then looser matches (ratio >= 0.3)."""
    import difflib
    import os

    index = dict(candidates) if hasattr(candidates, "keys") else {c: c for c in candidates}
    key = str(key)[:200]
    keys = list(index)
    ratio = lambda k: difflib.SequenceMatcher(None, k, key).ratio()  # noqa: E731
    close = [k for k in keys if key and (k.startswith(key) or k.endswith("." + key))]
    near = difflib.get_close_matches(key, keys, n=10, cutoff=0.5)
    near.sort(key=lambda k: (-len(os.path.commonprefix([k, key])), -ratio(k)))
    close += [k for k in near if k not in close]
    close += [k for k in keys if key and (key in k or k in key) and k not in close]
    if not close:
        close = difflib.get_close_matches(key, keys, n=10, cutoff=0.3)
    out: list[str] = []
    for k in close:
        if index[k] not in out:
            out.append(index[k])
    return out[:n]


def _admits_bool(value: Any, tp: Any) -> bool:
    """Whether ``value`` may hold a boolean where the annotation ``tp`` is: a boolean is taken
    only where ``bool`` (or ``Any``, a bare ``dict``/``list``) is part of the type."""
    import types
    import typing

    from pydantic import BaseModel

    if tp is Any or tp is bool or tp is object:
        return True
    if tp is None or tp is type(None):
        return False
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _admits_bool(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return any(_admits_bool(value, a) for a in args)
    if origin is typing.Literal:
        return not isinstance(value, bool) or any(isinstance(a, bool) for a in args)
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple, set, frozenset):
        if isinstance(value, bool):
            return False
        if isinstance(value, (list, tuple)) and args:
            inner = args[0]
            return all(_admits_bool(v, inner) for v in value)
        return True
    if origin is dict or tp is dict:
        if isinstance(value, bool):
            return False
        if isinstance(value, dict) and len(args) == 2:
            return all(_admits_bool(v, args[1]) for v in value.values())
        return True
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return not isinstance(value, bool)
    if tp in (int, float, str):
        return not isinstance(value, bool)
    return True


def _has_bool(value: Any, depth: int = 0) -> bool:
    """Whether a boolean is in ``value`` (lists and mappings looked into, 3 levels deep): the cheap
    test before the annotation is looked at (a request's 10,000 GPU counts are ints)."""
    if isinstance(value, bool):
        return True
    if depth >= 3:
        return False
    if isinstance(value, (list, tuple)):
        return any(type(v) is bool or (isinstance(v, (list, tuple, dict)) and _has_bool(v, depth + 1))
                   for v in value)
    if isinstance(value, dict):
        return any(_has_bool(v, depth + 1) for v in value.values())
    return False


#: (model class, field) -> whether a plain boolean is admitted there (:func:`_admits_bool` answers the
#: same for True and False): every Plan the search rebuilds carries ~15 boolean knobs, whose annotations
#: were walked again for each (~0.3 ms a Plan, a third of a 1,000-point front's report)
_BOOL_FIELD_OK: dict = {}


def refuse_bools(cls, data: Any) -> Any:
    """A ``model_validator(mode="before")`` body: refuse a boolean given for a number (``"gpus":
    [true]`` is not one GPU; pydantic's lax mode would take True as 1) in every field of
    ``cls``, so the CLI, JSON documents and the Python API refuse it alike."""
    if isinstance(data, dict):
        fields = cls.model_fields  # a property: read once, not per key
        for name, value in data.items():
            f = fields.get(name) if isinstance(name, str) else None
            if f is None or not _has_bool(value):
                continue
            if type(value) is bool:  # a plain boolean: the answer is the annotation's alone, looked up once
                ok = _BOOL_FIELD_OK.get((cls, name))
                if ok is None:
                    ok = _BOOL_FIELD_OK[(cls, name)] = _admits_bool(value, f.annotation)
            else:
                ok = _admits_bool(value, f.annotation)
            if not ok:
                raise ValueError(f"{name}: {short_repr(value)} holds a boolean (true/false) where a number or "
                                 "text is expected")
    return data



def _plain(value: Any) -> Any:
    """A numpy scalar or array as the Python value it holds (``np.int64(8)`` -> 8, an array -> a
    list, ``np.bool_`` -> bool); lists and tuples element by element; anything else unchanged."""
    if type(value).__module__ == "numpy" and callable(getattr(value, "tolist", None)):
        return value.tolist()
    if isinstance(value, (list, tuple)) and any(type(v).__module__ == "numpy" for v in value):
        return type(value)(_plain(v) for v in value)
    return value


def from_numpy(data: Any) -> Any:
    """``data`` (a document's mapping) with numpy values made plain Python, so the Python API takes
    ``tp=np.int64(8)`` or ``gpus=np.array([8, 16])`` as the ints they are (strict fields refused
    them as 'not a valid integer'); a numpy boolean stays a boolean, refused where a number is due."""
    if isinstance(data, dict) and any(type(v).__module__ == "numpy" or isinstance(v, (list, tuple))
                                      for v in data.values()):
        return {k: _plain(v) for k, v in data.items()}
    return data


class NoBoolNumbers(BaseModel):
    """Base of every input document (model spec, plan, request, sweep, allocation): a boolean given
    for a number is refused (:func:`refuse_bools`), once here for all of them. Schemas are built
    on first use (``defer_build``): the commands' start-up builds none."""

    model_config = ConfigDict(defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        return refuse_bools(cls, from_numpy(data))  # "gpus": [true] is not one GPU; lax mode takes True as 1

def _model_named(name: str) -> type[BaseModel] | None:
    """The pydantic model class called ``name`` (a ValidationError carries only its title)."""
    todo, seen = [BaseModel], set()
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                if sub.__name__ == name and sub.__module__.startswith("plan_search"):
                    return sub
                seen.add(sub)
                todo.append(sub)
    return None


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside ``annotation`` (``M``, ``M | None``, ``list[M]``, ``dict[str, M]``)."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _unknown_key_hint(exc: ValidationError, loc: tuple) -> str:
    """``; closest: a, b`` naming the fields nearest an unknown key at ``loc``, when there are any."""
    model = _model_named(exc.title)
    for part in loc[:-1]:
        if model is None:
            return ""
        if isinstance(part, str):
            f = model.model_fields.get(part)
            model = _inner_model(f.annotation) if f is not None else None
    if model is None or not loc:
        return ""
    close = closest(str(loc[-1]), [n for n in model.model_fields if n != "source"], n=3)
    return f"; closest: {', '.join(close)}" if close else ""


def validation_message(exc: ValidationError, where: str = "") -> str:
    """First error of a pydantic ValidationError as ``where: field.path: message``; an unknown key
    comes first (a misspelt required field is also a missing one) with the nearest field names."""
    errors = exc.errors()
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    loc = ".".join(str(p) if isinstance(p, int) else field_name(p) for p in err.get("loc", ()) if p != "__root__")
    loc = loc.removeprefix("knobs.")  # a plan knob is named alone: requests take it at the top level too
    msg = (err.get("msg") or "invalid value").removeprefix("Value error, ")  # not str(exc): it prints the input
    inp = err.get("input")
    shown = ""
    if err.get("type") not in ("missing", "value_error") and not isinstance(inp, (dict, list)):
        shown = f" (got {short_repr(inp)})"
    if err.get("type") == "extra_forbidden":
        shown += _unknown_key_hint(exc, tuple(err.get("loc", ())))
    more = len(errors) - 1
    tail = f" [+{more} more]" if more > 0 else ""
    prefix = f"{where}: " if where else ""
    field = f"{loc}: " if loc and not msg.startswith(loc) else ""
    return f"{prefix}{field}{msg}{shown}{tail}".replace("\n", " ")


def error_text(exc: Exception) -> str:
    """An error's text for a message: :func:`validation_message` of a pydantic ValidationError (a
    ``Plan`` or request field refused), ``str`` of any other (an :class:`InputError`, a ValueError)."""
    return validation_message(exc) if isinstance(exc, ValidationError) else str(exc)


def _read_bounded(stream: BinaryIO, what: str, name: str) -> bytes:
    """At most MAX_DOCUMENT_BYTES of ``stream`` (reading one byte more to tell)."""
    try:
        raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{what}: cannot read {name} ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{what}: {name} is larger than the limit of {MAX_DOCUMENT_BYTES} bytes")
    return raw


def _decode(raw: bytes, what: str, name: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{what}: {name} is not UTF-8 text") from None


def load_document(path: str | Path, what: str = "document") -> dict[str, Any]:
    """Read a YAML or JSON mapping from ``path`` (``yaml.safe_load``; JSON is YAML's subset).

    ``~`` is expanded; symlinks are followed; a directory, a missing file, a device or a pipe
    is an error naming the path; no more than MAX_DOCUMENT_BYTES are read."""
    p = expand_path(path)
    try:
        regular = p.is_file()
    except (OSError, ValueError):  # over-long or NUL-containing names
        regular = False
    if not regular:
        kind = "is a directory" if _is_dir(p) else "not found (or not a regular file)"
        raise InputError(f"{what}: file {str(p)!r} {kind}")
    try:
        size = p.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(f"{what}: {p.name} is {size} bytes; the limit is {MAX_DOCUMENT_BYTES}")
        with p.open("rb") as f:
            raw = _read_bounded(f, what, p.name)
    except OSError as exc:
        raise InputError(f"{what}: cannot read {str(p)!r} ({exc.strerror or type(exc).__name__})") from None
    return parse_document(_decode(raw, what, p.name), f"{what} {p.name}")


def load_stream(stream: BinaryIO, what: str = "document", name: str = "stdin") -> dict[str, Any]:
    """:func:`load_document` for an open binary stream (``--request -``): the same size bound,
    read without reading past it."""
    return parse_document(_decode(_read_bounded(stream, what, name), what, name), f"{what} {name}")


def read_document(path: str | Path, what: str = "document") -> dict[str, Any]:
    """A document from a file, or from standard input when ``path`` is ``-`` (the same size
    bound, a UTF-8 byte-order mark dropped, a closed or missing stdin one clear line)."""
    if str(path) != "-":
        return load_document(path, what)
    import sys

    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None or getattr(sys.stdin, "closed", False):
        raise InputError(f"{what}: -: there is no standard input to read")
    try:
        return load_stream(stdin, what)
    except (OSError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{what}: -: standard input cannot be read ({type(exc).__name__})") from None


#: Most values a YAML document may stand for once its aliases are expanded (each container and
#: scalar counts one), when aliases add to it: ``&a [x, x, ...]`` repeated by ``*a`` ten deep is a
#: few hundred bytes of text and 10**10 values to whatever walks it (a copy, a JSON dump, a
#: validator). A document without aliases is bounded by MAX_DOCUMENT_BYTES instead.
MAX_EXPANDED_VALUES = 1_000_000


def check_expansion(data: Any, what: str = "document", limit: int = MAX_EXPANDED_VALUES) -> None:
    """Refuse a loaded YAML value whose aliases expand it past ``limit`` values, or that contains
    itself (``&a [*a]``), before anything walks it: the size is counted once per distinct
    container (memoised by identity), so this takes time in the size of the text, not of the
    expansion. Without aliases nothing is shared and nothing is refused here."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    shared = False

    def size(v: Any) -> int:
        nonlocal shared
        if not isinstance(v, (dict, list)):
            return 1
        i = id(v)
        if i in sizes:
            shared = True
            return sizes[i]
        if i in on_path:
            raise InputError(f"{what}: a YAML alias refers to a value that contains it (a cycle); "
                             "write the value out")
        on_path.add(i)
        n = 1
        for x in (itertools.chain(v.keys(), v.values()) if isinstance(v, dict) else v):
            n += size(x)
        on_path.discard(i)
        sizes[i] = n = min(n, 10 * limit)  # capped: no huge integers from deep doubling
        return n

    if size(data) > limit and shared:
        raise InputError(f"{what}: YAML aliases expand it to more than {limit:,} values; write the "
                         "repeated parts out, or use fewer aliases")


_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean", bytes: "binary value"}


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False


class DuplicateKeyError(ValueError):
    """A key given twice in one mapping of a document (JSON and YAML parsers keep the last silently)."""

    def __init__(self, key: Any):
        super().__init__(f"key {short_repr(key)} is given twice in one mapping; keep one")


def _pairs_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` object hook: a mapping, refusing a key given twice."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(k)
        out[k] = v
    return out


class _OnceSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (a ``<<`` merge may still be
    overridden by the mapping's own keys, as YAML's merge keys mean)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DuplicateKeyError(key)
                    seen.add(key)
                except TypeError:  # an unhashable key: the base loader says so
                    pass
        return super().construct_mapping(node, deep=deep)


_OnceSafeLoader.add_constructor("tag:yaml.org,2002:map", _OnceSafeLoader.construct_yaml_map)


def _safe_load(text: str, fast: bool = False):
    """``yaml.safe_load``, refusing duplicated keys; ``fast``: the safe loader in libyaml's C
    (``yaml.CSafeLoader``, when PyYAML was built with it), which reads the package's own catalogs about
    ten times faster (start-up of every command). User documents keep the pure-Python loader and its
    error texts."""
    if fast and getattr(yaml, "CSafeLoader", None) is not None:
        return yaml.load(text, Loader=yaml.CSafeLoader)
    return yaml.load(text, Loader=_OnceSafeLoader)


def parse_document(text: str, what: str = "document", fast: bool = False) -> dict[str, Any]:
    """Parse YAML/JSON text into a mapping with one-line errors.

    Text that starts like JSON is parsed as JSON (fast, strict); when that fails it is tried as
    YAML (``{a: 1}`` is a YAML flow mapping), and the JSON error is reported if both fail.
    ``fast``: libyaml's safe loader (:func:`_safe_load`; the package's catalogs)."""
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                data = json.loads(text, object_pairs_hook=_pairs_once)
            except json.JSONDecodeError as json_exc:
                try:
                    data = _safe_load(text)
                except DuplicateKeyError:
                    raise
                except (yaml.YAMLError, ValueError):
                    raise json_exc from None
                check_expansion(data, what)
        else:
            data = _safe_load(text, fast)
            check_expansion(data, what)
    except InputError:
        raise
    except DuplicateKeyError as exc:
        raise InputError(f"{what}: {exc}") from None
    except RecursionError:
        raise InputError(f"{what}: not valid YAML/JSON (nested too deeply)") from None
    except (yaml.YAMLError, json.JSONDecodeError, ValueError, OverflowError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{what}: not valid YAML/JSON ({first[:200]})") from None
    if not isinstance(data, dict):
        got = "an empty document" if data is None else f"a {_KINDS.get(type(data), type(data).__name__)}"
        raise InputError(f"{what}: expected a mapping of fields at the top, got {got}")
    return data
