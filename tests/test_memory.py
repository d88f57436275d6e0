"""Memory (issue 11): each corrected figure pinned to its reference, the parts of a measured peak,
the memory knobs, and the validation against the measured peaks of the runs files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from plan_search.hardware.catalog import get_cluster
from plan_search.models import counting
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import memory
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.costmodel.plan import Plan

GIB = 2**30
GPT3 = get_model("megatron-gpt-175b")
LLAMA8 = get_model("llama3.1-8b")
A100 = get_cluster("a100-80gb")
H100 = get_cluster("h100-sxm")


def stage(model, plan: dict, which: str) -> dict:
    x = PlanArrays.from_plans([Plan(**plan)], model.num_layers)
    return {k: float(v[0]) for k, v in memory.stage_memory_bytes(model, A100, x, which).items()}


# ------------------------------------------------------------------ Korthikanti et al. 2022, Table 2 / Sec. 4
def per_layer(s, b, h, a, t, sp, rc):
    """Korthikanti Table 2, bytes per layer and micro-batch."""
    if rc == "full":
        return 2 * s * b * h / (t if sp else 1)
    if rc == "selective":
        return s * b * h * 34 / t
    if sp:
        return s * b * h * (34 + 5 * a * s / h) / t
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


CASES = [(False, "none"), (True, "none"), (True, "selective"), (True, "full"), (False, "full")]


@pytest.mark.parametrize("sp,rc", CASES)
def test_gpt_first_stage_pp_gt_1_is_table2_times_layers_plus_the_embedding_mask(sp, rc):
    """pp = 8: the first stage holds p micro-batches of L/p layers (L layers' worth, Sec. 4.2.3)
    plus, per micro-batch, the token ids 8sb and the embedding-dropout mask sbh (/t with SP,
    Sec. 4.3; Megatron theoretical_memory_usage.py) -- not the old 3sbh x p."""
    m, s, b, t, p = GPT3, 2048, 1, 8, 8
    h, a, L = m.hidden_size, m.num_heads, m.num_layers
    plan = dict(num_gpus=64, tp=t, pp=p, micro_batch=b, global_batch=64, seq_len=s, recompute=rc,
                sequence_parallel=sp, flash_attention=False, zero=1)
    got = stage(m, plan, "first")["activations"]
    want = L * per_layer(s, b, h, a, t, sp, rc) + p * (8 * s * b + s * b * h / (t if sp else 1))
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("sp,rc", CASES)
def test_gpt_single_stage_adds_the_output_layer_and_fp32_logits(sp, rc):
    """pp = 1: one micro-batch of L layers, the embedding terms, and Megatron's
    ``4sbh/t (1 + V/h)`` for the final norm / output-layer inputs and the fp32 logits."""
    m, s, b, t = GPT3, 2048, 1, 8
    h, a, L, V = m.hidden_size, m.num_heads, m.num_layers, m.vocab_size
    plan = dict(num_gpus=8, tp=t, micro_batch=b, global_batch=8, seq_len=s, recompute=rc,
                sequence_parallel=sp, flash_attention=False, zero=1)
    e = estimate(m, A100, plan)
    div = t if sp else 1
    want = L * per_layer(s, b, h, a, t, sp, rc) + 8 * s * b + s * b * h / div + 4 * s * b * h / div + 4 * s * b * V / t
    assert e.memory.activations_gib * GIB == pytest.approx(want, rel=1e-9)


def test_no_dropout_no_embedding_mask():
    """Llama has no dropout: the first stage keeps only the token ids (8sb per micro-batch in
    flight) beyond its layers -- not the old 3sbh per micro-batch."""
    m, s, t, p = get_model("llama3.1-70b"), 4096, 8, 4
    plan = dict(num_gpus=32, tp=t, pp=p, micro_batch=1, global_batch=32, seq_len=s, recompute="full", zero=1)
    got = stage(m, plan, "first")["activations"]
    assert got == pytest.approx(p * (m.num_layers // p) * 2 * s * m.hidden_size / t + p * 8 * s, rel=1e-12)


def test_1t_first_stage_is_27_gib_not_36():
    """Korthikanti Table 3's 1T configuration (t8 p64, SP + selective): 34sbh/t x 128 layers
    (26.6 GiB) plus the dropout mask sbh/t x 64 and ids: about 27 GiB; the old embedding term made
    it 36 GiB."""
    m = get_model("megatron-gpt-1t")
    plan = dict(num_gpus=512, tp=8, pp=64, micro_batch=1, global_batch=512, seq_len=2048,
                recompute="selective", sequence_parallel=True, flash_attention=False, zero=1)
    acts = stage(m, plan, "first")["activations"] / GIB
    assert acts == pytest.approx(27.0, abs=0.1)


def test_pp1_logits_buffer_at_two_vocabulary_sizes():
    """Llama-3.1-8B, pp = 1, s = 8192: the fp32 logits are 4sV/t = 3.9 GiB at V = 128,256 and
    15.6 GiB at V = 512,000; the only stage is no longer priced as a "first" stage without them."""
    plan = dict(num_gpus=8, tp=1, micro_batch=1, global_batch=8, seq_len=8192, recompute="full", zero=1)
    big = LLAMA8.model_copy(update={"vocab_size": 512_000})
    a = estimate(LLAMA8, H100, plan).memory.activations_gib
    b = estimate(big, H100, plan).memory.activations_gib
    assert (b - a) * GIB == pytest.approx(4 * 8192 * (512_000 - 128_256), rel=1e-9)
    assert 4 * 8192 * 128_256 / GIB == pytest.approx(3.9, abs=0.05)
    assert 4 * 8192 * 512_000 / GIB == pytest.approx(15.6, abs=0.05)
    # without the output layer (a middle stage) there is no logits term at all
    mid = stage(LLAMA8, dict(plan, num_gpus=32, pp=4, global_batch=32), "middle")["activations"]
    assert mid == pytest.approx(3 * 8 * 2 * 8192 * LLAMA8.hidden_size, rel=1e-12)  # stage 1: 8 layers x 3 in flight x 2sh


def test_zero3_gathers_the_largest_module_whole():
    """DeepSpeed's estimate_zero3_model_states_mem_needs: 4 B x the largest module (its gathered
    bf16 parameters and gradients) -- for Llama-3.1-8B the output layer, 2.4x a block -- plus the
    next block prefetched (2 B)."""
    plan = dict(num_gpus=8, micro_batch=1, global_batch=8, seq_len=8192, recompute="full", zero=3, fp32_grads=False)
    e = estimate(LLAMA8, H100, plan)
    out = LLAMA8.vocab_size * LLAMA8.hidden_size
    block = counting.mean_layer_params(LLAMA8)
    assert out / block == pytest.approx(2.4, abs=0.05)
    assert e.memory.zero3_gather_buffer_gib * GIB == pytest.approx(4 * out + 2 * block, rel=1e-9)
    # FSDP's fp32 reduction adds the 4 B copy of that module's gradient for the reduce-scatter
    e32 = estimate(LLAMA8, H100, dict(plan, fp32_grads=True))
    assert (e32.memory.zero3_gather_buffer_gib - e.memory.zero3_gather_buffer_gib) * GIB == pytest.approx(4 * out)


def test_full_recompute_without_flash_attention_keeps_the_rematerialised_scores():
    """The layer re-run by full recomputation holds its whole stored set, the 5as/h scores
    included without FlashAttention: sbh(34 + 5as/h)/t under SP (a middle stage: no loss buffers)."""
    m, s, t = GPT3, 2048, 8
    h, a = m.hidden_size, m.num_heads
    plan = dict(num_gpus=32, tp=t, pp=4, micro_batch=1, global_batch=32, seq_len=s, recompute="full",
                sequence_parallel=True, flash_attention=False, zero=1)
    assert stage(m, plan, "middle")["transient"] == pytest.approx(s * h * (34 + 5 * a * s / h) / t, rel=1e-12)
    fa = stage(m, dict(plan, flash_attention=True), "middle")["transient"]
    assert fa == pytest.approx(s * h * 34 / t, rel=1e-12)


# ------------------------------------------------------------------ what a peak is made of
def test_peak_parts_sum_and_allocated_reserved_device_order():
    plan = dict(num_gpus=64, tp=4, pp=4, micro_batch=1, global_batch=256, seq_len=8192, zero=1)
    e = estimate("llama3.1-70b", H100, plan)
    mm = e.memory
    parts = (mm.weights_gib + mm.gradients_gib + mm.optimizer_gib + mm.activations_gib + mm.transient_gib
             + mm.zero3_gather_buffer_gib + mm.allocator_slack_gib + mm.framework_overhead_gib)
    assert parts == pytest.approx(mm.peak_gib, rel=1e-9)
    assert mm.allocated_peak_gib < mm.reserved_peak_gib < mm.peak_gib
    assert mm.reserved_peak_gib - mm.allocated_peak_gib == pytest.approx(mm.allocator_slack_gib, rel=1e-9)
    # NCCL buffers grow with the communicators: tp, dp and pp groups (+ world) here
    assert mm.framework_overhead_gib * GIB == pytest.approx(
        H100.efficiency.framework_overhead_gib * GIB + 4 * memory.NCCL_COMMUNICATOR_BYTES)
    # feasibility is judged on the device figure at the default headroom
    assert e.memory.usable_gib == pytest.approx(H100.gpu.memory_gib * (1 - memory.DEFAULT_MEMORY_HEADROOM))
    assert e.feasible == (mm.peak_gib <= mm.usable_gib)


def test_the_peak_is_one_moment_loss_buffers_and_rematerialised_layer_do_not_add():
    """pp = 1 with full recomputation: the loss buffers (end of the forward) and the re-run layer
    (backward) are both transient; the peak takes the larger, not their sum."""
    plan = dict(num_gpus=8, micro_batch=1, global_batch=8, seq_len=8192, recompute="full", zero=1)
    x = PlanArrays.from_plans([Plan(**plan)], LLAMA8.num_layers)
    st = memory.stage_memory_bytes(LLAMA8, H100, x, "first")
    loss = memory.LOSS_EXTRA_BYTES_PER_LOGIT * 8192 * LLAMA8.vocab_size
    remat = float(memory.rematerialised_layer_bytes(LLAMA8, x)[0])
    assert float(st["transient"][0]) == pytest.approx(max(loss, remat))


def test_optimizer_step_can_be_the_peak_moment():
    """ZeRO-3 with a torch (foreach) optimizer and almost no activations: the step's fp32
    temporaries, not the backward, set the peak."""
    plan = dict(num_gpus=2, micro_batch=1, global_batch=2, seq_len=128, recompute="full", zero=3)
    e = estimate(LLAMA8, H100, plan)
    local = counting.total_params(LLAMA8) / 2
    assert e.memory.activations_gib == 0.0
    assert e.memory.transient_gib * GIB == pytest.approx(memory.OPTIMIZER_TEMP_BYTES_PER_PARAM * local, rel=1e-3)


def test_measured_reserved_is_capped_by_what_the_device_leaves():
    plan = Plan(num_gpus=8, micro_batch=1, global_batch=8, seq_len=8192, recompute="full", zero=1)
    x = PlanArrays.from_plans([plan], LLAMA8.num_layers)
    mem = memory.peak_memory(LLAMA8, H100, x)
    tight = float(mem["allocated"][0] + mem["framework_overhead"][0] + 1.0)
    got = memory.as_measured(mem, "reserved", tight)
    assert float(got[0]) == pytest.approx(tight - float(mem["framework_overhead"][0]))
    assert float(memory.as_measured(mem, "allocated", tight)[0]) == float(mem["allocated"][0])
    with pytest.raises(ValueError, match="measure"):
        memory.as_measured(mem, "smi", tight)


# ------------------------------------------------------------------ knobs
BASE = dict(num_gpus=64, tp=8, pp=1, micro_batch=1, global_batch=64, seq_len=8192, recompute="full")


def test_bf16_gradient_copy_beside_the_fp32_accumulator():
    """Megatron-DeepSpeed's BF16 optimizer (ZeRO-1): bf16 gradients + fp32 accumulator, 6 B/param."""
    m = get_model("llama3.1-70b")
    one = estimate(m, H100, dict(BASE, zero=1, fp32_grads=True))
    two = estimate(m, H100, dict(BASE, zero=1, fp32_grads=True, grad_bf16_copy=True))
    assert two.memory.gradients_gib == pytest.approx(one.memory.gradients_gib * 6 / 4, rel=1e-12)
    with pytest.raises(ValueError, match="grad_bf16_copy"):
        Plan(**BASE, grad_bf16_copy=True, fp32_grads=False)


def test_optimizer_offload_moves_the_optimizer_states_and_costs_step_time():
    m = get_model("llama3.1-70b")
    on = estimate(m, H100, dict(BASE, zero=1, optimizer_offload=True))
    off = estimate(m, H100, dict(BASE, zero=1))
    assert on.memory.optimizer_gib == 0.0 and off.memory.optimizer_gib > 0
    assert on.memory.peak_gib < off.memory.peak_gib
    assert on.time.optimizer_s > off.time.optimizer_s


def test_activation_offload_keeps_two_layers_on_the_gpu():
    m = get_model("llama3.1-70b")
    plan = dict(BASE, zero=1, recompute="none")
    on = estimate(m, H100, dict(plan, activation_offload=True))
    off = estimate(m, H100, plan)
    assert on.memory.activations_gib < 0.2 * off.memory.activations_gib
    assert on.step_time_s >= off.step_time_s


def test_reshard_after_forward_off_keeps_the_stage_parameters_gathered():
    m = get_model("llama3.1-70b")
    plan = dict(BASE, zero=3, micro_batch=4)  # the backward (not the optimizer step) is the peak moment
    on = estimate(m, H100, plan)
    off = estimate(m, H100, dict(plan, reshard_after_forward=False))
    psi = counting.total_params(m) / 8
    assert off.memory.zero3_gather_buffer_gib - on.memory.zero3_gather_buffer_gib == pytest.approx(
        (2 * psi - 2 * (m.vocab_size * m.hidden_size / 8 + counting.mean_layer_params(m) / 8)) / GIB, rel=1e-3)


# ------------------------------------------------------------------ against measured peaks
def test_measured_peaks_floors():
    """bench/memory_fidelity.py's rows (the runs files' measured peaks): median |error| <= 8%, no
    run that ran predicted above its GPU's capacity nor refused at the default headroom, and the
    published out-of-memory configurations predicted not to fit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        import memory_fidelity as mf
    finally:
        sys.path.pop(0)
    rows = mf.load_rows()
    assert len(rows) >= 10
    preds = [mf.predict(r, p, c) for r, p, c in rows]
    errs = [pr["predicted_gib"] / r.measured_memory_gb - 1 for pr, (r, _, _) in zip(preds, rows)]
    assert float(np.median(np.abs(errs))) <= 0.08
    for pr in preds:
        assert pr["device_gib"] <= pr["capacity_gib"] * (1 - memory.DEFAULT_MEMORY_HEADROOM)
    assert mf.oom_check()


def test_search_and_estimate_share_the_default_headroom():
    from plan_search.planner.search.request import SearchRequest

    assert SearchRequest.model_fields["memory_headroom"].default == memory.DEFAULT_MEMORY_HEADROOM


def test_cli_estimate_default_headroom_and_memory_table():
    from click.testing import CliRunner

    from plan_search.cli.estimate import main

    opt = next(o for o in main.params if o.name == "memory_headroom")
    assert opt.default == memory.DEFAULT_MEMORY_HEADROOM
    r = CliRunner().invoke(main, ["--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8",
                                  "--seq-len", "2048"])
    assert r.exit_code == 0, r.output
    assert "max_memory_allocated" in r.output and "max_memory_reserved" in r.output and "allocator slack" in r.output


def test_deepspeed_zero3_gathers_one_submodule_at_a_time():
    """DeepSpeed ZeRO-3 (the deepspeed profile) fetches one nn.Module at a time with at most
    stage3_max_live_parameters (1e9) live and stage3_prefetch_bucket_size (5e8) ahead; FSDP
    gathers a whole block (plus the next). For the 530B model (h 20480) the largest sub-module is
    the MLP up projection, 4h x h = 1.68B parameters."""
    import plan_search
    from plan_search.hardware.catalog import get_cluster
    from plan_search.hardware.profiles import profile_for
    from plan_search.models.catalog import get_model

    m = get_model("megatron-gpt-530b")
    a100 = get_cluster("a100-80gb")
    ds = a100.model_copy(update={"efficiency": profile_for(a100, "deepspeed")})
    plan = dict(num_gpus=640, tp=1, pp=1, micro_batch=4, global_batch=2560, seq_len=2048, recompute="full",
                sequence_parallel=False, flash_attention=False, zero=3, fp32_grads=False, precision="fp16")
    fsdp = plan_search.estimate(m, a100, **plan).memory.zero3_gather_buffer_gib
    deep = plan_search.estimate(m, ds, **plan).memory.zero3_gather_buffer_gib
    h = 20480
    sub = 4 * h * h
    expected = (2.0 * (sub + 5e8) + 2.0 * sub) / 2**30
    assert deep == pytest.approx(expected, rel=1e-9)
    assert fsdp > 3 * deep  # a whole 5B-parameter block (and the next) against one matrix
