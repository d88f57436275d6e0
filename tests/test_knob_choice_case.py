"""A choice knob's value (every Literal field of Plan: moe_dispatcher, precision, recompute,
pp_schedule, ...) is taken without regard to case, surrounding spaces or - against _, in one place
(plan.canonical_choices), by every interface: the API, plan-estimate, a plan-search JSON request,
a sweep; a value that is no choice is refused in one line naming the field and its choices."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from cli_helpers import one_stderr_line
import plan_search
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.cli.sweep import main as sweep_main
from plan_search.planner.costmodel.plan import choice_fields

MIXTRAL = ["--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64", "--ep", "8"]


_one_line = one_stderr_line


def test_every_choice_of_every_plan_field_in_any_case():
    fields = choice_fields()
    assert {"moe_dispatcher", "precision", "recompute", "pp_schedule", "master_weights"} <= set(fields)
    base = dict(num_gpus=8, pp=2, global_batch=16, seq_len=1024)  # dualpipe's even pp and micro-batches
    for name, choices in fields.items():
        for c in choices:
            swapped = c.translate(str.maketrans("-_", "_-")).upper()  # BF16-REMAINDER, FP8_CURRENT
            for given in (c.upper(), f" {c.title()} ", swapped):
                assert getattr(plan_search.Plan(**base, **{name: given}), name) == c


def test_api_estimate_prices_the_upper_case_knobs_as_lower_case():
    knobs = dict(moe_dispatcher="flex", precision="fp8-current", recompute="full", cross_entropy="te",
                 master_weights="bf16_remainder", adam_moments_dtype="bf16")
    lower = plan_search.estimate("mixtral-8x7b", "h100", num_gpus=64, ep=8, **knobs)
    upper = plan_search.estimate("mixtral-8x7b", "h100", num_gpus=64, ep=8,
                                 **{k: v.upper() for k, v in knobs.items()})
    assert upper.plan == lower.plan
    assert upper.step_time_s == lower.step_time_s
    assert upper.memory.peak_gib == lower.memory.peak_gib
    # the knob is applied, not dropped: the default dispatcher prices differently
    other = plan_search.estimate("mixtral-8x7b", "h100", num_gpus=64, ep=8, **dict(knobs, moe_dispatcher="alltoall"))
    assert other.step_time_s != lower.step_time_s


def test_plan_estimate_cli_takes_any_case_and_refuses_a_non_choice():
    def run(*extra):
        r = CliRunner().invoke(estimate_main, MIXTRAL + list(extra) + ["--format", "json"])
        assert "Traceback" not in r.output and r.exit_code in (0, 3), r.output
        return json.loads(r.stdout)

    lower, upper = run("--moe-dispatcher", "flex", "--pp-schedule", "1f1b"), run("--moe-dispatcher", "FLEX",
                                                                               "--pp-schedule", "1F1B")
    assert upper["step_time_s"] == lower["step_time_s"]
    assert upper["plan"]["moe_dispatcher"] == "flex"
    assert run("--master-weights", "BF16-REMAINDER")["plan"]["master_weights"] == "bf16_remainder"
    r = CliRunner().invoke(estimate_main, MIXTRAL + ["--moe-dispatcher", "flexx"])
    assert r.exit_code == 2
    line = _one_line(r)
    assert "--moe-dispatcher" in line and "alltoall, allgather, flex" in line


def test_search_request_and_sweep_take_any_case(tmp_path):
    def front(req: dict):
        return [(p.plan, p.step_time_s) for p in plan_search.search(req).front]

    base = {"model": "mixtral-8x7b", "gpu": ["h100"], "gpus": [64], "ep": 8}
    lower = front(dict(base, moe_dispatcher="flex", recompute=["full", "partial"]))
    assert front(dict(base, moe_dispatcher="FLEX", recompute=["Full", "PARTIAL"])) == lower
    assert all(plan.moe_dispatcher == "flex" for plan, _ in lower)

    req = tmp_path / "req.json"
    req.write_text(json.dumps(dict(base, knobs={"moe_dispatcher": " Flex", "recompute": ["FULL", "partial"]})))
    r = CliRunner().invoke(search_main, ["--request", str(req), "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [(p["plan"]["moe_dispatcher"], p["step_time_s"]) for p in out["front"]] == [
        (plan.moe_dispatcher, t) for plan, t in lower]

    req.write_text(json.dumps(dict(base, moe_dispatcher="deepep")))
    r = CliRunner().invoke(search_main, ["--request", str(req)])
    assert r.exit_code == 2
    line = _one_line(r)
    assert "moe_dispatcher" in line and "'alltoall', 'allgather' or 'flex'" in line and "deepep" in line

    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"base": {**base, "knobs": {"recompute": ["full"]}},
                                 "sweep": {"knobs.moe_dispatcher": ["FLEX", "AllGather"]}}))
    out_csv = tmp_path / "sweep.csv"
    r = CliRunner().invoke(sweep_main, [str(sweep), "-o", str(out_csv), "--workers", "1", "-q"])
    assert r.exit_code == 0, r.output
    rows = [row for row in csv.DictReader(out_csv.open()) if row["recommended"] == "True"]
    assert [row["knobs.moe_dispatcher"] for row in rows] == ["flex", "allgather"]  # the canonical value
    for row in rows:  # each scenario's plan is the API's with the lower-case knob
        want = front(dict(base, moe_dispatcher=row["knobs.moe_dispatcher"].lower(), recompute=["full"]))
        assert float(row["step_time_s"]) in [t for _, t in want]
    assert rows[0]["step_time_s"] != rows[1]["step_time_s"]
    # the same value in two spellings is one scenario, refused as a repeat
    sweep.write_text(json.dumps({"base": base, "sweep": {"knobs.moe_dispatcher": ["FLEX", "flex"]}}))
    r = CliRunner().invoke(sweep_main, [str(sweep), "-o", str(out_csv), "--workers", "1", "-q", "--overwrite"])
    assert r.exit_code == 2 and "same request" in _one_line(r)
