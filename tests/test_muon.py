"""Muon (issue 27): the optimizer states it keeps and the Newton-Schulz work it adds, checked through
plan-estimate against hand counts written here (not the cost model's functions), and the frameworks'
rules and Megatron-LM's flag."""

from __future__ import annotations

import json

from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate
from plan_search.hardware.catalog import load_catalog
from plan_search.planner.costmodel import compute

PLAN = ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "16", "--tp", "2", "--pp", "1", "--global-batch", "64",
        "--seq-len", "4096", "--zero", "1", "--format", "json"]


def run(*extra, code=0):
    r = CliRunner().invoke(estimate, PLAN + list(extra))
    assert r.exit_code == code, r.output
    return r


def est(*extra):
    return json.loads(run(*extra).stdout)


def hand_ns_flops(r, c, steps=5):
    a, b = min(r, c), max(r, c)
    return steps * (4 * a * a * b + 2 * a ** 3)  # X X^T, A A, B X per iteration


def test_muon_states_differ_from_adam_by_one_moment_on_the_hidden_weights():
    """Llama-3.1-8B, tp2 dp8 ZeRO-1: Muon drops Adam's second moment (4 B fp32) on every hidden-layer
    weight matrix; the embedding, output layer and norms keep Adam's. Hand count: per layer
    q 4096x4096, k and v 1024x4096, o 4096x4096, fc1 2x14336x4096, fc2 4096x14336; 32 layers, /tp 2
    (the layer weights shard), /dp 8 (ZeRO-1 shards the states)."""
    h, kv, f, layers = 4096, 1024, 14336, 32
    per_layer = 2 * h * h + 2 * kv * h + 3 * h * f
    saved_gib = 4 * per_layer * layers / 2 / 8 / 2 ** 30
    adam, muon = est(), est("--optimizer", "muon")
    d = adam["memory"]["optimizer_gib"] - muon["memory"]["optimizer_gib"]
    assert abs(d - saved_gib) / saved_gib < 0.005, (d, saved_gib)
    assert muon["memory"]["weights_gib"] == adam["memory"]["weights_gib"]


def test_muon_step_adds_the_newton_schulz_iterations():
    """The step grows by the Newton-Schulz FLOPs of the GPU's share (blockwise TP: each rank its own
    shard; the layer-wise distributed optimizer: 32 layers over dp 8 = 4 per GPU) at the bf16 rate of
    the GEMMs of the hidden size's TP shard."""
    h, kv, f = 4096, 1024, 14336
    shards = [(h // 2, h), (kv // 2, h), (kv // 2, h), (h, h // 2), (2 * f // 2, h), (h, f // 2)]
    flops = 4 * sum(hand_ns_flops(r, c) for r, c in shards)
    cluster = load_catalog()["h100-sxm"]
    rate = cluster.gpu.peak("bf16") * 1e12 * float(compute.gemm_efficiency(h / 2, cluster))
    adam, muon = est(), est("--optimizer", "muon")
    dt = muon["step_time_s"] - adam["step_time_s"]
    assert abs(dt - flops / rate) / (flops / rate) < 0.01, (dt, flops / rate)
    assert 0.02 < dt / adam["step_time_s"] < 0.5  # a visible cost, not the whole step


def test_frameworks_say_where_muon_runs():
    bare = PLAN[:14]  # no --zero, no --format
    for fw, rule in (("torchtitan", "torchtitan-optimizer"), ("deepspeed", "deepspeed-optimizer"),
                     ("nemo", "nemo-optimizer")):
        r = CliRunner().invoke(estimate, bare + ["--optimizer", "muon", "--framework", fw])
        assert r.exit_code == 2 and rule in r.stderr, (fw, r.stderr)
    r = CliRunner().invoke(estimate, bare + ["--zero", "3", "--optimizer", "muon", "--framework", "megatron"])
    assert r.exit_code == 2 and "megatron-muon" in r.stderr and "zero 3" in r.stderr


def test_megatron_launch_flags_carry_muon():
    r = CliRunner().invoke(estimate, PLAN[:-2] + ["--optimizer", "muon", "--framework", "megatron", "--emit"])
    assert r.exit_code == 0, r.output
    assert "--optimizer muon" in " ".join(r.stdout.split())
