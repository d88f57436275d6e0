"""Issue 12: NVLink domains larger than a host (GB200/GB300 NVL72), collectives across domains,
and precision recipes -- end to end through ``plan_search.estimate``."""

from __future__ import annotations

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.overrides import apply_overrides
from plan_search.models.catalog import get_model
from plan_search.models.io import InputError

LLAMA70 = get_model("llama3.1-70b")
GB200 = get_cluster("gb200-nvl72")
GB300 = get_cluster("gb300-nvl72")
H100 = get_cluster("h100-sxm")
NO_OVERLAP = dict(overlap_grad_reduce=False, overlap_param_gather=False)


def _est(cluster, model=LLAMA70, **plan):
    plan.setdefault("seq_len", 4096)
    return ps.estimate(model, cluster, plan)


# ------------------------------------------------------------------ topology (NVL72)


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb300-nvl72"])
def test_nvl72_is_trays_of_four_in_one_72_gpu_domain(name):
    node = get_cluster(name).node
    assert node.gpus_per_node == 4 and node.intra_domain_size == 72


@pytest.mark.parametrize("tp", [8, 16, 32, 64])
def test_tp_groups_up_to_the_rack_stay_on_nvlink(tp):
    """A TP group inside the 72-GPU domain never touches a NIC: its time does not move when the
    NIC is made 1000x slower; on 8-GPU H100 nodes a TP group of 16 does."""
    plan = dict(num_gpus=tp, tp=tp, global_batch=8, recompute="full")
    base = _est(GB200, **plan)
    slow_nic = _est(apply_overrides(GB200, ["node.inter_node_gbps=0.05"]), **plan)
    assert slow_nic.time.tp_comm_s == base.time.tp_comm_s > 0
    assert base.bottleneck != "nic"
    if tp > 8:
        h = _est(H100, **plan)
        h_slow = _est(apply_overrides(H100, ["node.inter_node_gbps=0.05"]), **plan)
        assert h_slow.time.tp_comm_s > 10 * h.time.tp_comm_s


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize("dp", [8, 32, 64])
def test_dp_group_inside_one_domain_never_slower_than_across_nics(zero, dp):
    """The same DP group priced inside one NVLink domain (GB200 rack) and across NICs (the same
    GPUs with the NVLink domain cut to a 4-GPU tray): never slower inside."""
    plan = dict(num_gpus=2 * dp, tp=2, zero=zero, global_batch=4 * dp, recompute="full", **NO_OVERLAP)
    inside = _est(GB200, **plan).time.dp_comm_s
    trays = apply_overrides(GB200, ["node.intra_domain_size=4"])
    across = _est(trays, **plan).time.dp_comm_s
    assert 0 < inside <= across
    if dp * 2 > 4 and not (zero == 3 and dp == 64):  # ZeRO-3 across racks: flat ring until part 3
        assert inside < across


def test_jobs_larger_than_a_rack_are_placed_in_equal_tray_shares():
    """128 GPUs on NVL72: 64 per rack (16 of 18 trays), so a tp=2 x dp=64 data-parallel group has
    32 members per rack and crosses racks; a 64-GPU job sits in one rack."""
    from plan_search.planner.costmodel import comm

    assert int(comm.domain_share(128, GB200)) == 64
    assert int(comm.domain_share(144, GB200)) == 72
    assert int(comm.domain_share(64, GB200)) == 64
    assert int(comm.domain_share(256, H100)) == 8
    assert int(comm.members_per_domain(2, 64, GB200, 128)) == 32
    assert int(comm.members_per_domain(1, 64, GB200, 64)) == 64
    assert int(comm.members_per_domain(1, 12, H100, 96)) == 6  # a divisor of the group
    one_rack = _est(GB200, num_gpus=64, tp=1, zero=3, global_batch=64, recompute="full", **NO_OVERLAP)
    assert one_rack.bottleneck != "nic"


def test_zero3_group_spanning_two_racks_is_hierarchical_not_a_flat_nic_ring():
    """Issue 12's case: a 64-GPU ZeRO-3/FSDP group over two GB200 NVL72 racks (tp 2 x dp 64 on 128
    GPUs: 32 members per rack). Priced in two levels it costs about 1/32 of the NIC traffic of a
    flat ring; the flat ring (``efficiency.zero3_flat``, DeepSpeed's profile) is exactly the
    per-GPU (n-1)/n * S over each NIC."""
    plan = dict(num_gpus=128, tp=2, zero=3, global_batch=128, micro_batch=1, recompute="full",
                grad_reduce="microbatch", **NO_OVERLAP)
    hier = _est(GB200, **plan)
    flat_cluster = apply_overrides(GB200, ["efficiency.zero3_flat=true"])
    flat = _est(flat_cluster, **plan)
    # per micro-batch: reduce-scatter of fp32 gradients + forward and backward bf16 gathers,
    # flat over the NIC: (n-1)/n * bytes / (NIC GB/s * inter_bw_eff) each, plus 63 ring steps
    from plan_search.models import counting

    e, node = GB200.efficiency, GB200.node
    psi = counting.total_params(LLAMA70) / 2  # tp 2 (embedding and output shard over tp too)
    nic = node.inter_node_gbps * 1e9 * e.inter_bw_eff * e.zero3_bw_eff
    lat = 63 * node.inter_latency_us * 1e-6 / e.zero3_bw_eff
    per_mb = (63 / 64) * psi * (4 + 2 + 2) / nic + 3 * lat
    m = 128 // 64
    assert flat.time.dp_comm_s == pytest.approx(m * per_mb, rel=0.02)
    assert hier.time.dp_comm_s < flat.time.dp_comm_s / 8
    # and a ZeRO-3 group of 64 inside one rack is cheaper still (NVLink only)
    one_rack = _est(GB200, **dict(plan, num_gpus=64, tp=1, global_batch=64))
    assert one_rack.bottleneck != "nic"


# ------------------------------------------------------------------ precision recipes

LOWP = ["fp8-delayed", "fp8-current", "mxfp8", "nvfp4"]
PEAK_KEY = {"fp8-delayed": "fp8", "fp8-current": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200", "b300", "gb200-nvl72", "gb300-nvl72"])
@pytest.mark.parametrize("model, plan", [
    ("llama3.1-8b", dict(num_gpus=8, tp=1, global_batch=64, micro_batch=2, recompute="none")),
    ("llama3.1-70b", dict(num_gpus=64, tp=8, global_batch=128, micro_batch=1, recompute="full")),
    ("llama3.1-70b", dict(num_gpus=32, tp=4, cp=2, global_batch=64, seq_len=16384, recompute="selective")),
])
def test_lower_precision_never_beats_its_gemm_share(gpu, model, plan):
    """Amdahl: a recipe speeds up only the GEMMs, by at most its peak over the bf16 peak, so the
    step can shrink by at most (bf16 compute + recompute) x (1 - bf16 peak / recipe peak); the
    casts make the memory-bound part grow; and on a compute-bound plan it does speed up."""
    cluster = get_cluster(gpu)
    plan = dict(plan, seq_len=plan.get("seq_len", 8192))
    base = ps.estimate(model, cluster, dict(plan, precision="bf16"))
    gemm_s = base.time.compute_s + base.time.recompute_s
    for prec in LOWP:
        if prec in ("mxfp8", "nvfp4") and not cluster.gpu.block_scaling:
            continue
        low = ps.estimate(model, cluster, dict(plan, precision=prec, bf16_layers=0))
        r = cluster.gpu.peak_tflops[PEAK_KEY[prec]] / cluster.gpu.peak("bf16")
        assert low.step_time_s >= base.step_time_s - gemm_s * (1 - 1 / r) - 1e-9, prec
        assert low.step_time_s < base.step_time_s, prec
        assert low.time.memory_bound_s > base.time.memory_bound_s, prec  # quantization casts


def test_recipe_costs_are_ordered_as_their_work():
    """Same plan on B200: current scaling reads each tensor once more than delayed (more
    memory-bound time); NVFP4 GEMMs at the FP4 peak beat FP8 ones; bf16 layers cost time; the
    spelling fp8 is fp8-delayed."""
    plan = dict(num_gpus=8, tp=1, global_batch=64, micro_batch=2, recompute="none", seq_len=8192)
    e = {p: ps.estimate("llama3.1-8b", "b200", dict(plan, precision=p, bf16_layers=0))
         for p in ("fp8-delayed", "fp8-current", "mxfp8", "nvfp4")}
    assert ps.estimate("llama3.1-8b", "b200", dict(plan, precision="fp8")).step_time_s == e["fp8-delayed"].step_time_s
    assert e["fp8-current"].time.memory_bound_s > e["fp8-delayed"].time.memory_bound_s
    assert e["nvfp4"].time.compute_s < e["mxfp8"].time.compute_s == pytest.approx(e["fp8-delayed"].time.compute_s)
    default_nvfp4 = ps.estimate("llama3.1-8b", "b200", dict(plan, precision="nvfp4"))  # 15% of 32 -> 5 layers bf16
    assert default_nvfp4.time.compute_s > e["nvfp4"].time.compute_s
    cur_default = ps.estimate("llama3.1-8b", "b200", dict(plan, precision="fp8-current"))  # first + last bf16
    assert cur_default.time.compute_s > e["fp8-current"].time.compute_s
    # the attention core stays bf16: with a long sequence the attention share does not shrink
    bf = ps.estimate("llama3.1-8b", "b200", dict(plan, precision="bf16"))
    assert e["nvfp4"].time.compute_s > 0.25 * bf.time.compute_s


def test_low_precision_weight_copies_in_memory():
    """The quantized weight copies: per-tensor FP8 with fp8 params replaces the bf16 weights
    (Hopper keeps a transpose: same bytes; Blackwell: no transpose, fewer); MXFP8 keeps row- and
    column-wise copies; NVFP4 keeps bf16 weights beside its copies; lowp_params off adds them."""
    plan = dict(num_gpus=8, tp=8, global_batch=8, recompute="full", seq_len=4096)
    w = lambda gpu, **kw: ps.estimate("llama3.1-70b", gpu, dict(plan, **kw)).memory.weights_gib  # noqa: E731
    assert w("h100-sxm", precision="fp8") == pytest.approx(w("h100-sxm", precision="bf16"))
    assert w("h100-sxm", precision="fp8", lowp_params=False) == pytest.approx(2 * w("h100-sxm", precision="bf16"), rel=0.01)
    b_bf16 = w("b200", precision="bf16")
    assert w("b200", precision="fp8") == pytest.approx(0.5 * b_bf16, rel=0.01)
    assert w("b200", precision="mxfp8", bf16_layers=0) == pytest.approx(b_bf16 * (1 + 1 / 32), rel=0.01)
    assert w("b200", precision="nvfp4", bf16_layers=0) == pytest.approx(b_bf16 * (1 + 1.125 / 2), rel=0.01)


@pytest.mark.parametrize("gpu, precision", [("h100-sxm", "nvfp4"), ("h100-sxm", "mxfp8"), ("a100-80gb", "fp8"),
                                             ("h200", "nvfp4"), ("mi300x", "mxfp8")])
def test_precision_the_gpu_lacks_is_refused_naming_the_gpus_that_have_it(gpu, precision):
    plan = dict(num_gpus=8, tp=8, global_batch=8, seq_len=4096, precision=precision)
    with pytest.raises(InputError) as exc:
        ps.estimate("llama3.1-70b", gpu, plan)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"precision: {gpu}") and precision in msg
    have = msg.split("GPUs with it: ")[1].split(";")[0].split(", ")
    if precision == "fp8":
        assert {"h100-sxm", "h200", "h800", "b200", "gb300-nvl72", "mi300x"} <= set(have)
    else:
        # Blackwell and CDNA 4 (MI350X, MI355X: OCP MX block scaling) apply block scales in hardware
        assert have == ["b200", "b300", "gb200-nvl72", "gb300-nvl72", "mi350x", "mi355x"]


def test_precision_refusal_through_search_and_cli():
    from click.testing import CliRunner

    from plan_search.cli.estimate import main as estimate_cli

    with pytest.raises(InputError, match=r"precision: h100-sxm .*GPUs with it: b200, b300, gb200-nvl72, gb300-nvl72"):
        ps.search(model="llama3.1-8b", gpu="h100", gpus=[8], global_batch=[64], seq_len=4096, precision="nvfp4")
    r = CliRunner().invoke(estimate_cli, ["--model", "llama3.1-70b", "--gpu", "h100", "--num-gpus", "8", "--tp", "8",
                                          "--global-batch", "8", "--seq-len", "4096", "--precision", "mxfp8"])
    assert r.exit_code != 0 and "GPUs with it: b200, b300, gb200-nvl72, gb300-nvl72" in r.output
    assert r.output.strip().count("\n") == 0


def test_bf16_layers_rules():
    with pytest.raises(ValueError, match="bf16_layers: precision fp8 .*delayed scaling"):
        ps.Plan(num_gpus=8, global_batch=8, seq_len=4096, precision="fp8", bf16_layers=2)
    with pytest.raises(InputError, match="bf16_layers: 99 exceeds num_layers 32"):
        ps.estimate("llama3.1-8b", "b200", dict(num_gpus=8, global_batch=8, seq_len=4096, precision="nvfp4",
                                                bf16_layers=99))


@pytest.mark.parametrize("precision, flags", [
    ("fp8", ["--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-param-gather"]),
    ("fp8-current", ["--fp8-recipe", "tensorwise", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "1",
                     "--num-layers-at-end-in-bf16", "1"]),
    ("mxfp8", ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8", "--fp8-param-gather"]),
    ("nvfp4", ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4", "--num-layers-at-end-in-bf16", "11"]),
])
def test_megatron_emits_each_recipe_and_reads_it_back(precision, flags):
    """The recipe reaches the launch flags (Megatron-LM arguments.py names), and the flags read back
    to a plan with the same estimate; a framework whose emitter lacks the recipe refuses it."""
    from plan_search.planner.frameworks import emit as E

    m = get_model("llama3.1-70b")
    p = ps.Plan(num_gpus=64, tp=8, pp=2, global_batch=128, seq_len=8192, precision=precision)
    args = E.to_megatron_args(p, m, get_cluster("b200"))
    text = " ".join(args)
    assert " ".join(flags) in text or all(f in args for f in flags)
    q = E.from_megatron_args(args, 64)
    assert q.precision == precision and q.lowp_params == p.lowp_params
    assert ps.estimate(m, "b200", q).step_time_s == ps.estimate(m, "b200", p).step_time_s
    if precision != "fp8":
        with pytest.raises(InputError, match=rf"nemo: nemo-precision: .*\(precision {precision}\)"):
            E.to_nemo_overrides(p, m, get_cluster("b200"))


def test_h800_tp_comm_pays_its_reduced_nvlink():
    """H800: the H100's compute with NVLink cut from 450 to 200 GB/s per direction, so a TP=8 layer's
    all-reduces take 450/200 times as long (bandwidth term; the per-step latency is the same)."""
    plan = dict(num_gpus=8, tp=8, global_batch=8, recompute="full", seq_len=4096)
    h100, h800 = _est(H100, **plan), _est(get_cluster("h800"), **plan)
    assert h800.time.compute_s == pytest.approx(h100.time.compute_s)
    assert h800.time.tp_comm_s > 2.0 * h100.time.tp_comm_s
    assert h800.time.tp_comm_s < 450 / 200 * h100.time.tp_comm_s
