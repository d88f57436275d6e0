"""Round trip (issue 26): for a plan of every catalog model under every framework that can run it, the launch file
``plan-estimate --emit`` writes, read back with ``--from``, gives the same plan and the same step time and memory."""

from __future__ import annotations

import itertools

import pytest

from plan_search.hardware.profiles import for_framework
from plan_search.hardware.resolve import resolve_cluster
from plan_search.models.catalog import get_model, model_names
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.frameworks import emit as E
from plan_search.planner.frameworks import rules as F
from plan_search.planner.frameworks.read import read_launch

H100 = resolve_cluster("h100")
SUFFIX = {"megatron": ".sh", "nemo": ".txt", "torchtitan": ".toml", "deepspeed": ".json"}


def pick(framework: str, m, variant: int) -> Plan | None:
    """A plan the framework can run (conformed), varied by ``variant`` over layouts and knobs."""
    tps = [t for t in (8, 4, 2, 1) if m.num_heads % t == 0 and (m.num_kv_heads % t == 0 or t % m.num_kv_heads == 0)]
    eps = [e for e in (8, 4, 2, 1) if m.is_moe and m.num_experts % e == 0] or [1]
    pps = (2, 4, 1) if variant % 2 else (1, 2, 4)
    zero = 3 if framework == "torchtitan" else (1, 0, 2)[variant % 3] if framework == "deepspeed" else 1
    for tp, pp, ep in itertools.product(tps, pps, eps):
        dp = max(2, ep)
        vpp = 2 if (framework in ("megatron", "nemo") and pp > 1 and variant % 2 and (m.num_layers // pp) % 2 == 0
                    and m.num_layers % pp == 0) else 1
        kw = dict(num_gpus=tp * pp * dp, tp=tp, pp=pp, vpp=vpp, zero=zero, micro_batch=1,
                  global_batch=dp * pp * 2, seq_len=min(m.seq_len, 4096),
                  recompute=("full" if framework == "deepspeed" else ("selective", "full", "none")[variant % 3]),
                  precision="fp8" if variant % 4 == 3 and framework != "deepspeed" else "bf16")
        if m.is_moe:
            kw.update(ep=ep, etp=1)
        try:
            p = Plan(**kw)
            p.check_against(m)
        except Exception:
            continue
        q = F.runnable(framework, p, m, H100)
        if q is not None:
            return q
    return None


CASES = [(name, fw) for name in model_names() for fw in F.FRAMEWORKS]


@pytest.mark.parametrize("name, framework", CASES)
def test_emitted_file_reads_back_to_the_same_plan_and_step(tmp_path, name, framework):
    m = get_model(name)
    variant = sum(map(ord, name)) % 12
    p = pick(framework, m, variant)
    if p is None:
        pytest.skip(f"{framework} runs no plan of {name} here")
    cluster = for_framework(H100, framework)
    launch = E.emit(framework, p, m, cluster)
    f = tmp_path / f"launch{SUFFIX[framework]}"
    f.write_text(launch.text + "\n")
    given = m  # --model: the model the plan was made for (NeMo overrides and DeepSpeed configs do not carry it)
    r = read_launch(f, model=given, num_gpus=p.num_gpus if framework == "megatron" else None,
                    seq_len=p.seq_len if framework == "deepspeed" else None)
    assert r.framework == framework
    want = F.normalize(framework, p, m.num_layers)
    assert r.plan == want, {k: (getattr(r.plan, k), getattr(want, k)) for k in Plan.model_fields
                            if getattr(r.plan, k) != getattr(want, k)}
    a = estimate(m, cluster, F.as_run(framework, p, m, cluster))
    b = estimate(r.model, cluster, F.as_run(framework, r.plan, r.model, cluster))
    assert b.step_time_s == a.step_time_s
    assert b.memory.peak_gib == a.memory.peak_gib
    assert r.not_understood == [], [e.text for e in r.not_understood]


@pytest.mark.parametrize("name", ["llama3.1-8b", "mixtral-8x22b", "deepseek-v3", "qwen3-235b-a22b", "llama2-70b"])
def test_megatron_flags_alone_give_the_model(tmp_path, name):
    """Without --model, Megatron's flags define the model: the catalog model of that shape and those flags."""
    m = get_model(name)
    p = pick("megatron", m, 0)
    cluster = for_framework(H100, "megatron")
    f = tmp_path / "launch.sh"
    f.write_text(E.emit("megatron", p, m, cluster).text + "\n")
    r = read_launch(f, num_gpus=p.num_gpus)
    assert r.model.name == name
    assert estimate(r.model, cluster, r.plan).step_time_s == estimate(m, cluster, F.as_run("megatron", p, m, cluster)).step_time_s


@pytest.mark.parametrize("name", ["llama3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b"])
def test_deepspeed_file_with_its_hf_config_gives_the_model(tmp_path, name):
    """--emit's DeepSpeed text carries the model's Hugging Face config.json: read back without --model."""
    m = get_model(name)
    p = pick("deepspeed", m, 0)
    cluster = for_framework(H100, "deepspeed")
    f = tmp_path / "ds.json"
    f.write_text(E.emit("deepspeed", p, m, cluster).text + "\n")
    r = read_launch(f, seq_len=p.seq_len)
    assert r.plan == F.normalize("deepspeed", p, m.num_layers)
    a = estimate(m, cluster, F.as_run("deepspeed", p, m, cluster))
    b = estimate(r.model, cluster, F.as_run("deepspeed", r.plan, r.model, cluster))
    assert b.step_time_s == a.step_time_s and b.memory.peak_gib == a.memory.peak_gib
