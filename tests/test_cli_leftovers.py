"""Interface and robustness leftovers of issue 13, each through the CLI or the API:

- every degree knob's set (``--tp``, ``--cp``, ``--pp``, ``--ep``, ``--etp``) filters the space the same
  way: values that break a rule are dropped, the request refused only when none is left (space.given_degrees);
- ``plan-calibrate -o`` into a missing directory creates it, as plan-sweep and plan-search --plot do
  (models.output.check_output / atomic_output, the one writer of every output);
"""

from __future__ import annotations

import json

from click.testing import CliRunner

import plan_search
from plan_search.cli.search import main as search_main

MIXTRAL = ["--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64"]


def _one_line(result) -> str:
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _front(args) -> list[dict]:
    r = CliRunner().invoke(search_main, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    return [p["plan"] for p in json.loads(r.stdout)["front"]]


def test_ep_and_etp_ranges_filter_the_space_as_tp_ranges_do():
    # --ep 1..8 on Mixtral's 8 experts keeps 1, 2, 4, 8 (3, 5, 6, 7 divide no 8 experts): the same
    # front as the divisors alone, where --ep 1..8 was refused ("[3, 5, 6, 7] do not divide ...")
    ranged = _front(MIXTRAL + ["--ep", "1..8", "--tp", "1..8"])
    listed = _front(MIXTRAL + ["--ep", "1,2,4,8", "--tp", "1,2,4,8"])
    assert ranged == listed and ranged
    assert {p["ep"] for p in ranged} <= {1, 2, 4, 8} and max(p["ep"] for p in ranged) > 1
    # etp: Mixtral's 14336-wide experts; 3 divides no 14336, 2 does
    kept = _front(MIXTRAL + ["--ep", "8", "--etp", "2,3"])
    assert kept == _front(MIXTRAL + ["--ep", "8", "--etp", "2"]) and {p["etp"] for p in kept} == {2}
    # the same in a request (a list), as the CLI's set
    res = plan_search.search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep=[3, 8], etp=[2, 3])
    assert [p.plan.model_dump() for p in res.front] == kept


def test_a_degree_set_with_no_valid_value_is_refused_naming_its_knob():
    for args, says in ((["--ep", "3,5..7"], "ep: none of [3, 5, 6, 7] divides num_experts 8 of mixtral-8x7b; "
                                            "use divisors: 1, 2, 4, 8"),
                       (["--etp", "3"], "etp: none of [3] divides expert_ffn_hidden_size 14336 of mixtral-8x7b"),
                       (["--tp", "3,5"], "tp: 3 does not divide"),
                       (["--cp", "3"], "cp: none of [3]")):
        r = CliRunner().invoke(search_main, MIXTRAL + args)
        assert r.exit_code == 2, (args, r.output)
        assert _one_line(r).startswith(f"error: {says}"), r.stderr
    # a dense model keeps ep = etp = 1 of a set, and names the knob when 1 is not in it
    res = plan_search.search(model="megatron-gpt-1.7b", gpu="h100", gpus=[8], ep=[1, 2], etp=[1, 4])
    assert {(p.plan.ep, p.plan.etp) for p in res.front} == {(1, 1)}
    r = CliRunner().invoke(search_main, ["--model", "megatron-gpt-1.7b", "--gpu", "h100", "--gpus", "8",
                                         "--etp", "2"])
    assert r.exit_code == 2
    assert _one_line(r) == "error: etp: megatron-gpt-1.7b is a dense model (no experts); etp must be 1"


def test_plan_calibrate_creates_the_output_directory_as_the_other_commands_do(tmp_path):
    from pathlib import Path

    import yaml

    from plan_search.cli.calibrate import main as calibrate_main
    from plan_search.hardware.resolve import resolve_cluster

    runs = Path(__file__).parent / "data" / "runs" / "small-runs.csv"
    out = tmp_path / "new" / "dir" / "my-a100.yaml"  # was refused: "the directory ... does not exist"
    r = CliRunner().invoke(calibrate_main, [str(runs), "--gpu", "a100", "-o", str(out), "--iters", "2"])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["base"] and resolve_cluster(str(out)).efficiency is not None
    assert [p.name for p in out.parent.iterdir()] == ["my-a100.yaml"]  # no temporary file left beside it
