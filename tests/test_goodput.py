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
