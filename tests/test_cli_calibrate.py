"""plan-calibrate: fit on a small CSV (rows copied from planner/published_runs.csv), write a
cluster YAML that --gpu accepts, and do not make the median error worse."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from plan_search.cli.calibrate import main as calibrate
from plan_search.cli.estimate import main as estimate
from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.resolve import resolve_cluster
from plan_search.planner.calibration import error_summary, load_runs, predict

DATA = Path(__file__).parent / "data"
SMALL = DATA / "runs" / "small-runs.csv"  # 4 A100 rows (Narayanan Table 2, Korthikanti) + 1 H100 row
ITERS = "20"
#: the fixture starts from a system whose GEMM efficiency is set wrong, so the fit has something to find
START = ("--set", "efficiency.gemm_eff_max=0.55")


def invoke(cmd, *args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


def _no_traceback(result):
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "my-a100.yaml"
    r = invoke(calibrate, SMALL, "--gpu", "a100", *START, "-o", out, "--iters", ITERS)
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    return out, r


def _medians(stdout: str) -> tuple[float, float]:
    found = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"(before|after)\s+([0-9.]+)%\s+([0-9.]+)%", line.strip())
        if m:
            found[m.group(1)] = float(m.group(2))
    return found["before"], found["after"]


def test_output_table(fitted):
    out, r = fitted
    text = r.stdout
    fixed = [line for line in text.splitlines() if str(out) not in line]  # the path is as long as it is
    assert all(len(line) <= 80 for line in fixed), max(fixed, key=len)
    assert "4 run(s) from small-runs.csv" in text  # the H100 row is not an a100-80gb run
    for word in ("measured", "before", "after", "error", "median", "p90", "efficiency terms"):
        assert word in text
    rows = [ln for ln in text.splitlines() if re.match(r"\s+\d+\s+GPT", ln)]
    assert len(rows) == 4
    assert str(out) in text


def test_written_yaml_is_base_plus_efficiency(fitted):
    out, _ = fitted
    doc = yaml.safe_load(out.read_text())
    assert doc["base"] == "a100-80gb"
    assert set(doc) == {"base", "efficiency"}
    assert "fitted by plan-calibrate" in doc["efficiency"]["source"]
    spec = resolve_cluster(str(out))
    assert spec.gpu == get_cluster("a100").gpu
    assert spec.efficiency.model_dump() == doc["efficiency"]


def test_fit_not_worse_than_before(fitted):
    out, r = fitted
    before, after = _medians(r.stdout)
    assert after < before / 2  # a GEMM efficiency 19% low is found again
    # and the same, recomputed from the file the command wrote
    records = load_runs(SMALL, gpu="a100")
    start = get_cluster("a100")
    start = start.model_copy(update={"efficiency": start.efficiency.model_copy(update={"gemm_eff_max": 0.55})})
    s0 = error_summary([predict(x, start) for x in records])
    s1 = error_summary([predict(x, resolve_cluster(str(out))) for x in records])
    assert s1["median"] <= s0["median"] + 1e-12


def test_a_fit_that_raises_the_median_keeps_the_systems_terms(tmp_path):
    """The fit minimises the squared log error, which can move the median |error| up: here three of
    the four A100 rows measure exactly the catalog's prediction and the fourth 30% more, so any move
    of the terms towards the fourth row takes the median off 0%. The command keeps the catalog's terms
    and says so. (The four rows of SMALL did this by themselves while 35503fd priced the pipeline;
    since its revert, 4bb9eab, their fit lowers the median: the rows are made here, not found.)"""
    import csv

    records = load_runs(SMALL, gpu="a100")
    predicted = [predict(x, get_cluster("a100")).predicted_step_s for x in records]
    with SMALL.open(newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row["gpu"].startswith("A100")]
    assert len(rows) == len(predicted) == 4
    for row, step_s, factor in zip(rows, predicted, (1.0, 1.0, 1.0, 1.3)):
        row.update(measured_step_time_s=repr(step_s * factor), measured_tflops_per_gpu="", measured_mfu="",
                   measured_tokens_per_s_per_gpu="")
    runs = tmp_path / "three-exact.csv"
    with runs.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "kept.yaml"
    r = invoke(calibrate, runs, "--gpu", "a100", "-o", out, "--iters", ITERS)
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    before, after = _medians(r.stdout)
    assert after == before
    assert "the system's terms are kept" in r.stdout
    kept = resolve_cluster(str(out)).efficiency.model_dump()
    catalog = get_cluster("a100").efficiency.model_dump()
    assert {k: v for k, v in kept.items() if k != "source"} == {k: v for k, v in catalog.items() if k != "source"}


def test_plan_estimate_accepts_the_file(fitted):
    out, _ = fitted
    args = ["--model", "gpt3-175b", "--num-gpus", "64", "--tp", "8", "--pp", "8", "--micro-batch", "1",
            "--global-batch", "64", "--recompute", "full", "--format", "json"]
    r = invoke(estimate, "--gpu", out, *args)
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["cluster"] == "my-a100"
    assert "fitted by plan-calibrate" in d["efficiency"]["source"]
    default = json.loads(invoke(estimate, "--gpu", "a100", *args).stdout)
    assert d["step_time_s"] != default["step_time_s"]
    r = invoke(estimate, "--gpu", out, *args[:-2])
    assert r.exit_code == 0 and "fitted by plan-calibrate" in r.stdout


def test_set_overrides_are_kept_in_the_file(tmp_path):
    out = tmp_path / "slow-net.yaml"
    r = invoke(calibrate, SMALL, "--gpu", "a100", "-o", out, "--iters", "3",
               "--set", "node.inter_node_gbps=12.5", "--set", "gpu.peak_tflops.bf16=300")
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(out.read_text())
    assert doc["node"] == {"inter_node_gbps": 12.5}
    assert doc["gpu"] == {"peak_tflops": {"bf16": 300}}
    spec = resolve_cluster(str(out))
    assert spec.node.inter_node_gbps == 12.5 and spec.gpu.peak_tflops["bf16"] == 300


def test_cluster_file_with_base_as_starting_point(tmp_path):
    src = tmp_path / "lab.yaml"
    shutil.copy(DATA / "hw" / "my-cluster.yaml", src)
    out = tmp_path / "lab-fitted.yaml"
    r = invoke(calibrate, SMALL, "--gpu", src, "-o", out, "--iters", "3")
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    spec = resolve_cluster(str(out))
    start = resolve_cluster(str(src))
    assert spec.node.inter_node_gbps == start.node.inter_node_gbps
    assert spec.price_per_gpu_hour_usd == start.price_per_gpu_hour_usd
    assert "fitted by plan-calibrate" in spec.efficiency.source


@pytest.mark.parametrize(
    "args,needle",
    [
        ([SMALL, "--gpu", "h200"], "runs: no complete rows for h200"),
        ([DATA / "runs" / "missing.csv", "--gpu", "a100"], "runs: file"),
        ([SMALL, "--gpu", "a1000"], "gpu"),
        ([SMALL, "--gpu", "a100", "--set", "node.inter=3"], "--set node.inter"),
        ([SMALL, "--gpu", DATA / "hw" / "full-cluster.yaml"], "base"),
        ([DATA / "hw" / "my-cluster.yaml", "--gpu", "a100"], "runs: the CSV lacks"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, needle):
    r = invoke(calibrate, *args, "-o", tmp_path / "out.yaml", "--iters", "2")
    _no_traceback(r)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("plan-calibrate:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr
    assert not (tmp_path / "out.yaml").exists()
