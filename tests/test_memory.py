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
    ``4sbh/t (1 + V/h)`` for the final norm / output-layer inputs and the fp32 logits -- held at
    the loss's instant; under full recomputation, when the re-run layer's instant is the larger,
    the output layer's buffers are freed by then and the peak's activations leave them out."""
    m, s, b, t = GPT3, 2048, 1, 8
    h, a, L, V = m.hidden_size, m.num_heads, m.num_layers, m.vocab_size
    plan = dict(num_gpus=8, tp=t, micro_batch=b, global_batch=8, seq_len=s, recompute=rc,
                sequence_parallel=sp, flash_attention=False, zero=1)
    e = estimate(m, A100, plan)
    div = t if sp else 1
    output = 4 * s * b * h / div + 4 * s * b * V / t
    want = L * per_layer(s, b, h, a, t, sp, rc) + 8 * s * b + s * b * h / div + output
    x = PlanArrays.from_plans([Plan(**plan)], L)
    remat = float(memory.rematerialised_layer_bytes(m, x)[0]) if rc == "full" else 0.0
    at_loss = output + memory.LOSS_EXTRA_BYTES_PER_LOGIT * s * b * V / t >= remat
    assert at_loss == (rc != "full")  # GPT-3 at t 8, no FlashAttention: the re-run layer is the larger
    assert e.memory.activations_gib * GIB == pytest.approx(want - (0.0 if at_loss else output), rel=1e-9)


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
    included without FlashAttention: sbh(34 + 5as/h)/t under SP (a middle stage: no loss buffers),
    plus the gradient allocated at its backward's peak instant: the MLP down projection's input
    gradient 2f = 8h B/token while everything is live, or, without FlashAttention, the attention
    probabilities' gradient 2as once the MLP's saved inputs (16h: 2f + 2f) are freed -- the
    larger, /t."""
    m, s, t = GPT3, 2048, 8
    h, a = m.hidden_size, m.num_heads
    plan = dict(num_gpus=32, tp=t, pp=4, micro_batch=1, global_batch=32, seq_len=s, recompute="full",
                sequence_parallel=True, flash_attention=False, zero=1)
    extra = max(8 * h, 2 * a * s - 16 * h)  # GPT-3: 2as - 16h = 196,608 > 8h = 98,304
    assert extra == 2 * a * s - 16 * h
    assert stage(m, plan, "middle")["transient"] == pytest.approx(s * (h * (34 + 5 * a * s / h) + extra) / t,
                                                                  rel=1e-12)
    fa = stage(m, dict(plan, flash_attention=True), "middle")["transient"]
    assert fa == pytest.approx(s * h * (34 + 8) / t, rel=1e-12)


def test_rerun_peak_gradient_term_per_token():
    """The term itself (planner.costmodel.memory.rerun_peak_extra_bytes_per_token): 2f/t with
    FlashAttention; without it the larger of 2f/t and 2as/t - (2f + 2f)/t (bf16 GEMM inputs);
    gated MLPs free 3f of their own (4f + 2f) first; MoE layers: none (their own accounting)."""
    def term(model, **kw):
        plan = dict(num_gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096, recompute="full", zero=1)
        x = PlanArrays.from_plans([Plan(**dict(plan, **kw))], model.num_layers)
        return float(memory.rerun_peak_extra_bytes_per_token(model, x)[0])

    f, a = GPT3.ffn_hidden_size, GPT3.num_heads
    assert term(GPT3, flash_attention=True) == pytest.approx(2 * f / 8)
    assert term(GPT3, flash_attention=False) == pytest.approx(max(2 * f, 2 * a * 4096 - 4 * f) / 8)
    f8 = LLAMA8.ffn_hidden_size
    assert term(LLAMA8, flash_attention=False) == pytest.approx(
        max(2 * f8, 2 * LLAMA8.num_heads * 4096 - 6 * f8) / 8)
    assert term(get_model("mixtral-8x7b"), flash_attention=True) == 0.0


# ------------------------------------------------------------------ what a peak is made of
def test_peak_parts_sum_and_allocated_reserved_device_order():
    plan = dict(num_gpus=64, tp=4, pp=4, micro_batch=1, global_batch=256, seq_len=8192, zero=1)
    e = estimate("llama3.1-70b", H100, plan)
    mm = e.memory
    parts = (mm.weights_gib + mm.gradients_gib + mm.optimizer_gib + mm.activations_gib + mm.transient_gib
             + mm.zero3_gather_buffer_gib + mm.allocator_slack_gib + mm.framework_overhead_gib)
    assert parts == pytest.approx(mm.peak_gib, rel=1e-9)
    # with room: allocated < reserved < device; at capacity: allocated < reserved at capacity <= reserved
    assert mm.allocated_peak_gib < mm.reserved_at_capacity_gib < mm.reserved_peak_gib < mm.device_peak_gib
    assert mm.peak_gib == pytest.approx(mm.reserved_at_capacity_gib + mm.framework_overhead_gib, rel=1e-12)
    assert mm.device_peak_gib == pytest.approx(mm.reserved_peak_gib + mm.framework_overhead_gib, rel=1e-12)
    assert mm.reserved_peak_gib - mm.allocated_peak_gib == pytest.approx(
        mm.allocator_slack_gib + mm.releasable_slack_gib, rel=1e-9)
    # NCCL buffers grow with the communicators: tp, dp and pp groups (+ world) here
    assert mm.framework_overhead_gib * GIB == pytest.approx(
        H100.efficiency.framework_overhead_gib * GIB + 4 * memory.NCCL_COMMUNICATOR_BYTES)
    # feasibility is judged on the figure at capacity (peak_gib) at the default headroom
    assert e.memory.usable_gib == pytest.approx(H100.gpu.memory_gib * (1 - memory.DEFAULT_MEMORY_HEADROOM))
    assert e.feasible == (mm.peak_gib <= mm.usable_gib)


def test_the_peak_is_one_moment_loss_buffers_and_rematerialised_layer_do_not_add():
    """pp = 1 with full recomputation: the loss instant (the output layer's stored inputs and fp32
    logits, 4sbh + 4sbV/t without SP, plus the loss buffers) and the re-run layer's instant (the output
    layer's buffers are freed by then) never coincide; the peak takes the larger, not their sum.
    Llama-3.1-8B (V = 128,256): the loss instant; GPT-3 (V = 51,200, no FlashAttention): the
    re-run layer's, without the output buffers."""
    for model, fa in ((LLAMA8, True), (GPT3, False)):
        plan = dict(num_gpus=8, micro_batch=1, global_batch=8, seq_len=2048, recompute="full", zero=1, tp=8,
                    sequence_parallel=False, flash_attention=fa)
        x = PlanArrays.from_plans([Plan(**plan)], model.num_layers)
        st = {k: float(v[0]) for k, v in memory.stage_memory_bytes(model, H100, x, "first").items()}
        T, h, V = 2048, model.hidden_size, model.vocab_size
        loss = memory.LOSS_EXTRA_BYTES_PER_LOGIT * T * V / 8
        output = 4 * T * h + 4 * T * V / 8  # no SP: the output layer inputs whole, the logits /t
        remat = float(memory.rematerialised_layer_bytes(model, x)[0])
        layers = model.num_layers * 2 * T * h + T * (8 + (h if model.dropout else 0))
        at_loss = output + loss >= remat
        assert at_loss == (model is LLAMA8)
        assert st["transient"] == pytest.approx(loss if at_loss else remat, rel=1e-12)
        assert st["activations"] == pytest.approx(layers + (output if at_loss else 0.0), rel=1e-12)


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
    tight = float(mem["total"][0] + 1.0)  # the run fits (at capacity), with 1 B to spare
    assert float(mem["reserved"][0] + mem["framework_overhead"][0]) > tight  # it would reserve more with room
    got = memory.as_measured(mem, "reserved", tight)
    assert float(got[0]) == pytest.approx(tight - float(mem["framework_overhead"][0]))
    assert float(memory.as_measured(mem, "device", tight)[0]) == pytest.approx(tight)
    # a run that does not fit at capacity is not capped (it did not run)
    short = float(mem["total"][0] - 1.0)
    assert float(memory.as_measured(mem, "reserved", short)[0]) == float(mem["reserved"][0])
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
        assert pr["needed_gib"] <= pr["capacity_gib"] * (1 - memory.DEFAULT_MEMORY_HEADROOM)
    assert mf.oom_check()
    over, refused = mf.ran_over_capacity()  # every dense run of the runs files, measured or not
    assert over == []
    assert [r.split(" (")[0] for r in refused] == ["published_runs.csv row 14"]  # the 530B ZeRO-3 at 640


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
    """DeepSpeed ZeRO-3 (the deepspeed profile) fetches one nn.Module at a time; it prefetches
    stage3_prefetch_bucket_size (5e7) ahead only while fewer than stage3_max_live_parameters (1e9)
    are available; FSDP gathers a whole block (plus the next). For the 530B model (h 20480) the
    largest sub-module is the MLP up projection, 4h x h = 1.68B parameters: gathered alone, with
    its fp16 gradient, no prefetch."""
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
    expected = (2.0 * sub + 2.0 * sub) / 2**30
    assert deep == pytest.approx(expected, rel=1e-9)
    assert fsdp > 3 * deep  # a whole 5B-parameter block (and the next) against one matrix
    # a model whose sub-modules and blocks are under the live cap: its block stays live and the next
    # 5e7 parameters are prefetched (Llama-3.1-8B, tp 1: block 218M, output layer 525M the largest)
    # (8K-token micro-batches: the backward, not the optimizer step, is the peak)
    p8 = dict(num_gpus=8, micro_batch=2, global_batch=16, seq_len=8192, recompute="full", zero=3, fp32_grads=False)
    got = plan_search.estimate(LLAMA8, ds, **p8).memory.zero3_gather_buffer_gib * 2**30
    out = LLAMA8.vocab_size * LLAMA8.hidden_size
    assert got == pytest.approx(2.0 * (out + memory.DS_PREFETCH_PARAMS) + 2.0 * out, rel=1e-9)
    assert memory.DS_PREFETCH_PARAMS == 5e7 and memory.DS_MAX_LIVE_PARAMS == 1e9


# ------------------------------------------------------------------ Narayanan et al. 2021, Table 2: 530B ZeRO-3
ZERO3_530B = dict(tp=1, pp=1, micro_batch=4, seq_len=2048, recompute="full", sequence_parallel=False,
                  flash_attention=False, zero=3, fp32_grads=False, precision="fp16")


def test_530b_zero3_deepspeed_figures_and_the_560_gpu_oom():
    """Narayanan et al. 2021 Table 2 (DeepSpeed ZeRO-3, no model parallelism, micro-batch 4): at 640
    GPUs it ran, at 560 it did not fit. Through plan_search.estimate with the deepspeed profile,
    each part against its formula (s 2048, b 4, h 20480, a 128, f 4h, V 51,200, 105 layers):
    states 16 B/param / d; activations 105 checkpoints 2sbh + token ids 8sb + embedding-dropout mask
    sbh (the output layer's buffers are freed before the re-run layer's backward); the re-run layer
    at its peak sbh(34 + 5as/h) + the down projection's input gradient 2sbf (> 2as - 4f here);
    the gather: the 1.68B up projection alone (no prefetch above the live cap) and its fp16 gradient.
    With room it would reserve 80.5 GiB (device 83.0, above the 80 GB): the allocator slack, 0.31 x
    (activations + gather) fitted on torchtitan's reserved peaks. Pressed against its capacity the
    allocator gives its whole free segments back before failing; what it cannot give back,
    memory.UNRELEASABLE_SLACK_SHARE of that slack (fitted on this pair), puts it at 78.8 GiB: it fits
    at 640, and at 560 (80.5) it does not.
    """
    import plan_search
    from plan_search.models import counting

    m = get_model("megatron-gpt-530b")
    s, b, h, a, L, V = 2048, 4, 20480, 128, 105, 51200
    T = s * b
    e = plan_search.estimate(m, "a100-80gb", framework="deepspeed", memory_headroom=0.0,
                             num_gpus=640, global_batch=2560, **ZERO3_530B)
    mm = e.memory
    psi = counting.total_params(m)
    assert (mm.weights_gib + mm.gradients_gib + mm.optimizer_gib) * GIB == pytest.approx(16 * psi / 640, rel=1e-9)
    assert mm.activations_gib * GIB == pytest.approx(L * 2 * T * h + T * (8 + h), rel=1e-12)
    remat = T * h * (34 + 5 * a * s / h) + T * max(2 * 4 * h, 2 * a * s - 4 * 4 * h)
    assert mm.transient_gib * GIB == pytest.approx(remat, rel=1e-12)
    assert mm.zero3_gather_buffer_gib * GIB == pytest.approx(4 * (4 * h * h), rel=1e-12)
    frag = A100.efficiency.fragmentation * (mm.activations_gib + mm.zero3_gather_buffer_gib)
    assert mm.allocator_slack_gib == pytest.approx(memory.UNRELEASABLE_SLACK_SHARE * frag, rel=1e-9)
    assert mm.releasable_slack_gib == pytest.approx((1 - memory.UNRELEASABLE_SLACK_SHARE) * frag, rel=1e-9)
    assert mm.allocated_peak_gib == pytest.approx(68.36, abs=0.01)
    assert mm.reserved_peak_gib == pytest.approx(80.52, abs=0.01)  # with room, as before
    assert mm.device_peak_gib == pytest.approx(83.02, abs=0.01)
    assert mm.peak_gib == pytest.approx(78.76, abs=0.01)
    assert e.feasible  # it ran
    oom = plan_search.estimate(m, "a100-80gb", framework="deepspeed", memory_headroom=0.0,
                               num_gpus=560, global_batch=2240, **ZERO3_530B)
    assert not oom.feasible  # it did not fit
    assert oom.memory.peak_gib == pytest.approx(80.52, abs=0.01)
    # the default headroom refuses the run that ran pressed against its capacity (memory.DEFAULT_MEMORY_HEADROOM)
    assert not plan_search.estimate(m, "a100-80gb", framework="deepspeed", num_gpus=640, global_batch=2560,
                                    **ZERO3_530B).feasible
    # 80 fewer GPUs: only the sharded states grow (16 psi (1/560 - 1/640))
    assert (oom.memory.peak_gib - mm.peak_gib) * GIB == pytest.approx(16 * psi * (1 / 560 - 1 / 640), rel=1e-9)


def test_deepspeed_zero3_optimizer_step_casts_one_sub_group_to_fp32():
    """DeepSpeed ZeRO-3's step flattens a sub-group's fp16 gradients (2 B) and casts them to fp32
    (4 B) for its fused Adam: 6 B per local parameter, at most sub_group_size (1e9) at a time; FSDP
    with torch's foreach AdamW: 4 B per local parameter (sqrt of the variance), no cap. Llama-3.1-8B
    on 2 A100s (the system with a DeepSpeed profile of its own) with almost no activations, so the
    optimizer step is the peak."""
    import plan_search

    plan = dict(num_gpus=2, micro_batch=1, global_batch=2, seq_len=128, recompute="full", zero=3, fp32_grads=False)
    local = counting.total_params(LLAMA8) / 2
    ds = plan_search.estimate(LLAMA8, "a100-80gb", framework="deepspeed", **plan).memory
    fsdp = plan_search.estimate(LLAMA8, "a100-80gb", **plan).memory
    assert local > memory.DS_SUB_GROUP_PARAMS  # 4.0B local: the cap binds
    assert ds.transient_gib * GIB == pytest.approx(memory.DS_STEP_TEMP_BYTES_PER_PARAM * memory.DS_SUB_GROUP_PARAMS,
                                                   rel=1e-9)
    assert ds.transient_gib * GIB == pytest.approx(6 * 1e9, rel=1e-9)
    assert fsdp.transient_gib * GIB == pytest.approx(4 * local, rel=1e-3)
    assert ds.activations_gib == 0.0 and fsdp.activations_gib == 0.0


# ------------------------------------------------------------------ reserved with room and at capacity
def _bench():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        import memory_fidelity as mf
    finally:
        sys.path.pop(0)
    return mf


def test_torchtitan_reserved_figure_unchanged_and_the_bench_judges_what_estimate_judges():
    """The reserved peak with room, compared with torchtitan's max_memory_reserved, is the figure it
    was before the figure at capacity was added (row 91: Llama-3.1-8B, 8 H100 96 GB, FSDP + CP 2:
    85.444 GiB reserved, 88.444 on the device); the bench's feasibility figure is plan-estimate's
    peak_gib, through the same function (evaluate.memory_fit)."""
    mf = _bench()
    rec, plan, cluster = next(r for r in mf.load_rows() if r[0].index == 91)
    pr = mf.predict(rec, plan, cluster)
    assert pr["kind"] == "reserved"
    assert pr["predicted_gib"] == pytest.approx(85.444, abs=1e-3)
    assert pr["device_gib"] == pytest.approx(88.444, abs=1e-3)
    e = estimate(rec.model, cluster, plan, memory_headroom=0.0)
    assert e.memory.reserved_peak_gib == pytest.approx(85.444, abs=1e-3)
    assert e.memory.peak_gib == pytest.approx(pr["needed_gib"], rel=1e-12)
    assert e.memory.peak_gib < e.memory.device_peak_gib


@pytest.mark.parametrize("model,plan", [
    ("llama3.1-70b", dict(num_gpus=64, tp=4, pp=4, micro_batch=1, global_batch=256, seq_len=8192, zero=1)),
    ("llama3.1-70b", dict(num_gpus=64, tp=8, pp=1, micro_batch=4, global_batch=256, seq_len=8192, zero=3,
                          recompute="full")),
    ("llama3.1-8b", dict(num_gpus=2, micro_batch=1, global_batch=2, seq_len=128, recompute="full", zero=3)),
    ("megatron-gpt-175b", dict(num_gpus=64, tp=8, pp=8, micro_batch=1, global_batch=64, seq_len=2048,
                               recompute="none", sequence_parallel=False, flash_attention=False, zero=0)),
])
def test_needed_at_capacity_never_above_reserved_with_room(model, plan):
    """What a run needs at capacity (allocated + the unreleasable slack) is never above what it
    reserves with room, whichever moment (backward, optimizer step) sets either peak."""
    import plan_search

    mm = plan_search.estimate(model, "h100-sxm", **plan).memory
    assert mm.allocated_peak_gib <= mm.reserved_at_capacity_gib <= mm.reserved_peak_gib
    assert mm.peak_gib <= mm.device_peak_gib
    assert mm.releasable_slack_gib >= 0.0


def test_a_run_that_ran_is_tight_not_out_of_memory_at_the_default_headroom():
    """The 530B ZeRO-3 run at 640 GPUs needs 78.8 of 80 GiB: inside the default headroom, so not
    feasible for the planner, but it fits the device: the estimate says "tight", never "out of
    memory", and its 560-GPU twin (80.5 GiB) is out of memory plainly."""
    import subprocess
    import sys

    import plan_search

    m = get_model("megatron-gpt-530b")
    ran = plan_search.estimate(m, "a100-80gb", framework="deepspeed", num_gpus=640, global_batch=2560, **ZERO3_530B)
    assert not ran.feasible and ran.fits_device
    assert ran.reasons[0].startswith("memory: tight, not out of memory: peak 78.8 GiB")
    oom = plan_search.estimate(m, "a100-80gb", framework="deepspeed", num_gpus=560, global_batch=2240, **ZERO3_530B)
    assert not oom.feasible and not oom.fits_device
    assert oom.reasons[0].startswith("memory: peak 80.5 GiB on the only stage exceeds the usable")
    args = ["--model", "megatron-gpt-530b", "--gpu", "a100-80gb", "--framework", "deepspeed", "--gpus", "640",
            "--global-batch", "2560", "--tp", "1", "--pp", "1", "--micro-batch", "4", "--seq-len", "2048",
            "--recompute", "full", "--no-sequence-parallel", "--no-flash-attention", "--zero", "3",
            "--no-fp32-grads", "--precision", "fp16"]
    cli = [sys.executable, "-m", "plan_search.cli.estimate"]
    out = subprocess.run(cli + args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 3  # the planner's margin is not met: exit 3 as documented
    assert "TIGHT (fits the device, not the headroom)" in out.stdout and "INFEASIBLE" not in out.stdout
    out0 = subprocess.run(cli + args + ["--memory-headroom", "0"], capture_output=True, text=True, timeout=120)
    assert out0.returncode == 0 and "verdict           feasible" in out0.stdout


# ------------------------------------------------------------------ issue 11 x 13: MoE memory settings
#: DeepSeek-V3's production run (arXiv 2412.19437 Sec. 3.2: 2,048 H800, DualPipe, pp 16, ep 64, no tp,
#: ZeRO-1; Sec. 4.2: 15,360 sequences of 4,096 tokens; fine-grained FP8; MTP depth 1; recomputed
#: RMSNorm and MLA up-projections), on the split bench/moe_fidelity.py prices for it.
DSV3_PROD = dict(num_gpus=2048, tp=1, pp=16, ep=64, etp=1, micro_batch=1, global_batch=15360, seq_len=4096,
                 recompute="selective", precision="fp8", pp_schedule="dualpipe", moe_dispatcher="flex",
                 moe_overlap=True, first_stage_layers=4, last_stage_layers=1)
#: What Sec. 3.3.3 says it stores: BF16 Adam moments (FP32 master weights and gradients), FP8 SwiGLU inputs.
DSV3_REPORT = dict(adam_moments_dtype="bf16", act_fp8_input_store=True, fp32_grads=True)


def test_deepseek_v3_production_plan_fits_its_h800_with_the_reports_settings():
    import plan_search as ps

    on = ps.estimate("deepseek-v3", "h800", memory_headroom=0.0, **DSV3_PROD, **DSV3_REPORT)
    off = ps.estimate("deepseek-v3", "h800", memory_headroom=0.0, **DSV3_PROD)
    cap = on.memory.capacity_gib
    assert on.fits_device and on.memory.peak_gib <= cap  # it ran
    assert not off.fits_device  # without the report's low-precision storage the same plan does not fit
    assert off.memory.peak_gib - on.memory.peak_gib > 10.0  # ~15 GiB: moments, SwiGLU inputs, their slack


def test_bf16_adam_moments_are_8_bytes_of_optimizer_state_per_param():
    """4 B fp32 master + 2 x 2 B moments against 4 + 2 x 4 (Megatron-Core --exp-avg-dtype/--exp-avg-sq-dtype);
    the expert and the dense states alike, and the optimizer step moves 2 x 8 B instead of 2 x 12 B."""
    import plan_search as ps

    for model, gpu, kw in (("llama3.1-70b", "h100-sxm", dict(BASE, zero=1)), ("deepseek-v3", "h800", DSV3_PROD)):
        fp32 = ps.estimate(model, gpu, memory_headroom=0.0, **kw)
        bf16 = ps.estimate(model, gpu, memory_headroom=0.0, adam_moments_dtype="bf16", **kw)
        assert bf16.memory.optimizer_gib == pytest.approx(fp32.memory.optimizer_gib * 8 / 12, rel=1e-12)
        assert bf16.memory.weights_gib == fp32.memory.weights_gib
        assert bf16.memory.gradients_gib == fp32.memory.gradients_gib
        assert bf16.time.optimizer_s < fp32.time.optimizer_s


def test_fp8_activation_inputs_store_one_byte_per_swiglu_input():
    """Megatron-Core activation_func_fp8_input_store: the two SwiGLU inputs kept as 1 B each instead of
    2 B: ``2 f`` bytes per token and gated MLP layer fewer; nothing for an ungated MLP."""
    import plan_search as ps

    m = get_model("llama3.1-8b")
    kw = dict(num_gpus=8, tp=1, pp=1, micro_batch=1, global_batch=8, seq_len=4096, recompute="none", zero=1)
    bf16 = ps.estimate(m, H100, memory_headroom=0.0, **kw)
    fp8 = ps.estimate(m, H100, memory_headroom=0.0, act_fp8_input_store=True, **kw)
    expected = m.num_layers * 4096 * 2.0 * m.ffn_hidden_size / GIB  # pp 1: one micro-batch in flight
    assert bf16.memory.activations_gib - fp8.memory.activations_gib == pytest.approx(expected, rel=1e-9)
    gpt = get_model("megatron-gpt-175b")  # GELU MLP: Megatron allows the FP8 store for SwiGLU only
    kw = dict(num_gpus=64, tp=8, pp=8, micro_batch=1, global_batch=64, seq_len=2048)
    assert (ps.estimate(gpt, "a100-80gb", act_fp8_input_store=True, **kw).memory.activations_gib
            == ps.estimate(gpt, "a100-80gb", **kw).memory.activations_gib)


def test_fp8_activation_inputs_of_the_routed_and_shared_experts():
    """DeepSeek-V3 (Sec. 3.3.3, "Inputs of the SwiGLU operator in MoE"): per MoE layer and micro-batch the
    routed rows (``T k`` x the routing imbalance, etp 1) save ``2 f_e`` bytes each and the shared expert
    ``2 f_s`` per token; the fullest stage (a middle one: 4 MoE layers, twice under DualPipe's mirror,
    ``pp + 1`` = 17 micro-batches of one stage's layers in flight) holds 17 x 4 of them."""
    import plan_search as ps

    m = get_model("deepseek-v3")
    off = ps.estimate(m, "h800", memory_headroom=0.0, **DSV3_PROD, adam_moments_dtype="bf16")
    on = ps.estimate(m, "h800", memory_headroom=0.0, **DSV3_PROD, **DSV3_REPORT)
    T, imb = 4096, Plan.model_fields["moe_imbalance"].default
    per_layer = T * m.experts_per_token * imb * 2.0 * m.expert_ffn_hidden_size + T * 2.0 * (
        m.num_shared_experts * m.shared_expert_ffn_hidden_size)
    assert off.memory.activations_gib - on.memory.activations_gib == pytest.approx(17 * 4 * per_layer / GIB,
                                                                                   rel=1e-9)


@pytest.mark.parametrize("impl,stored,extra", [("pytorch", 4.0, 8.0), ("pytorch_bf16", 2.0, 4.0),
                                               ("megatron", 4.0, 2.0), ("te", 2.0, 0.0)])
def test_cross_entropy_bytes_per_logit(impl, stored, extra):
    """The loss's logits as each implementation keeps them (stored with the output stage's activations)
    and what it adds at its backward (the transient): PyTorch's unfused loss on fp32 logits 4 + 8 B,
    on bf16 logits 2 + 4, Megatron-Core's in-place vocab_parallel_cross_entropy 4 + 2, Transformer
    Engine's parallel_cross_entropy (gradient written into its bf16 input) 2 + 0."""
    import plan_search as ps

    m = get_model("llama3.1-8b")
    kw = dict(num_gpus=8, tp=1, pp=1, micro_batch=1, global_batch=8, seq_len=4096, recompute="none", zero=1)
    base = ps.estimate(m, H100, memory_headroom=0.0, **kw)  # default: pytorch
    e = ps.estimate(m, H100, memory_headroom=0.0, cross_entropy=impl, **kw)
    logits = 4096 * m.vocab_size / GIB
    assert e.memory.transient_gib == pytest.approx(extra * logits, rel=1e-9)
    assert base.memory.activations_gib - e.memory.activations_gib == pytest.approx((4.0 - stored) * logits,
                                                                                   rel=1e-9, abs=1e-9)


def test_master_weights_as_remainders_or_none():
    """torch.optim.Adam on a bf16 model (NeMo AutoModel's MoE benchmarks): no 4 B master copy; its
    moments in the parameters' dtype: 2 x 2 B against Megatron's 4 + 2 x 4. Megatron-Core's
    precision-aware optimizer on bf16 weights keeps 16-bit remainders: 2 + 2 x 4."""
    import plan_search as ps

    kw = dict(BASE, zero=1)
    full = ps.estimate("llama3.1-70b", "h100-sxm", memory_headroom=0.0, **kw)
    pure = ps.estimate("llama3.1-70b", "h100-sxm", memory_headroom=0.0, master_weights="none",
                       adam_moments_dtype="bf16", **kw)
    assert pure.memory.optimizer_gib == pytest.approx(full.memory.optimizer_gib * 4 / 12, rel=1e-12)
    fp32_moments = ps.estimate("llama3.1-70b", "h100-sxm", memory_headroom=0.0, master_weights="none", **kw)
    assert fp32_moments.memory.optimizer_gib == pytest.approx(full.memory.optimizer_gib * 8 / 12, rel=1e-12)
    rem = ps.estimate("llama3.1-70b", "h100-sxm", memory_headroom=0.0, master_weights="bf16_remainder", **kw)
    assert rem.memory.optimizer_gib == pytest.approx(full.memory.optimizer_gib * 10 / 12, rel=1e-12)


def test_dualpipe_mtp_shares_the_embedding_of_the_rank_holding_both_ends():
    """DeepSeek-V3 report Sec. 3.2.3: DualPipe puts the shallowest layers (with the embedding) and the
    deepest (with the output head and the MTP module) on one PP rank, so the MTP module shares that
    embedding: both end GPUs hold the same two stages and the same weights. Under 1F1B the MTP stage
    builds its own copy of the embedding (Megatron-Core), ``V h / tp`` parameters more than it would."""
    from plan_search.planner.costmodel import experts

    m = get_model("deepseek-v3")
    c = get_cluster("h800")
    kw = dict(DSV3_PROD, first_stage_layers=3, last_stage_layers=2)
    dual = PlanArrays.from_plans([Plan(**kw)], m.num_layers)
    one = PlanArrays.from_plans([Plan(**dict(kw, pp_schedule="1f1b"))], m.num_layers)
    ends = [memory.stage_memory_bytes(m, c, dual, st)["weights"][0] for st in ("first", "last")]
    assert ends[0] == pytest.approx(ends[1], rel=1e-12)
    mtp_dual = experts.mtp_nonexpert_params_local(m, dual, "last")[0]
    mtp_one = experts.mtp_nonexpert_params_local(m, one, "last")[0]
    assert mtp_one - mtp_dual == pytest.approx(m.vocab_size * m.hidden_size, rel=1e-12)
