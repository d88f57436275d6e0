"""plan-catalog: models / gpus / show, table and JSON output, errors without tracebacks."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from plan_search.cli.catalog import main
from plan_search.hardware.catalog import load_catalog as load_systems
from plan_search.hardware.resolve import load_cluster_file
from plan_search.models.catalog import load_catalog as load_models
from plan_search.models.counting import total_params
from plan_search.models.spec import ModelSpec


@pytest.fixture
def run():
    runner = CliRunner()

    def _run(*args):
        return runner.invoke(main, list(args))

    return _run


def _no_traceback(result):
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "Traceback" not in text
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _row(output: str, name: str) -> list[str]:
    for line in output.splitlines():
        if line.split() and line.split()[0] == name:
            return line.split()
    raise AssertionError(f"no row for {name}:\n{output}")


def test_gpus_table_shows_real_figures(run):
    r = run("gpus")
    assert r.exit_code == 0, r.output
    for name in load_systems():
        assert _row(r.output, name)
    a100 = _row(r.output, "a100-80gb")
    assert a100[1:5] == ["80", "2039", "312", "-"]  # mem GiB, HBM GB/s, bf16, no fp8
    assert "nvswitch" in a100 and "300" in a100 and "25" in a100 and "1.75" in a100
    h100 = _row(r.output, "h100-sxm")
    assert "989.4" in h100 and "1978.9" in h100 and "450" in h100 and "50" in h100
    assert "125*" in _row(r.output, "v100-32gb") and "* fp16 (no" in r.output  # V100 has no bf16
    assert "GB/s per" in r.output and "GPU per direction" in r.output
    assert max(len(x) for x in r.output.splitlines()) <= 80  # fits a terminal


def test_gpus_json(run):
    r = run("gpus", "--format", "json")
    assert r.exit_code == 0
    data = {d["name"]: d for d in json.loads(r.output)}
    assert set(data) == set(load_systems())
    a = data["a100-80gb"]
    assert a["bf16_tflops"] == 312 and a["intra_node_gbps"] == 300 and a["inter_node_gbps"] == 25
    assert "a100" in a["aliases"] and a["price_source"]
    assert data["b200"]["fp4_tflops"] == 9000


def test_models_table_shows_real_figures(run):
    r = run("models")
    assert r.exit_code == 0, r.output
    row = _row(r.output, "gpt3-175b")
    assert row[1] == "174.6"  # total_params in billions
    assert row[3:6] == ["96", "12288", "96/96"]
    assert all(_row(r.output, name) for name in load_models())
    assert max(len(x) for x in r.output.splitlines()) <= 80


def test_models_table_moe_active_params(run):
    models = load_models()
    moe = [n for n, m in models.items() if m.is_moe]
    if not moe:
        pytest.skip("no MoE model in the catalog")
    r = run("models")
    row = _row(r.output, moe[0])
    assert row[2] != "-" and float(row[2]) < float(row[1])


def test_models_json(run):
    r = run("models", "--format", "JSON")
    assert r.exit_code == 0
    data = {d["name"]: d for d in json.loads(r.output)}
    m = load_models()["gpt3-175b"]
    assert data["gpt3-175b"]["total_params"] == total_params(m)
    assert data["gpt3-175b"]["params_b"] == pytest.approx(174.6, abs=0.05)


def test_show_gpu_is_a_valid_cluster_file(run, tmp_path):
    r = run("show", "A100")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("# system a100-80gb")
    f = tmp_path / "a100.yaml"
    f.write_text(r.output)
    spec = load_cluster_file(f)
    assert spec == load_systems()["a100-80gb"]


def test_show_model_yaml_and_json(run):
    r = run("show", "gpt3-175b")
    assert r.exit_code == 0, r.output
    assert "174.6 B parameters" in r.output.splitlines()[0]
    doc = yaml.safe_load(r.output)
    assert ModelSpec.model_validate(doc) == load_models()["gpt3-175b"]
    j = run("show", "h100", "--format", "json")
    assert json.loads(j.output)["node"]["intra_node_gbps"] == 450


def test_show_kind_restricts_lookup(run):
    r = run("show", "--kind", "model", "h100")
    assert r.exit_code == 2 and "model: unknown 'h100'" in r.output
    r = run("show", "--kind", "gpu", "gpt3-175b")
    assert r.exit_code == 2 and "show: unknown 'gpt3-175b'" in r.output


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (("show", "a1000"), 2, "error: show: unknown 'a1000'; closest: a100-80gb"),
        (("bogus",), 2, "No such command"),
        (("gpus", "--format", "xml"), 2, "Invalid value for '--format'"),
        (("models", "--nope"), 2, "No such option"),
        (("show",), 2, "Missing argument"),
    ],
)
def test_errors_exit_nonzero_without_traceback(run, args, code, fragment):
    r = run(*args)
    assert r.exit_code == code
    assert fragment in r.output
    _no_traceback(r)


def test_help(run):
    r = run("--help")
    assert r.exit_code == 0 and "models" in r.output and "gpus" in r.output and "show" in r.output
