"""The plan knobs as command-line options, generated from the one description of them
(:mod:`plan_search.planner.costmodel.knobs`, read from the ``Plan`` fields).

``plan-estimate`` takes one value of each knob, ``plan-search`` a value or a set; the spelling
is the same in both: ``--tp 8`` / ``--tp 1,2,4,8`` / ``--pp 1..16``; ``--precision bf16`` /
``--precision bf16,fp8``; a boolean knob ``--flash-attention`` (on), ``--no-flash-attention``
(off) or ``--flash-attention on|off|both``. Every option's default is the Plan's default (shown in
``--help``), so the two commands price a plan with the same knobs.
"""

from __future__ import annotations

import click

#: Older spellings still accepted (hidden): option -> (boolean knob, False): each is that knob's --no-x.
ALIASES = {"bf16-grads": ("fp32_grads", False)}


def _int(text: str, name: str, minimum: int = 1) -> int:
    from plan_search.models.io import parse_int

    try:
        return parse_int(text, minimum)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{name}") from None


def parse_int_set(text: str, name: str, limit: int = 10_000_000, minimum: int = 1) -> list[int]:
    """``8``, ``1,2,4``, ``1..16``, ``64..1024:64`` (and combinations) -> sorted unique ints: the
    one parser of integer sets (models.io.parse_int_set, which requests and sweeps use too)."""
    from plan_search.models.io import parse_int_set as parse

    try:
        return parse(text, limit, minimum)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{name}") from None


def _check_number(name: str, value) -> None:
    """A number knob's value against its Plan field (range, finite): ValueError with the field's
    message, so both commands say "Invalid value for --moe-imbalance: Input should be greater than
    or equal to 1 (got 0.5)" (plan-search said "moe_imbalance.0: ..." of its one-value list)."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from plan_search.models.io import validation_message
    from plan_search.planner.costmodel.plan import Plan

    if value is None:
        return
    field = Plan.model_fields[name]
    try:
        TypeAdapter(Annotated[field.annotation, field]).validate_python(value)
    except ValidationError as exc:
        raise ValueError(validation_message(exc)) from None


def _specs():
    from plan_search.planner.costmodel.knobs import knob_specs

    return knob_specs()


def _default_text(spec) -> str:
    if spec.default is None:
        return "auto"
    if spec.kind == "bool":
        return "on" if spec.default else "off"
    return str(spec.default)


#: Knobs a search spans over every value the model, GPU and framework allow unless the option is given.
SEARCH_SPANNED = ("tp", "pp", "ep", "etp", "cp", "vpp", "micro_batch", "zero", "recompute", "recompute_layers")
#: Knobs a search spans over what each framework's current recipes use on the GPU unless the option is given
#: (planner.frameworks.recipes.RECIPE_KNOBS; kept here as names so the command's start-up imports nothing more).
SEARCH_RECIPES = ("moe_dispatcher", "moe_grouped_gemm", "moe_overlap", "pp_schedule", "overlap_tp_comm",
                  "fp8_attention")


def _search_default_text(spec) -> str:
    """plan-search's ``[default: ...]``: what the search does when the option is not given."""
    if spec.name in SEARCH_SPANNED:
        return "searched: every value the model, GPU and framework allow"
    if spec.name in SEARCH_RECIPES:
        return "searched: the values each framework's current recipes use on the GPU"
    return f"{_default_text(spec)}, or the framework's own"


def _seen(ctx, param, value):
    """Record the order in which boolean knob options were given (the last given wins, as with
    click's own ``--x/--no-x`` pairs)."""
    if value not in (None, False):
        ctx.meta.setdefault("plan_search_knob_order", []).append(param.name)
    return value


def knob_options(multi: bool):
    """A decorator adding one option per plan knob (two for a boolean: ``--x [on|off]`` and
    ``--no-x``). ``multi``: values may be sets (plan-search)."""

    default = _search_default_text if multi else _default_text

    def deco(f):
        for spec in reversed(_specs()):
            opt = spec.option
            what = spec.description
            if spec.kind == "bool":
                vals = "on|off|both" if multi else "on|off"
                f = click.option(f"--no-{opt[2:]}", f"knob_no__{spec.name}", is_flag=True, default=False,
                                 callback=_seen, help=f"the same as {opt} off")(f)
                f = click.option(opt, f"knob__{spec.name}", is_flag=False, flag_value="on", default=None,
                                 metavar=f"[{vals}]", callback=_seen,
                                 help=f"{what} [default: {default(spec)}]")(f)
            else:
                if spec.kind == "choice":
                    metavar = "|".join(map(str, spec.choices)) if not multi else ",".join(map(str, spec.choices[:3])) + ("" if len(spec.choices) <= 3 else ",...")
                elif spec.kind == "int":
                    metavar = "N[,N|LO..HI]" if multi else "N"
                else:
                    metavar = "X[,X]" if multi else "X"
                f = click.option(opt, f"knob__{spec.name}", default=None, metavar=metavar,
                                 help=f"{what} [default: {default(spec)}]")(f)
        for alias, (knob, _value) in ALIASES.items():
            f = click.option(f"--{alias}", f"knob_alias__{alias.replace('-', '_')}", is_flag=True, default=False,
                             hidden=True, callback=_seen)(f)
        return f

    return deco


def collect(kwargs: dict, multi: bool) -> dict:
    """Pop the knob options out of a command's ``kwargs``; return the knobs the user gave:
    ``{name: value}`` (one value) or ``{name: [values]}`` (``multi``)."""
    from plan_search.planner.costmodel.knobs import knob_spec, parse_value

    ctx = click.get_current_context(silent=True)
    order = list(ctx.meta.get("plan_search_knob_order", [])) if ctx is not None else []
    # an old spelling is its knob's --no-x (all ALIASES turn a boolean off): the same ordering rule
    for key in [k for k in kwargs if k.startswith("knob_alias__")]:
        val = kwargs.pop(key)
        knob, _value = ALIASES[key[len("knob_alias__"):].replace("_", "-")]
        if val:
            kwargs[f"knob_no__{knob}"] = True
            order = [f"knob_no__{knob}" if o == key else o for o in order]
    for name in {k.split("__", 1)[1] for k in kwargs if k.startswith("knob_no__")}:
        given = [o for o in order if o in (f"knob__{name}", f"knob_no__{name}")]
        if len(given) > 1:  # both spellings given: the last one wins
            loser = "knob_no__" if given[-1].startswith("knob__") else "knob__"
            kwargs[f"{loser}{name}"] = None if loser == "knob__" else False
    out: dict = {}
    for key in [k for k in kwargs if k.startswith(("knob__", "knob_no__"))]:
        val = kwargs.pop(key)
        name = key.split("__", 1)[1]
        spec = knob_spec(name)
        hint = spec.option if not key.startswith("knob_no__") else f"--no-{spec.option[2:]}"
        if key.startswith("knob_no__"):
            if val:
                if name in out:
                    raise click.BadParameter(f"give {spec.option} or --no-{spec.option[2:]}, not both",
                                             param_hint=hint)
                out[name] = [False] if multi else False
            continue
        if val is None:
            continue
        if name in out:
            raise click.BadParameter(f"give {spec.option} or --no-{spec.option[2:]}, not both", param_hint=hint)
        text = str(val).strip()
        if spec.kind == "bool" and text.lower() == "both":
            if not multi:
                raise click.BadParameter("plan-estimate prices one plan: on or off (plan-search takes both)",
                                         param_hint=hint)
            out[name] = [True, False]
            continue
        if spec.kind == "int" and not (spec.optional and text.lower() in ("none", "auto")):
            minimum = int(spec.minimum) if spec.minimum is not None else 1
            limit = int(spec.maximum) if spec.maximum is not None else 10_000_000
            vals = parse_int_set(text, spec.option[2:], limit=limit, minimum=minimum)
            if not multi and len(vals) > 1:
                raise click.BadParameter(f"plan-estimate prices one plan: one value, not {text!r} "
                                         "(plan-search takes sets)", param_hint=hint)
            out[name] = vals if multi else vals[0]
            continue
        parts = [p for p in text.split(",") if p.strip()] if multi else [text]
        if not parts:
            raise click.BadParameter("empty", param_hint=hint)
        try:
            # the search's recompute set also takes "partial" (full on k layers per stage)
            vals = [p.strip().lower() if (multi and name == "recompute" and p.strip().lower() == "partial")
                    else parse_value(spec, p) for p in parts]
            if spec.kind not in ("bool", "choice"):  # a number: the Plan field's range, named by the option
                for v in vals:
                    _check_number(name, v)
        except ValueError as exc:
            raise click.BadParameter(str(exc).split(": ", 1)[-1], param_hint=hint) from None
        out[name] = vals if multi else vals[0]
    return out
