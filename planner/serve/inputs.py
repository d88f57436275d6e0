"""An HTTP body read into the planner's own documents, within :class:`~.limits.Limits`.

The bodies are the commands' documents: ``POST /v1/search`` takes a :class:`SearchRequest` (what
``plan-search --request`` reads), ``POST /v1/estimate`` an :class:`EstimateRequest` (the fields of
``plan-estimate``'s options and of :func:`plan_search.estimate`), ``POST /v1/sweep`` a sweep
document (what ``plan-sweep`` reads). Validation is theirs: the one-line message a command prints
after ``error:`` is the message of the 422 answer, and its leading field is ``field``.

Nothing from a request reaches the file system: a model is a catalog name (or alias) or the text of
a model file sent in the body (``model_config``: a HuggingFace ``config.json`` or our YAML schema as
a JSON object, read by :func:`models.hf.from_hf_config` / :func:`models.resolve.spec_from_document`,
the functions ``--model FILE`` uses; ``model`` then only names it, as the file's name does); a GPU
is a catalog name or alias (``--set`` what-if overrides change it in memory). A name that would be a
file for the commands is refused with the fix.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, ValidationError

from plan_search.models.io import DuplicateKeyError, InputError, NoBoolNumbers, _pairs_once, short_repr, \
    validation_message
from plan_search.planner.costmodel.memory import DEFAULT_MEMORY_HEADROOM
from plan_search.planner.serve.limits import Limits

FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "nemo")
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\[\]-]*): ")


class BadRequest(Exception):
    """A request refused before it runs: ``status`` (400, 413, 422), the one-line ``message``,
    the ``field`` it names (the message's leading ``name:``, when there is one)."""

    def __init__(self, status: int, message: str, field: str | None = None, kind: str = "bad-input") -> None:
        message = " ".join(str(message).split())
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        if field is None:
            m = _FIELD.match(message)
            field = m.group(1) if m else None
        self.field = field

    def body(self) -> dict:
        return {"error": self.kind, "message": self.message, "field": self.field}


#: Longest error message (cli.common.MAX_ERROR_CHARS: the commands' one line is cut the same way)
MAX_ERROR_CHARS = 1000


def one_line(exc: BaseException) -> str:
    """An error's one line, as the commands print it after ``error:`` (cli.common.one_line)."""
    from plan_search.models.io import error_text

    text = " ".join((error_text(exc).strip() or type(exc).__name__).split())
    if len(text) <= MAX_ERROR_CHARS:
        return text
    head = MAX_ERROR_CHARS * 3 // 4
    return text[:head] + " ... " + text[-(MAX_ERROR_CHARS - head - 5):]


def parse_json_object(raw: bytes, limits: Limits) -> dict:
    """The body as a JSON object, or 413 (too large) / 400 (not UTF-8 JSON, not an object)."""
    if len(raw) > limits.max_body_bytes:
        raise BadRequest(413, f"body: {len(raw):,} bytes; at most {limits.max_body_bytes:,}", "body", "too-large")
    try:
        doc = json.loads(raw.decode("utf-8-sig"), parse_constant=_no_constant, object_pairs_hook=_pairs_once)
    except DuplicateKeyError as exc:  # plan-search --request refuses it too (models.io.parse_document)
        raise BadRequest(400, f"body: {exc}", "body") from None
    except UnicodeDecodeError:
        raise BadRequest(400, "body: not UTF-8 text; send the request as JSON", "body") from None
    except RecursionError:
        raise BadRequest(400, "body: nested too deeply", "body") from None
    except ValueError as exc:
        raise BadRequest(400, f"body: not valid JSON ({str(exc).split(':')[0]})", "body") from None
    if not isinstance(doc, dict):
        raise BadRequest(400, f"body: expected a JSON object (got {type(doc).__name__})", "body")
    return doc


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


# ------------------------------------------------------------------ models and GPUs
def model_label(ref: str) -> tuple[str, str]:
    """(the spec's name, the message prefix) a model file called ``ref`` gets from ``--model ref``
    (:func:`models.resolve.load_model_file`: ``dir/config.json`` is named ``dir``, else the stem),
    computed from the text alone."""
    p = PurePosixPath(ref.strip().replace("\\", "/"))
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return (name or "model"), f"model {p.name or 'model'}"


def resolve_model(ref: Any, config: Any = None):
    """The :class:`ModelSpec` of a request: ``config`` (a model file's document) when given, else
    the catalog entry ``ref`` names. Never a file."""
    from plan_search.models.catalog import lookup, suggestions
    from plan_search.models.resolve import looks_like_hf_config, spec_from_document

    if not isinstance(ref, str) or not ref.strip():
        raise BadRequest(422, "model: give a catalog name (GET /v1/catalog/models), or a model file's contents "
                              "as model_config", "model")
    if config is not None:
        if not isinstance(config, dict):
            raise BadRequest(422, f"model_config: expected a JSON object, a config.json's contents "
                                  f"(got {short_repr(config)})", "model_config")
        name, where = model_label(ref)
        try:
            if looks_like_hf_config(config):
                from plan_search.models.hf import from_hf_config

                return from_hf_config(config, name, where=where)
            return spec_from_document(config, name, where)
        except (ValueError, TypeError, OverflowError) as exc:
            raise BadRequest(422, str(exc), "model_config") from None
        except RecursionError:
            raise BadRequest(422, "model_config: nested too deeply", "model_config") from None
    spec = lookup(ref)
    if spec is None:
        close = ", ".join(suggestions(ref))
        raise BadRequest(422, f"model: {short_repr(ref)} is not a catalog model; closest: {close}; this server reads "
                              "no files: send a model file's contents as model_config", "model")
    return spec


def check_gpu(ref: str) -> str:
    """``ref`` if it is a catalog GPU name or alias; else a 422 naming the closest ones."""
    from plan_search.hardware.catalog import canonical_name, get_cluster

    if canonical_name(ref) is not None:
        return ref
    if ref.lower().endswith((".yaml", ".yml", ".json")) or "/" in ref or "\\" in ref:
        raise BadRequest(422, f"gpu: {short_repr(ref)} is a file name; this server reads no files: give a catalog "
                              "name (GET /v1/catalog/gpus) and what-if overrides in sets, e.g. "
                              "node.inter_node_gbps=50", "gpu")
    try:
        get_cluster(ref)  # raises with the closest names
    except InputError as exc:
        raise BadRequest(422, str(exc), "gpu") from None
    raise BadRequest(422, f"gpu: unknown {short_repr(ref)}", "gpu")  # pragma: no cover - get_cluster raised


def _time_limit(value: float, limits: Limits, field: str = "time_limit_s") -> None:
    if value > limits.max_time_limit_s:
        raise BadRequest(422, f"{field}: {value:g} s is over this server's limit of {limits.max_time_limit_s:g} s; "
                              f"ask for less (plan-serve --max-time-limit raises it)", field)


def _validated(model_cls, doc: dict):
    try:
        return model_cls.model_validate(doc)
    except ValidationError as exc:
        raise BadRequest(422, validation_message(exc)) from None
    except RecursionError:
        raise BadRequest(422, "request: nested too deeply") from None
    except (InputError, ValueError, TypeError, OverflowError) as exc:
        raise BadRequest(422, str(exc)) from None


# ------------------------------------------------------------------ POST /v1/search
def search_request(doc: dict, limits: Limits):
    """(:class:`SearchRequest`, its :class:`ModelSpec`) of a search body, or :class:`BadRequest`."""
    from plan_search.planner.search.request import SearchRequest

    doc = dict(doc)
    config = doc.pop("model_config", None)
    req = _validated(SearchRequest, doc)
    if req.format == "table":
        raise BadRequest(422, "format: table is plan-search's terminal output; the API answers json or csv", "format")
    if len(req.gpu) > limits.max_gpu_types:
        raise BadRequest(422, f"gpu: {len(req.gpu)} GPU types; at most {limits.max_gpu_types} per request", "gpu")
    for g in req.gpu:
        check_gpu(g)
    if req.gpus is not None and len(req.gpus) > limits.max_gpu_counts:
        raise BadRequest(422, f"gpus: {len(req.gpus):,} GPU counts; at most {limits.max_gpu_counts:,} per request", "gpus")
    if req.gpus is None and req.max_gpus is not None:
        from plan_search.hardware.catalog import get_cluster

        step = req.gpus_step or min(get_cluster(g).node.gpus_per_node for g in req.gpu)
        lo = req.min_gpus or step
        counts = (req.max_gpus - lo) // step + 1 if req.max_gpus >= lo else 0
        if counts > limits.max_gpu_counts:
            raise BadRequest(422, f"max_gpus: {req.max_gpus:,} GPUs in steps of {step} is {counts:,} GPU counts; at most "
                                  f"{limits.max_gpu_counts:,} per request (raise gpus_step or min_gpus)", "max_gpus")
    _time_limit(req.time_limit_s, limits)
    if req.solver_threads > limits.max_solver_threads:
        raise BadRequest(422, f"solver_threads: {req.solver_threads}; this server allows at most "
                              f"{limits.max_solver_threads}", "solver_threads")
    return req, resolve_model(req.model, config)


# ------------------------------------------------------------------ POST /v1/estimate
class EstimateRequest(NoBoolNumbers):
    """One plan's estimate: ``plan-estimate``'s options as a document, and the arguments of
    :func:`plan_search.estimate` (the one function both call)."""

    model_config = {"frozen": True, "extra": "forbid", "strict": True}

    model: str = Field(min_length=1, description="catalog model name or alias (or the name of model_config)")
    gpu: str = Field(min_length=1, description="catalog system name or alias")
    plan: dict[str, Any] = Field(description="the plan: Plan's fields (num_gpus required; tp, pp, dp, ... as "
                                             "plan-estimate's options; global_batch and seq_len default to the model's)")
    memory_headroom: float = Field(default=DEFAULT_MEMORY_HEADROOM, ge=0.0, lt=1.0)
    tokens: float | str | None = Field(default=None, description="token budget for the run figures: 3e11 or \"300B\"")
    checkpoint_interval_h: float | None = Field(default=None, gt=0, le=1e6, description="hours between "
                                                "checkpoints; default the interval that maximises goodput")
    failure_rate: float | None = Field(default=None, ge=0, le=1e6, description="failures per 1,000 GPU-days; 0: none")
    restart_minutes: float | None = Field(default=None, ge=0, le=1e6)
    async_checkpoint: bool = True
    sets: list[str] = Field(default_factory=list, max_length=1000, description="--set what-if overrides")
    framework: Literal["megatron", "deepspeed", "torchtitan", "nemo"] | None = None


def estimate_request(doc: dict, limits: Limits):
    """(:class:`EstimateRequest`, its :class:`ModelSpec`) of an estimate body, or :class:`BadRequest`."""
    doc = dict(doc)
    config = doc.pop("model_config", None)
    if isinstance(doc.get("framework"), str):
        doc["framework"] = doc["framework"].strip().lower()
    req = _validated(EstimateRequest, doc)
    if isinstance(req.tokens, float) and not (math.isfinite(req.tokens) and 0 < req.tokens < 1e18):
        raise BadRequest(422, f"tokens: {req.tokens} must be a positive token count below 1e18", "tokens")
    check_gpu(req.gpu)
    return req, resolve_model(req.model, config)


# ------------------------------------------------------------------ POST /v1/sweep
def sweep_document(doc: dict, limits: Limits):
    """The :class:`planner.sweep.Sweep` of a sweep body (``plan-sweep``'s file as JSON): at most
    ``max_sweep_scenarios`` scenarios, catalog models and GPUs only, their time limits adding up
    to at most ``max_time_limit_s``."""
    from plan_search.planner.sweep import SweepFile, build_sweep

    spec = _validated(SweepFile, doc)
    values = list(spec.sweep.values())
    total = (len(values[0]) if values else 1) if spec.combine == "zip" else math.prod(len(v) for v in values)
    if total > limits.max_sweep_scenarios:
        raise BadRequest(422, f"sweep: {total:,} scenarios; at most {limits.max_sweep_scenarios} per request "
                              "(plan-sweep runs larger sweeps)", "sweep")
    if "model_config" in spec.base or "model_config" in spec.sweep:
        raise BadRequest(422, "base.model_config: a sweep takes catalog models only", "base.model_config")
    # every model and GPU the scenarios name is a catalog entry before build_sweep resolves them
    for m in [spec.base.get("model")] + list(spec.sweep.get("model", [])):
        if isinstance(m, str):  # anything else is build_sweep's to refuse
            resolve_model(m)
    gpus = [spec.base.get("gpu")] + list(spec.sweep.get("gpu", []))
    for g in gpus:
        for ref in ([g] if isinstance(g, str) else g if isinstance(g, list) else []):
            if isinstance(ref, str):
                for one in ref.split(","):
                    if one.strip():
                        check_gpu(one.strip())
    try:
        sweep = build_sweep(doc, "sweep", check_resolvable=False)
    except (InputError, ValueError, TypeError, OverflowError) as exc:
        raise BadRequest(422, str(exc)) from None
    from plan_search.hardware.resolve import resolve_cluster

    for s in sweep.scenarios:  # planner.sweep._check_resolvable's checks, from the catalogs alone
        try:
            for g in s.request.gpu:
                resolve_cluster(check_gpu(g), s.request.sets)  # a catalog name: no file is looked at
        except (ValueError, OSError) as exc:
            raise BadRequest(422, f"sweep: scenario {s.index} ({s.label()}): {' '.join(str(exc).split())}") from None
        if len(s.request.gpu) > limits.max_gpu_types:
            raise BadRequest(422, f"gpu: scenario {s.index}: {len(s.request.gpu)} GPU types; at most "
                                  f"{limits.max_gpu_types}", "gpu")
        if s.request.gpus is not None and len(s.request.gpus) > limits.max_gpu_counts:
            raise BadRequest(422, f"gpus: scenario {s.index}: {len(s.request.gpus):,} GPU counts; at most "
                                  f"{limits.max_gpu_counts:,}", "gpus")
        if s.request.solver_threads > limits.max_solver_threads:
            raise BadRequest(422, f"solver_threads: {s.request.solver_threads}; this server allows at most "
                                  f"{limits.max_solver_threads}", "solver_threads")
    total_s = sum(s.request.time_limit_s for s in sweep.scenarios)
    if total_s > limits.max_time_limit_s:
        raise BadRequest(422, f"time_limit_s: {len(sweep.scenarios)} scenarios' time limits add up to {total_s:g} s, over "
                              f"this server's limit of {limits.max_time_limit_s:g} s; set base.time_limit_s lower or "
                              "sweep fewer scenarios", "time_limit_s")
    return sweep
