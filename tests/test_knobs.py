"""One description of the plan knobs (issue 10): the same spelling and default in plan-estimate,
plan-search, JSON requests and the Python API, and every front point reproduced exactly by the
plan-estimate command it carries."""

from __future__ import annotations

import json
import math
import shlex

import pytest
from click.testing import CliRunner

import plan_search
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.planner.costmodel.knobs import broadcast_knobs, knob_specs
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.search.request import Knobs, SearchRequest


def _run_estimate(command: str) -> dict:
    argv = shlex.split(command)
    assert argv[0] == "plan-estimate"
    r = CliRunner().invoke(estimate_main, argv[1:] + ["--format", "json"])
    assert r.exit_code in (0, 3), r.output
    return json.loads(r.output)


FRONTS = [
    dict(model="gpt3", gpu="a100", gpus=[512, 1024, 1536], objective="fastest"),
    dict(model="llama3.1-8b", gpu="h100-sxm", gpus=[8, 16, 32], tokens="100B", precision=["bf16", "fp8"],
         flash_attention=[True, False], objective="cheapest"),
    dict(model="llama3.1-70b", gpu=["h100-sxm", "a100-80gb"], gpus=[64, 128], tokens="1T",
         overlap_tp_comm=[True, False], objective="fastest", sets=["node.inter_node_gbps=50"]),
    # a framework whose defaults are not the Plan's (torchtitan keeps FSDP2 parameters gathered
    # under pipelining) and its own efficiency profile
    dict(model="llama3.1-8b", gpu="h100-sxm", min_gpus=8, max_gpus=64, framework="torchtitan", objective="fastest"),
]


@pytest.mark.parametrize("req", FRONTS, ids=["gpt3", "llama8b-sets", "llama70b-two-gpus", "torchtitan"])
def test_every_front_point_is_reproduced_by_its_estimate_command(req):
    result = plan_search.search(**req)
    assert result.front
    points = list(result.front)
    for fp in points:
        est = _run_estimate(fp.estimate_command)
        assert est["plan"] == fp.plan.model_dump()
        assert est["step_time_s"] == pytest.approx(fp.step_time_s, rel=1e-12)
        assert est["memory"]["peak_gib"] == pytest.approx(fp.memory_gib, rel=1e-12)
        assert est["run"]["days"] == pytest.approx(fp.days, rel=1e-12)
        assert est["run"]["cost_usd"] == pytest.approx(fp.cost_usd, rel=1e-12)
    rec = _run_estimate(result.recommended_command)
    assert rec["step_time_s"] == pytest.approx(result.recommended.step_time_s, rel=1e-12)
    assert rec["plan"] == result.recommended.plan.model_dump()


def test_the_same_knob_has_the_same_default_everywhere():
    """plan-search with every knob left alone prices a plan exactly as plan-estimate does given the
    plan's knobs (framework-free: a framework's own defaults are its, tests/test_search_span.py): each is the
    Plan's default, or a value today's recipes set that the search spans
    (issue 23: planner/frameworks/recipes.py; the front carries it), and nothing else (an earlier bug
    was overlap_tp_comm silently differing between the two commands)."""
    from plan_search.planner.search.space import RESOLVED_KNOBS

    result = plan_search.search(model="gpt3", gpu="a100", gpus=[1024], objective="fastest", framework="none")
    p = result.front[0].plan
    changed = [spec for spec in broadcast_knobs() if getattr(p, spec.name) != spec.default]
    assert {spec.name for spec in changed} <= set(RESOLVED_KNOBS) | {"pp_schedule"}, [s.name for s in changed]
    argv = ["--model", "gpt3", "--gpu", "a100", "--gpus", "1024", "--tp", str(p.tp), "--pp", str(p.pp),
            "--vpp", str(p.vpp), "--zero", str(p.zero), "--micro-batch", str(p.micro_batch),
            "--recompute", p.recompute, "--format", "json"]
    for spec in changed:
        v = getattr(p, spec.name)
        argv += [spec.option if v else f"--no-{spec.option[2:]}"] if spec.kind == "bool" else [spec.option, str(v)]
    est = json.loads(CliRunner().invoke(estimate_main, argv).output)
    assert est["step_time_s"] == pytest.approx(result.front[0].step_time_s, rel=1e-12)


def test_every_knob_is_an_option_of_both_commands_with_one_spelling():
    est_help = CliRunner().invoke(estimate_main, ["--help"], terminal_width=200).output
    search_help = CliRunner().invoke(search_main, ["--help"], terminal_width=200).output
    for spec in knob_specs():
        assert spec.option + " " in est_help, spec.option
        assert spec.option + " " in search_help, spec.option
        if spec.kind == "bool":
            assert f"--no-{spec.option[2:]}" in est_help and f"--no-{spec.option[2:]}" in search_help
        # a knob's description comes from the Plan field and is non-trivial
        assert len(spec.description) > len(spec.name), spec.name
    # every broadcast knob is a field of the search's Knobs and of no other place
    for spec in broadcast_knobs():
        assert spec.name in Knobs.model_fields
        assert spec.name not in SearchRequest.model_fields


def test_plan_estimate_refuses_a_set_and_plan_search_takes_it():
    r = CliRunner().invoke(estimate_main, ["--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8",
                                           "--tp", "1,2"])
    assert r.exit_code == 2 and "--tp" in r.output and "one plan" in r.output
    r = CliRunner().invoke(search_main, ["--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8,16",
                                         "--tp", "1,2", "--flash-attention", "both", "--precision", "bf16,fp8",
                                         "--objective", "fastest", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["request"]["knobs"]["flash_attention"] == [True, False]
    assert doc["request"]["knobs"]["precision"] == ["bf16", "fp8"]
    assert {fp["plan"]["tp"] for fp in doc["front"]} <= {1, 2}
    # --no-x and --x off mean the same
    a = CliRunner().invoke(estimate_main, ["--model", "gpt3", "--gpu", "a100", "--gpus", "1536", "--tp", "8", "--pp",
                                           "12", "--no-flash-attention", "--recompute", "full", "--format", "json"])
    b = CliRunner().invoke(estimate_main, ["--model", "gpt3", "--gpu", "a100", "--gpus", "1536", "--tp", "8", "--pp",
                                           "12", "--flash-attention", "off", "--recompute", "full", "--format", "json"])
    assert json.loads(a.output)["step_time_s"] == json.loads(b.output)["step_time_s"]
    assert json.loads(a.output)["plan"]["flash_attention"] is False


def test_flash_attention_off_never_pairs_with_context_parallelism():
    r = plan_search.search(model="llama3.1-8b", gpu="h100-sxm", gpus=[64], seq_len=16384, flash_attention=False,
                           objective="fastest", tokens="10B")
    assert all(fp.plan.cp == 1 and not fp.plan.flash_attention for fp in r.front)


def test_requests_take_what_the_cli_takes(tmp_path):
    req = SearchRequest.model_validate({"model": "gpt3", "gpu": "a100", "tokens": "300B", "tp": 8,
                                        "overlap_tp_comm": True, "format": "json"})
    assert req.gpu == ["a100"] and req.tokens == 300e9 and req.knobs.tp == [8]
    assert req.knobs.overlap_tp_comm == [True] and req.format == "json"
    with pytest.raises(ValueError, match="tokens"):
        SearchRequest.model_validate({"model": "gpt3", "tokens": True})
    with pytest.raises(ValueError, match="tp"):
        SearchRequest.model_validate({"model": "gpt3", "tp": 8, "knobs": {"tp": [4]}})
    # a JSON request answers in JSON without --format
    f = tmp_path / "req.json"
    f.write_text(json.dumps({"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": [8], "tokens": "10B",
                             "objective": "fastest"}))
    r = CliRunner().invoke(search_main, ["--request", str(f)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["front"][0]["estimate_command"].startswith("plan-estimate --model llama3.1-8b --gpu h100-sxm")
    assert math.isclose(doc["inputs"]["tokens"], 10e9)


def test_search_takes_keywords_a_dict_or_a_request():
    kw = dict(model="llama3.1-8b", gpu="h100-sxm", gpus=[8], tokens="10B", objective="fastest")
    a = plan_search.search(**kw)
    b = plan_search.search(kw)
    c = plan_search.search(SearchRequest(**{**kw, "gpu": ["h100-sxm"], "tokens": 10e9}))
    assert a.recommended.step_time_s == b.recommended.step_time_s == c.recommended.step_time_s
    with pytest.raises(Exception, match="tp"):
        plan_search.search(**kw, tp="eight")


def test_standard_input_with_a_byte_order_mark_is_read_by_every_command(tmp_path):
    """One document reader (models.io.read_document) serves plan-search and plan-allocate: a
    UTF-8 byte-order mark on stdin is dropped in both (plan-allocate used to refuse it)."""
    from plan_search.cli.allocate import main as allocate_main

    bom = "\ufeff"
    req = json.dumps({"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": [8], "tokens": "1B", "objective": "fastest"})
    r = CliRunner().invoke(search_main, ["--request", "-"], input=(bom + req).encode("utf-8"))
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["front"][0]["num_gpus"] == 8
    pool = tmp_path / "pool.yaml"
    pool.write_text(json.dumps({"free": {"h100-sxm": 16}}))
    jobs = json.dumps({"jobs": [{"name": "a", "model": "llama3.1-8b", "tokens": "1B"}]})
    r = CliRunner().invoke(allocate_main, ["--pool", str(pool), "--jobs", "-", "--format", "json"],
                           input=(bom + jobs).encode("utf-8"))
    assert r.exit_code == 0, r.output
    assert [a["job"] for a in json.loads(r.output)["assignments"]] == ["a"]


@pytest.mark.parametrize("args,fp32", [(["--fp32-grads", "on", "--bf16-grads"], False),
                                       (["--bf16-grads", "--fp32-grads", "on"], True),
                                       (["--no-fp32-grads", "--fp32-grads"], True),
                                       (["--fp32-grads", "--no-fp32-grads"], False)])
def test_the_last_spelling_of_a_boolean_knob_wins(args, fp32):
    r = CliRunner().invoke(estimate_main, ["--model", "gpt3", "--gpu", "a100", "--gpus", "1536", "--tp", "8", "--pp",
                                           "12", *args, "--format", "json"])
    assert r.exit_code in (0, 3), r.output
    assert json.loads(r.output)["plan"]["fp32_grads"] is fp32
