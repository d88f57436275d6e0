"""The published JSON Schema of a request says what the code accepts (issue 10): every value
of a field that the schema accepts, SearchRequest accepts, and every value the schema refuses,
SearchRequest refuses, field by field (cross-field rules such as min_gpus <= max_gpus are the
code's alone)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from click.testing import CliRunner

from plan_search.cli.search import main as search_main
from plan_search.planner.search.request import SearchRequest, json_schema

SCHEMA = json_schema("request")
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

INTS = [-1, 0, 1, 8, 100_000, 200_000, 1.5, "8", None, True]
INT_LISTS = [[], [0], [1, 2], [3, 1, 3], [-4], [1.5], ["a"], [True], 4, 0, [2] * 2000]
CASES = {
    "gpu": ["a100", ["a100", "h100-sxm"], [], "", " ", [""], [" "], 5, [5], ["x"] * 40],
    "tokens": [300e9, "300B", "1.5T", "3e11", 0, -5, "lots", "300X", True, None],
    "gpus": INT_LISTS + [[10_000_001]],
    "global_batch": INT_LISTS,
    "min_gpus": INTS, "max_gpus": INTS, "seq_len": INTS, "max_nodes": INTS,
    "deadline_days": [1, 0.5, 0, -1, "x", True],
    "memory_headroom": [0, 0.1, 0.99, 1, -0.1, "x"],
    "objective": ["fastest", "cheapest", "slowest", 1],
    "solver": ["cpsat", "exhaustive", "gurobi"],
    "format": ["json", "table", "csv", "xml"],
    "knobs": [{"tp": [1, 2]}, {"tp": 8}, {"tp": [0]}, {"tp": [200_000]}, {"zero": [0, 3]}, {"zero": [4]},
              {"zero": 2}, {"zero": [-1]}, {"recompute": ["full"]}, {"recompute": ["most"]},
              {"sequence_parallel": [True, False]}, {"sequence_parallel": ["yes"]}, {"nope": [1]},
              {"precision": "bf16"}, {"precision": ["fp8", "bf16"]}, {"precision": ["fp9"]},
              {"flash_attention": [True, False]}, {"flash_attention": [1]}, {"tp": [True]}, {"pp": []},
              {"max_micro_batch": 0}, {"max_micro_batch": 16}, {"micro_batch": [1, 2, 4]}],
    "tp": [8, [1, 2], 0, [0], "x"],
    "precision": ["bf16", ["bf16", "fp8"], "fp9"],
    "overlap_tp_comm": [True, [True, False], "on"],
    "sets": [["node.inter_node_gbps=50"], ["x"], [""], ["=5"], ["a=1", "b = 2"], "a=1"],
    "moe_imbalance": [1.1, [1.1, 1.2], 0.5, 200, [1.1, 1000]],
    "unknown_field": [1],
}


def _code_accepts(doc) -> bool:
    try:
        SearchRequest.model_validate(doc)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("field,value", [(f, v) for f, vals in CASES.items() for v in vals],
                         ids=lambda x: json.dumps(x)[:40] if not isinstance(x, str) else x)
def test_schema_and_code_agree(field, value):
    doc = {"model": "gpt3", field: value}
    schema_ok = VALIDATOR.is_valid(doc)
    assert schema_ok == _code_accepts(doc), (doc, "schema accepts" if schema_ok else "schema refuses")


def test_schema_is_what_the_cli_prints_and_names_its_dialect():
    r = CliRunner().invoke(search_main, ["--schema", "request"])
    doc = json.loads(r.output)
    assert doc == json.loads(json.dumps(SCHEMA))
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(doc)
    res = json.loads(CliRunner().invoke(search_main, ["--schema", "result"]).output)
    assert res["$schema"] == doc["$schema"]
    jsonschema.Draft202012Validator.check_schema(res)
