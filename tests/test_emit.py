"""Launch configurations (planner.emit) and framework rules (planner.frameworks).

Always on: values consistent (global batch = micro x accumulation x dp, degrees multiply to the GPU
count), every emitted name in the kept argument list (planner/data/framework_args, with its source),
Megatron flags parsed by an argparse parser of that list, round trips over generated plans, refusals
naming the rule, knobs normalized away have no effect on the estimate, and the CLI.

When the frameworks are installed (not with ``.[dev]`` alone: these tests skip there), the emitted
configurations also go through the frameworks' own code: DeepSpeed's ``DeepSpeedConfig`` and pipeline
partitioner, torchtitan's ``ConfigManager``/``JobConfig``, ``ParallelDims`` and stage splitter,
Megatron-Core's ``TransformerConfig``, ``DistributedDataParallelConfig`` and ``get_num_layers_to_build``,
and NeMo's ``MegatronStrategy``/``MegatronMixedPrecision``/``MockDataModule`` signatures (read from the
installed nemo-toolkit sources).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import types
import warnings
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from plan_search.cli.estimate import main as estimate_main
from plan_search.hardware.resolve import resolve_cluster
from plan_search.models.catalog import get_model
from plan_search.models.io import InputError
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as F
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.search.request import Knobs
from plan_search.planner.costmodel.plan import Plan

FW = F.FRAMEWORKS
MODELS = ["llama2-70b", "gpt3-175b", "megatron-gpt-529.6b", "llama3.1-8b", "nemotron-3-8b", "gpt-neox-20b"]
H100 = resolve_cluster("h100")
A100 = resolve_cluster("a100")


def _divisors(n: int, cap: int = 64) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


@st.composite
def plans(draw, model_names=MODELS):
    """Valid plans of a catalog model (Plan and check_against rules hold)."""
    m = get_model(draw(st.sampled_from(model_names)))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if m.num_heads % t == 0 and m.ffn_hidden_size % t == 0
                               and (m.num_kv_heads % t == 0 or t % m.num_kv_heads == 0)]))
    pp = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8]))
    cp = draw(st.sampled_from([1, 1, 2]))
    dp = draw(st.sampled_from([1, 2, 4]))
    mb = draw(st.sampled_from([1, 2]))
    accum = draw(st.sampled_from([1, 2, 4, 8, 12]))
    first = last = None
    vpp = 1
    if pp > 1:
        if m.num_layers % pp or draw(st.booleans()):
            mid = -(-m.num_layers // pp)
            mid = draw(st.sampled_from(sorted({mid, mid + 1, mid + 2})))
            rest = m.num_layers - (pp - 2) * mid
            assume(rest >= 2)
            first = draw(st.integers(1, rest - 1)) if pp > 2 else draw(st.integers(1, m.num_layers - 1))
            last = rest - first if pp > 2 else m.num_layers - first
            assume(last >= 1)
        per = m.num_layers // pp
        vpp = draw(st.sampled_from([v for v in (1, 2, 3, 4) if per % v == 0] or [1]))
        if vpp > 1 and accum % pp:
            accum = pp * draw(st.sampled_from([1, 2]))
    recompute = draw(st.sampled_from(["none", "selective", "full", "full"]))
    rc_layers = None
    if recompute == "full" and draw(st.booleans()):
        rc_layers = draw(st.integers(1, max(1, m.num_layers // pp)))
    data = dict(
        num_gpus=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp, zero=draw(st.sampled_from([0, 1, 2, 3])),
        micro_batch=mb, global_batch=mb * dp * accum, seq_len=draw(st.sampled_from([2048, 4096])),
        recompute=recompute, recompute_layers=rc_layers, sequence_parallel=draw(st.booleans()),
        flash_attention=True if cp > 1 else draw(st.sampled_from([True, True, False])),
        precision=draw(st.sampled_from(["bf16", "bf16", "fp16", "fp8"])), fp32_grads=draw(st.booleans()),
        overlap_grad_reduce=draw(st.booleans()), overlap_param_gather=draw(st.booleans()),
        overlap_tp_comm=draw(st.booleans()), first_stage_layers=first, last_stage_layers=last,
    )
    try:
        p = Plan(**data)
        p.check_against(m)
    except (ValueError, InputError):
        assume(False)
    return p, m


# ------------------------------------------------------------------ writers and readers per framework


def write(framework: str, p: Plan, m):
    if framework == "megatron":
        return E.to_megatron_args(p, m, H100)
    if framework == "deepspeed":
        return E.to_deepspeed_config(p, m, H100), E.to_deepspeed_pipeline(p, m, cluster=H100)
    if framework == "torchtitan":
        return E.to_torchtitan_toml(p, m, H100)
    return E.to_nemo_overrides(p, m, H100)


def read(framework: str, out, p: Plan, m) -> Plan:
    if framework == "megatron":
        return E.from_megatron_args(out, p.num_gpus)
    if framework == "deepspeed":
        cfg, pipe = out
        return E.from_deepspeed_config(json.loads(json.dumps(cfg)), p.num_gpus, p.seq_len, pipe,
                                       flash_attention=p.flash_attention)
    if framework == "torchtitan":
        return E.from_torchtitan_toml(out, m.num_layers)
    return E.from_nemo_overrides(E.nemo_overrides_text(out))


def consistent(framework: str, out, p: Plan) -> None:
    """The emitted numbers agree with each other and with the plan."""
    n = p.num_gpus
    if framework == "megatron":
        ns = E.megatron_parser().parse_args(out)
        tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size
        assert n % (tp * pp * cp) == 0
        dp = n // (tp * pp * cp)
        assert tp * pp * cp * dp == n
        assert ns.global_batch_size % (ns.micro_batch_size * dp) == 0
        assert ns.global_batch_size == ns.micro_batch_size * p.grad_accum * dp
    elif framework == "deepspeed":
        cfg, pipe = out
        dp = cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"])
        assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
        tp = (cfg.get("tensor_parallel") or {}).get("autotp_size", 1)
        pp = pipe["num_stages"] if pipe else 1
        assert tp * pp * dp == n
        if pipe:
            t = pipe["topology"]
            assert t["num_pp"] * t["num_mp"] * t["num_dp"] == n and t["num_dp"] == dp
    elif framework == "torchtitan":
        d = E._parse_toml(out)
        par, tr = d["parallelism"], d["training"]
        dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
        assert dp * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"] * par["context_parallel_degree"] == n
        steps, rem = divmod(tr["global_batch_size"], tr["local_batch_size"] * dp)
        assert rem == 0
        micro = tr["local_batch_size"] // par.get("pipeline_parallel_microbatch_size", tr["local_batch_size"])
        assert steps * micro == p.grad_accum
        assert tr["global_batch_size"] == p.micro_batch * p.grad_accum * dp
    else:
        o = out
        assert o["trainer.num_nodes"] * o["trainer.devices"] == n
        s = "trainer.strategy."
        mp = o[s + "tensor_model_parallel_size"] * o[s + "pipeline_model_parallel_size"] * o[s + "context_parallel_size"]
        dp = n // mp
        assert mp * dp == n
        assert o["data.global_batch_size"] == o["data.micro_batch_size"] * p.grad_accum * dp


@pytest.mark.parametrize("framework", FW)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(pm=plans())
def test_round_trip_or_refusal(framework, pm):
    """Runnable plans (after conform): emit, consistent, read back equal; the others refused with the rule."""
    p0, m = pm
    p = F.conform(framework, p0, m.num_layers)
    bad = F.check(framework, p, m, H100)
    if bad:
        with pytest.raises(InputError) as ei:
            write(framework, p, m)
        assert str(ei.value).startswith(f"{framework}: {bad[0].rule.id}: ")
        assert "\n" not in str(ei.value)
        return
    out = write(framework, p, m)
    consistent(framework, out, p)
    assert read(framework, out, p, m) == F.normalize(framework, p, m.num_layers)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(pm=plans())
def test_normalized_knobs_have_no_effect(pm):
    """What normalize() changes does not move the estimate: emitting the normalized plan is the same plan (the
    memory knobs the plan leaves unset run the framework's way: the estimate of that plan, with_memory_defaults)."""
    p, m = pm
    for framework in FW:
        q = F.normalize(framework, p, m.num_layers)
        d = F.with_memory_defaults(framework, p)
        if q == d:
            continue
        base = estimate(m, H100, d)
        e = estimate(m, H100, q)
        assert e.step_time_s == pytest.approx(base.step_time_s, rel=1e-12, abs=1e-15)
        assert e.memory.peak_gib == pytest.approx(base.memory.peak_gib, rel=1e-12, abs=1e-15)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(pm=plans())
def test_conform_changes_only_what_the_framework_decides(pm):
    p, m = pm
    for framework in FW:
        q = F.conform(framework, p, m.num_layers)
        changed = {k for k in Plan.model_fields if getattr(p, k) != getattr(q, k)}
        allowed = set(F.allowed(framework).decides) | {"overlap_tp_comm", "overlap_param_gather",
                                                       "overlap_grad_reduce", "zero", "first_stage_layers",
                                                       "last_stage_layers"}
        allowed |= {k for k in F.memory_defaults(framework) if k not in p.model_fields_set}  # unset: its defaults
        assert changed <= allowed, (framework, changed)
        for k in ("num_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch", "seq_len",
                  "recompute", "recompute_layers", "precision"):
            assert getattr(p, k) == getattr(q, k)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(pm=plans())
def test_runnable_is_conform_then_check(pm):
    p, m = pm
    for framework in FW:
        q = F.runnable(framework, p, m, H100)
        c = F.conform(framework, p, m.num_layers)
        assert q == (None if F.check(framework, c, m, H100) else c)
        if q is not None:
            assert q.num_gpus == p.num_gpus and q.global_batch == p.global_batch


def _llama(**kw) -> Plan:
    base = dict(num_gpus=256, tp=8, pp=4, micro_batch=1, global_batch=512, seq_len=4096)
    base.update(kw)
    return Plan(**base)


def test_a_range_of_fixed_plans_round_trip():
    m = get_model("llama2-70b")
    cases = [
        ("megatron", _llama(vpp=2)),
        ("megatron", _llama(zero=0, recompute="full")),
        ("megatron", _llama(pp=1, tp=8, zero=3, recompute="none", num_gpus=64)),
        ("megatron", _llama(pp=5, num_gpus=320, global_batch=640, first_stage_layers=17, last_stage_layers=15,
                            recompute="full", recompute_layers=3, precision="fp8")),
        ("megatron", _llama(cp=2, num_gpus=512, precision="fp16", fp32_grads=False, overlap_tp_comm=True)),
        ("nemo", _llama(vpp=5, pp=4, recompute="full", recompute_layers=10, global_batch=512)),
        ("nemo", _llama(pp=1, zero=2, num_gpus=64)),
        ("deepspeed", _llama(tp=1, pp=4, zero=1, recompute="full", sequence_parallel=False,
                             overlap_param_gather=False, num_gpus=64)),
        ("deepspeed", _llama(tp=8, pp=1, zero=3, recompute="none", sequence_parallel=False, num_gpus=64)),
        ("deepspeed", _llama(tp=1, pp=1, zero=0, recompute="none", fp32_grads=False, overlap_grad_reduce=False,
                             num_gpus=64)),
        ("torchtitan", _llama(zero=3, vpp=2, recompute="full")),
        ("torchtitan", _llama(zero=3, pp=3, num_gpus=192, global_batch=384, first_stage_layers=26,
                              last_stage_layers=26, recompute="none")),
        ("torchtitan", _llama(zero=3, cp=2, num_gpus=512, recompute="full", recompute_layers=10,
                              overlap_tp_comm=True, precision="fp8")),
        ("torchtitan", _llama(tp=1, pp=1, zero=0, num_gpus=16, global_batch=64, recompute="none")),
    ]
    for framework, p in cases:
        assert F.check(framework, p, m, H100) == [], (framework, [str(v) for v in F.check(framework, p, m)])
        out = write(framework, p, m)
        consistent(framework, out, p)
        assert read(framework, out, p, m) == F.normalize(framework, p, m.num_layers), framework


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("framework, model, plan, rule", [
    ("deepspeed", "llama2-70b", _llama(zero=3, tp=1, sequence_parallel=False, recompute="none"), "deepspeed-pipe-zero"),
    ("deepspeed", "llama2-70b", _llama(zero=1, tp=1, vpp=2, recompute="none"), "deepspeed-vpp"),
    ("deepspeed", "llama2-70b", _llama(zero=1, tp=1, pp=1, cp=2, num_gpus=64, recompute="none"), "deepspeed-cp"),
    ("deepspeed", "llama2-70b", _llama(zero=1, tp=1, precision="fp8", recompute="none"), "deepspeed-fp8"),
    ("deepspeed", "llama2-70b", _llama(zero=1, tp=1), "deepspeed-recompute"),
    ("torchtitan", "llama2-70b", _llama(zero=1), "torchtitan-zero12"),
    ("torchtitan", "llama2-70b", _llama(zero=0, recompute="none"), "torchtitan-ddp-1d"),
    ("torchtitan", "mixtral-8x7b", _llama(zero=3, recompute="selective"), "torchtitan-selective"),
    ("torchtitan", "llama2-70b", _llama(zero=3, precision="fp16", recompute="none"), "torchtitan-fp16"),
    ("megatron", "bloom-176b", Plan(num_gpus=64, tp=8, pp=2, micro_batch=1, global_batch=64, seq_len=2048),
     "megatron-alibi"),
    ("megatron", "llama2-70b", _llama(zero=3), "megatron-fsdp-pp"),
    ("megatron", "llama2-70b", _llama(overlap_grad_reduce=False), "megatron-overlap-param-gather"),
    ("nemo", "bloom-176b", Plan(num_gpus=64, tp=8, pp=2, micro_batch=1, global_batch=64, seq_len=2048), "nemo-alibi"),
    ("megatron", "llama2-70b", _llama(sequence_parallel=False, overlap_tp_comm=True), "megatron-tp-comm-overlap"),
    ("megatron", "llama2-70b", _llama(vpp=2, recompute="full", recompute_layers=3), "megatron-recompute-vpp"),
    ("nemo", "llama2-70b", _llama(overlap_tp_comm=True), "nemo-tp-comm-callback"),
    ("nemo", "llama2-70b", _llama(flash_attention=False), "nemo-attention"),
])
def test_refused_with_the_rule_named(framework, model, plan, rule):
    m = get_model(model)
    bad = F.check(framework, plan, m, H100)
    assert rule in [v.rule.id for v in bad]
    with pytest.raises(InputError, match=f"^{framework}: {bad[0].rule.id}: "):
        write(framework, plan, m)


def test_fp8_needs_an_fp8_gpu():
    m = get_model("llama2-70b")
    p = _llama(precision="fp8")
    assert F.check("megatron", p, m, H100) == []
    assert [v.rule.id for v in F.check("megatron", p, m, A100)] == ["megatron-fp8-gpu"]
    with pytest.raises(InputError, match="megatron-fp8-gpu"):
        E.to_megatron_args(p, m, A100)


def test_unknown_framework_is_bad_input():
    with pytest.raises(InputError, match="framework"):
        F.check("colossalai", _llama(), get_model("llama2-70b"))


def test_every_rule_names_its_source_and_version():
    for framework in FW:
        assert F.VERSIONS[framework]
        ids = [r.id for r in F.rules(framework)]
        assert len(ids) == len(set(ids))
        for r in F.rules(framework):
            assert r.id.startswith(framework + "-") and r.text and r.source
            assert any(ch.isdigit() for ch in r.source), r  # a version or a commit


def test_capabilities_narrow_the_knobs():
    k = F.allowed("deepspeed").knobs(Knobs())
    assert k.vpp == [1] and k.cp == [1] and k.recompute == ["none", "full"] and k.sequence_parallel == [False]
    k = F.allowed("torchtitan").knobs(Knobs())
    assert k.zero == [0, 3] and k.recompute == ["none", "selective", "full", "partial"]  # selective: op SAC
    assert F.allowed("megatron").knobs(Knobs()).zero == [0, 1, 2, 3]


# ------------------------------------------------------------------ kept argument lists


def test_kept_lists_name_their_source():
    for framework in FW:
        src = F.kept_source(framework)
        assert "source:" in src and any(ch.isdigit() for ch in src)
        assert len(F.kept_args(framework)) > 20
    assert F.MEGATRON_ARGS_COMMIT in F.kept_source("megatron")


def test_megatron_parser_rejects_what_megatron_rejects():
    ps = E.megatron_parser()
    with pytest.raises(SystemExit):
        ps.parse_args(["--recompute-granularity", "partial"])
    with pytest.raises(SystemExit):
        ps.parse_args(["--attention-backend", "xformers"])
    ns, rest = ps.parse_known_args(["--lr", "1e-4", "--tensor-model-parallel-size", "4"])
    assert ns.tensor_model_parallel_size == 4 and rest == ["--lr", "1e-4"]


def test_emitted_names_are_kept_names():
    m = get_model("llama2-70b")
    for framework, p in (("megatron", _llama(zero=2, pp=1, num_gpus=64)), ("nemo", _llama(zero=3, pp=1, num_gpus=64)),
                         ("torchtitan", _llama(zero=3, recompute="full", precision="fp8", overlap_tp_comm=True)),
                         ("deepspeed", _llama(tp=1, zero=1, recompute="full", overlap_param_gather=False))):
        lc = E.emit(framework, F.conform(framework, p, m.num_layers), m, H100)
        known = F.kept_args(framework)
        if framework == "megatron":
            names = [a for a in lc.data if a.startswith("--")]
        elif framework == "deepspeed":
            names = E._flatten(lc.data) + ["PipelineModule." + k for k in lc.extra if k != "topology"]
        elif framework == "torchtitan":
            names = [f"{s}.{k}" for s, kv in lc.data.items() for k in kv]
        else:
            names = list(lc.data)
        assert names and all(n in known for n in names), [n for n in names if n not in known]
        for n in names:
            spec = known[n]
            if framework == "megatron" and spec.choices:
                i = lc.data.index(n)
                assert lc.data[i + 1] in spec.choices


def test_nemo_text_is_the_overrides():
    m = get_model("llama2-70b")
    lc = E.emit("nemo", _llama(vpp=2), m, H100)
    assert E.parse_nemo_overrides(lc.text) == lc.data
    assert E.from_nemo_overrides(lc.text) == F.normalize("nemo", _llama(vpp=2), m.num_layers)


def test_readers_refuse_what_is_not_a_plan():
    with pytest.raises(InputError, match="micro-batch-size"):
        E.from_megatron_args(["--tensor-model-parallel-size", "2"], 8)
    with pytest.raises(InputError, match="num_gpus"):
        E.from_megatron_args(["--tensor-model-parallel-size", "3", "--micro-batch-size", "1",
                              "--global-batch-size", "8", "--seq-length", "128"], 8)
    with pytest.raises(InputError, match="explicitly"):
        E.from_torchtitan_toml("[parallelism]\ndata_parallel_shard_degree = -1\n", 32)
    # HSDP is a plan since issue 12 (dp_shard): replicate 2 x shard 2
    hsdp = E.from_torchtitan_toml("[parallelism]\ndata_parallel_shard_degree = 2\ndata_parallel_replicate_degree = 2\n", 32)
    assert (hsdp.dp, hsdp.dp_shard, hsdp.zero) == (4, 2, 3)
    with pytest.raises(InputError, match="fsdp_reshard_after_forward"):
        E.from_torchtitan_toml("[parallelism]\ndata_parallel_shard_degree = 2\nfsdp_reshard_after_forward = \"sometimes\"\n", 32)
    with pytest.raises(InputError, match="num_gpus"):
        E.from_deepspeed_config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                 "gradient_accumulation_steps": 4}, 8, 2048)
    with pytest.raises(InputError):
        E.from_nemo_overrides({"trainer.devices": 8})


def test_toml_subset_parser_matches_tomllib():
    m = get_model("llama2-70b")
    text = E.to_torchtitan_toml(_llama(zero=3, recompute="full", recompute_layers=10, precision="fp8",
                                       overlap_tp_comm=True), m, H100)
    tomllib = pytest.importorskip("tomllib")
    assert E._parse_toml_subset(text) == tomllib.loads(text)


# ------------------------------------------------------------------ CLI

ARGS = ["--model", "llama2-70b", "--gpu", "h100", "--num-gpus", "256", "--tp", "8", "--pp", "4", "--vpp", "2",
        "--micro-batch", "1", "--global-batch", "512"]


def _run(*args):
    r = CliRunner().invoke(estimate_main, [str(a) for a in args])
    assert "Traceback" not in r.output
    return r


def test_cli_emit_prints_the_flags_after_the_estimate():
    r = _run(*ARGS, "--framework", "megatron", "--emit")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert out.index("time per step") < out.index("launch configuration: megatron")
    assert "--num-virtual-stages-per-pipeline-rank 2 \\" in out
    assert "--use-distributed-optimizer" in out


@pytest.mark.parametrize("framework", ["megatron", "nemo"])
def test_cli_emit_json_is_one_document(framework):
    r = _run(*ARGS, "--framework", framework, "--emit", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "step_time_s" in doc and doc["launch"]["framework"] == framework
    if framework == "megatron":
        assert E.from_megatron_args(doc["launch"]["config"], 256).vpp == 2
    else:
        assert E.from_nemo_overrides(doc["launch"]["config"]).vpp == 2


def test_cli_refusal_is_exit_2_with_one_line_naming_the_rule():
    r = _run(*ARGS, "--zero", "3", "--framework", "deepspeed", "--emit")
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "deepspeed-pipe-zero" in lines[0]


def test_cli_framework_alone_checks_and_emit_needs_it():
    r = _run(*ARGS, "--framework", "megatron")
    assert r.exit_code == 0 and "launch configuration" not in r.stdout
    r = _run(*ARGS, "--emit")
    assert r.exit_code == 2 and "--framework" in r.stderr


# ------------------------------------------------------------------ the frameworks' own parsers (optional)


def _has(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


needs_torch = pytest.mark.skipif(not _has("torch"), reason="torch not installed (not in .[dev])")


@pytest.fixture(scope="module")
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@needs_torch
@pytest.mark.skipif(not _has("deepspeed"), reason="deepspeed not installed (not in .[dev])")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(pm=plans())
def test_deepspeed_config_class_accepts_the_config(pm):
    import deepspeed.runtime.config as dsc
    from deepspeed.runtime.config import DeepSpeedConfig

    p0, m = pm
    p = F.conform("deepspeed", p0, m.num_layers)
    assume(not F.check("deepspeed", p, m, H100))
    cfg = E.to_deepspeed_config(p, m, H100)

    class MPU:  # DeepSpeed asks the model-parallel unit for the data-parallel size
        def get_data_parallel_world_size(self):
            return p.dp

        def get_data_parallel_rank(self):
            return 0

        def get_model_parallel_world_size(self):
            return p.tp

        def get_model_parallel_rank(self):
            return 0

    with mock.patch.object(dsc.dist, "get_rank", return_value=0):
        c = DeepSpeedConfig(json.loads(json.dumps(cfg)), mpu=MPU())
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == (
        p.global_batch, p.micro_batch, p.grad_accum)
    assert c.zero_optimization_stage == p.zero
    assert c.bfloat16_config.enabled == (p.precision == "bf16")
    if p.zero >= 1:
        assert c.zero_config.overlap_comm == p.overlap_grad_reduce
    if p.tp > 1:
        assert c.tensor_parallel_config.autotp_size == p.tp


@needs_torch
@pytest.mark.skipif(not _has("deepspeed"), reason="deepspeed not installed (not in .[dev])")
def test_deepspeed_pipeline_arguments_and_partition(quiet):
    import inspect

    from deepspeed.pipe import PipelineModule
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    from deepspeed.runtime.utils import partition_balanced

    m = get_model("llama2-70b")
    p = _llama(tp=1, pp=8, zero=1, recompute="full", overlap_param_gather=False, num_gpus=64)
    pipe = E.to_deepspeed_pipeline(p, m)
    sig = inspect.signature(PipelineModule.__init__).parameters
    assert all(k in sig for k in pipe if k != "topology")
    topo = PipeModelDataParallelTopology(**pipe["topology"])
    assert topo.world_size() == p.num_gpus
    # type:<layer> weighs the transformer layers 1 and the embedding/head 0: the even split
    weights = [0] + [1] * m.num_layers + [0]
    parts = partition_balanced(weights, p.pp)
    counts = [sum(weights[parts[i]:parts[i + 1]]) for i in range(p.pp)]
    assert counts == F.rank_layers(p, m.num_layers)


@pytest.fixture(scope="module")
def titan():
    """torchtitan's config modules, loaded without torchtitan/__init__ (it imports triton, a GPU package)."""
    spec = importlib.util.find_spec("torchtitan")
    saved = {k: v for k, v in sys.modules.items() if k == "torchtitan" or k.startswith("torchtitan.")}
    pkg = types.ModuleType("torchtitan")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchtitan"] = pkg
    try:
        from torchtitan.config.manager import ConfigManager
        from torchtitan.distributed import parallel_dims

        # distributed/pipeline_parallel.py imports the MoE models (triton): take its splitter from the source
        src = (Path(spec.submodule_search_locations[0]) / "distributed" / "pipeline_parallel.py").read_text()
        fn = next(n for n in ast.parse(src).body
                  if isinstance(n, ast.FunctionDef) and n.name == "generate_llm_fqn_per_model_part")
        ns: dict = {}
        exec(compile(ast.Module(body=[fn], type_ignores=[]), "pipeline_parallel.py", "exec"), ns)
        yield ConfigManager, parallel_dims.ParallelDims, ns["generate_llm_fqn_per_model_part"]
    finally:
        for k in [k for k in sys.modules if k == "torchtitan" or k.startswith("torchtitan.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _titan_version_ok() -> bool:
    try:
        import importlib.metadata as md

        return md.version("torchtitan").startswith("0.2.")
    except Exception:
        return False


@needs_torch
@pytest.mark.skipif(not (_has("torchtitan") and _titan_version_ok()), reason="torchtitan 0.2.x not installed")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(pm=plans())
def test_torchtitan_job_config_parses_the_toml(titan, tmp_path_factory, pm):
    ConfigManager, ParallelDims, fqns = titan
    p0, m = pm
    p = F.conform("torchtitan", p0, m.num_layers)
    assume(not F.check("torchtitan", p, m, H100))
    text = E.to_torchtitan_toml(p, m, H100)
    path = tmp_path_factory.mktemp("tt") / "job.toml"
    path.write_text(text)
    cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
    par = cfg.parallelism
    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree,
                        pp=par.pipeline_parallel_degree, ep=1, etp=1, world_size=p.num_gpus)
    assert cfg.training.seq_len % dims.seq_len_divisor == 0
    assert cfg.training.global_batch_size % (cfg.training.local_batch_size * dims.dp_replicate * dims.dp_shard) == 0
    if p.pp > 1:
        lps = par.pipeline_parallel_layers_per_stage
        iw, ow = par.pipeline_parallel_first_stage_less_layers, par.pipeline_parallel_last_stage_less_layers
        stages = -(-(m.num_layers + iw + ow) // lps) if lps else p.pp
        assert stages == p.pp * p.vpp
        parts = fqns(stages, m.num_layers, iw, ow)
        per_stage = [sum(1 for x in part if x.startswith("layers.")) for part in parts]
        assert per_stage == F.titan_split(stages, m.num_layers, iw, ow)
        assert F._rank_totals(per_stage, p.pp) == F.rank_layers(p, m.num_layers)
        assert cfg.training.local_batch_size // par.pipeline_parallel_microbatch_size == p.grad_accum


def _mcore_config(ns, quiet_ok=True):
    import torch
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    dt = torch.float16 if ns.fp16 else torch.bfloat16
    return TransformerConfig(
        num_layers=ns.num_layers, hidden_size=ns.hidden_size, ffn_hidden_size=ns.ffn_hidden_size,
        num_attention_heads=ns.num_attention_heads,
        num_query_groups=ns.num_query_groups if ns.group_query_attention else None, kv_channels=ns.kv_channels,
        tensor_model_parallel_size=ns.tensor_model_parallel_size,
        pipeline_model_parallel_size=ns.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=ns.num_virtual_stages_per_pipeline_rank,
        context_parallel_size=ns.context_parallel_size, sequence_parallel=ns.sequence_parallel,
        recompute_granularity=ns.recompute_granularity, recompute_method=ns.recompute_method,
        recompute_num_layers=ns.recompute_num_layers, recompute_modules=ns.recompute_modules,
        num_layers_in_first_pipeline_stage=ns.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=ns.decoder_last_pipeline_num_layers,
        bf16=ns.bf16, fp16=ns.fp16, params_dtype=dt, pipeline_dtype=dt,
        attention_backend=AttnBackend[ns.attention_backend], normalization=ns.normalization,
        add_bias_linear=not ns.disable_bias_linear, gated_linear_unit=ns.swiglu or ns.quick_geglu,
        fp8=ns.fp8_format, fp8_recipe=ns.fp8_recipe, tp_comm_overlap=ns.tp_comm_overlap,
        gradient_accumulation_fusion=not ns.no_gradient_accumulation_fusion,
    )


@needs_torch
@pytest.mark.skipif(not _has("megatron.core"), reason="megatron-core not installed (not in .[dev])")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(pm=plans())
def test_megatron_core_configs_accept_the_flags(quiet, pm):
    """The flags as megatron/training/arguments.py hands them to Megatron-Core (core_transformer_config_from_args
    and the DDP config): TransformerConfig validates them and builds the plan's layers on every rank/chunk."""
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    p0, m = pm
    p = F.conform("megatron", p0, m.num_layers)
    assume(not F.check("megatron", p, m, H100))
    ns = E.megatron_parser().parse_args(E.to_megatron_args(p, m, H100))
    cfg = _mcore_config(ns)
    vpp = ns.num_virtual_stages_per_pipeline_rank or 1
    per_rank = [sum(get_num_layers_to_build(cfg, vp_stage=v if vpp > 1 else None, pp_rank=r) for v in range(vpp))
                for r in range(p.pp)]
    assert per_rank == F.rank_layers(p, m.num_layers)
    DistributedDataParallelConfig(
        grad_reduce_in_fp32=not ns.grad_reduce_in_bf16 if ns.bf16 else ns.accumulate_allreduce_grads_in_fp32,
        overlap_grad_reduce=ns.overlap_grad_reduce, overlap_param_gather=ns.overlap_param_gather,
        use_distributed_optimizer=ns.use_distributed_optimizer, use_megatron_fsdp=ns.use_megatron_fsdp,
        data_parallel_sharding_strategy=ns.data_parallel_sharding_strategy or "no_shard",
    )


def _nemo_file(rel: str):
    import importlib.metadata as md

    try:
        dist = md.distribution("nemo-toolkit")
    except md.PackageNotFoundError:
        return None
    path = dist.locate_file(rel)
    return path if path.exists() else None


def _init_params(path, cls_name: str) -> set[str]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for b in node.body:
                if isinstance(b, ast.FunctionDef) and b.name == "__init__":
                    return {a.arg for a in b.args.args[1:] + b.args.kwonlyargs}
    raise KeyError(cls_name)


@pytest.mark.skipif(_nemo_file("nemo/lightning/pytorch/strategies/megatron_strategy.py") is None,
                    reason="nemo-toolkit not installed (not in .[dev]; pip install --no-deps nemo-toolkit suffices)")
@pytest.mark.skipif(not _has("megatron.core"), reason="megatron-core not installed")
def test_nemo_override_paths_are_the_recipe_objects_arguments(quiet):
    import dataclasses

    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.optimizer_config import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    targets = {
        "trainer.strategy.": _init_params(_nemo_file("nemo/lightning/pytorch/strategies/megatron_strategy.py"),
                                          "MegatronStrategy"),
        "trainer.plugins.": _init_params(_nemo_file("nemo/lightning/pytorch/plugins/mixed_precision.py"),
                                         "MegatronMixedPrecision"),
        "data.": _init_params(_nemo_file("nemo/collections/llm/gpt/data/mock.py"), "MockDataModule"),
        "trainer.strategy.ddp.": {f.name for f in dataclasses.fields(DistributedDataParallelConfig)},
        "optim.config.": {f.name for f in dataclasses.fields(OptimizerConfig)},
        "model.config.": {f.name for f in dataclasses.fields(TransformerConfig)} | {"seq_length"},
        "trainer.": {"num_nodes", "devices"},
    }
    m = get_model("llama2-70b")
    for p in (_llama(vpp=2), _llama(pp=1, zero=3, num_gpus=64, precision="fp8", recompute="full"),
              _llama(pp=5, num_gpus=320, global_batch=640, first_stage_layers=17, last_stage_layers=15,
                     recompute="full", recompute_layers=3)):
        for key in E.to_nemo_overrides(p, m, H100):
            prefix = max((t for t in targets if key.startswith(t) and "." not in key[len(t):]), key=len)
            assert key[len(prefix):] in targets[prefix], key


@needs_torch
@pytest.mark.skipif(not _has("deepspeed"), reason="deepspeed not installed (not in .[dev])")
def test_deepspeed_kept_list_matches_the_installed_package(quiet):
    import inspect

    from deepspeed.pipe import PipelineModule
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    models = {"zero_optimization": DeepSpeedZeroConfig, "bf16": DeepSpeedBF16Config, "fp16": DeepSpeedFP16Config,
              "tensor_parallel": TPTrainingConfig}
    calls = {"PipelineModule": PipelineModule.__init__, "PipeModelDataParallelTopology": PipeModelDataParallelTopology.__init__}
    for key in F.kept_args("deepspeed"):
        head, _, rest = key.partition(".")
        if head in models and rest:
            fields = models[head].model_fields
            assert rest in fields or rest in {f.alias for f in fields.values()}, key
        elif head in calls:
            assert rest in inspect.signature(calls[head]).parameters, key


@needs_torch
@pytest.mark.skipif(not (_has("torchtitan") and _titan_version_ok()), reason="torchtitan 0.2.x not installed")
def test_torchtitan_kept_list_matches_job_config(titan):
    import dataclasses

    from torchtitan.config.job_config import JobConfig

    for key in F.kept_args("torchtitan"):
        obj = JobConfig()
        for part in key.split("."):
            assert part in {f.name for f in dataclasses.fields(obj)}, key
            obj = getattr(obj, part)
