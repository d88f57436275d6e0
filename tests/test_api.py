"""The embedding API: planner.search / planner.estimate, JSON round trips of the documents,
the DataFrames, ``plan-search --request`` end to end (every CLI option as a request field, the
result JSON, the JSON Schemas, exit codes), and the examples of docs/api.md run as written."""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import plan_search as planner
from plan_search.cli.search import main as search_main
from plan_search.planner.api import FRONT_COLUMNS, estimate_dataframe, front_dataframe, request_dataframe
from plan_search.planner.costmodel.estimate import Estimate
from plan_search.planner.search.request import Knobs, NoFeasiblePlan, SearchRequest, SearchResult

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api.md"
BIN = Path(sys.executable).parent

REQ = SearchRequest(model="llama3.1-8b", gpu=["h100-sxm"], gpus=[8, 16, 32, 64], tokens=100e9)


@pytest.fixture(scope="module")
def result() -> SearchResult:
    return planner.search(REQ)


@pytest.fixture(scope="module")
def two_systems() -> SearchResult:
    return planner.search(SearchRequest(model="llama3.1-8b", gpu=["h100-sxm", "a100-80gb"], min_gpus=8, max_gpus=64,
                                        tokens=100e9, global_batch=[512], seq_len=8192, objective="cheapest"))


# ------------------------------------------------------------------ the Python API
def test_public_api_names():
    assert {"search", "estimate", "Estimate", "Plan"} <= set(planner.__all__)
    assert planner.search is sys.modules["plan_search.planner.search.front"].search


def test_search_takes_a_request_or_its_dict(result):
    again = planner.search(REQ.model_dump())
    assert again.front == result.front and again.recommended == result.recommended
    assert result.request == REQ
    assert [p.num_gpus for p in result.front] == [8, 16, 32, 64]
    # real numbers: the 8B model on 64 H100s, 100B tokens
    best = result.recommended
    assert best.plan.num_gpus == 64 and 1.5 < best.run.days < 2.5 and 7_000 < best.run.cost_usd < 11_000


def test_recommended_is_planner_estimate_of_its_plan(result):
    best = result.recommended
    e = planner.estimate(REQ.model, REQ.gpu[0], best.plan, tokens=REQ.tokens, memory_headroom=REQ.memory_headroom)
    assert e == best
    for fp in result.front:
        e = planner.estimate(REQ.model, fp.gpu, fp.plan, tokens=REQ.tokens, memory_headroom=REQ.memory_headroom)
        assert (e.step_time_s, e.run.days, e.run.cost_usd, e.memory.peak_gib) == \
            (fp.step_time_s, fp.days, fp.cost_usd, fp.memory_gib)


def test_documents_round_trip_through_json(result, two_systems):
    for res in (result, two_systems):
        text = res.model_dump_json()
        back = SearchResult.model_validate_json(text)
        assert back == res and back.model_dump_json() == text
        req = SearchRequest.model_validate_json(res.request.model_dump_json())
        assert req == res.request
        assert Estimate.model_validate_json(res.recommended.model_dump_json()) == res.recommended
    # every field set, nested knobs included
    full = SearchRequest(model="gpt3-175b", gpu=["a100-80gb", "h100-sxm"], sets=["price_per_gpu_hour_usd=2"],
                         min_gpus=64, max_gpus=1024, gpus_step=64, max_nodes=128, global_batch=[1536, 2048],
                         seq_len=4096, tokens=3e11, deadline_days=30, budget_usd=5e6, max_power_kw=900,
                         memory_headroom=0.05, max_comm_ratio=0.3,
                         knobs=Knobs(tp=[4, 8], pp=[8, 16], cp=[1, 2], vpp=[1, 2], micro_batch=[1, 2], zero=[1],
                                     recompute=["selective", "partial"], recompute_layers=[2],
                                     sequence_parallel=[True, False], allow_cross_node_tp=True, max_cp=4,
                                     max_vpp=4, max_micro_batch=4),
                         precision="fp8", overlap_tp_comm=False, fp32_grads=False, checkpoint_interval_h=2,
                         objective="least-energy", solver="exhaustive", time_limit_s=30, workers=4, seed=7,
                         max_candidates=1000)
    assert SearchRequest.model_validate_json(full.model_dump_json()) == full
    assert SearchRequest.model_validate(json.loads(full.model_dump_json())) == full


def test_front_dataframe(result, two_systems):
    for res in (result, two_systems):
        df = front_dataframe(res)
        assert list(df.columns) == list(FRONT_COLUMNS)
        assert len(df) == len(res.front)
        for (_, row), fp in zip(df.iterrows(), res.front):
            assert row["gpu"] == fp.gpu and row["num_gpus"] == fp.num_gpus
            for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero", "recompute", "global_batch"):
                assert row[k] == getattr(fp.plan, k)
            assert row["days"] == fp.days and row["cost_usd"] == fp.cost_usd and row["mfu"] == fp.mfu
            assert row["binding"] == "+".join(fp.binding)
        assert df["recommended"].sum() == (res.recommended_index is not None)
        if res.recommended_index is not None:
            assert df["recommended"].tolist().index(True) == res.recommended_index
    assert {fp.gpu for fp in two_systems.front} == set(front_dataframe(two_systems).gpu)
    # the frame equals plan-search's CSV, column for column
    r = CliRunner().invoke(search_main, ["--model", REQ.model, "--gpu", "h100-sxm", "--gpus", "8,16,32,64",
                                         "--tokens", "100e9", "--format", "csv"])
    assert r.exit_code == 0, r.output
    csv = pd.read_csv(io.StringIO(r.stdout))
    df = front_dataframe(result)
    for col in csv.columns:
        a, b = csv[col].tolist(), df[col].tolist()
        if col in ("days", "cost_usd", "mfu", "step_time_s"):
            assert a == pytest.approx(b, rel=1e-12)
        else:  # an empty CSV cell reads back as NaN: the same as None
            norm = lambda x: "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)  # noqa: E731
            num = lambda x: norm(float(x)) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else norm(x)  # noqa: E731
            assert [num(x) for x in a] == [num(x) for x in b], col


def test_front_dataframe_empty_front_keeps_the_columns(result):
    empty = result.model_copy(update={"front": [], "recommended_index": None})
    df = front_dataframe(empty)
    assert df.empty and list(df.columns) == list(FRONT_COLUMNS)


def test_estimate_dataframe(result):
    best = result.recommended
    bare = planner.estimate(REQ.model, "h100-sxm", best.plan)  # no tokens: no run figures
    df = estimate_dataframe([best, bare])
    assert len(df) == 2
    assert list(estimate_dataframe(best).columns) == list(df.columns)
    row = df.iloc[0]
    assert row["tp"] == best.plan.tp and row["dp"] == best.plan.dp and row["num_gpus"] == 64
    assert row["step_time_s"] == best.step_time_s and row["mfu"] == best.mfu
    assert row["memory_peak_gib"] == best.memory.peak_gib and row["time_compute_s"] == best.time.compute_s
    assert row["run_days"] == best.run.days and row["run_cost_usd"] == best.run.cost_usd
    assert row["eff_gemm_eff_max"] == best.efficiency.gemm_eff_max
    assert math.isnan(df.iloc[1]["run_days"])
    # the time columns sum to the step, as the breakdown does
    parts = [c for c in df.columns if c.startswith("time_") and c.endswith("_s") and c != "time_hidden_comm_s"]
    assert sum(row[c] for c in parts) == pytest.approx(row["step_time_s"], rel=1e-9)
    with pytest.raises(TypeError):
        estimate_dataframe([best, "not an estimate"])
    assert estimate_dataframe([]).empty


def test_request_dataframe(result):
    other = SearchRequest(model="gpt3-175b", gpu=["a100-80gb", "h100-sxm"], max_gpus=1024, deadline_days=30,
                          knobs=Knobs(tp=[4, 8], sequence_parallel=[True, False]))
    df = request_dataframe([REQ, other])
    assert len(df) == 2 and list(request_dataframe(REQ).columns) == list(df.columns)
    assert "knobs" not in df.columns and {"knobs_tp", "knobs_zero", "knobs_max_micro_batch"} <= set(df.columns)
    a, b = df.iloc[0], df.iloc[1]
    assert a["model"] == "llama3.1-8b" and a["gpus"] == "8,16,32,64" and a["tokens"] == 100e9
    assert pd.isna(a["knobs_tp"]) and a["knobs_zero"] == "0,1,2,3"
    assert b["gpu"] == "a100-80gb,h100-sxm" and b["knobs_tp"] == "4,8" and b["knobs_sequence_parallel"] == "true,false"
    assert b["max_gpus"] == 1024 and b["deadline_days"] == 30
    assert request_dataframe([]).empty
    with pytest.raises(TypeError):
        request_dataframe([result])


def test_no_feasible_plan_is_an_exception_with_the_figures():
    with pytest.raises(NoFeasiblePlan) as info:
        planner.search(SearchRequest(model="gpt3-175b", gpu=["a100-40gb"], gpus=[64],
                                     knobs=Knobs(zero=[0], recompute=["none"])))
    assert info.value.reason == "memory" and info.value.smallest_gib > info.value.usable_gib


# ------------------------------------------------------------------ plan-search over JSON
#: Every plan-search option and the request field(s) it sets. Output-only options excluded.
OUTPUT_ONLY = {"request_file", "fmt", "schema", "plot_file", "emit", "version", "show_all"}
BASE = {"model": "llama2-7b", "gpu": ["h100-sxm"]}
CLI_TO_REQUEST = {
    "model_ref": (["--model", "llama2-13b"], {"model": "llama2-13b"}),
    "gpu_ref": (["--gpu", "h100-sxm,a100-80gb"], {"gpu": ["h100-sxm", "a100-80gb"]}),
    "gpus": (["--gpus", "16..64:16"], {"min_gpus": 16, "max_gpus": 64, "gpus_step": 16}),
    "max_gpus": (["--max-gpus", "64"], {"max_gpus": 64}),
    "min_gpus": (["--min-gpus", "16"], {"min_gpus": 16}),
    "max_nodes": (["--max-nodes", "4"], {"max_nodes": 4}),
    "global_batch": (["--global-batch", "512,1024"], {"global_batch": [512, 1024]}),
    "seq_len": (["--seq-len", "8192"], {"seq_len": 8192}),
    "tokens": (["--tokens", "1.5T"], {"tokens": 1.5e12}),
    "deadline_days": (["--deadline-days", "30"], {"deadline_days": 30}),
    "budget_usd": (["--budget-usd", "1e6"], {"budget_usd": 1e6}),
    "max_power_kw": (["--max-power-kw", "500"], {"max_power_kw": 500}),
    "memory_headroom": (["--memory-headroom", "0.2"], {"memory_headroom": 0.2}),
    "max_comm_ratio": (["--max-comm-ratio", "0.25"], {"max_comm_ratio": 0.25}),
    "failure_rate": (["--failure-rate", "1.5"], {"failure_rate": 1.5}),
    "restart_minutes": (["--restart-minutes", "25"], {"restart_minutes": 25.0}),
    "async_checkpoint": (["--no-async-checkpoint"], {"async_checkpoint": False}),
    "allow_cross_node_tp": (["--allow-cross-node-tp"], {"knobs": {"allow_cross_node_tp": True}}),
    "allow_unfitted": (["--allow-unfitted"], {"allow_unfitted": True}),
    "max_cp": (["--max-cp", "4"], {"knobs": {"max_cp": 4}}),
    "max_vpp": (["--max-vpp", "2"], {"knobs": {"max_vpp": 2}}),
    "max_micro_batch": (["--max-micro-batch", "16"], {"knobs": {"max_micro_batch": 16}}),
    "objective": (["--objective", "cheapest"], {"objective": "cheapest"}),
    "min_efficiency": (["--min-efficiency", "0.9"], {"min_scaling_efficiency": 0.9}),
    "solver": (["--solver", "exhaustive"], {"solver": "exhaustive"}),
    "time_limit": (["--time-limit", "30"], {"time_limit_s": 30}),
    "workers": (["--solver-threads", "2"], {"solver_threads": 2}),
    "seed": (["--seed", "3"], {"seed": 3}),
    "framework": (["--framework", "megatron"], {"framework": "megatron"}),
    "sets": (["--set", "price_per_gpu_hour_usd=2", "--set", "gpu.hbm_bandwidth_gbps=3000"],
             {"sets": ["price_per_gpu_hour_usd=2", "gpu.hbm_bandwidth_gbps=3000"]}),
}


def _knob_example(spec):
    """A non-default value of a knob: (argv, request knobs)."""
    if spec.kind == "bool":
        return ([f"--no-{spec.option[2:]}"] if spec.default else [spec.option]), [not spec.default]
    if spec.kind == "choice":
        v = next(c for c in spec.choices if c != spec.default)
        return [spec.option, str(v)], [v]
    if spec.kind == "int":
        v = 2 if spec.default != 2 else 4
        return [spec.option, f"{v},{v * 2}"], [v, v * 2]
    v = round((spec.default or 1.0) * 1.25, 3)
    return [spec.option, str(v)], [v]


#: every plan knob as a plan-search option, from the one description of the knobs
KNOB_EXAMPLES = {}
for _spec in __import__("plan_search.planner.costmodel.knobs", fromlist=["knob_specs"]).knob_specs():
    _argv, _vals = _knob_example(_spec)
    if _spec.name == "recompute":
        _argv, _vals = ["--recompute", "selective,full"], ["selective", "full"]
    if _spec.name == "zero":
        _argv, _vals = ["--zero", "0,1"], [0, 1]
    if _spec.name == "sequence_parallel":
        _argv, _vals = ["--sequence-parallel", "both"], [True, False]
    if _spec.name.startswith("account_for_"):  # plan-search enumerates these splits itself: only off is a request
        _argv, _vals = [f"--no-{_spec.option[2:]}"], [False]
    KNOB_EXAMPLES[_spec.name] = (_argv, {"knobs": {_spec.name: _vals}})
CLI_TO_REQUEST.update({f"knob:{k}": v for k, v in KNOB_EXAMPLES.items()})


class _Captured(Exception):
    pass


def _capture(monkeypatch, args) -> SearchRequest:
    """The SearchRequest plan-search builds from ``args`` (the search itself is not run)."""
    seen = []

    def fake(request, **kw):
        seen.append(request)
        raise NoFeasiblePlan("captured", reason="test")

    # the package attribute planner.search is the function; the module is in sys.modules
    monkeypatch.setattr(sys.modules["plan_search.planner.search.front"], "search", fake)
    r = CliRunner().invoke(search_main, args)
    assert r.exit_code == 3 and seen, r.output
    return seen[0]


def test_every_cli_option_has_a_request_field():
    params = {p.name for p in search_main.params} - OUTPUT_ONLY
    knob_params = {p for p in params if p.startswith(("knob__", "knob_no__", "knob_alias__"))}
    assert {p.split("__", 1)[1] for p in knob_params if not p.startswith("knob_alias__")} == set(KNOB_EXAMPLES)
    static = params - knob_params
    expected = {k for k in CLI_TO_REQUEST if not k.startswith("knob:")}
    assert static == expected, static ^ expected


@pytest.mark.parametrize("name", sorted(CLI_TO_REQUEST))
def test_cli_option_equals_its_request_field(monkeypatch, tmp_path, name):
    args, fields = CLI_TO_REQUEST[name]
    base = ["--model", BASE["model"], "--gpu", ",".join(BASE["gpu"])]
    from_cli = _capture(monkeypatch, base + args)  # the option given last wins over the base
    doc = dict(BASE, **fields)
    f = tmp_path / "req.json"
    f.write_text(json.dumps(doc))
    from_file = _capture(monkeypatch, ["--request", str(f)])
    assert from_file == from_cli == SearchRequest.model_validate(doc)
    assert from_cli != SearchRequest.model_validate(BASE)  # the option changed something


def test_cli_options_override_the_request_file(monkeypatch, tmp_path):
    f = tmp_path / "req.yaml"
    f.write_text("model: llama2-7b\ngpu: [h100-sxm]\nmax_gpus: 64\nknobs: {tp: [1, 2], zero: [1]}\nsets: [a=1]\n")
    req = _capture(monkeypatch, ["--request", str(f), "--max-gpus", "32", "--tp", "4", "--set", "b=2"])
    assert req.max_gpus == 32 and req.knobs.tp == [4] and req.knobs.zero == [1] and req.sets == ["a=1", "b=2"]


def test_cli_gpus_range_replaces_the_request_files_list(monkeypatch, tmp_path):
    f = tmp_path / "req.json"
    f.write_text(json.dumps({"model": "llama2-7b", "gpu": ["h100-sxm"], "gpus": [8]}))
    req = _capture(monkeypatch, ["--request", str(f), "--gpus", "16..32"])
    assert (req.gpus, req.min_gpus, req.max_gpus) == (None, 16, 32)


def _run(*args, stdin: str | None = None):
    return subprocess.run([str(BIN / "plan-search"), *args], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_request_file_end_to_end(tmp_path, result):
    f = tmp_path / "req.json"
    f.write_text(REQ.model_dump_json())
    p = _run("--request", str(f), "--format", "json")
    assert p.returncode == 0, p.stderr
    res = SearchResult.model_validate_json(p.stdout)
    assert res.request == REQ
    assert res.front == result.front and res.recommended == result.recommended
    assert res.recommended_index == result.recommended_index


def test_request_from_stdin(result):
    p = _run("--request", "-", "--format", "json", stdin=REQ.model_dump_json())
    assert p.returncode == 0, p.stderr
    assert SearchResult.model_validate_json(p.stdout).front == result.front


@pytest.mark.parametrize("which", ["request", "result"])
def test_schemas_are_valid_json_schema_and_match_the_documents(which, result):
    jsonschema = pytest.importorskip("jsonschema")
    p = _run("--schema", which)
    assert p.returncode == 0, p.stderr
    schema = json.loads(p.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    from plan_search.planner.search.request import json_schema

    assert schema == json.loads(json.dumps(json_schema(which)))
    doc = json.loads((REQ if which == "request" else result).model_dump_json())
    jsonschema.validate(doc, schema)
    if which == "request":
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"model": "x", "colour": "red"}, schema)


@pytest.mark.parametrize("doc,word", [
    ('{"model": "llama2-7b", "colour": 1}', "colour: Extra inputs are not permitted"),
    # an unknown key names the nearest fields; a misspelt model: is named, not reported missing
    ('{"model": "llama2-7b", "time_limt_s": 5}', "time_limt_s: Extra inputs are not permitted (got 5); "
                                                  "closest: time_limit_s"),
    ('{"model": "llama2-7b", "knobs": {"tpp": [1, 2]}}', "tpp: Extra inputs are not permitted; closest: tp,"),
    ('{"modle": "llama2-7b"}', "modle: Extra inputs are not permitted (got 'llama2-7b'); closest: model"),
    ("[1, 2]", "expected a mapping"),
    ('{"model": "llama2-7b", "gpus": "eight"}', "gpus: Input should be a valid list"),
    ("{bad", "not valid YAML/JSON"),
    ('{"model": "llama2-7b", "gpu": ["nosuchgpu"]}', "nosuchgpu"),
    ('{"model": "nosuchmodel"}', "nosuchmodel"),
    ('{"model": "llama2-7b", "knobs": {"zero": [5]}}', "zero: stages are 0, 1, 2, 3"),
    ('{"model": "llama2-7b", "tokens": -1}', "tokens: -1 must be a positive"),
    ('{"model": "llama2-7b", "deadline_days": NaN}', "deadline_days"),
    ('{"model": "llama2-7b", "gpu": ["h100-sxm"], "gpus": [8], "knobs": {"tp": [3]}}', "tp: 3 does not divide num_heads 32"),
])
def test_bad_request_exits_2_with_one_line(tmp_path, doc, word):
    f = tmp_path / "req.json"
    f.write_text(doc)
    p = _run("--request", str(f))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and word in lines[0], p.stderr


def test_missing_request_file_exits_2(tmp_path):
    p = _run("--request", str(tmp_path / "nope.json"))
    assert p.returncode == 2 and "not found" in p.stderr and "Traceback" not in p.stderr


def test_infeasible_request_exits_3_with_one_line(tmp_path):
    f = tmp_path / "req.json"
    f.write_text(json.dumps({"model": "gpt3-175b", "gpu": ["a100-40gb"], "gpus": [64],
                             "knobs": {"zero": [0], "recompute": ["none"]}}))
    p = _run("--request", str(f), "--format", "json")
    assert p.returncode == 3 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infeasible: no plan fits in memory")


# ------------------------------------------------------------------ docs/api.md, run as written
def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_doc_python_examples_are_the_files_docs_examples_runs():
    """The Python blocks of docs/api.md are docs/examples/api_*.py verbatim; docs/examples.py runs
    those files and writes their output under them (tests/test_docs.py checks it is current)."""
    blocks = _blocks("python")
    for name in ("api_search.py", "api_allocate.py"):
        assert (ROOT / "docs" / "examples" / name).read_text() in blocks, name


def test_doc_json_request_runs(tmp_path):
    (doc,) = [b for b in _blocks("json") if '"model"' in b and '"front"' not in b]
    req = SearchRequest.model_validate_json(doc)
    assert (ROOT / "docs" / "examples" / "req.json").read_text() == doc
    f = tmp_path / "req.json"
    f.write_text(doc)
    p = _run("--request", str(f))
    assert p.returncode == 0, p.stderr
    res = SearchResult.model_validate_json(p.stdout)  # JSON by default for a request file
    assert res.request == req


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"tp": "8"}, "plan: tp: Input should be a valid integer (got '8')"),
        ({"tp": 8.0}, "plan: tp: Input should be a valid integer (got 8.0)"),
        ({"tp": True}, "plan: tp: True holds a boolean"),
        ({"zero_stage": "3"}, "plan: zero_stage:"),
    ],
)
def test_estimate_fields_are_validated_strictly_like_requests(fields, message):
    """estimate()'s plan fields follow the request's strict types: "8" is not a count and the
    error is one InputError line naming the field (not a pydantic dump)."""
    from plan_search.models.io import InputError

    with pytest.raises(InputError) as exc:
        planner.estimate("gpt3-175b", "a100-80gb", num_gpus=1024, pp=8, **fields)
    text = str(exc.value)
    assert text.startswith(message) and "\n" not in text
    good = planner.estimate("gpt3-175b", "a100-80gb", num_gpus=1024, pp=8, tp=8)
    assert good.plan.tp == 8 and good.step_time_s > 0


def test_estimate_refuses_a_field_given_twice():
    from plan_search.models.io import InputError

    with pytest.raises(InputError, match="^tp: given in plan and as a keyword argument; give it once$"):
        planner.estimate("gpt3-175b", "a100-80gb", {"num_gpus": 1024, "tp": 2, "pp": 8}, tp=4)
    e = planner.estimate("gpt3-175b", "a100-80gb", {"num_gpus": 1024, "pp": 8}, tp=4)
    assert e.plan.tp == 4 and e.plan.pp == 8


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"ep": [3.5]}, "request: ep.0: Input should be a valid integer (got 3.5)"),
        ({"moe_imbalance": float("nan")}, "request: moe_imbalance: Input should be a finite number (got nan)"),
        ({"pp": [3], "pp_schedule": "dualpipe"}, "request: knobs: pp_schedule: dualpipe needs an even pp"),
        ({"gpus": ["64"]}, "request: gpus.0: Input should be a valid integer (got '64')"),
    ],
)
def test_search_bad_fields_are_one_input_error_line(fields, message):
    """Review (issue 13): search() given a dict or keyword fields raised pydantic's multi-line
    ValidationError (with its URL) for a bad MoE knob; it is one InputError line naming the field,
    as estimate()'s and the CLI's."""
    from plan_search.models.io import InputError

    with pytest.raises(InputError) as exc:
        planner.search(model="mixtral-8x7b", gpu="h100", **{"gpus": [64], **fields})
    text = str(exc.value)
    assert text.startswith(message) and "\n" not in text and "errors.pydantic.dev" not in text


def test_numpy_numbers_are_the_numbers_they_hold():
    """Review (issue 13): numpy integers where an int is expected (ep=np.int64(8), gpus from an array)
    were refused as 'Input should be a valid integer (got np.int64(8))'; they are taken as the ints
    they hold, giving the same estimate and front as plain ints. A numpy boolean stays a boolean."""
    import numpy as np

    from plan_search.models.io import InputError

    plain = planner.estimate("mixtral-8x7b", "h100", num_gpus=64, tp=2, pp=4, ep=8, first_stage_layers=8, moe_imbalance=1.0)
    np_est = planner.estimate("mixtral-8x7b", "h100", num_gpus=np.int64(64), tp=np.int32(2), pp=np.uint8(4),
                              ep=np.int64(8), first_stage_layers=np.int64(8), moe_imbalance=np.float64(1.0))
    assert np_est.plan == plain.plan and type(np_est.plan.ep) is int
    assert np_est.step_time_s == plain.step_time_s and np_est.memory.peak_gib == plain.memory.peak_gib
    with pytest.raises(InputError, match="ep: True holds a boolean"):
        planner.estimate("mixtral-8x7b", "h100", num_gpus=64, tp=2, pp=4, ep=np.bool_(True))
    kw = dict(model="mixtral-8x7b", gpu="h100", time_limit_s=10)
    a = planner.search(**kw, gpus=np.array([64]), ep=np.array([8]))
    b = planner.search(**kw, gpus=[64], ep=[8])
    assert a.request == b.request and [p.plan for p in a.front] == [p.plan for p in b.front]
