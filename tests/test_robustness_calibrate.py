"""Issue 24: plan-calibrate says why it has nothing to fit, and refuses absurd measurements.

- a runs file of mixture-of-experts rows said only "no complete rows": it now says how many MoE rows of
  the GPU were skipped and why (calibration.MOE_ROWS_SKIPPED), also when other rows are fitted (stderr);
- a measured 1e-308 TFLOP/s made an infinite step and "math domain error": a measurement implying an
  MFU below calibration.MIN_MFU is refused naming the row and the column."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from plan_search.cli.calibrate import main
from plan_search.planner.calibration import MIN_MFU, load_runs

RUNS = Path(__file__).resolve().parents[1] / "planner" / "runs_2026_12.csv"


def _rows():
    with RUNS.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _write(path: Path, rows) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(_rows()[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _is_moe(r) -> bool:
    return (r.get("num_experts") or "").strip() not in ("", "0", "0.0")


def _runner():
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def test_moe_rows_are_said_to_be_skipped_and_why(tmp_path):
    moe = [r for r in _rows() if _is_moe(r)]
    h100 = [r for r in moe if r["gpu"].startswith("H100")]
    assert h100
    runs = _write(tmp_path / "moe.csv", moe)
    r = _runner().invoke(main, [str(runs), "--gpu", "h100", "-o", str(tmp_path / "out.yaml")])
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"{len(h100)} mixture-of-experts row(s) of h100-sxm skipped" in line, line
    assert "would be priced as a dense model" in line and "bench/moe_fidelity.py" in line, line
    assert not (tmp_path / "out.yaml").exists()
    counted: dict = {}
    assert load_runs(runs, gpu="h100", skipped=counted) == [] and counted == {"moe": len(h100)}


def test_moe_rows_skipped_beside_fitted_rows_are_reported(tmp_path):
    rows = _rows()
    b200 = [r for r in rows if r["gpu"] == "GB300"]
    moe = [r for r in b200 if _is_moe(r)]
    assert moe and len(b200) > len(moe)
    runs = _write(tmp_path / "b200.csv", b200)
    r = _runner().invoke(main, [str(runs), "--gpu", "gb300", "-o", str(tmp_path / "out.yaml"), "--iters", "5"])
    assert r.exit_code == 0, r.stderr
    assert f"plan-calibrate: {len(moe)} mixture-of-experts row(s) of gb300-nvl72 skipped" in r.stderr, r.stderr


@pytest.mark.parametrize("col, value", [("measured_tflops_per_gpu", "1e-308"), ("measured_tflops_per_gpu", "1e-9"),
                                        ("measured_step_time_s", "1e9"), ("measured_mfu", "1e-300")])
def test_a_measurement_below_a_millionth_of_the_peak_is_refused(tmp_path, col, value):
    row = next(r for r in _rows() if r["gpu"] == "GB300" and not _is_moe(r) and r["layers"])
    for c in ("measured_tflops_per_gpu", "measured_mfu", "measured_tokens_per_s_per_gpu", "measured_step_time_s"):
        row[c] = ""
    row[col] = value
    runs = _write(tmp_path / "tiny.csv", [row])
    r = _runner().invoke(main, [str(runs), "--gpu", "gb300", "-o", str(tmp_path / "out.yaml")])
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "math domain" not in line, line
    assert line.startswith(f"error: runs: row 1: {col}: '{value}' means a step of"), line
    assert f"an MFU below {MIN_MFU:g}" in line, line
