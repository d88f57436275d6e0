"""A framework's defaults never replace what the user wrote: a cluster file's explicit efficiency
terms win over the framework's kernel-efficiency profile (through the plan-estimate CLI and the API)."""

from __future__ import annotations

from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.estimate import main as estimate_cli
from plan_search.hardware.catalog import get_cluster

H100 = "h100-sxm"
LLAMA = dict(num_gpus=64, tp=8, pp=1, zero=3, micro_batch=1, global_batch=64, seq_len=8192, recompute="full")
LLAMA_ARGS = ("--model", "llama3.1-70b", "--num-gpus", "64", "--tp", "8", "--pp", "1", "--zero", "3",
              "--micro-batch", "1", "--global-batch", "64", "--seq-len", "8192", "--recompute", "full")


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(estimate_cli, list(args), catch_exceptions=False)
    return r.exit_code, r.output


def test_cluster_file_kernel_fusion_wins_over_the_torchtitan_profile(tmp_path):
    lab = tmp_path / "lab.yaml"
    lab.write_text("base: h100-sxm\nefficiency:\n  kernel_fusion: eager\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("base: h100-sxm\nprice_per_gpu_hour_usd: 2.0\n")
    eager_file = ps.estimate("llama3.1-70b", str(lab), framework="torchtitan", **LLAMA).step_time_s
    compiled = ps.estimate("llama3.1-70b", H100, framework="torchtitan", **LLAMA).step_time_s
    eager_set = ps.estimate("llama3.1-70b", H100, framework="torchtitan", sets=["efficiency.kernel_fusion=eager"],
                            **LLAMA).step_time_s
    # the file's eager is priced (Llama's unfused RMSNorm/RoPE/SwiGLU passes): as the --set spelling, slower
    # than torchtitan's compiled default, which a file without the term still gets
    assert eager_file == eager_set and eager_file > compiled * 1.01
    assert ps.estimate("llama3.1-70b", str(plain), framework="torchtitan", **LLAMA).step_time_s == compiled
    code, out = _cli(*LLAMA_ARGS, "--gpu", str(lab), "--framework", "torchtitan")
    flat = " ".join(out.split())
    assert code in (0, 3), out
    assert "kernel fusion eager" in flat and "kernel_fusion=eager kept from cluster file lab.yaml over the " \
        "torchtitan profile" in flat
    code, out = _cli(*LLAMA_ARGS, "--gpu", str(plain), "--framework", "torchtitan")
    assert code in (0, 3) and "kernel fusion compiled" in " ".join(out.split()) and "kept from" not in out


def test_cluster_file_efficiency_terms_win_in_the_search(tmp_path):
    # every term the file sets (here two) is kept, in the search as in the estimate: the same as --set
    lab = tmp_path / "lab.yaml"
    lab.write_text("base: h100-sxm\nefficiency:\n  kernel_fusion: eager\n  attention_eff: 0.5\n")
    kw = dict(model="llama3.1-8b", framework="torchtitan", gpus=[8], tp=[1], pp=[1], zero=[3], recompute=["full"],
              tokens=1e9)
    r_file = ps.search(gpu=[str(lab)], **kw)
    r_set = ps.search(gpu=[H100], sets=["efficiency.kernel_fusion=eager", "efficiency.attention_eff=0.5"], **kw)
    assert r_file.recommended.step_time_s == r_set.recommended.step_time_s
    assert r_file.recommended.step_time_s != ps.search(gpu=[H100], **kw).recommended.step_time_s


# ---- the memory knobs (issue 11) as each framework runs them: its defaults, its flags, its refusals

from plan_search.cli.search import main as search_cli  # noqa: E402
from plan_search.models.catalog import get_model  # noqa: E402
from plan_search.models.io import InputError  # noqa: E402
from plan_search.planner.frameworks import emit as E  # noqa: E402
from plan_search.planner.frameworks import rules as F  # noqa: E402

import pytest  # noqa: E402

# one stage (pp 1): the loss's logits buffer is on the only stage, so the loss implementation moves the peak
ONE_STAGE = dict(num_gpus=8, tp=8, pp=1, zero=1, micro_batch=1, global_batch=8, seq_len=8192)
ONE_STAGE_ARGS = ("--model", "llama3.1-8b", "--gpu", H100, "--num-gpus", "8", "--tp", "8", "--pp", "1", "--zero", "1",
                  "--micro-batch", "1", "--global-batch", "8", "--seq-len", "8192", "--format", "json")


def _peak(out: str) -> float:
    import json

    return json.loads(out)["memory"]["peak_gib"]


def test_each_framework_prices_its_own_loss_when_the_user_names_none():
    peak = {ce: ps.estimate("llama3.1-8b", H100, cross_entropy=ce, recompute="full", **ONE_STAGE).memory.peak_gib
            for ce in ("pytorch", "megatron", "te")}
    assert peak["pytorch"] > peak["megatron"] > peak["te"]  # 4+8, 4+2, 2+0 bytes per logit (Plan.cross_entropy)
    extra = {"megatron": (), "nemo": (), "torchtitan": ("--zero", "3"), "deepspeed": ("--no-sequence-parallel",)}
    for framework, ce in (("megatron", "megatron"), ("nemo", "megatron"), ("torchtitan", "pytorch"),
                          ("deepspeed", "pytorch")):
        assert F.memory_defaults(framework)["cross_entropy"] == ce
        args = ONE_STAGE_ARGS + ("--recompute", "full") + extra[framework] + ("--framework", framework)
        code, out = _cli(*args)
        assert code in (0, 3), out
        code2, out2 = _cli(*args, "--cross-entropy", ce)  # the framework's default, named
        assert code2 == code and _peak(out) == _peak(out2), framework
    # Megatron's default is its loss, not the Plan's upper bound: the same peak as the plan priced with it
    code, out = _cli(*ONE_STAGE_ARGS, "--recompute", "full", "--framework", "megatron")
    assert _peak(out) == pytest.approx(peak["megatron"], rel=1e-12)
    # without a framework the Plan's default stays the upper bound, and an explicit value is the user's
    code, out = _cli(*ONE_STAGE_ARGS, "--recompute", "full")
    assert _peak(out) == pytest.approx(peak["pytorch"], rel=1e-12)
    code, out = _cli(*ONE_STAGE_ARGS, "--recompute", "full", "--framework", "megatron", "--cross-entropy", "te")
    assert _peak(out) == pytest.approx(peak["te"], rel=1e-12)


def test_megatron_flags_for_the_memory_knobs_round_trip():
    m = get_model("llama3.1-70b")
    base = dict(num_gpus=256, tp=8, pp=4, zero=1, micro_batch=1, global_batch=512, seq_len=8192)
    cases = {
        (): {},  # the default loss writes nothing
        ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl te"): dict(cross_entropy="te"),
        ("--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"):
            dict(adam_moments_dtype="bf16", master_weights="bf16_remainder"),
        ("--use-precision-aware-optimizer",): dict(master_weights="bf16_remainder"),
        # current scaling keeps fp32 masters: bf16 moments alone
        ("--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16", "--fp8-recipe tensorwise"):
            dict(adam_moments_dtype="bf16", precision="fp8-current"),
    }
    for flags, knobs in cases.items():
        p = ps.Plan(**base, **knobs)
        args = E.to_megatron_args(p, m)
        text = " ".join(args)
        for f in flags:
            assert f in text, (f, text)
        if not flags:
            assert "cross-entropy" not in text and "precision-aware" not in text
        assert E.from_megatron_args(args, 256) == F.normalize("megatron", p, m.num_layers)
        assert E.from_megatron_args(args, 256).cross_entropy == knobs.get("cross_entropy", "megatron")


def test_nemo_overrides_for_the_memory_knobs_round_trip():
    m = get_model("llama3.1-70b")
    p = ps.Plan(num_gpus=256, tp=8, pp=4, zero=1, micro_batch=1, global_batch=512, seq_len=8192, cross_entropy="te",
                adam_moments_dtype="bf16", act_fp8_input_store=True,
                master_weights="fp32")  # fp32 masters named: store_param_remainders off
    o = E.to_nemo_overrides(p, m)
    assert o["model.config.cross_entropy_fusion_impl"] == "te" and o["model.config.cross_entropy_loss_fusion"]
    assert o["optim.config.use_precision_aware_optimizer"] and o["optim.config.exp_avg_dtype"] == "torch.bfloat16"
    assert o["optim.config.store_param_remainders"] is False and o["model.config.activation_func_fp8_input_store"]
    assert E.from_nemo_overrides(E.nemo_overrides_text(o)) == F.normalize("nemo", p, m.num_layers)


@pytest.mark.parametrize("framework, option, value, rule", [
    ("megatron", "--cross-entropy", "pytorch", "megatron-cross-entropy"),
    ("megatron", "--master-weights", "none", "megatron-master-weights"),
    ("megatron", "--act-fp8-input-store", None, "megatron-act-fp8-input-store"),
    ("megatron", "--act-clamp-fused", None, "megatron-act-clamp-fused"),
    ("nemo", "--act-clamp-fused", None, "nemo-act-clamp-fused"),
    # bf16 masters come with bf16 moments (the default then); fp32 masters named with them are refused
    ("megatron", "--adam-moments-dtype", "bf16 --master-weights fp32", "megatron-optimizer-precision"),
    ("torchtitan", "--cross-entropy", "te", "torchtitan-cross-entropy"),
    ("torchtitan", "--cross-entropy", "pytorch_bf16", "torchtitan-cross-entropy"),
    ("torchtitan", "--adam-moments-dtype", "bf16", "torchtitan-adam-moments-dtype"),
    ("deepspeed", "--cross-entropy", "megatron", "deepspeed-cross-entropy"),
    ("deepspeed", "--master-weights", "bf16_remainder", "deepspeed-master-weights"),
])
def test_a_knob_value_the_framework_cannot_run_is_refused_with_its_rule(framework, option, value, rule):
    args = [a for a in ONE_STAGE_ARGS if a not in ("--format", "json")] + ["--recompute", "full",
                                                                            "--framework", framework]
    if framework == "torchtitan":
        args[args.index("--zero") + 1] = "3"
    if framework == "deepspeed":
        args.append("--no-sequence-parallel")
    code, out = _cli(*args, option, *(value.split() if value else []), "--emit")
    assert code == 2 and out.startswith(f"error: {framework}: {rule}: ") and out.count("\n") == 1, out
    r = next(r for r in F.rules(framework) if r.id == rule)
    assert "@" in r.source  # repo@commit path


def test_nemo_stores_fp8_activation_inputs_for_swiglu_only():
    gpt = get_model("gpt3-175b")  # GELU
    p = ps.Plan(num_gpus=64, tp=8, pp=8, micro_batch=1, global_batch=64, seq_len=2048, act_fp8_input_store=True)
    assert [v.rule.id for v in F.check("nemo", p, gpt)] == ["nemo-act-fp8-input-store"]
    with pytest.raises(InputError, match="nemo-act-fp8-input-store"):
        E.to_nemo_overrides(p, gpt)


def test_the_search_runs_each_frameworks_default_loss_and_refuses_what_it_cannot_run():
    kw = dict(model="llama3.1-8b", gpu=[H100], gpus=[8], tokens=1e10)
    assert ps.search(**kw, framework="megatron").recommended.plan.cross_entropy == "megatron"
    assert ps.search(**kw, framework="torchtitan").recommended.plan.cross_entropy == "pytorch"
    # the framework-free what-if keeps the Plan's default; the default search (issue 23: it spans the
    # frameworks) gives its pick the loss of the framework it names
    assert ps.search(**kw, framework="none").recommended.plan.cross_entropy == "pytorch"
    res = ps.search(**kw)
    loss = {"megatron": ("megatron", "te"), "nemo": ("megatron", "te"), "torchtitan": ("pytorch",),
            "deepspeed": ("pytorch", "pytorch_bf16")}
    assert all(res.recommended.plan.cross_entropy in loss[f] for f in res.recommended_framework), res.recommended_framework
    with pytest.raises(InputError, match=r"^cross_entropy: megatron cannot run pytorch; use megatron or te"):
        ps.search(**kw, framework="megatron", knobs={"cross_entropy": ["pytorch"]})
    r = CliRunner().invoke(search_cli, ["--model", "llama3.1-8b", "--gpu", H100, "--gpus", "8", "--framework",
                                        "torchtitan", "--cross-entropy", "te"])
    assert r.exit_code == 2 and r.output.startswith("error: cross_entropy: torchtitan cannot run te") \
        and r.output.count("\n") == 1, r.output


def test_a_catalog_dump_overrides_only_the_terms_it_changes(tmp_path):
    from plan_search.cli.catalog import main as catalog_cli

    r = CliRunner().invoke(catalog_cli, ["show", H100])
    assert r.exit_code == 0, r.output
    same = tmp_path / "h100-dump.yaml"
    same.write_text(r.output)  # restates h100-sxm under its name: no term of it is an override
    changed = tmp_path / "h100-eager.yaml"
    changed.write_text(r.output.replace("kernel_fusion: fused", "kernel_fusion: eager"))
    assert "kernel_fusion: eager" in changed.read_text()
    t = {g: ps.estimate("llama3.1-70b", g, framework="torchtitan", **LLAMA).step_time_s
         for g in (H100, str(same), str(changed))}
    eager = ps.estimate("llama3.1-70b", H100, framework="torchtitan", sets=["efficiency.kernel_fusion=eager"],
                        **LLAMA).step_time_s
    assert t[str(same)] == t[H100] and t[str(changed)] == eager != t[H100]


def test_the_api_and_the_cli_price_a_framework_named_plan_alike():
    """plan_search.estimate(framework=...) prices the plan plan-estimate --framework prices: the
    framework's defaults for the unset knobs (Megatron's loss, torchtitan's reshard-after-forward),
    and the same refusal for a plan the framework cannot run."""
    import json

    for framework, extra, kw in (("megatron", (), {}), ("nemo", (), {}),
                                 ("torchtitan", ("--zero", "3", "--tp", "4", "--pp", "2"), dict(zero=3, tp=4, pp=2))):
        api = ps.estimate("llama3.1-8b", H100, framework=framework, recompute="full", **{**ONE_STAGE, **kw})
        code, out = _cli(*ONE_STAGE_ARGS, "--recompute", "full", *extra, "--framework", framework, "--format", "json")
        cli = json.loads(out)
        assert cli["plan"] == json.loads(api.plan.model_dump_json()), framework
        assert cli["step_time_s"] == api.step_time_s and cli["memory"] == json.loads(api.memory.model_dump_json())
    assert ps.estimate("llama3.1-8b", H100, framework="megatron", recompute="full", **ONE_STAGE).plan.cross_entropy \
        == "megatron"
    tt = ps.estimate("llama3.1-8b", H100, framework="torchtitan", recompute="full", **{**ONE_STAGE, "zero": 3, "tp": 4, "pp": 2})
    assert tt.plan.reshard_after_forward is False  # torchtitan keeps parameters gathered under pipeline parallelism
    with pytest.raises(InputError, match="torchtitan-zero12"):
        ps.estimate("llama3.1-8b", H100, framework="torchtitan", recompute="full", **{**ONE_STAGE, "zero": 1, "tp": 4})
    code, out = _cli(*ONE_STAGE_ARGS, "--recompute", "full", "--zero", "1", "--tp", "4", "--framework", "torchtitan")
    assert code == 2 and "torchtitan-zero12" in out


def test_bf16_moments_under_megatron_core_keep_bf16_master_remainders_by_default():
    """bf16 Adam moments turn on Megatron-Core's precision-aware optimizer, whose store_param_remainders
    defaults to True: on bf16 (and FP8 delayed) the master weights are bf16 remainders unless the plan says
    otherwise; under FP8 current scaling they stay fp32. The search asked for bf16 moments finds plans (it
    found none: every candidate kept fp32 masters, which Megatron-LM cannot run with bf16 moments there)."""
    kw = dict(model="llama3.1-8b", gpu=[H100], gpus=[8], tokens=1e10)
    for fw in ("megatron", "nemo"):
        rec = ps.search(**kw, framework=fw, knobs={"adam_moments_dtype": ["bf16"]}).recommended.plan
        assert (rec.adam_moments_dtype, rec.master_weights) == ("bf16", "bf16_remainder"), fw
    one = dict(num_gpus=8, tp=1, zero=1, global_batch=8, seq_len=4096, recompute="full", adam_moments_dtype="bf16")
    bf16 = ps.estimate("llama3.1-8b", H100, framework="megatron", **one)
    assert bf16.plan.master_weights == "bf16_remainder"
    fp32_masters = ps.estimate("llama3.1-8b", H100, framework="nemo", master_weights="fp32", **one)
    assert fp32_masters.plan.master_weights == "fp32"  # NeMo can turn the remainders off
    assert fp32_masters.memory.peak_gib > bf16.memory.peak_gib
    fp8cs = ps.estimate("llama3.1-8b", H100, framework="megatron", precision="fp8-current", **one)
    assert fp8cs.plan.master_weights == "fp32"
    code, out = _cli(*ONE_STAGE_ARGS, "--framework", "megatron", "--adam-moments-dtype", "bf16", "--format", "json")
    import json

    assert json.loads(out)["plan"]["master_weights"] == "bf16_remainder"


def test_a_term_at_its_base_value_overrides_no_profile(tmp_path):
    """plan-calibrate writes a complete efficiency section onto its base: the terms it left at the
    base's values (kernel_fusion fused, Megatron's per-expert GEMM call time) restate the base and must
    not override a framework's profile, while a term it changed does (hardware.resolve._mark_efficiency).
    torchtitan's blocks stay compiled on such a file (and its MoE experts one grouped kernel, the plan's)."""
    base = get_cluster(H100).efficiency
    full = tmp_path / "calibrated.yaml"
    full.write_text(f"base: h100-sxm\nefficiency:\n  kernel_fusion: fused\n  grouped_gemm_call_s: {base.grouped_gemm_call_s!r}\n"
                    f"  gemm_eff_max: 0.5\n")
    kw = dict(num_gpus=8, ep=8, zero=3, global_batch=64, seq_len=4096, recompute="full", framework="torchtitan")
    e = ps.estimate("qwen3-30b-a3b", str(full), **kw)
    assert e.efficiency.kernel_fusion == "compiled" and e.plan.moe_grouped_gemm == "fused"
    assert e.efficiency.grouped_gemm_call_s == base.grouped_gemm_call_s
    assert e.efficiency.gemm_eff_max == 0.5 and "gemm_eff_max=0.5 kept from cluster file calibrated.yaml" in e.efficiency.source
    same = ps.estimate("qwen3-30b-a3b", H100, sets=["efficiency.gemm_eff_max=0.5"], **kw)
    assert e.step_time_s == same.step_time_s
