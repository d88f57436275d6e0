"""Adversarial uses of today's plan knobs (--optimizer muon, --cp-comm-type, deepseek-v3.2, MI350X/MI355X),
kept as tests: each was a plan a framework cannot run, shown with exit 0."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate
from plan_search.cli.estimate import main as estimate_cli


def test_ulysses_needs_the_key_value_heads_to_divide_by_cp_too():
    """Llama-3.1-8B: 32 query heads, 8 K/V heads. Ulysses over cp 16 splits the query heads (2 each)
    but not the K/V heads: Transformer Engine's a2a asserts ``k.shape[-2] % cp_size == 0``. It was
    priced and shown under --framework megatron (exit 0)."""
    base = ["--model", "llama3.1-8b", "--gpu", "h100", "--cp-comm-type", "a2a", "--framework", "megatron"]
    r = CliRunner().invoke(estimate, base + ["--gpus", "16", "--cp", "16"])
    assert r.exit_code == 2, r.output
    assert "megatron-cp-comm-type" in r.stderr and "8 key/value heads per tensor-parallel rank" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # tp 2 leaves 4 K/V heads a rank: cp 8 cannot split them, cp 4 can
    r = CliRunner().invoke(estimate, base + ["--gpus", "16", "--tp", "2", "--cp", "8"])
    assert r.exit_code == 2 and "4 key/value heads" in r.stderr, r.output
    r = CliRunner().invoke(estimate, base + ["--gpus", "8", "--tp", "2", "--cp", "4", "--seq-len", "32768",
                                             "--global-batch", "64"])
    assert r.exit_code in (0, 3), r.output


def test_a_checkpoint_interval_shorter_than_a_step_is_one_step():
    """checkpoint_interval_h 1e-300 (POST /v1/search, --checkpoint-interval): a save every 1e-300 h was
    priced (Llama-3.1-8B on 16 H100: 1.9e295 days, $2.2e298, HTTP 200) while the launch settings it
    printed save every step (--save-interval 1). A save comes at a step's end: the interval is one step."""
    from plan_search import estimate, search

    plan = {"num_gpus": 16, "zero": 3}
    tiny = estimate("llama3.1-8b", "h100", plan, checkpoint_interval_h=1e-300, tokens=1e9)
    step = tiny.step_time_s
    one = estimate("llama3.1-8b", "h100", plan, checkpoint_interval_h=step / 3600.0, tokens=1e9)
    assert tiny.checkpoint_interval_steps == one.checkpoint_interval_steps == 1
    assert tiny.checkpoint_interval_s == pytest.approx(step)
    assert tiny.goodput == pytest.approx(one.goodput) and 0.9 < tiny.goodput <= 1.0
    assert tiny.run.days == pytest.approx(one.run.days)
    res = search({"model": "llama3.1-8b", "gpu": ["h100"], "gpus": [16], "tokens": "1B", "time_limit_s": 60,
                  "checkpoint_interval_h": 1e-300})
    rec = res.recommended
    assert rec.checkpoint_interval_steps == 1 and rec.run.days < 1.0, (rec.run.days, rec.checkpoint_interval_steps)
    assert all(p.days < 1.0 for p in res.front)


def test_a_run_that_never_finishes_is_not_feasible():
    """failure_rate 1e6 per 1,000 GPU-days and restart_minutes 1e6 (both within their bounds): a failure
    every 5.4 s against a restart of 1.9 years; goodput 0. plan-estimate printed 'inf days' with exit 0,
    POST /v1/estimate answered 200 with days null. Now infeasible (exit 3, 409), the reason naming the field."""
    from plan_search import estimate

    e = estimate("llama3.1-8b", "h100", {"num_gpus": 16, "zero": 3}, failure_rate=1e6, restart_minutes=1e6,
                 tokens=1e9)
    assert e.goodput == 0.0 and not e.feasible
    assert any(r.startswith("failure_rate: a failure every 5.4 s on 16 GPUs") for r in e.reasons), e.reasons
    r = CliRunner().invoke(estimate_cli, ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "16", "--zero", "3",
                                          "--failure-rate", "1e6", "--restart-minutes", "1e6", "--tokens", "1B"])
    assert r.exit_code == 3 and "the run never finishes" in r.output, r.output
    # a realistic rate stays feasible
    assert estimate("llama3.1-8b", "h100", {"num_gpus": 16, "zero": 3}, tokens=1e9).feasible
