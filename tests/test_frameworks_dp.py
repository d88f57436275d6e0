"""Issue 12: data parallelism as each framework runs it, framework efficiency profiles, and the
pipeline splits the frameworks make (through the public API and the plan-estimate CLI)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.estimate import main as estimate_cli
from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.profiles import EAGER_OVER_COMPILED, for_framework, load_profiles
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as F

H100 = "h100-sxm"


def _dp(**kw) -> float:
    """Data-parallel seconds of a 70B FSDP plan on 64 H100s (8 nodes), overlap off so that the
    breakdown's dp row is every collective."""
    plan = dict(num_gpus=64, tp=1, pp=1, zero=3, micro_batch=1, seq_len=4096, recompute="full",
                overlap_grad_reduce=False, overlap_param_gather=False)
    plan.update(kw)
    return ps.estimate("llama3.1-70b", H100, **plan).time.dp_comm_s


def test_fsdp_reduce_scatter_once_per_step_vs_every_micro_batch():
    # 4 micro-batches per step (global batch 256 over dp 64)
    per_mb = _dp(global_batch=256, grad_reduce="microbatch")
    once = _dp(global_batch=256, grad_reduce="step")
    one_mb = _dp(global_batch=64)  # m = 1: two gathers and one reduce-scatter
    assert per_mb == pytest.approx(4 * one_mb, rel=1e-9)  # everything repeats per micro-batch
    assert once < per_mb
    # the difference is 3 reduce-scatters; in fp32 they move twice the bytes of bf16
    rs_fp32 = (per_mb - once) / 3
    rs_bf16 = (_dp(global_batch=256, grad_reduce="microbatch", fp32_grads=False)
               - _dp(global_batch=256, grad_reduce="step", fp32_grads=False)) / 3
    assert rs_fp32 == pytest.approx(2 * rs_bf16, rel=1e-3)
    # the default for ZeRO-3 without pipeline parallelism is FSDP2's: every micro-batch
    assert _dp(global_batch=256) == pytest.approx(per_mb, rel=1e-12)
    # without resharding after the forward, the backward reuses the forward's gather
    assert _dp(global_batch=256, reshard_after_forward=False) < per_mb


def test_fsdp_under_pipelining_reduces_once_per_step_by_default():
    base = dict(num_gpus=64, tp=1, pp=4, zero=3, micro_batch=1, global_batch=64, seq_len=4096, recompute="full",
                overlap_grad_reduce=False, overlap_param_gather=False)
    default = ps.estimate("llama3.1-70b", H100, **base).time.dp_comm_s
    step = ps.estimate("llama3.1-70b", H100, **base, grad_reduce="step").time.dp_comm_s
    mb = ps.estimate("llama3.1-70b", H100, **base, grad_reduce="microbatch").time.dp_comm_s
    assert default == pytest.approx(step, rel=1e-12) and step < mb


def test_hsdp_is_cheaper_across_nodes_than_flat_fsdp_at_the_same_dp():
    # shard inside each 8-GPU node, 8 replicas across the nodes: the parameter gathers stay on
    # NVLink; the replicas' all-reduce of 1/8 of the gradients crosses the NICs. NCCL's flat ring
    # over 64 GPUs also carries only 1/8 of a collective per NIC, so with fp32 gradients (an
    # all-reduce moves twice a reduce-scatter's bytes) the two nearly tie, and with bf16 gradients
    # the saved gathers win.
    assert _dp(global_batch=64, dp_shard=8) < _dp(global_batch=64)
    bf16_flat, bf16_hsdp = _dp(global_batch=64, fp32_grads=False), _dp(global_batch=64, fp32_grads=False, dp_shard=8)
    assert bf16_hsdp < 0.9 * bf16_flat
    # DeepSpeed's per-module ZeRO-3 collectives (flat rings, the deepspeed profile's zero3_flat):
    # every GPU's whole traffic over its NIC; HSDP keeps it in the node
    base = get_cluster(H100)
    flat_rings = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"zero3_flat": True})})
    kw = dict(num_gpus=64, zero=3, micro_batch=1, global_batch=64, seq_len=4096, recompute="full",
              overlap_grad_reduce=False, overlap_param_gather=False)
    flat = ps.estimate("llama3.1-70b", flat_rings, **kw).time.dp_comm_s
    hsdp = ps.estimate("llama3.1-70b", flat_rings, dp_shard=8, **kw).time.dp_comm_s
    assert hsdp < flat / 3
    # a group inside one NVLink domain is never slower than the same group across NICs
    assert _dp(num_gpus=8, global_batch=8) <= _dp(num_gpus=64, global_batch=64) / 8 * 8
    with pytest.raises(Exception, match="dp_shard"):
        ps.estimate("llama3.1-70b", H100, num_gpus=64, zero=3, micro_batch=1, global_batch=64, dp_shard=7)


def test_hsdp_and_reshard_in_the_torchtitan_config_round_trip():
    from plan_search.models.catalog import get_model

    m = get_model("llama3.1-8b")
    p = ps.Plan(num_gpus=32, zero=3, dp_shard=8, reshard_after_forward=False, micro_batch=1, global_batch=64,
                seq_len=8192, recompute="full")
    sec = E.torchtitan_sections(p, m)["parallelism"]
    assert (sec["data_parallel_replicate_degree"], sec["data_parallel_shard_degree"]) == (4, 8)
    assert sec["fsdp_reshard_after_forward"] == "never"
    back = E.from_torchtitan_toml(E.to_torchtitan_toml(p, m), m.num_layers)
    assert (back.dp_shard, back.reshard_after_forward) == (8, False)
    # Megatron: partial sharding is the distributed optimizer's instances; DeepSpeed refuses it
    q = p.model_copy(update={"zero": 1, "reshard_after_forward": True})
    args = E.to_megatron_args(q, m)
    assert args[args.index("--num-distributed-optimizer-instances") + 1] == "4"
    assert E.from_megatron_args(args, 32).dp_shard == 8
    assert "deepspeed-dp-shard" in [v.rule.id for v in F.check("deepspeed", F.conform("deepspeed", q, m.num_layers), m)]


def _cli(*args):
    r = CliRunner().invoke(estimate_cli, list(args))
    return r.exit_code, r.output


LLAMA405_PP16 = ("--model", "llama3.1-405b", "--gpu", H100, "--num-gpus", "2048", "--tp", "8", "--pp", "16",
                 "--vpp", "8", "--micro-batch", "1", "--global-batch", "2048", "--seq-len", "8192")


def test_405b_pp16_vpp8_with_embedding_and_loss_accounting_through_the_cli():
    code, out = _cli(*LLAMA405_PP16, "--account-for-embedding-in-pipeline-split",
                     "--account-for-loss-in-pipeline-split", "--framework", "megatron", "--emit")
    assert code in (0, 3), out
    assert "7|8x14|7 layers (embedding and loss counted as a layer)" in " ".join(out.split())
    assert "--account-for-embedding-in-pipeline-split" in out and "--account-for-loss-in-pipeline-split" in out
    # without the accounting 126 layers do not cut into 16 x 8 equal chunks: one line naming vpp
    code, out = _cli(*LLAMA405_PP16)
    assert code == 2 and out.strip().count("\n") == 0 and "vpp" in out and "account_for" in out


def test_uneven_split_is_balanced_by_default_and_printed():
    code, out = _cli("--model", "llama3.1-405b", "--gpu", H100, "--num-gpus", "1280", "--tp", "8", "--pp", "10",
                     "--micro-batch", "1", "--global-batch", "2048", "--seq-len", "8192")
    assert code in (0, 3), out
    assert "13x6|12x4 layers (balanced: 10 does not divide 126)" in " ".join(out.split())
    p = ps.Plan(num_gpus=1280, tp=8, pp=10, global_batch=2048, seq_len=8192)
    assert p.split(126) == [13] * 6 + [12] * 4 and p.stage_layers(126) == (13, 13, 12)


def test_framework_profiles_are_fitted_on_their_own_rows():
    profiles = load_profiles()
    tt = profiles["h100-96gb-500w"]["torchtitan"]  # the 500 W H100s its benchmark ran on
    assert "torchtitan" in tt.source and "1091" in tt.source  # names the rows it saw
    base = get_cluster(H100)
    assert for_framework(base, "megatron") == base and for_framework(base, None) == base
    # a profile fitted on the 500 W part is not carried to the 700 W one: h100-sxm gets the family
    # prior (its Megatron fit, compiled fusion, FlashAttention-2's attention), never faster kernels
    carried = for_framework(base, "torchtitan").efficiency
    assert carried.gemm_eff_max == base.efficiency.gemm_eff_max and carried.kernel_fusion == "compiled"
    assert carried.attention_eff < base.efficiency.attention_eff and "family prior" in carried.source
    eager = for_framework(base, "torchtitan", compiled=False).efficiency
    # eager differs by its unfused element-wise passes only (a structural term, no fitted factor)
    assert eager.kernel_fusion == "eager" and eager.gemm_eff_max == carried.gemm_eff_max
    assert 0.8 < EAGER_OVER_COMPILED < 0.9
    kw = dict(num_gpus=8, zero=3, micro_batch=1, global_batch=16, seq_len=8192, recompute="full")
    t_meg = ps.estimate("llama3.1-8b", H100, **kw).step_time_s
    t_tt = ps.estimate("llama3.1-8b", H100, framework="torchtitan", **kw).step_time_s
    t_eager = ps.estimate("llama3.1-8b", H100, framework="torchtitan", compiled=False, **kw).step_time_s
    assert t_tt != t_meg and t_eager > t_tt
    ds = for_framework(get_cluster("a100-80gb"), "deepspeed").efficiency
    assert ds.zero3_flat and "11" in ds.source


def test_framework_defaults_for_unset_dp_knobs_through_the_cli():
    args = ("--model", "llama3.1-405b", "--gpu", H100, "--num-gpus", "512", "--tp", "8", "--pp", "8", "--zero", "3",
            "--micro-batch", "4", "--global-batch", "256", "--seq-len", "8192", "--recompute", "full")
    code, out = _cli(*args, "--framework", "torchtitan")
    flat = " ".join(out.split())
    # torchtitan under pipeline parallelism: FSDP2 keeps the parameters gathered after the forward
    # (reshard_after_forward = not pp_enabled) and reduce-scatters once per step (torch pipelining)
    assert code in (0, 3) and "params kept gathered after forward" in flat and "reduced once per step" in flat
    code, out = _cli(*args, "--framework", "torchtitan", "--reshard-after-forward", "on")
    assert code in (0, 3) and "params resharded after forward" in " ".join(out.split())
    code, out = _cli(*args)
    assert code in (0, 3) and "params resharded after forward" in " ".join(out.split())
