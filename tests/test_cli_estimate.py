"""plan-estimate: JSON and table output, breakdown sums, monotonicity, a published run, exit codes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from plan_search.cli.estimate import main

GPT3_NARAYANAN = [
    "--model", "gpt3-175b", "--gpu", "a100", "--num-gpus", "1536", "--tp", "8", "--pp", "12",
    "--micro-batch", "1", "--global-batch", "1536", "--recompute", "full", "--no-sequence-parallel",
    "--no-flash-attention", "--zero", "0", "--precision", "fp16",
]
LLAMA_DP = ["--model", "llama2-7b", "--gpu", "h100", "--num-gpus", "64", "--tp", "1", "--pp", "1",
            "--micro-batch", "1", "--global-batch", "256", "--seq-len", "4096"]
LLAMA_3D = ["--model", "llama2-70b", "--gpu", "h100", "--num-gpus", "256", "--tp", "8", "--pp", "4",
            "--vpp", "2", "--micro-batch", "1", "--global-batch", "512"]
GPT3_TP16 = ["--model", "gpt3-175b", "--gpu", "a100", "--num-gpus", "512", "--tp", "16", "--pp", "8",
             "--micro-batch", "1", "--global-batch", "512", "--recompute", "full"]
PLANS = {"llama-dp": LLAMA_DP, "llama-3d": LLAMA_3D, "gpt3-narayanan": GPT3_NARAYANAN, "gpt3-tp16": GPT3_TP16}

TIME_PARTS = ("compute_s", "memory_bound_s", "recompute_s", "tp_comm_s", "cp_comm_s", "pp_comm_s",
              "bubble_s", "dp_comm_s", "optimizer_s", "overhead_s")
MEMORY_PARTS = ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "transient_gib",
                "zero3_gather_buffer_gib", "allocator_slack_gib", "framework_overhead_gib")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _no_traceback(result):
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def estimate_json(*args) -> dict:
    r = invoke(*args, "--format", "json")
    _no_traceback(r)
    assert r.exit_code in (0, 3), r.output
    return json.loads(r.stdout)


def _one_error_line(result) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ------------------------------------------------------------------ output


@pytest.mark.parametrize("name", sorted(PLANS))
def test_json_fields_and_breakdown_sums(name):
    d = estimate_json(*PLANS[name], "--tokens", "300e9")
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                "hardware_tflops_per_gpu", "mfu", "hfu", "feasible", "bottleneck", "reasons", "memory",
                "time", "run", "efficiency", "plan"):
        assert key in d, key
    assert d["step_time_s"] > 0 and 0 < d["mfu"] < 1
    t, m = d["time"], d["memory"]
    assert sum(t[k] for k in TIME_PARTS) == pytest.approx(d["step_time_s"], rel=1e-6)
    assert sum(m[k] for k in MEMORY_PARTS) == pytest.approx(m["peak_gib"], rel=1e-6)
    assert "hidden_comm_s" in t and t["hidden_comm_s"] >= 0
    for key in ("days", "gpu_hours", "cost_usd", "energy_kwh", "checkpoint_overhead_fraction", "data_loading_ok"):
        assert key in d["run"], key


def test_defaults_from_model_and_dp_derived():
    d = estimate_json("--model", "gpt3-175b", "--gpu", "a100", "--num-gpus", "1536", "--tp", "8", "--pp", "12",
                      "--micro-batch", "1")
    assert d["plan"]["dp"] == 16
    assert d["plan"]["seq_len"] == 2048
    assert d["plan"]["global_batch"] == 1536
    assert d["run"] is None


def test_table_fits_80_columns_and_sums():
    r = invoke(*GPT3_NARAYANAN, "--tokens", "300B", "--set", "node.inter_node_gbps=50")
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), max(out.splitlines(), key=len)
    assert "tp8 pp12 dp16 cp1 vpp1 zero0 mb1 gb1536 seq2048 full no-SP no-FA fp16" in out
    for word in ("step time", "tokens/s", "MFU / HFU", "verdict", "bottleneck", "memory per GPU", "peak",
                 "usable", "time per step", "hidden by overlap", "run of 300B tokens", "GPU-hours", "energy",
                 "checkpoints", "data loading", "efficiency terms", "source:",
                 "what-if: node.inter_node_gbps = 50"):
        assert word in out, word
    # the time rows of the table add up to its step row
    rows = {}
    section = None
    for line in out.splitlines():
        if line.startswith("time per step"):
            section = "time"
        elif not line.startswith("  "):
            section = None
        elif section == "time" and line.split()[-1].endswith("%"):
            *label, secs, _ = line.split()
            rows[" ".join(label)] = float(secs)
    step = rows.pop("step")
    assert sum(rows.values()) == pytest.approx(step, abs=1e-3)


def test_published_gpt3_narayanan_step_time():
    """Narayanan et al. 2021: GPT-3 175B on 1536 A100s, 141 TFLOP/s per GPU (hardware FLOPs,
    recompute included) -> 20.8 s per 1536 x 2048-token step."""
    d = estimate_json(*GPT3_NARAYANAN)
    assert d["feasible"]
    assert d["step_time_s"] == pytest.approx(20.8, rel=0.20)


# ------------------------------------------------------------------ monotonicity


@pytest.mark.parametrize("name", sorted(PLANS))
def test_more_hbm_bandwidth_never_slower(name):
    steps = [estimate_json(*PLANS[name], "--set", f"gpu.hbm_bandwidth_gbps={bw}")["step_time_s"]
             for bw in (800, 1600, 2039, 3350, 8000, 20000)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:])), steps


@pytest.mark.parametrize("name", sorted(PLANS))
def test_more_inter_node_bandwidth_never_slower(name):
    steps = [estimate_json(*PLANS[name], "--set", f"node.inter_node_gbps={bw}")["step_time_s"]
             for bw in (3.125, 12.5, 25, 50, 100, 400)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:])), steps


@pytest.mark.parametrize("name", ["llama-dp", "llama-3d", "gpt3-tp16"])
def test_zero_stage_lowers_peak_memory(name):
    # Issue 11: ZeRO-3 never holds more model states than ZeRO-2, but its gather buffers (the
    # largest module whole) and a torch optimizer's step temporaries can make its peak higher
    mem = {z: estimate_json(*PLANS[name], "--zero", z, "--grad-reduce", "microbatch")["memory"] for z in (0, 1, 2, 3)}
    peak = {z: m["peak_gib"] for z, m in mem.items()}
    assert peak[2] <= peak[1] <= peak[0], peak
    states = {z: m["weights_gib"] + m["gradients_gib"] + m["optimizer_gib"] for z, m in mem.items()}
    assert states[3] <= states[2] <= states[1] <= states[0], states


@pytest.mark.parametrize("fa", ["--flash-attention", "--no-flash-attention"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_recompute_lowers_activations(name, fa):
    act = {rc: estimate_json(*PLANS[name], "--recompute", rc, fa)["memory"]["activations_gib"]
           for rc in ("none", "selective", "full")}
    assert act["full"] <= act["selective"] <= act["none"], act


# ------------------------------------------------------------------ exit codes

BASE = ["--model", "gpt3-175b", "--gpu", "a100", "--micro-batch", "1"]
BAD_PLANS = [
    ("num_gpus", ["--num-gpus", "64", "--tp", "8", "--pp", "3"]),
    ("num_gpus", ["--num-gpus", "8", "--tp", "8", "--dp", "2"]),
    ("tp", ["--num-gpus", "5", "--tp", "5"]),
    ("pp", ["--num-gpus", "128", "--pp", "128"]),
    ("global_batch", ["--num-gpus", "128", "--tp", "8", "--global-batch", "1000"]),
    ("vpp", ["--num-gpus", "8", "--tp", "8", "--vpp", "2"]),
    ("seq_len", ["--num-gpus", "48", "--tp", "8", "--cp", "3", "--global-batch", "96"]),
    ("precision", ["--num-gpus", "8", "--tp", "8", "--precision", "fp8"]),
    ("recompute_layers", ["--num-gpus", "8", "--tp", "8", "--recompute-layers", "2"]),
    ("memory_headroom", ["--num-gpus", "8", "--tp", "8", "--memory-headroom", "1.5"]),
    ("gpu.hbm_bw", ["--num-gpus", "8", "--tp", "8", "--set", "gpu.hbm_bw=3000"]),
    ("model", ["--num-gpus", "8", "--tp", "8", "--model", "no-such-model"]),
]


@pytest.mark.parametrize("field,args", BAD_PLANS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_PLANS)])
def test_bad_plan_exits_2_with_one_line(field, args):
    r = invoke(*BASE, *args)
    _no_traceback(r)
    assert r.exit_code == 2, r.output
    line = _one_error_line(r)
    assert line.startswith("error: ") and field in line, line
    assert r.stdout == ""


def test_infeasible_plan_prints_estimate_and_exits_3():
    args = ["--model", "gpt3-175b", "--gpu", "a100", "--num-gpus", "8", "--tp", "8", "--pp", "1",
            "--micro-batch", "1"]
    r = invoke(*args)
    _no_traceback(r)
    assert r.exit_code == 3
    assert "INFEASIBLE" in r.stdout and "time per step" in r.stdout
    assert _one_error_line(r).startswith("infeasible: memory: ")
    r = invoke(*args, "--format", "json")
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert d["feasible"] is False and d["bottleneck"] == "memory"
    assert d["memory"]["peak_gib"] > d["memory"]["usable_gib"]


def test_headroom_can_make_a_plan_infeasible():
    d = estimate_json(*LLAMA_DP, "--zero", "1", "--memory-headroom", "0")
    peak, cap = d["memory"]["peak_gib"], d["memory"]["capacity_gib"]
    assert d["feasible"]
    tight = 1 - peak / cap + 0.05  # leaves less than the peak usable
    r = invoke(*LLAMA_DP, "--zero", "1", "--memory-headroom", f"{tight:.3f}")
    assert r.exit_code == 3, r.output
