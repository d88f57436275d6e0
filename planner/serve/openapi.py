"""The JSON Schemas ``plan-serve`` publishes (``GET /v1/schema/NAME``) and its OpenAPI document
(``GET /openapi.json``), written from the same schemas the commands publish.

``request`` and ``result`` are :func:`planner.search.request.json_schema` (``plan-search --schema
request|result``), with the body's ``model_config`` added to the request; ``estimate`` is the
:class:`Estimate` ``plan-estimate --format json`` prints; ``sweep`` the sweep document ``plan-sweep``
reads. In the OpenAPI document every schema's ``$defs`` are moved to ``components/schemas`` (a
definition two schemas share, such as ``Plan``, is kept once).
"""

from __future__ import annotations

import copy
import functools
import json

MODEL_CONFIG = {
    "type": "object",
    "description": "a model file's contents (a HuggingFace config.json, or our model schema, optionally base: + "
                   "overrides) instead of a catalog model; model then only names it, as a file's name does "
                   "(my-model/config.json is named my-model)",
}
ERROR = {
    "type": "object",
    "title": "Error",
    "description": "Why a request was refused: 'bad-input' (400, 413, 422: the one line plan-search prints after "
                   "'error:', and the field it names), 'infeasible' (409: the line after 'infeasible:', with "
                   "reason, smallest_gib, alternatives ...), 'busy' (503: the queue is full; retry), 'timeout' "
                   "(408: the body came too slowly; 504: no answer within the time limit).",
    "properties": {
        "error": {"enum": ["bad-input", "too-large", "infeasible", "busy", "timeout", "internal"]},
        "message": {"type": "string"},
        "field": {"type": ["string", "null"]},
        "reason": {"type": ["string", "null"]},
    },
    "required": ["error", "message"],
}
SWEEP_RESULT = {
    "type": "object",
    "title": "SweepResult",
    "description": "plan-sweep's table (planner.sweep.build_frame): one row per scenario and front point, the "
                   "columns of plan-sweep -o out.csv in order, missing cells null",
    "properties": {
        "columns": {"type": "array", "items": {"type": "string"}},
        "rows": {"type": "array", "items": {"type": "array"}},
        "elapsed_s": {"type": "number"},
    },
    "required": ["columns", "rows"],
}


def _request() -> dict:
    from plan_search.planner.search.request import json_schema

    doc = json_schema("request")
    doc["properties"]["model_config"] = MODEL_CONFIG
    return doc


def _estimate_request() -> dict:
    from plan_search.planner.search.request import JSON_SCHEMA_DIALECT
    from plan_search.planner.serve.inputs import EstimateRequest

    doc = EstimateRequest.model_json_schema()
    doc["properties"]["model_config"] = MODEL_CONFIG
    return {"$schema": JSON_SCHEMA_DIALECT, **doc}


def _estimate() -> dict:
    from plan_search.planner.costmodel.estimate import Estimate
    from plan_search.planner.search.request import JSON_SCHEMA_DIALECT

    doc = Estimate.model_json_schema()
    doc["properties"]["launch"] = {"type": "object", "description": "with ?emit=1: the launch configuration"}
    return {"$schema": JSON_SCHEMA_DIALECT, **doc}


def _result() -> dict:
    from plan_search.planner.search.request import json_schema

    return json_schema("result")


def _sweep() -> dict:
    from plan_search.planner.search.request import JSON_SCHEMA_DIALECT
    from plan_search.planner.sweep import SweepFile

    return {"$schema": JSON_SCHEMA_DIALECT, **SweepFile.model_json_schema()}


def _plain(doc: dict) -> dict:
    from plan_search.planner.search.request import JSON_SCHEMA_DIALECT

    return {"$schema": JSON_SCHEMA_DIALECT, **doc}


#: name -> the function writing that schema (GET /v1/schema/NAME)
SCHEMAS = {
    "request": _request,
    "result": _result,
    "estimate-request": _estimate_request,
    "estimate": _estimate,
    "sweep": _sweep,
    "sweep-result": lambda: _plain(SWEEP_RESULT),
    "error": lambda: _plain(ERROR),
}


@functools.lru_cache(maxsize=None)
def schema_text(name: str) -> bytes:
    """The schema ``name`` as JSON text (built once per process)."""
    return json.dumps(SCHEMAS[name](), indent=2).encode()


def _hoist(name: str, schema: dict, components: dict) -> dict:
    """``schema`` with its ``$defs`` moved into ``components`` (renamed when a different definition
    already holds the name) and its references rewritten; returns a reference to it."""
    schema = copy.deepcopy(schema)
    schema.pop("$schema", None)
    defs = schema.pop("$defs", {})
    renames = {}
    for key, d in defs.items():
        new = key
        while new in components and components[new] != d:
            new = f"{name}_{new}" if not new.startswith(name) else new + "_"
        renames[key] = new
    def fix(node):
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                    out[k] = "#/components/schemas/" + renames[v[len("#/$defs/"):]]
                else:
                    out[k] = fix(v)
            return out
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node
    for key, d in defs.items():
        components[renames[key]] = fix(d)
    components[name] = fix(schema)
    return {"$ref": f"#/components/schemas/{name}"}


def _json(ref: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": ref}}}


@functools.lru_cache(maxsize=1)
def openapi_text(version: str) -> bytes:
    """The OpenAPI 3.1 document of the API."""
    comps: dict = {}
    req = _hoist("SearchRequestBody", SCHEMAS["request"](), comps)
    res = _hoist("SearchResult", SCHEMAS["result"](), comps)
    ereq = _hoist("EstimateRequestBody", SCHEMAS["estimate-request"](), comps)
    est = _hoist("EstimateResult", SCHEMAS["estimate"](), comps)
    sw = _hoist("SweepBody", SCHEMAS["sweep"](), comps)
    swr = _hoist("SweepResult", SWEEP_RESULT, comps)
    err = _hoist("Error", ERROR, comps)
    emit = {"name": "emit", "in": "query", "required": False, "schema": {"enum": ["0", "1"]},
            "description": "1: add the launch configuration ('launch'), as the commands' --emit (needs framework)"}
    bad = {"400": _json(err, "the body is not a JSON object"), "413": _json(err, "the body is over the size limit"),
           "422": _json(err, "bad input: one line naming the field and the fix (the command's exit 2)"),
           "503": _json(err, "the queue is full (answered at once) or the request waited past its time limit"),
           "504": _json(err, "no answer within the time limit")}
    listing = {"type": "array", "items": {"type": "object"}}
    doc = {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {"title": "plan-search", "version": version,
                 "description": "The planner over HTTP: the same documents as plan-search --request, plan-estimate "
                                "--format json and plan-sweep; exit 0 -> 200, 2 -> 422 (400, 413), 3 -> 409."},
        "paths": {
            "/v1/search": {"post": {
                "summary": "plan-search: the front of GPU count, days and dollars, and the recommended plan",
                "parameters": [emit],
                "requestBody": {"required": True, "content": {"application/json": {"schema": req}}},
                "responses": {"200": {"description": "the SearchResult (plan-search --format json), or its CSV "
                                                     "with format: csv",
                                      "content": {"application/json": {"schema": res},
                                                  "text/csv": {"schema": {"type": "string"}}}},
                              "409": _json(err, "nothing feasible (plan-search's exit 3): why, and what would fit"),
                              **bad}}},
            "/v1/estimate": {"post": {
                "summary": "plan-estimate: every figure of one plan",
                "parameters": [emit],
                "requestBody": {"required": True, "content": {"application/json": {"schema": ereq}}},
                "responses": {"200": _json(est, "the Estimate (plan-estimate --format json); the plan fits"),
                              "409": _json(est, "the Estimate of a plan that does not fit (plan-estimate's exit 3)"),
                              **bad}}},
            "/v1/sweep": {"post": {
                "summary": "plan-sweep: one search per scenario (bounded), one table",
                "requestBody": {"required": True, "content": {"application/json": {"schema": sw}}},
                "responses": {"200": _json(swr, "the table; at least one scenario is feasible"),
                              "409": _json(swr, "the table; no scenario is feasible (plan-sweep's exit 3)"),
                              **bad}}},
            "/v1/catalog/models": {"get": {"summary": "plan-catalog models --format json",
                                           "responses": {"200": _json(listing, "the catalog models")}}},
            "/v1/catalog/gpus": {"get": {"summary": "plan-catalog gpus --format json",
                                         "responses": {"200": _json(listing, "the catalog systems")}}},
            "/v1/schema/{name}": {"get": {
                "summary": "a JSON Schema (request and result are plan-search --schema request|result)",
                "parameters": [{"name": "name", "in": "path", "required": True,
                                "schema": {"enum": sorted(SCHEMAS)}}],
                "responses": {"200": _json({"type": "object"}, "the JSON Schema"),
                              "404": _json(err, "no such schema")}}},
            "/v1/version": {"get": {"summary": "the package's version (plan-search --version)",
                                    "responses": {"200": _json({"type": "object"}, "name and version")}}},
            "/v1/health": {"get": {"summary": "liveness and load",
                                   "responses": {"200": _json({"type": "object"}, "ok, workers, running, waiting")}}},
        },
        "components": {"schemas": comps},
    }
    return json.dumps(doc, indent=2).encode()
