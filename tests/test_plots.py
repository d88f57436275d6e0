"""Plots: plan-search --plot and plan-sweep --plot write non-empty pictures; a clear error
without matplotlib (the tests that draw skip when it is not installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from plan_search.cli.search import main as search_main
from plan_search.cli.sweep import main as sweep_main
from plan_search.planner.search.request import SearchRequest
from plan_search.planner.search.front import search
from plan_search.planner.sweep import build_sweep, run_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 5000 and path.read_bytes()[:8] == PNG_MAGIC


@pytest.fixture()
def mpl():
    return pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'plan-search[plot]')")


def test_front_plot_two_systems(tmp_path, mpl):
    from plan_search.planner.plots import plot_front

    res = search(SearchRequest(model="llama2-70b", gpu=["a100-80gb", "h100-sxm"], gpus=[64, 128, 256, 512],
                               tokens=2e12))
    out = plot_front(res, tmp_path / "front.png")
    assert _is_png(out)
    svg = plot_front(res, tmp_path / "front.svg")
    assert svg.read_text().lstrip().startswith("<?xml")


def test_plan_search_plot_option(tmp_path, mpl):
    out = tmp_path / "sub" / "f.png"
    r = CliRunner().invoke(search_main, ["--model", "gpt3-175b", "--gpu", "h100-sxm", "--gpus", "512..2048",
                                         "--plot", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.stderr and r.stdout.lstrip().startswith("{")  # stdout stays JSON
    assert _is_png(out)


def test_sweep_plots(tmp_path, mpl):
    from plan_search.planner.plots import choose_x, plot_sweep

    doc = {"base": {"model": "megatron-gpt-1.7b", "tokens": "200B", "deadline_days": 5},
           "sweep": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [8, 16, 32, 64]}}
    sw = build_sweep(doc)
    df = run_sweep(sw, tmp_path / "s.csv", workers=1, progress=False).frame
    assert (df["status"] == "infeasible").any()  # too few GPUs miss the deadline: an x on the plot
    assert choose_x(df, sw.axes) == "gpus"
    assert _is_png(plot_sweep(df, tmp_path / "by-count.png", axes=sw.axes))
    # a categorical x axis, one line per GPU count
    assert _is_png(plot_sweep(df, tmp_path / "by-gpu.png", axes=sw.axes, x="gpu"))
    # no axes: the single scenario's front
    one = build_sweep({"base": {"model": "megatron-gpt-1.7b", "gpus": [8, 16, 32]}})
    df1 = run_sweep(one, tmp_path / "one.csv", workers=1, progress=False).frame
    assert _is_png(plot_sweep(df1, tmp_path / "one.png", axes=[]))


def test_plan_sweep_plot_option(tmp_path, mpl):
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump({"base": {"model": "llama3.1-8b", "gpu": "h100-sxm", "tokens": "50B"},
                                 "sweep": {"gpus": [8, 16, 32], "gpu.hbm_bandwidth_gbps": [2000, 3350]}}))
    png = tmp_path / "w.png"
    r = CliRunner().invoke(sweep_main, [str(f), "-o", str(tmp_path / "w.csv"), "--plot", str(png), "-q",
                                        "--workers", "1", "--plot-x", "gpus"])
    assert r.exit_code == 0, r.output
    assert _is_png(png)
    r = CliRunner().invoke(sweep_main, [str(f), "--plot", str(png), "--plot-x", "seq_len"])
    assert r.exit_code == 2 and "not an axis" in r.stderr


def test_no_matplotlib_is_one_line_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = CliRunner().invoke(search_main, ["--model", "gpt3-175b", "--gpus", "1024", "--plot",
                                         str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "pip install 'plan-search[plot]'" in r.stderr
    assert r.stderr.strip().count("\n") == 0
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump({"base": {"model": "gpt3-175b"}, "sweep": {"gpus": [1024]}}))
    r = CliRunner().invoke(sweep_main, [str(f), "--plot", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "matplotlib" in r.stderr
    assert not (tmp_path / "w.csv").exists()  # refused before anything ran
