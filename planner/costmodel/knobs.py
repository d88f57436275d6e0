"""One description of a plan's knobs, read from :class:`~plan_search.planner.costmodel.plan.Plan`.

Every knob is a field of :class:`Plan` with a type, a default and a one-line description; this
module turns those fields into :class:`KnobSpec` records that every interface uses: the options
of ``plan-estimate`` (one value) and ``plan-search`` (a value or a set), the ``knobs`` of a JSON
request and of a sweep, and the Python API. A knob added to :class:`Plan` appears everywhere with
the same spelling and the same default.

Two kinds of knob:

- *enumerated*: the search builds their domain itself with rules of their own (tp divides the
  heads and stays in the NVLink domain, pp splits the layers, ...): :data:`ENUMERATED`.
- *broadcast*: every other knob. A search takes a value or a set of values of each; the space
  is crossed with every combination (by default the Plan's default alone).

The shape of a plan (``num_gpus``, ``dp``, ``global_batch``, ``seq_len``) is not a knob here:
the search chooses the GPU count and dp, the request gives the batch and sequence.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from functools import lru_cache

from plan_search.planner.costmodel.plan import Plan, canonical_choices

#: Plan fields that are the plan's shape rather than knobs.
SHAPE_FIELDS = ("num_gpus", "dp", "global_batch", "seq_len")

#: Knobs whose search domain the space builds with its own rules (planner/search/space.py).
ENUMERATED = ("tp", "pp", "cp", "vpp", "micro_batch", "zero", "recompute", "recompute_layers",
              "sequence_parallel", "first_stage_layers", "last_stage_layers", "ep", "etp")


@dataclass(frozen=True)
class KnobSpec:
    """A plan knob: ``name`` (the Plan field), ``kind`` (``int``, ``float``, ``bool``,
    ``choice``), ``choices`` for a choice, ``default`` (``None``: derived from the rest of the
    plan), ``optional`` (``None`` is a valid value) and ``description`` (one line, units)."""

    name: str
    kind: str
    choices: tuple
    default: object
    optional: bool
    description: str
    minimum: float | None = None  # the Plan field's lower bound (ge, or gt + 1 for an integer)
    maximum: float | None = None

    @property
    def option(self) -> str:
        """The command-line spelling: ``--overlap-grad-reduce``."""
        return "--" + self.name.replace("_", "-")

    @property
    def enumerated(self) -> bool:
        return self.name in ENUMERATED


def _kind(annotation) -> tuple[str, tuple, bool]:
    args = typing.get_args(annotation)
    optional = type(None) in args
    if optional:
        rest = [a for a in args if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    if typing.get_origin(annotation) is typing.Literal:
        return "choice", tuple(typing.get_args(annotation)), optional
    if annotation is bool:
        return "bool", (), optional
    if annotation is int:
        return "int", (), optional
    if annotation is float:
        return "float", (), optional
    raise TypeError(f"Plan knob of unsupported type {annotation!r}")


@lru_cache(maxsize=None)
def knob_specs() -> tuple[KnobSpec, ...]:
    """Every knob of :class:`Plan`, in the order of its fields."""
    out = []
    for name, field in Plan.model_fields.items():
        if name in SHAPE_FIELDS:
            continue
        kind, choices, optional = _kind(field.annotation)
        lo = hi = None
        for c in field.metadata:
            if getattr(c, "ge", None) is not None:
                lo = c.ge
            elif getattr(c, "gt", None) is not None:
                lo = c.gt + 1 if kind == "int" else c.gt
            if getattr(c, "le", None) is not None:
                hi = c.le
        out.append(KnobSpec(name, kind, choices, field.default, optional, field.description or name.replace("_", " "),
                            lo, hi))
    return tuple(out)


def knob_spec(name: str) -> KnobSpec:
    for k in knob_specs():
        if k.name == name:
            return k
    raise KeyError(name)


def broadcast_knobs() -> tuple[KnobSpec, ...]:
    """The knobs a search crosses as given (a value or a set), not enumerated by rules."""
    return tuple(k for k in knob_specs() if not k.enumerated)


def parse_value(spec: KnobSpec, text: str):
    """One value of ``spec`` from its text: ``8``, ``on``/``off``/``true``/``false``, ``bf16``,
    ``none`` for an optional knob. Raises ``ValueError`` naming the knob and what it takes."""
    t = str(text).strip()
    low = t.lower()
    if spec.optional and low in ("none", "auto", "default"):
        return None
    if spec.kind == "bool":
        if low in ("on", "true", "yes", "1"):
            return True
        if low in ("off", "false", "no", "0"):
            return False
        raise ValueError(f"{spec.name}: {t!r} is not on/off")
    if spec.kind == "choice":
        c = canonical_choices({spec.name: t})[spec.name]  # "FLEX" is flex: the one rule, Plan's
        if c in spec.choices:
            return c
        raise ValueError(f"{spec.name}: {t!r} is not one of {', '.join(map(str, spec.choices))}")
    try:
        if spec.kind == "int":
            f = float(t)
            if not f.is_integer():
                raise ValueError
            return int(f)
        return float(t)
    except ValueError:
        raise ValueError(f"{spec.name}: {t!r} is not {'an integer' if spec.kind == 'int' else 'a number'}") from None
