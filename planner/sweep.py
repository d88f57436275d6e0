"""``plan-sweep``: what-if sweeps, one :func:`planner.search.search` per scenario, into one tidy table.

The sweep file (YAML or JSON, read by :func:`models.io.load_document`)::

    base:                      # a SearchRequest mapping (plan-search --schema request)
      model: gpt3-175b
      gpu: a100-80gb
      tokens: 300B
    combine: product           # product (cartesian, the default) or zip (lists of equal length)
    sweep:                     # axes, each a list of values, in the order of the file
      gpus: [512, 1024, 2048]  # a request field: model, gpu, gpus, seq_len, global_batch, tokens, ...
      node.inter_node_gbps: [25, 50, 100]   # anything else: a --set what-if key
      knobs.zero: [1, 3]       # knobs.<field>: a plan-knob domain

Axis values replace the base's field (list fields -- ``gpu``, ``gpus``, ``global_batch``,
knob domains -- take a scalar as a one-element list, or a list as it is: ``gpu: [[a100-80gb,
h100-sxm]]`` is one scenario with both systems on one front). A ``--set`` axis adds
``KEY=VALUE`` after the base's ``sets``. ``tokens`` takes numbers or ``300B``/``1.4T``.

Output (:func:`run_sweep`): one row per scenario and front point, with ``scenario`` (its index
in the sweep), ``scenario_key`` (a hash of the scenario's full request: what resumption
matches on), one column per axis (named as the axis), ``status`` (``ok``, ``infeasible`` or
``error``), ``reason`` (the infeasibility's constraint: memory, deadline, ...) and ``message``,
then the point's system, GPU count, plan knobs (``plan_global_batch`` is the batch the plan
chose), step time, MFU, memory, days, GPU-hours, dollars, energy, power, scaling efficiency,
bottleneck and binding constraints, and ``recommended``. An infeasible scenario is one row that
says why. When the recommended plan is not on the front (objectives least-energy, best-mfu) it
is one more row with ``on_front`` false.

Resumption: every finished scenario is appended (flushed and fsynced) to a journal beside the
output, ``OUT.journal``, as it finishes; the table is written (atomically) in scenario order at
the end or on an interrupt, and the journal removed. A rerun with the same output reads both
and runs only the scenarios whose key is in neither (scenarios that ended in ``error`` are run
again). Rows of scenarios that are not in the sweep any more are refused unless ``overwrite``.
``overwrite`` starts over without destroying the existing table: the new rows are journaled as
above and the table is replaced (atomically) only when every scenario has finished; an
interrupted or failed ``overwrite`` run leaves the previous table as it was, byte for byte, and
drops its own journal (the same command starts over again).

Executors: ``local`` (default) runs the scenarios on a ``ProcessPoolExecutor`` of ``workers``
processes (default: the usable cores; 1 runs them in this process); ``ray`` as Ray tasks
(``pip install 'plan-search[ray]'``; a local Ray instance unless ``ray_address`` or
``RAY_ADDRESS`` names a cluster, whose workers need this package installed). The order of the
output never depends on the order of completion.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from plan_search.models.io import (InputError, closest, expand_path, load_document, parse_token_count, short_repr,
                                   validation_message)

from plan_search.planner.search.request import KNOB_EXTRA_CHOICES, Knobs, NoFeasiblePlan, SearchRequest

MAX_SCENARIOS = 100_000
#: Request fields that hold lists: an axis value that is a scalar becomes a one-element list.
LIST_FIELDS = {"gpu", "gpus", "global_batch", "sets"}
KNOB_LIST_FIELDS = {"tp", "pp", "cp", "vpp", "micro_batch", "zero", "recompute", "recompute_layers",
                    "sequence_parallel"}
#: The columns after the scenario's parameters, in order (plan-search's CSV, renamed where a
#: name would collide with a request field: ``system`` is the point's GPU type).
RESULT_COLUMNS = (
    "status", "reason", "point", "on_front", "recommended", "system", "num_gpus", "nodes", "tp", "pp", "dp",
    "cp", "vpp", "ep", "etp", "micro_batch", "plan_global_batch", "grad_accum", "zero", "recompute", "recompute_layers",
    "sequence_parallel", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_gib",
    "memory_usable_gib", "comm_ratio", "days", "gpu_hours", "cost_usd", "energy_kwh", "power_kw",
    "scaling_efficiency", "bottleneck", "binding", "proven_optimal", "search_s", "message", "scenario_rows",
)
HEAD_COLUMNS = ("scenario", "scenario_key")
_INT = ("scenario", "scenario_rows", "point", "num_gpus", "tp", "pp", "dp", "cp", "vpp", "ep", "etp", "micro_batch",
        "plan_global_batch", "grad_accum", "zero", "recompute_layers")
_BOOL = ("on_front", "recommended", "sequence_parallel", "proven_optimal")
_TEXT = ("scenario_key", "status", "reason", "system", "recompute", "bottleneck", "binding", "message")
#: pandas dtypes of the fixed columns (nullable: an infeasible scenario's row has no plan)
DTYPES = {**{c: "Int64" for c in _INT}, **{c: "boolean" for c in _BOOL}, **{c: "string" for c in _TEXT},
          **{c: "Float64" for c in RESULT_COLUMNS if c not in _INT + _BOOL + _TEXT}}
STATUSES = ("ok", "infeasible", "error")


# ------------------------------------------------------------------ the sweep file
class SweepFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base: dict[str, Any] = Field(default_factory=dict, description="a SearchRequest mapping")
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description="axis -> values")
    combine: Literal["product", "zip"] = "product"
    name: str | None = None

    @field_validator("sweep", mode="before")
    @classmethod
    def _axes(cls, v):
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("expected a mapping of axis -> list of values")
        for k, vals in v.items():
            if not isinstance(vals, list):
                raise ValueError(f"{k}: expected a list of values, e.g. {k}: [{vals!r}]")
            if not vals:
                raise ValueError(f"{k}: empty list of values")
        return v


@dataclass(frozen=True)
class Scenario:
    index: int
    key: str
    params: dict[str, Any]  # axis -> column value
    request: SearchRequest

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items()) or "base"


@dataclass
class Sweep:
    axes: list[str]
    scenarios: list[Scenario]
    combine: str
    name: str | None = None
    #: files the sweep reads (the sweep file, model and cluster files): never an output
    inputs: list[Path] = field(default_factory=list)


def parse_tokens(value: Any, where: str = "tokens") -> float:
    """``3e11``, ``300e9`` (YAML reads it as text), ``300B``, ``1.4T`` -> a float (models.io)."""
    return parse_token_count(value, where)


def axis_kind(name: str) -> str:
    """``request`` (a SearchRequest field), ``knob`` (``knobs.<field>``) or ``set`` (a --set key)."""
    if name.startswith("knobs."):
        return "knob"
    if name in SearchRequest.model_fields:
        if name in ("knobs",):
            raise InputError(f"sweep.{name}: sweep one knob at a time, e.g. knobs.zero: [1, 3]")
        return "request"
    if name in Knobs.model_fields:  # it would be read as a --set key ("--set ep: no such field")
        raise InputError(f"sweep.{name}: a plan knob is swept as knobs.{name}, e.g. knobs.{name}: {_knob_example(name)}")
    return "set"


def _knob_example(name: str) -> str:
    """Two values of knob ``name`` as a sweep axis writes them (its choices, on and off, or numbers):
    ``knobs.moe_grouped_gemm: [loop, fused]``, not ``[1, 2]``."""
    from plan_search.planner.costmodel.knobs import knob_specs

    spec = next((k for k in knob_specs() if k.name == name), None)
    if spec is not None and spec.kind == "choice":
        return f"[{', '.join(map(str, spec.choices[:2]))}]"
    if spec is not None and spec.kind == "bool":
        return "[false, true]"
    if spec is not None and spec.kind == "float":
        return f"[{spec.default}, {spec.default * 2 if spec.default else 1.0}]"
    return "[1, 3]" if name == "zero" else "[1, 2]"


def _column_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return ",".join(str(_column_value(x)) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return v


def _canonical_param(name: str, value: Any, request: SearchRequest) -> Any:
    """An axis value as the scenario's column shows it: a choice in its one spelling, the one the
    request priced (``knobs.moe_dispatcher: [" Flex "]`` is ``flex``: plan.canonical_choices, as
    Knobs takes it; ``framework: [NeMo]`` is ``nemo``), anything else as given."""
    from plan_search.planner.costmodel.plan import canonical_choices

    if name.startswith("knobs."):
        f = name.split(".", 1)[1]
        value = canonical_choices({f: value}, KNOB_EXTRA_CHOICES)[f]
    elif isinstance(value, str) and name in SearchRequest.model_fields:
        got = getattr(request, name, None)
        if isinstance(got, str) and got != value and got.lower() == value.strip().lower():
            value = got
    return _column_value(value)


def _set_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def _apply(data: dict, knobs: dict, name: str, value: Any) -> None:
    kind = axis_kind(name)
    if kind == "request":
        if name == "tokens":
            value = parse_tokens(value, f"sweep.{name}")
        if name in LIST_FIELDS and not isinstance(value, list):
            value = [value]
        if name == "sets":
            data["sets"] = list(data.get("sets") or []) + [str(s) for s in value]
        else:
            data[name] = value
    elif kind == "knob":
        f = name.split(".", 1)[1]
        if f not in Knobs.model_fields:
            near = closest(f, list(Knobs.model_fields), n=1)
            hint = f"did you mean knobs.{near[0]}? " if near else ""
            raise InputError(f"sweep.{name}: no such knob; {hint}knobs are {', '.join(Knobs.model_fields)}")
        if f in KNOB_LIST_FIELDS and not isinstance(value, list):
            value = [value]
        knobs[f] = value
    else:
        data["sets"] = list(data.get("sets") or []) + [f"{name}={_set_text(value)}"]


def scenario_key(request: SearchRequest) -> str:
    """16 hex digits of the SHA-256 of the request's canonical JSON, fields at their default left
    out: the key names the scenario as asked, so a new request field (with a default) in a later
    version does not orphan a sweep's finished rows, and writing a default out changes nothing."""
    text = json.dumps(request.model_dump(mode="json", exclude_defaults=True), sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_sweep(doc: dict, where: str = "sweep", check_resolvable: bool = True) -> Sweep:
    """Scenarios of a sweep document, each a validated SearchRequest; every model and system
    (with its what-if overrides) is resolved once here, so a typo fails before anything runs
    (``check_resolvable`` False: the caller has resolved them without files, as plan-serve does)."""
    try:
        spec = SweepFile.model_validate(doc)
    except ValidationError as exc:
        raise InputError(validation_message(exc, where)) from None
    base = dict(spec.base)
    if "tokens" in base:
        base["tokens"] = parse_tokens(base["tokens"], f"{where}: base.tokens")
    for k in LIST_FIELDS:
        if k in base and not isinstance(base[k], list):
            base[k] = [base[k]]
    axes = list(spec.sweep)
    for a in axes:
        axis_kind(a)
    values = [spec.sweep[a] for a in axes]
    if spec.combine == "zip":
        lens = {a: len(v) for a, v in zip(axes, values)}
        if len(set(lens.values())) > 1:
            raise InputError(f"{where}: combine zip needs lists of one length; got "
                             + ", ".join(f"{a} {n}" for a, n in lens.items()))
        combos: Iterable = zip(*values)
        total = len(values[0]) if values else 1
    else:
        combos = itertools.product(*values)
        total = math.prod(len(v) for v in values)
    if total > MAX_SCENARIOS:
        raise InputError(f"{where}: {total:,} scenarios; the limit is {MAX_SCENARIOS:,}")
    scenarios: list[Scenario] = []
    seen: dict[str, int] = {}
    for i, combo in enumerate(combos):
        data = json.loads(json.dumps(base))
        raw_knobs = data.pop("knobs", None) or {}
        if not isinstance(raw_knobs, dict):
            raise InputError(f"base.knobs: expected a mapping of knob bounds, e.g. {{zero: [1, 3]}} "
                             f"(got {type(raw_knobs).__name__})")
        knobs = dict(raw_knobs)
        params = {}
        for a, v in zip(axes, combo):
            _apply(data, knobs, a, v)
            params[a] = _column_value(v)
        if knobs:
            data["knobs"] = knobs
        label = ", ".join(f"{k}={v}" for k, v in params.items()) or "base"
        try:
            req = SearchRequest.model_validate(data)
        except ValidationError as exc:
            raise InputError(validation_message(exc, f"{where}: scenario {i} ({label})")) from None
        params = {a: _canonical_param(a, v, req) for a, v in zip(axes, combo)}
        label = ", ".join(f"{k}={v}" for k, v in params.items()) or "base"
        key = scenario_key(req)
        if key in seen:
            raise InputError(f"{where}: scenarios {seen[key]} and {i} ({label}) are the same request; "
                             "remove the repeated value")
        seen[key] = i
        scenarios.append(Scenario(i, key, params, req))
    if not scenarios:
        raise InputError(f"{where}: no scenarios")
    if check_resolvable:
        _check_resolvable(scenarios, where)
    # one dtype per column: an axis mixing lists and scalars is all text
    for a in axes:
        if any(isinstance(v, (list, dict)) for v in spec.sweep[a]):
            for s in scenarios:
                s.params[a] = str(s.params[a])
    return Sweep(axes, scenarios, spec.combine, spec.name)


def _check_resolvable(scenarios: list[Scenario], where: str) -> None:
    from plan_search.hardware.resolve import resolve_cluster
    from plan_search.models.resolve import resolve_model

    models: set[str] = set()
    systems: set[tuple] = set()
    for s in scenarios:
        r = s.request
        try:
            if r.model not in models:
                resolve_model(r.model)
                models.add(r.model)
            for g in r.gpu:
                k = (g, tuple(r.sets))
                if k not in systems:
                    resolve_cluster(g, r.sets)
                    systems.add(k)
        except (ValueError, OSError) as exc:
            text = " ".join(str(exc).split())
            raise InputError(f"{where}: scenario {s.index} ({s.label()}): {text}") from None


def load_sweep(path: str | Path) -> Sweep:
    sw = build_sweep(load_document(path, "sweep"), f"sweep {short_repr(Path(path).name)}")
    sw.inputs = [Path(path)] + input_files(sw)
    return sw


def input_files(sweep: Sweep) -> list[Path]:
    """The model and cluster files the scenarios name (existing regular files only)."""
    out: list[Path] = []
    for ref in {r for s in sweep.scenarios for r in [s.request.model, *s.request.gpu]}:
        try:
            p = expand_path(ref)
            if p.is_file():
                out.append(p)
        except (OSError, ValueError):
            continue
    return sorted(out)


# ------------------------------------------------------------------ one scenario
def _plan_cells(p) -> dict:
    """The plan's columns of a result row (tp ... sequence_parallel), for a front point and an estimate alike."""
    return {
        "tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "vpp": p.vpp, "ep": p.ep, "etp": p.etp,
        "micro_batch": p.micro_batch, "plan_global_batch": p.global_batch, "grad_accum": p.grad_accum,
        "zero": p.zero, "recompute": p.recompute, "recompute_layers": p.recompute_layers,
        "sequence_parallel": p.sequence_parallel,
    }


def _point_row(fp, index: int | None, recommended: bool) -> dict:
    return {
        "point": index, "on_front": True, "recommended": recommended, "system": fp.gpu, "num_gpus": fp.num_gpus,
        "nodes": fp.nodes, **_plan_cells(fp.plan), "step_time_s": fp.step_time_s, "tokens_per_s": fp.tokens_per_s,
        "tokens_per_s_per_gpu": fp.tokens_per_s_per_gpu, "mfu": fp.mfu, "memory_gib": fp.memory_gib,
        "memory_usable_gib": fp.memory_usable_gib, "comm_ratio": fp.comm_ratio, "days": fp.days,
        "gpu_hours": fp.gpu_hours, "cost_usd": fp.cost_usd, "energy_kwh": fp.energy_kwh, "power_kw": fp.power_kw,
        "scaling_efficiency": fp.scaling_efficiency, "bottleneck": fp.bottleneck, "binding": "+".join(fp.binding),
    }


def _estimate_row(e, gpus_per_node: int | None) -> dict:
    p = e.plan
    run = e.run
    return {
        "point": None, "on_front": False, "recommended": True, "system": e.cluster, "num_gpus": p.num_gpus,
        "nodes": p.num_gpus / gpus_per_node if gpus_per_node else None, **_plan_cells(p),
        "step_time_s": e.step_time_s, "tokens_per_s": e.tokens_per_s, "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
        "mfu": e.mfu, "memory_gib": e.memory.peak_gib, "memory_usable_gib": e.memory.usable_gib,
        "comm_ratio": e.comm_ratio, "days": run.days if run else None, "gpu_hours": run.gpu_hours if run else None,
        "cost_usd": run.cost_usd if run else None, "energy_kwh": run.energy_kwh if run else None,
        "power_kw": e.power_kw, "scaling_efficiency": None, "bottleneck": e.bottleneck, "binding": "",
    }


def result_rows(result) -> list[dict]:
    """The result part of the rows of one scenario's :class:`SearchResult`."""
    rows = [_point_row(fp, i, result.recommended_index == i) for i, fp in enumerate(result.front)]
    if result.recommended_index is None:
        gpn = None
        for fp in result.front:
            if fp.gpu == result.recommended.cluster:
                gpn = round(fp.num_gpus / fp.nodes)
                break
        rows.append(_estimate_row(result.recommended, gpn))
    extra = {"status": "ok", "reason": "", "proven_optimal": result.stats.proven_optimal,
             "search_s": result.stats.total_s, "message": ""}
    return [dict(r, **extra) for r in rows]


def run_scenario(index: int, request: dict, model=None) -> dict:
    """Run one scenario (in a worker process or a Ray task): ``{"index", "status", "rows"}``;
    ``model``, a ModelSpec, instead of resolving the request's (:func:`planner.search.search`'s ``model``).

    Never raises for a scenario's own failure: nothing feasible is a row with status
    ``infeasible`` and the reason; any other error is a row with status ``error``."""
    t0 = time.perf_counter()
    try:
        from plan_search.planner.search.front import search

        result = search(SearchRequest.model_validate(request), model=model)
        rows = result_rows(result)
        status = "ok"
    except NoFeasiblePlan as exc:
        status = "infeasible"
        rows = [{"status": status, "reason": exc.reason, "on_front": False, "recommended": False,
                 "search_s": time.perf_counter() - t0, "message": " ".join(str(exc).split()),
                 "system": exc.system}]
    except Exception as exc:  # noqa: BLE001  (one bad scenario must not end the sweep)
        status = "error"
        text = " ".join(str(exc).split()) or type(exc).__name__
        rows = [{"status": status, "reason": type(exc).__name__, "on_front": False, "recommended": False,
                 "search_s": time.perf_counter() - t0, "message": text}]
    return {"index": index, "status": status, "rows": rows}


# ------------------------------------------------------------------ progress
def _clock(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A progress bar on ``stream`` (stderr): done/total, elapsed, an estimate of the time left
    (elapsed per scenario run so far x scenarios left; skipped ones cost nothing). On a terminal
    one line redrawn in place; otherwise a line at most every ``interval`` seconds and at the end."""

    def __init__(self, total: int, *, skipped: int = 0, stream=None, enabled: bool = True, width: int = 24,
                 interval: float = 5.0, label: str = "plan-sweep"):
        self.total = total
        self.skipped = skipped
        self.done = 0
        self.bad = {"infeasible": 0, "error": 0}
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.interval = interval
        self.label = label
        self.t0 = time.monotonic()
        self._last = -math.inf
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self) -> str:
        todo = self.total - self.skipped
        finished = self.skipped + self.done
        frac = finished / self.total if self.total else 1.0
        fill = int(round(frac * self.width))
        bar = "#" * fill + "-" * (self.width - fill)
        el = time.monotonic() - self.t0
        if self.done and self.done < todo:
            left = f"left ~{_clock(el / self.done * (todo - self.done))}"
        elif self.done >= todo:
            left = "done"
        else:
            left = "left ?"
        extra = ", ".join(f"{n} {k}" for k, n in self.bad.items() if n)
        skip = f", {self.skipped} resumed" if self.skipped else ""
        return (f"{self.label} [{bar}] {finished}/{self.total} {100 * frac:3.0f}%  elapsed {_clock(el)}  "
                f"{left}{skip}{' (' + extra + ')' if extra else ''}")

    def show(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + self.line().ljust(79) + "\033[K")
            self.stream.flush()
        elif force or now - self._last >= self.interval:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last = now

    def update(self, status: str = "ok") -> None:
        self.done += 1
        if status in self.bad:
            self.bad[status] += 1
        self.show(force=self.done + self.skipped >= self.total)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ------------------------------------------------------------------ storage
def output_format(path: str | Path, fmt: str | None = None) -> str:
    suffix = Path(path).suffix.lower()
    inferred = "parquet" if suffix in (".parquet", ".pq") else "csv"
    if fmt is None:
        return inferred
    fmt = fmt.lower()
    if fmt not in ("csv", "parquet"):
        raise InputError(f"--format: {fmt!r}; use csv or parquet")
    if suffix in (".parquet", ".pq", ".csv") and fmt != inferred:
        raise InputError(f"--format {fmt} does not match the output {Path(path).name}")
    return fmt


def require_parquet() -> None:
    """Parquet through pandas needs pyarrow (or fastparquet): a one-line error without them."""
    import importlib

    for mod in ("pyarrow", "fastparquet"):
        try:
            importlib.import_module(mod)
            return
        except ImportError:
            continue
    raise InputError("Parquet output needs pyarrow: pip install 'plan-search[parquet]' (or pyarrow; or write CSV: "
                     "-o out.csv)")


def journal_path(output: str | Path) -> Path:
    return Path(str(output) + ".journal")


def read_journal(path: Path, damaged: list | None = None) -> dict[str, dict]:
    """key -> journal entry. A line that is not a complete entry (a torn last line after a kill,
    a hand edit: not JSON, not an object with a text ``key`` and a non-empty list of row
    objects, not UTF-8) is left out, and counted in ``damaged`` when given."""
    out: dict[str, dict] = {}
    try:
        if not path.exists():
            return out
        if not path.is_file():
            raise InputError(f"journal {short_repr(str(path))} is not a regular file; remove it or write "
                             "elsewhere")
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as exc:
        from plan_search.models.output import reason

        raise InputError(f"journal {short_repr(str(path))}: cannot read it ({reason(exc)})") from None
    for raw in lines:
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw.decode("utf-8"))
            key, rows = entry["key"], entry["rows"]
            if not (isinstance(key, str) and isinstance(rows, list) and rows
                    and all(isinstance(r, dict) for r in rows)):
                raise TypeError
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, RecursionError):
            if damaged is not None:
                damaged.append(raw[:40])
            continue
        entry["rows"] = [_coerce_row(r) for r in rows]
        out[key] = entry
    return out


def _number(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


#: Cells an ``ok`` row must hold (positive, finite numbers), what a torn or edited row lacks.
_REQUIRED_NUMBERS = ("num_gpus", "tp", "pp", "dp", "micro_batch", "step_time_s", "mfu", "memory_gib", "days",
                     "gpu_hours", "cost_usd")


def rows_complete(rows: Any, expected: int | None = None) -> bool:
    """Whether ``rows`` are one scenario's complete result, as :func:`run_scenario` makes them:
    one status for all; ``ok``: front points numbered 0, 1, ... with every figure a positive
    number, exactly one recommended row; ``infeasible``/``error``: one row; and as many rows as
    ``expected`` (the scenario's ``scenario_rows``, or its journal's count) when known."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return False
    status = rows[0].get("status")
    if status not in STATUSES or any(r.get("status") != status for r in rows):
        return False
    if expected is not None and len(rows) != expected:
        return False
    if status != "ok":
        return len(rows) == 1
    if any(not _OK_KEYS <= r.keys() for r in rows):  # a row cut short, a column renamed by an edit
        return False
    if sum(1 for r in rows if r.get("recommended") is True) != 1:
        return False
    points = [r.get("point") for r in rows if r.get("point") is not None]
    if [_number(p) for p in points] != [float(i) for i in range(len(points))] or len(rows) - len(points) > 1:
        return False
    for r in rows:
        if not isinstance(r.get("system"), str) or not r.get("system"):
            return False
        for c in _REQUIRED_NUMBERS:
            v = _number(r.get(c))
            if v is None or v <= 0:
                return False
        # the plan's own arithmetic: a digit changed by hand or by a bad disk shows here
        n, tp, pp, dp, cp = (_number(r.get(c)) for c in ("num_gpus", "tp", "pp", "dp", "cp"))
        if cp is not None and n != tp * pp * dp * cp:
            return False
        gb, mb, ga = (_number(r.get(c)) for c in ("plan_global_batch", "micro_batch", "grad_accum"))
        if gb is not None and ga is not None and gb != dp * mb * ga:
            return False
        if not math.isclose(_number(r.get("gpu_hours")), _number(r.get("days")) * 24 * n, rel_tol=1e-6):
            return False
    return _typed(rows)


#: Keys every row of an ``ok`` scenario has (as :func:`run_scenario` makes it).
_OK_KEYS = frozenset(RESULT_COLUMNS) - {"scenario_rows"}


def _typed(rows: list[dict]) -> bool:
    """Every cell of a known column holds what its dtype takes (:data:`DTYPES`, after
    :func:`_coerce_row`): a whole number, a boolean, a number, or text; else the table cannot
    be rebuilt from it."""
    for r in rows:
        for c, t in DTYPES.items():
            v = r.get(c)
            if v is None:
                continue
            if t == "Int64" and not (isinstance(v, int) and not isinstance(v, bool)):
                return False
            if t == "boolean" and not isinstance(v, bool):
                return False
            if t == "Float64" and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
                return False
            if t == "string" and not isinstance(v, str):
                return False
    return True


_TRUE, _FALSE = ("True", "true", "1", 1, True), ("False", "false", "0", 0, False)


def _coerce_row(row: dict) -> dict:
    """A row read back from a table or a journal with its cells as :data:`DTYPES` says (numbers
    from text, booleans from ``True``/``False``); a cell that cannot be is left as it is, for
    :func:`_typed` to refuse."""
    out = dict(row)
    for c, t in DTYPES.items():
        if c not in out:
            continue
        v = out[c]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out[c] = None
            continue
        if t in ("Int64", "Float64") and not isinstance(v, bool):
            f = _number(v) if not (isinstance(v, float) and math.isinf(v)) else v
            if f is not None and (t == "Float64" or f == int(f)):
                out[c] = int(f) if t == "Int64" else float(f)
        elif t == "boolean":
            out[c] = True if v in _TRUE else False if v in _FALSE else v
        elif t == "string" and not isinstance(v, str):
            out[c] = str(v)
    return out


def _read_table_text(path: Path) -> tuple[str, int]:
    """The CSV's text up to its last complete line (every line this module writes ends in a
    newline: a file that does not was cut mid-line) and the number of torn bytes left out."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        from plan_search.models.output import reason

        raise InputError(f"{short_repr(path.name)}: cannot read it to resume ({reason(exc)})") from None
    cut = 0
    if raw and not raw.endswith(b"\n"):
        keep = raw.rfind(b"\n") + 1
        cut, raw = len(raw) - keep, raw[:keep]
    try:
        return raw.decode("utf-8"), cut
    except UnicodeDecodeError:
        raise InputError(f"{short_repr(path.name)}: not a plan-sweep table (not UTF-8 text); pass --overwrite "
                         "or write elsewhere") from None


def read_output(path: Path, fmt: str, damaged: list | None = None,
                columns: Iterable[str] | None = None) -> dict[str, list[dict]]:
    """key -> result rows of an existing output table (for resumption). Scenarios whose rows are
    not complete (:func:`rows_complete`: a table cut mid-line or at a line boundary, an edited
    cell) are left out, to be run again, and their keys added to ``damaged`` when given."""
    import io

    import pandas as pd

    if not path.exists():
        return {}
    name = short_repr(path.name)
    try:
        if fmt == "parquet":
            require_parquet()
            df = pd.read_parquet(path)
        else:
            text, torn = _read_table_text(path)
            if torn and damaged is not None:
                damaged.append("torn last line")
            if not text.strip():
                return {}
            df = pd.read_csv(io.StringIO(text), dtype={"scenario_key": str, "status": str, "reason": str,
                                                       "message": str, "binding": str, "bottleneck": str,
                                                       "system": str}, keep_default_na=True)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"{name}: cannot read it to resume ({short_repr(' '.join(str(exc).split()), 200)}); "
                         "pass --overwrite to start over") from None
    if "scenario_key" not in df.columns or "status" not in df.columns:
        raise InputError(f"{name}: not a plan-sweep table (no scenario_key column); pass --overwrite "
                         "or write elsewhere")
    if columns is not None and list(df.columns) != list(columns) and damaged is not None:
        damaged.append("columns")  # an edited or damaged header: the table is written anew
    out: dict[str, list[dict]] = {}
    counts: dict[str, Any] = {}
    cols = [c for c in RESULT_COLUMNS if c in df.columns]
    for rec in df[["scenario_key"] + cols].to_dict("records"):
        clean = _coerce_row({k: (None if _isna(v) else v) for k, v in rec.items()})
        key = str(clean.pop("scenario_key"))
        out.setdefault(key, []).append(clean)
        counts.setdefault(key, clean.get("scenario_rows"))
    for key in list(out):
        n = _number(counts.get(key))
        if not rows_complete(out[key], int(n) if n is not None else None) or key in ("None", "nan", ""):
            del out[key]
            if damaged is not None:
                damaged.append(key)
    return out


def _isna(v) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v)) or (v is not None and str(v) == "<NA>")
    except (TypeError, ValueError):
        return False


def build_frame(sweep: Sweep, results: dict[str, list[dict]]):
    """The tidy table: scenarios in sweep order, rows in front order; nullable dtypes."""
    import pandas as pd

    records = []
    for s in sweep.scenarios:
        rows = results.get(s.key)
        if rows is None:
            continue
        for r in rows:
            rec = {"scenario": s.index, "scenario_key": s.key}
            rec.update(s.params)
            rec.update({c: r.get(c) for c in RESULT_COLUMNS})
            rec["scenario_rows"] = len(rows)
            records.append(rec)
    columns = list(HEAD_COLUMNS) + list(sweep.axes) + list(RESULT_COLUMNS)
    df = pd.DataFrame.from_records(records, columns=columns)
    axes = list(sweep.axes)
    if axes:
        df[axes] = df[axes].convert_dtypes()
    for c, t in DTYPES.items():
        df[c] = df[c].astype(t)
        if t == "string":  # "" and missing are one thing (CSV cannot tell them apart)
            df[c] = df[c].mask(df[c] == "")
    return df


def write_frame(df, path: Path, fmt: str, shown: str | Path | None = None) -> None:
    """Write atomically (:func:`plan_search.models.output.atomic_output`: a temporary file beside
    it, fsynced, renamed): a full disk or a kill leaves the previous table whole."""
    from plan_search.models.output import atomic_output

    with atomic_output(path, "output", shown) as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)


# ------------------------------------------------------------------ executors
class WorkerLost(RuntimeError):
    """A worker process died (killed, out of memory): what finished is kept; rerun to resume."""


def _worker_init(parent: int | None = None) -> None:
    """Workers leave the terminal's process group, so Ctrl-C reaches the parent only (which then
    ends them): CP-SAT installs its own SIGINT handler during a solve and restores the default
    one afterwards, so ignoring the signal is not enough."""
    import signal

    try:
        os.setpgrp()
    except OSError:  # pragma: no cover
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid() if parent is None else parent
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before the line above (while this worker started)
        os._exit(1)
    _watch_parent(parent)


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when its parent dies (``prctl(PR_SET_PDEATHSIG)``),
    even while it is inside a solve that holds the GIL (where the watching thread cannot run)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover
        pass


def _watch_parent(parent: int, interval_s: float = 0.5) -> None:
    """End this worker when its parent is gone (killed with SIGKILL, which nothing can catch):
    a daemon thread polls the parent id (a dead parent's children are re-parented). A worker
    that outlived the command would block on its queue forever, holding the terminal's stdout."""
    import threading

    def watch():
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="plan-sweep-parent-watch", daemon=True).start()


def _start_resource_tracker_ignoring_hup() -> None:
    import signal
    import threading

    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import resource_tracker

    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, old)


@contextlib.contextmanager
def _interrupts_deferred():
    """Hold Ctrl-C, SIGTERM and SIGHUP (the command's interrupts) until the block ends, then raise the
    KeyboardInterrupt: starting a spawned worker is one step (the child runs, then reads its
    preparation data from the parent), and an interrupt between the two left the child reading an
    empty pipe and printing multiprocessing's EOFError traceback under the command's one line. Only
    the Python-level handlers change (a spawned child starts with the defaults), main thread only."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    names = [n for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
    old = {n: signal.signal(getattr(signal, n), lambda signum, frame: caught.append(signum)) for n in names}
    try:
        yield
    finally:
        for n, h in old.items():
            signal.signal(getattr(signal, n), h)
    if caught:
        raise KeyboardInterrupt(f"signal {caught[0]}")


def _local(todo: list[Scenario], workers: int) -> Iterator[dict]:
    if workers <= 1:
        import signal
        import threading

        main_thread = threading.current_thread() is threading.main_thread()
        handler = signal.getsignal(signal.SIGINT) if main_thread else None
        for s in todo:
            res = run_scenario(s.index, s.request.model_dump(mode="json"))
            if handler is not None:
                # CP-SAT leaves SIGINT at the C default (die at once) after a solve: put Python's back
                signal.signal(signal.SIGINT, handler)
            yield res
        return
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    # spawn: the workers import the planner afresh (~0.5 s), nothing inherited from a parent with threads
    ctx = multiprocessing.get_context("spawn")
    # multiprocessing's resource tracker ignores SIGINT and SIGTERM but not SIGHUP (closing the
    # terminal signals the whole group): started with SIGHUP ignored, it inherits that and outlives
    # the workers, so the parent's own handler reports one 'interrupted' line, not its tracebacks
    _start_resource_tracker_ignoring_hup()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),))
    finished = False
    try:
        with _interrupts_deferred():  # submit starts the workers: each gets its data before an interrupt ends it
            pending = {pool.submit(run_scenario, s.index, s.request.model_dump(mode="json")) for s in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                try:
                    res = f.result()
                except BrokenProcessPool:
                    raise WorkerLost("a worker process died (killed, or out of memory?); the finished scenarios "
                                     "are kept: rerun the same command to resume") from None
                yield res
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:  # interrupted: drop the queue and end this pool's own worker processes
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(timeout=5)


def _ray(todo: list[Scenario], workers: int, address: str | None) -> Iterator[dict]:
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'plan-search[ray]' (or pip install ray)") from None
    started = False
    if not ray.is_initialized():
        kw = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        address = address or os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(num_cpus=workers, **kw)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(run_scenario)
        pending = [task.remote(s.index, s.request.model_dump(mode="json")) for s in todo]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                yield ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def max_local_workers() -> int:
    """Most local worker processes a sweep starts: 4 per usable core (at least 8)."""
    return max(8, 4 * default_workers())


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------ the sweep
@dataclass
class SweepRun:
    """What :func:`run_sweep` did."""

    output: Path
    frame: Any
    scenarios: int
    ran: int
    resumed: int
    counts: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    interrupted: bool = False
    #: scenarios found damaged in the output or its journal (torn, cut short, edited): run again
    dropped: int = 0
    #: scenarios whose error is bad input (an InputError in the search: a limit, a model/GPU mismatch)
    input_errors: int = 0
    #: an interrupted ``overwrite`` run left the previous table at ``output`` as it was (``frame``
    #: then holds the new run's finished rows, which were not written)
    kept_previous: bool = False


def check_sweep_output(sweep: Sweep, output: str | Path, fmt: str | None = None,
                       extra_inputs: Iterable[str | Path] = ()) -> tuple[Path, str]:
    """The output's path and format if it may be written (before anything runs): a regular file
    or none, not one of the sweep's inputs (by device and inode), its journal likewise."""
    from plan_search.models.output import check_output

    fmt = output_format(output, fmt)
    if fmt == "parquet":
        require_parquet()
    inputs = list(sweep.inputs) + list(extra_inputs)
    path = check_output(output, "--output", inputs, make_parents=True, overwrite_option=True)
    check_output(journal_path(path), "--output (its journal)", inputs, make_parents=True, overwrite_option=True)
    return path, fmt


class _TermAsInterrupt:
    """SIGTERM (what ``timeout``, ``kill`` and schedulers send) and SIGHUP raise KeyboardInterrupt
    in the main thread, as Ctrl-C does: the pool is ended and what finished is written."""

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __enter__(self):
        import signal
        import threading

        self.old = {}
        if threading.current_thread() is not threading.main_thread():
            return self

        def handler(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                self.old[sig] = signal.signal(sig, handler)
        return self

    def __exit__(self, *exc):
        import signal

        for sig, old in self.old.items():
            signal.signal(sig, old)
        return False


def _ray_available() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'plan-search[ray]' (or pip install ray); "
                         "nothing was run") from None


def run_sweep(sweep: Sweep, output: str | Path, *, fmt: str | None = None, executor: str = "local",
              workers: int | None = None, overwrite: bool = False, progress: bool = True, stream=None,
              ray_address: str | None = None, on_result: Callable[[dict], None] | None = None) -> SweepRun:
    """Run the scenarios not yet in ``output`` (or its journal), write the table. See the module
    docstring. ``on_result`` is called with every finished scenario (after it is journaled).

    Every precondition is checked before anything is read, run or removed: the output (a
    regular file or none, not an input of the sweep), the format, the executor (Ray installed),
    the workers; ``overwrite`` then ignores the existing table and journal (the table is replaced
    atomically when the sweep has finished every scenario, never deleted up front nor replaced by
    a partial table: an interrupted ``overwrite`` run leaves it whole and drops its own journal)."""
    t0 = time.perf_counter()
    shown = output
    if not isinstance(sweep, Sweep):
        raise InputError(f"sweep: {short_repr(sweep)} is not a Sweep (load_sweep(path) or build_sweep(doc) makes one)")
    expand_path(output)  # a path, or one InputError naming it
    if executor not in ("local", "ray"):
        raise InputError(f"--executor: {short_repr(executor)}; use local or ray")
    if isinstance(workers, bool) or (workers is not None and (not isinstance(workers, int) or workers < 1)):
        raise InputError(f"--workers: {short_repr(workers)} must be a whole number, at least 1")
    if executor == "local" and workers is not None and workers > max_local_workers():
        raise InputError(f"--workers: {workers} is more than {max_local_workers()} (4 per usable core): each "
                         "local worker is a process of its own (about 280 MB for a GPT-3 scenario), and more "
                         "than the cores do not run faster")
    output, fmt = check_sweep_output(sweep, output, fmt)
    if executor == "ray" and overwrite:
        _ray_available()  # before the old journal is dropped
    jpath = journal_path(output)
    results: dict[str, list[dict]] = {}
    damaged: list = []
    journal: dict[str, dict] = {}
    if not overwrite:
        results.update(read_output(output, fmt, damaged, list(HEAD_COLUMNS) + list(sweep.axes) + list(RESULT_COLUMNS)))
        journal = read_journal(jpath, damaged)
        for k, entry in journal.items():
            n = entry.get("n_rows")
            if rows_complete(entry["rows"], n if isinstance(n, int) and not isinstance(n, bool) else None):
                results[k] = entry["rows"]
            elif k not in results:
                damaged.append(k)
    keys = {s.key for s in sweep.scenarios}
    stale = set(results) - keys
    if stale:
        raise InputError(f"{short_repr(output.name)} holds rows of {len(stale)} scenario(s) that are not in this "
                         "sweep (the sweep file changed?); write to another output or pass --overwrite")
    lost = {k for k in damaged if isinstance(k, str) and k in keys and k not in results}
    dropped = len(lost) + sum(isinstance(d, bytes) for d in damaged) + ("torn last line" in damaged and not lost)
    if overwrite and jpath.exists():
        jpath.unlink()  # every precondition holds: the user asked to start over
    # an --overwrite run over an existing table writes it only once complete: a partial table must
    # never replace a complete one (the previous table is the user's until the new one exists)
    keep_previous = overwrite and output.exists()
    # scenarios that ended in an error are run again
    for k in [k for k, rows in results.items() if any(r.get("status") == "error" for r in rows)]:
        del results[k]
    todo = [s for s in sweep.scenarios if s.key not in results]
    resumed = len(sweep.scenarios) - len(todo)
    n_workers = workers or default_workers()
    n_workers = max(1, min(n_workers, len(todo))) if todo else 1
    if executor == "ray" and todo:
        _ray_available()
    bar = Progress(len(sweep.scenarios), skipped=resumed, stream=stream, enabled=progress)
    by_index = {s.index: s for s in sweep.scenarios}
    interrupted = False
    if todo:
        bar.show(force=True)
        it = _ray(todo, n_workers, ray_address) if executor == "ray" else _local(todo, n_workers)
        try:
            with _TermAsInterrupt():
                try:
                    jpath.parent.mkdir(parents=True, exist_ok=True)
                    with open(jpath, "a", encoding="utf-8") as jf:
                        for res in it:
                            s = by_index[res["index"]]
                            entry = {"key": s.key, "index": s.index, "params": s.params, "n_rows": len(res["rows"]),
                                     "rows": res["rows"]}
                            jf.write(json.dumps(entry, default=_json_default) + "\n")
                            jf.flush()
                            os.fsync(jf.fileno())
                            results[s.key] = res["rows"]
                            bar.update(res["status"])
                            if on_result is not None:
                                on_result(res)
                except KeyboardInterrupt:
                    interrupted = True
                    it.close()
                except BaseException as exc:
                    it.close()
                    bar.close()
                    # keep what finished (or, overwriting, the previous table whole), then re-raise
                    _save(sweep, results, output, fmt, jpath, write=not keep_previous, shown=shown)
                    if keep_previous and isinstance(exc, WorkerLost):
                        raise WorkerLost(f"a worker process died (killed, or out of memory?); "
                                         f"{short_repr(str(shown))} is left as it was (the previous table): "
                                         "rerun the same command to start over") from None
                    raise
                finally:
                    bar.close()
        except KeyboardInterrupt:  # a second signal while the pool was being ended
            interrupted = True
        except OSError as exc:
            from plan_search.models.output import reason

            raise InputError(f"--output: cannot write the journal of {short_repr(str(shown))} "
                             f"({reason(exc)})") from None
    kept_previous = interrupted and keep_previous
    with _TermAsInterrupt():
        df = _save(sweep, results, output, fmt, jpath, write=not kept_previous and bool(
            todo or journal or damaged or overwrite or not output.exists()), shown=shown)
    counts = {k: 0 for k in STATUSES}
    input_errors = 0
    for s in sweep.scenarios:
        rows = results.get(s.key)
        if rows:
            st = rows[0].get("status") or "error"
            counts[st] = counts.get(st, 0) + 1
            input_errors += st == "error" and rows[0].get("reason") in INPUT_ERRORS
    return SweepRun(output=output, frame=df, scenarios=len(sweep.scenarios),
                    ran=sum(1 for s in todo if s.key in results), resumed=resumed, counts=counts,
                    elapsed_s=time.perf_counter() - t0, interrupted=interrupted, dropped=dropped,
                    input_errors=input_errors, kept_previous=kept_previous)


#: ``reason`` of an ``error`` row whose cause is the scenario's input, not the program.
INPUT_ERRORS = ("InputError", "ValidationError")


def _save(sweep: Sweep, results: dict, output: Path, fmt: str, jpath: Path, write: bool = True,
          shown: str | Path | None = None):
    """The table of what finished, written atomically; then the journal is not needed. The
    journal is read again first: an interrupt between its write and ``results`` loses nothing."""
    keys = {s.key for s in sweep.scenarios}
    for k, entry in read_journal(jpath).items():
        n = entry.get("n_rows")
        if k in keys and rows_complete(entry["rows"], n if isinstance(n, int) and not isinstance(n, bool) else None):
            results.setdefault(k, entry["rows"])
    df = build_frame(sweep, results)
    if write:
        write_frame(df, output, fmt, shown)
    if jpath.exists():
        jpath.unlink()
    return df


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
