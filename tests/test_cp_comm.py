"""Context-parallel exchange variants (issue 27): Megatron's --cp-comm-type p2p | a2a | allgather priced
on the links their collectives use, checked through plan-estimate against hand counts written here;
the frameworks' rules; Megatron-LM's flag emitted and read back."""

from __future__ import annotations

import json

from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate
from plan_search.hardware.catalog import load_catalog
from plan_search.planner.frameworks.emit import from_megatron_args

# Llama-3.1-8B (32 layers, 32 query / 8 K/V heads of 128) on 64 H100: tp2 cp4 dp8, 32K tokens:
# 8,192 tokens per GPU, 8 micro-batches of 1; the cp group (stride tp 2) sits in one 8-GPU node.
ARGS = ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "64", "--tp", "2", "--cp", "4", "--global-batch", "64",
        "--seq-len", "32768", "--recompute", "none", "--micro-batch", "1"]
LAYERS, MICRO, T, CP = 32, 8, 8192, 4


def est(*extra):
    r = CliRunner().invoke(estimate, ARGS + ["--format", "json", *extra])
    assert r.exit_code in (0, 3), r.output
    doc, _ = json.JSONDecoder().raw_decode(r.stdout)
    return doc


def h100():
    c = load_catalog()["h100-sxm"]
    return c.node, c.efficiency


def test_ulysses_all_to_all_is_exposed_per_layer():
    """a2a: Q (16 heads x 128), K and V (4 heads each, already cp), the output (16 x 128): bf16 rows of
    8,192 tokens; each rank keeps 1/4 and sends 3/4 over NVLink; forward and backward once each."""
    node, eff = h100()
    nbytes = 2 * T * (16 * 128 + 2 * 4 * 128 + 16 * 128)
    one = nbytes * (CP - 1) / CP / (node.intra_node_gbps * 1e9 * eff.a2a_bw_eff) + node.intra_latency_us * 1e-6
    want = LAYERS * MICRO * 2 * one
    got = est("--cp-comm-type", "a2a")["time"]["cp_comm_s"]
    assert abs(got - want) / want < 0.01, (got, want)


def test_allgather_gathers_kv_twice_and_reduce_scatters_its_gradient():
    """allgather: K and V of 4 heads x 128 for 8,192 tokens per rank, gathered over 4 ranks before
    the forward's attention and again for the backward, whose K/V gradients reduce-scatter: three ring
    collectives of cp x the local chunk per layer and micro-batch, not hidden under the attention."""
    node, eff = h100()
    gathered = CP * 2 * 2 * T * 4 * 128
    ring = (CP - 1) / CP * gathered / (node.intra_node_gbps * 1e9 * eff.intra_bw_eff) + (CP - 1) * node.intra_latency_us * 1e-6
    want = LAYERS * MICRO * 3 * ring
    got = est("--cp-comm-type", "allgather")["time"]["cp_comm_s"]
    assert abs(got - want) / want < 0.01, (got, want)


def test_ring_hides_under_long_attention_and_variants_order():
    p2p, a2a, ag = (est("--cp-comm-type", t) for t in ("p2p", "a2a", "allgather"))
    assert p2p["time"]["cp_comm_s"] < a2a["time"]["cp_comm_s"] < ag["time"]["cp_comm_s"]
    assert p2p["step_time_s"] < a2a["step_time_s"] < ag["step_time_s"]
    # at cp 1 the knob changes nothing
    one = [json.JSONDecoder().raw_decode(CliRunner().invoke(estimate, ARGS[:8] + ["--cp", "1"] + ARGS[10:] + [
        "--format", "json", "--cp-comm-type", t]).stdout)[0]["step_time_s"] for t in ("p2p", "a2a")]
    assert one[0] == one[1]


def test_rules_and_megatron_flags():
    r = CliRunner().invoke(estimate, ARGS + ["--cp-comm-type", "a2a", "--framework", "megatron", "--emit"])
    assert r.exit_code == 0, r.output
    flags = r.stdout[r.stdout.index("--"):].split() if "--" in r.stdout else []
    assert "--cp-comm-type" in flags and flags[flags.index("--cp-comm-type") + 1] == "a2a"
    args = [t for t in r.stdout.replace("\\", " ").split() if t]
    start = next(i for i, t in enumerate(args) if t.startswith("--tensor-model-parallel-size"))
    assert from_megatron_args(args[start:], 64).cp_comm_type == "a2a"
    # 32 heads / tp 4 = 8 per rank: a2a over cp 16 cannot split them
    r = CliRunner().invoke(estimate, ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "64", "--tp", "4", "--cp", "16",
                                      "--global-batch", "64", "--seq-len", "32768", "--cp-comm-type", "a2a",
                                      "--framework", "megatron"])
    assert r.exit_code == 2 and "megatron-cp-comm-type" in r.stderr and "8 query heads" in r.stderr
    r = CliRunner().invoke(estimate, ARGS + ["--cp-comm-type", "a2a", "--framework", "torchtitan", "--zero", "3"])
    assert r.exit_code == 2 and "torchtitan-cp-comm-type" in r.stderr, r.stderr
