"""Plots: what the pictures say (the matplotlib artists: series, points, labels, units), that
plan-search --plot and plan-sweep --plot write them, and a clear error without matplotlib (the
tests that draw skip when it is not installed)."""

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


def _texts(fig) -> list[str]:
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
        out += [t.get_text() for t in ax.get_xticklabels()]
        leg = ax.get_legend()
        if leg is not None:
            out += [t.get_text() for t in leg.get_texts()]
    return [t for t in out if t]


def _points(ax, label_start: str):
    """(x, y) of the plotted points of the series whose legend label starts with label_start."""
    out = []
    for line in ax.get_lines():
        if str(line.get_label()).startswith(label_start) and line.get_marker() not in (None, "None", ""):
            out += list(zip(line.get_xdata(), line.get_ydata()))
    return out


def test_front_plot_days_against_dollars_one_series_per_type(tmp_path, mpl):
    from plan_search.planner.plots import front_figure, plot_front

    res = search(SearchRequest(model="llama2-70b", gpu=["a100-80gb", "h100-sxm"], gpus=[64, 128, 256, 512],
                               tokens=2e12))
    assert {fp.gpu for fp in res.front} == {"h100-sxm"}  # the A100 is dominated at every count ...
    assert {fp.gpu for fp in res.other_fronts} == {"a100-80gb"}  # ... and its own front is kept
    fig = front_figure(res)
    ax = fig.axes[0]
    assert "training days" in ax.get_xlabel() and "USD" in ax.get_ylabel()
    # one series per GPU type, the dominated one drawn with all its points, not only listed
    h100 = _points(ax, "h100-sxm")
    a100 = _points(ax, "a100-80gb (dominated")
    assert len(h100) == len(res.front) and len(a100) == len(res.other_fronts) > 0
    assert sorted(h100) == sorted((fp.days, fp.cost_usd / 1e6) for fp in res.front)  # days, $M
    # every point labelled with its GPU count (few points)
    labels = sorted(int(t.get_text().replace(",", "")) for t in ax.texts if t.get_text().replace(",", "").isdigit())
    assert labels == sorted(fp.num_gpus for fp in res.front + res.other_fronts)
    # the recommended plan marked once, where it is
    stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*" and len(ln.get_xdata())]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [res.recommended.run.days]
    assert sum("recommended (balanced)" in t for t in _texts(fig)) == 1
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert _is_png(plot_front(res, tmp_path / "front.png"))
    svg = plot_front(res, tmp_path / "front.svg")
    assert svg.read_text().lstrip().startswith("<?xml")


def test_sweep_plot_units_and_readable_series(tmp_path, mpl):
    """A bandwidth sweep: one panel per GPU count (the axis that moves the days most), one line
    per HBM bandwidth in each, axes and legend named in words with units, no raw keys."""
    from plan_search.planner.plots import sweep_figure

    doc = {"base": {"model": "megatron-gpt-1.7b", "gpu": "a100-80gb", "tokens": "100B"},
           "sweep": {"gpus": [8, 64], "gpu.hbm_bandwidth_gbps": [1555, 3000], "node.inter_node_gbps": [12.5, 50]}}
    sw = build_sweep(doc)
    df = run_sweep(sw, tmp_path / "bw.csv", workers=1, progress=False).frame
    fig = sweep_figure(df, sw.axes, x="node.inter_node_gbps")
    panels = fig.axes
    assert len(panels) == 4  # days and dollars, for 8 and 64 GPUs
    texts = _texts(fig)
    assert not any("node.inter_node_gbps" in t or "hbm_bandwidth_gbps" in t for t in texts)
    assert panels[2].get_xlabel() == "inter-node bandwidth per GPU, GB/s"
    assert {p.get_title() for p in panels[:2]} == {"GPUs 8", "GPUs 64"}
    legend = [t.get_text() for t in panels[0].get_legend().get_texts()]
    assert legend == ["HBM 1,555 GB/s", "HBM 3,000 GB/s"]
    for p in panels:  # two lines per panel, each through both bandwidths
        drawn = [ln for ln in p.get_lines() if len(ln.get_xdata()) == 2]
        assert len(drawn) == 2 and {tuple(ln.get_xdata()) for ln in drawn} == {(12.5, 50.0)}
    assert "days" in panels[0].get_ylabel() and "USD" in panels[2].get_ylabel()


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
