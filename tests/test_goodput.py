"""Goodput (issue 25): failures, restarts and checkpoint saves priced into a run's days and dollars.

The floors go through plan-estimate (CLI, JSON) and ``plan_search.estimate`` with real numbers, and
are pinned against the exact model computed here on its own: the expected wall time of a segment
M e^(R/M) (e^((tau+C)/M) - 1) maximised over a dense grid of intervals (no Newton, no module code).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import plan_search
from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate_main

from tests.cli_helpers import one_stderr_line


def invoke(main, args):
    return CliRunner().invoke(main, list(args))

LLAMA3_RATE = 419 / (54 * 16_384) * 1000  # Llama 3 paper, Table 5: per 1,000 GPU-days
LLAMA3 = dict(num_gpus=16_384, tp=8, pp=16, cp=1, global_batch=2048, seq_len=8192)  # 16M tokens at 8,192


def exact_best(save_s: float, restart_total_s: float, mtbf_s: float, step_s: float, min_tau_s: float = 0.0):
    """(goodput, interval s) of the exact model, maximised over whole steps by brute force."""
    steps = np.arange(1, int(4 * mtbf_s / step_s) + 2, dtype=float)
    tau = steps * step_s
    tau = tau[tau + save_s >= min_tau_s]
    g = tau / (mtbf_s * math.exp(restart_total_s / mtbf_s) * np.expm1((tau + save_s) / mtbf_s))
    i = int(np.argmax(g))
    return float(g[i]), float(tau[i])


def _cli_json(*args) -> dict:
    res = invoke(estimate_main, [*args, "--format", "json"])
    assert "Traceback" not in res.output and res.exit_code in (0, 3), res.output
    return json.loads(res.stdout)


def _llama3_args(gpus=16_384, restart=10, rate=None, asyn=True):
    a = ["--model", "llama3.1-405b", "--gpu", "h100", "--gpus", str(gpus), "--tp", "8", "--pp", "16", "--cp", "1",
         "--global-batch", "2048", "--seq-len", "8192", "--tokens", "15.6T", "--restart-minutes", str(restart)]
    if rate is not None:
        a += ["--failure-rate", repr(rate)]
    return a + (["--async-checkpoint"] if asyn else ["--no-async-checkpoint"])


def _pin_to_formula(doc: dict, min_tau_s: float = 0.0) -> tuple[float, float]:
    rc = doc["recovery"]
    mtbf = rc["mtbf_h"] * 3600
    step = max(doc["step_time_s"], doc["run"]["data_read_s_per_step"])
    g, tau = exact_best(rc["checkpoint_save_blocking_s"], rc["restart_s"] + rc["restore_s"], mtbf, step, min_tau_s)
    return g, tau


def test_llama3_405b_as_meta_ran_it():
    """16,384 H100, tp8 pp16, 16M-token batches, Llama 3's rate, async saves, 10-minute restart:
    goodput in [0.88, 0.96] (Meta reports more than 90% effective training time)."""
    doc = _cli_json(*_llama3_args())
    rc = doc["recovery"]
    assert rc["failure_rate_per_1000_gpu_days"] == pytest.approx(LLAMA3_RATE)
    assert "Llama 3" in rc["failure_rate_source"]
    assert rc["mtbf_h"] == pytest.approx(1000 * 24 / (LLAMA3_RATE * 16_384))  # ~3.1 h: Meta saw one every ~3 h
    assert rc["restart_s"] == 600 and rc["async_checkpoint"] is True
    assert 0.88 <= doc["goodput"] <= 0.96
    write = doc["run"]["checkpoint_write_s"]
    g, tau = _pin_to_formula(doc, min_tau_s=write)  # the background write ends before the next save
    assert doc["goodput"] == pytest.approx(g, rel=1e-9)
    assert doc["checkpoint_interval_s"] == pytest.approx(tau, rel=1e-9)
    assert doc["checkpoint_interval_steps"] * max(doc["step_time_s"], doc["run"]["data_read_s_per_step"]) \
        == pytest.approx(tau, rel=1e-9)
    # the badput split and goodput are the whole wall time
    assert sum(doc["badput"].values()) + doc["goodput"] == pytest.approx(1.0, abs=1e-12)
    assert set(doc["badput"]) == {"checkpoint_save", "lost_progress", "restart", "restore"}
    # days: the training time over goodput; without failures, training and saves alone
    run = doc["run"]
    train_days = run["steps"] * max(doc["step_time_s"], run["data_read_s_per_step"]) / 86400
    assert run["days"] == pytest.approx(train_days / doc["goodput"], rel=1e-9)
    assert run["days_without_failures"] == pytest.approx(
        train_days * (1 + rc["checkpoint_save_blocking_s"] / doc["checkpoint_interval_s"]), rel=1e-9)
    assert run["cost_usd"] > run["cost_usd_without_failures"]
    n = doc["checkpoint_interval_steps"]
    assert rc["framework_settings"]["megatron"].startswith(f"--save-interval {n} --async-save")
    assert f"interval = {n}" in rc["framework_settings"]["torchtitan"]
    assert f"every_n_train_steps={n}" in rc["framework_settings"]["nemo"]


def test_goodput_falls_with_gpus_and_grows_with_async_saves():
    prev = 1.0
    for n in (2048, 4096, 8192, 16_384, 32_768, 65_536):
        kw = dict(LLAMA3, num_gpus=n, tokens=15.6e12, failure_rate=LLAMA3_RATE, restart_minutes=10)
        a = plan_search.estimate("llama3.1-405b", "h100", **kw)
        s = plan_search.estimate("llama3.1-405b", "h100", async_checkpoint=False, **kw)
        assert a.goodput < prev, (n, a.goodput, prev)
        assert a.goodput > s.goodput, n
        assert s.recovery.checkpoint_save_blocking_s == pytest.approx(s.run.checkpoint_write_s)
        prev = a.goodput


def test_65536_gpus_at_llama3_rate_with_30_minute_restart():
    doc = _cli_json(*_llama3_args(gpus=65_536, restart=30))
    assert doc["goodput"] < 0.6
    g, tau = _pin_to_formula(doc, min_tau_s=doc["run"]["checkpoint_write_s"])
    assert doc["goodput"] == pytest.approx(g, rel=1e-9)
    # Young's first-order interval is far from the exact optimum there
    rc = doc["recovery"]
    young = math.sqrt(2 * rc["checkpoint_save_blocking_s"] * rc["mtbf_h"] * 3600)
    assert abs(young - tau) > 0.05 * tau or tau >= doc["run"]["checkpoint_write_s"]


def test_interval_optimum_matches_daly_2006():
    """Daly 2006 (FGCS 22:303) Figs. 3-5: M = 24 h, 6 h, 15 min, R = 10 min, delta = 5 min: the
    exact model's optimum interval 117, 57 and 9.1 minutes."""
    from plan_search.planner.costmodel import goodput

    got = goodput.optimal_interval_s(300.0, np.array([86400.0, 21600.0, 900.0])) / 60
    assert got == pytest.approx([117, 57, 9.1], abs=0.35)
    for m, t in zip((86400.0, 21600.0, 900.0), got):
        _, tau = exact_best(300.0, 600.0, m, step_s=0.01)
        assert t * 60 == pytest.approx(tau, abs=0.02)


def test_failures_off_and_synchronous_is_the_old_run_time():
    """--failure-rate 0 --no-async-checkpoint prices what the planner priced before issue 25: the
    training time stretched by one blocking write an hour."""
    doc = _cli_json("--model", "gpt3-175b", "--gpu", "a100", "--gpus", "1024", "--tp", "8", "--pp", "8",
                    "--tokens", "300B", "--failure-rate", "0", "--no-async-checkpoint")
    run, w = doc["run"], doc["run"]["checkpoint_write_s"]
    assert doc["recovery"]["mtbf_h"] is None and doc["checkpoint_interval_s"] == 3600
    train_days = run["steps"] * max(doc["step_time_s"], run["data_read_s_per_step"]) / 86400
    assert run["days"] == pytest.approx(train_days * (1 + w / 3600), rel=1e-12)
    assert doc["goodput"] == pytest.approx(3600 / (3600 + w))
    assert doc["badput"]["lost_progress"] == doc["badput"]["restart"] == 0


def test_a_cluster_file_sets_the_rate_and_the_option_wins(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("base: h100\nfailures_per_1000_gpu_days: 2.0\nrestart_minutes: 20\n")
    d = _cli_json("--model", "llama3.1-70b", "--gpu", str(f), "--gpus", "1024", "--tp", "8", "--tokens", "1T")
    assert d["recovery"]["failure_rate_per_1000_gpu_days"] == 2.0 and d["recovery"]["restart_s"] == 1200
    e = _cli_json("--model", "llama3.1-70b", "--gpu", str(f), "--gpus", "1024", "--tp", "8", "--tokens", "1T",
                  "--failure-rate", "0.5", "--restart-minutes", "5")
    assert e["recovery"]["failure_rate_per_1000_gpu_days"] == 0.5 and e["recovery"]["restart_s"] == 300
    assert e["goodput"] > d["goodput"]


def test_presets_per_gpu_type():
    a100 = plan_search.estimate("gpt3-175b", "a100-80gb", num_gpus=1024, tp=8, pp=8, tokens=300e9)
    assert a100.recovery.failure_rate_per_1000_gpu_days == pytest.approx(6.50 / 8)
    assert "RSC-1" in a100.recovery.failure_rate_source
    b200 = plan_search.estimate("gpt3-175b", "b200", num_gpus=1024, tp=8, pp=8, tokens=300e9)
    assert b200.recovery.failure_rate_per_1000_gpu_days == pytest.approx(LLAMA3_RATE)
    assert "no published rate" in b200.recovery.failure_rate_source


@pytest.mark.parametrize("args, field", [
    (["--failure-rate", "-1"], "failure_rate"),
    (["--failure-rate", "nan"], "failure_rate"),
    (["--restart-minutes", "-5"], "restart_minutes"),
])
def test_bad_recovery_options_are_one_line(args, field):
    res = invoke(estimate_main, ["--model", "gpt3-175b", "--gpu", "a100", "--gpus", "1024", "--tp", "8", *args])
    assert res.exit_code == 2
    assert field in one_stderr_line(res)


def test_table_shows_goodput_and_the_interval_in_framework_terms():
    res = invoke(estimate_main, _llama3_args())
    out = res.stdout
    assert "goodput" in out and "lost progress" in out and "--save-interval" in out
    assert "no failures" in out and "interruptions" in out


def test_readme_goodput_figures_are_the_benchmarks():
    """README's question 7 quotes bench/goodput.py through docs/figures.py's goodput.* figures (the
    --check of tests/test_readme_figures.py compares them); the benchmark meets its floors (exit 0)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme.split("### 7. What failures, restarts and checkpoints cost at scale (goodput)", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert section.count("<!-- figure: goodput.") >= 15
    out = subprocess.run([sys.executable, "bench/goodput.py"], cwd=root, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "goodput changed the pick" in out.stdout and "NOT MET" not in out.stdout


def test_deadline_pick_changes_once_failures_are_priced_and_says_so():
    """Llama-3.1-70B, 15T tokens on H100: at 25 days the pick keeps its GPUs and its days grow by the
    goodput lost; at a deadline between the goodput-blind pick's days without and with failures, that
    pick misses it once failures are priced and the search picks another, saying so. Every figure is
    plan-estimate's."""
    # the goodput-blind comparison is made in the framework-free what-if: a framework's searched rows are
    # only those its rules were checked on, among which the blind pick is not known (goodput_note)
    kw = dict(model="llama3.1-70b", gpu="h100", tokens=15e12, time_limit_s=120, framework="none")
    off25 = plan_search.search(deadline_days=25, failure_rate=0, **kw)
    on25 = plan_search.search(deadline_days=25, **kw)
    assert on25.recommended.plan == off25.recommended.plan
    assert on25.recommended.run.days > off25.recommended.run.days
    assert "failures priced: goodput" in on25.reason and "the goodput-blind pick is the same plan" in on25.reason
    assert "failures priced" not in off25.reason
    blind = plan_search.estimate("llama3.1-70b", "h100", off25.recommended.plan, tokens=15e12)
    assert blind.run.days == pytest.approx(on25.recommended.run.days, rel=1e-12)
    d = (off25.recommended.run.days + blind.run.days) / 2
    off = plan_search.search(deadline_days=d, failure_rate=0, **kw)
    on = plan_search.search(deadline_days=d, **kw)
    assert off.recommended.plan == off25.recommended.plan  # still the cheapest that meets it, without failures
    assert on.recommended.plan != off.recommended.plan and on.recommended.run.days <= d < blind.run.days
    assert "goodput changed the pick" in on.reason
    assert f"{off.recommended.plan.num_gpus:,} h100-sxm GPUs" in on.reason
    r = on.recommended
    assert r.goodput == pytest.approx(r.run.days_without_failures / r.run.days
                                      / (1 + r.recovery.checkpoint_save_blocking_s / r.checkpoint_interval_s))


def test_search_options_reach_every_figure_and_the_estimate_command():
    res = plan_search.search(model="gpt3-175b", gpu="a100", gpus=[1024], failure_rate=2.0, restart_minutes=30,
                             async_checkpoint=False)
    rec = res.recommended
    assert rec.recovery.failure_rate_per_1000_gpu_days == 2.0 and rec.recovery.restart_s == 1800
    assert rec.recovery.async_checkpoint is False
    cmd = res.front[0].estimate_command
    assert "--failure-rate 2.0" in cmd and "--restart-minutes 30.0" in cmd and "--no-async-checkpoint" in cmd
    import shlex

    doc = _cli_json(*shlex.split(cmd)[1:])
    fp = res.front[0]
    assert doc["run"]["days"] == pytest.approx(fp.days, rel=1e-12)


def test_plan_calibrate_fits_rate_and_restart_from_an_interruption_log(tmp_path):
    from plan_search.cli.calibrate import main as calibrate_main

    log = tmp_path / "log.csv"
    lines = ["timestamp,event,gpus,lost_minutes", "2026-01-01T00:00:00,start,8192,"]
    lines += [f"2026-01-{d:02d}T12:00:00,interruption,,{m}" for d, m in ((2, 20), (4, 10), (7, 15), (9, 15))]
    lines += ["2026-01-11T00:00:00,end,,"]
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "mine.yaml"
    r = CliRunner().invoke(calibrate_main, [str(log), "--interruptions", "--gpu", "h100", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rate = 4 / (10 * 8192) * 1000  # 4 interruptions in 10 days on 8,192 GPUs
    assert f"{rate:.3g} per 1,000 GPU-days" in r.stdout and "15 minutes" in r.stdout
    d = _cli_json("--model", "llama3.1-70b", "--gpu", str(out), "--gpus", "1024", "--tp", "8", "--tokens", "1T")
    assert d["recovery"]["failure_rate_per_1000_gpu_days"] == pytest.approx(rate)
    assert d["recovery"]["restart_s"] == pytest.approx(900)
    # a bad row is one line naming it
    log.write_text("timestamp,event,gpus,lost_minutes\n2026-01-01,start,8,\n2026-01-02,crash,,5\n")
    r = CliRunner().invoke(calibrate_main, [str(log), "--interruptions", "--gpu", "h100", "-o", str(out)])
    assert r.exit_code == 2 and "line 3" in one_stderr_line(r) and "crash" in one_stderr_line(r)


@pytest.mark.parametrize("framework, want", [
    ("megatron", ["--save-interval {n}", "--async-save"]),
    ("nemo", ["log.ckpt.every_n_train_steps={n}", "trainer.strategy.ckpt_async_save=True"]),
])
def test_emitted_launch_carries_the_interval(framework, want):
    res = invoke(estimate_main, ["--model", "llama3.1-70b", "--gpu", "h100", "--gpus", "1024", "--tp", "8",
                                 "--pp", "4", "--framework", framework, "--emit", "--format", "json"])
    doc = json.loads(res.stdout)
    n = doc["checkpoint_interval_steps"]
    for w in want:
        assert w.format(n=n) in doc["launch"]["text"], doc["launch"]["text"]


def test_sweeps_and_allocation_take_the_recovery_fields():
    from plan_search.planner.allocate import Job
    from plan_search.planner.sweep import build_sweep

    sw = build_sweep({"base": {"model": "gpt3-175b", "gpus": [1024]}, "sweep": {"failure_rate": [0, 2.0]}})
    assert [s.request.failure_rate for s in sw.scenarios] == [0, 2.0]
    assert len({s.key for s in sw.scenarios}) == 2
    job = Job(name="a", model="gpt3-175b", tokens=300e9,
              search={"failure_rate": 0.5, "restart_minutes": 20, "async_checkpoint": False})
    assert job.search["failure_rate"] == 0.5


def test_recovery_options_with_from_are_refused_in_one_line(tmp_path):
    f = tmp_path / "run.sh"
    f.write_text("--tensor-model-parallel-size 8\n")
    res = invoke(estimate_main, ["--from", str(f), "--model", "llama3.1-70b", "--gpu", "h100", "--gpus", "64",
                                 "--failure-rate", "1"])
    assert res.exit_code == 2 and "--failure-rate" in one_stderr_line(res)
