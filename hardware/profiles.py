"""Kernel-efficiency profiles per training framework (issue 12).

The same GPU reaches different fractions of its peaks under different frameworks: Megatron-LM and
NeMo run Transformer Engine's fused kernels; torchtitan runs PyTorch eager or ``torch.compile``'d
kernels with torchao Float8 and FSDP2's NCCL collectives; DeepSpeed's ZeRO-3 issues its own
per-module collectives. A *profile* is one :class:`~plan_search.hardware.spec.EfficiencySpec`
per (system, framework):

- ``megatron`` (Megatron-LM, NeMo, Megatron-Bridge with Transformer Engine): the catalog's own
  ``efficiency`` block of each system (``hardware/catalog.yaml``) -- the default, as before.
- ``torchtitan`` (compiled) and ``deepspeed``: fitted on the published runs of that framework
  (``python bench/fidelity.py --refit --write-profiles``), kept in ``efficiency_profiles.yaml``
  next to this file with the rows each fit saw.
- ``torchtitan-eager``: the compiled profile with ``kernel_fusion="eager"``: every element-wise
  op between the GEMMs is its own memory-bound pass (bytes counted from torchtitan's model code in
  ``planner.costmodel.compute.unfused_membound_fwd_bytes``); the measured eager/compiled
  throughput ratio :data:`EAGER_OVER_COMPILED` checks it (bench/fidelity.py), it is not applied.

A framework's *family prior* (:func:`family_prior`) is what the profile of a framework with no
rows of its own is: the system's Megatron profile (the hardware terms fitted on other frameworks'
runs) with the framework's structural terms (:data:`FAMILY_STRUCTURE`: how it fuses element-wise
work, how its ZeRO-3 collectives run). The fits of ``bench/fidelity.py`` start from it and move
only a few terms.

A system without a profile of its own for a framework takes the family prior on that system:
a profile fitted on one system is not carried to others (its fitted kernel terms absorb that
system's own figures, e.g. the 500 W derating of torchtitan's H100s).
"""

from __future__ import annotations

import functools
from pathlib import Path

from plan_search.hardware.spec import ClusterSpec, EfficiencySpec

PROFILES_FILE = Path(__file__).with_name("efficiency_profiles.yaml")

#: Framework (``--framework``) -> profile name; no framework: ``megatron`` (the catalog values).
FRAMEWORK_PROFILE = {"megatron": "megatron", "nemo": "megatron", "torchtitan": "torchtitan",
                     "deepspeed": "deepspeed"}
PROFILES = ("megatron", "torchtitan", "torchtitan-eager", "deepspeed")

#: Throughput of torchtitan eager over torch.compile'd, same run otherwise (FSDP, Llama 3.1 8B,
#: bf16, selective AC): 5,762 / 6,667 TPS/GPU on 8 H100s (Table 1) and 5,605 / 6,514 on 128
#: (Table 3) of pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md @ 820504e20; the
#: mean of the two ratios (0.864, 0.860). No eager row has a complete configuration in the runs
#: files (their selective AC is torchtitan's op-level SAC, not a plan of this planner): the ratio
#: is the check of the eager profile's structural bytes (``bench/fidelity.py`` prints the predicted
#: ratio next to it), not a factor applied to it.
EAGER_OVER_COMPILED = round((5762 / 6667 + 5605 / 6514) / 2, 4)
#: Structural terms of each framework family: what its kernels and collectives are, from its code,
#: never fitted. torchtitan (compiled, the default of its benchmarks): torch.compile per block
#: (parallelize_llama.apply_compile @9dec370); deepspeed: ZeRO-3 per-module flat collectives. How a MoE
#: layer's local experts' GEMMs run (one kernel, torchtitan's ``torch._grouped_mm``, or one GEMM per expert)
#: is the plan's ``moe_grouped_gemm``, at each framework's value (planner/frameworks/rules.MEMORY_KNOBS).
FAMILY_STRUCTURE = {"megatron": {}, "torchtitan": {"kernel_fusion": "compiled", "selective_ac": "op", "fsdp2": True},
                    "torchtitan-eager": {"kernel_fusion": "eager", "selective_ac": "op", "fsdp2": True},
                    "deepspeed": {"zero3_flat": True}}

#: Attention kernels: torchtitan runs SDPA's flash backend, FlashAttention-2 (under context
#: parallelism forced: torchtitan/utils.py get_train_context @9dec370 enters
#: sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION]), "TODO: support cuDNN backend"); Megatron
#: with Transformer Engine runs cuDNN's fused attention on Hopper. Their throughput ratio on H100
#: SXM5, head dim 128, seq 16K (Shah et al. 2024, FlashAttention-3, figures "Attention forward /
#: backward speed, head dim 128"): FlashAttention-2 370 / 322 TFLOP/s, cuDNN 595 / 516, weighted
#: by the backward's 2.5x work (planner.costmodel.compute.FA_BACKWARD_RATIO).
FA2_OVER_CUDNN = round((1 / 595 + 2.5 / 516) / (1 / 370 + 2.5 / 322), 4)
#: Kernel-efficiency ratios of a framework family to Megatron/TE's (multiplying the megatron terms).
FAMILY_KERNEL_RATIO = {"torchtitan": {"attention_eff": FA2_OVER_CUDNN},
                       "torchtitan-eager": {"attention_eff": FA2_OVER_CUDNN}}
#: Where each structural term (term, value) and kernel ratio (term) of a family comes from: the
#: family prior's ``source`` names it beside the term, ``term=value (why)``.
FAMILY_TERM_SOURCES = {
    ("kernel_fusion", "compiled"): "torch.compile per block, torchtitan parallelize_llama.apply_compile @9dec370",
    ("kernel_fusion", "eager"): "each element-wise op its own pass, planner.costmodel.compute."
                                "unfused_membound_fwd_bytes",
    ("zero3_flat", True): "DeepSpeed ZeRO-3 per-module flat collectives",
    ("fsdp2", True): "ZeRO-3 is FSDP2 fully_shard, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
    ("selective_ac", "op"): "selective AC is op-level SAC, torchtitan distributed/activation_checkpoint.py "
                            "(selective_ac_option 'op', every second mm recomputed)",
    "attention_eff": "FlashAttention-2 over cuDNN fused attention on H100, Shah et al. 2024 (FlashAttention-3)",
}

#: Static (leakage + idle) power assumed under a power limit: typical idle draw of an H100 SXM
#: (assumption, not a datasheet figure).
POWER_STATIC_W = 70.0


def power_limited_clock_ratio(limit_w: float, tdp_w: float, static_w: float = POWER_STATIC_W) -> float:
    """Sustained SM clock at a power limit over the clock at the TDP, for tensor-core-bound work
    that draws the full TDP: dynamic power ``P - P_static ~ C V^2 f`` with the voltage scaling
    with the clock in the DVFS range, so ``f ~ (P - P_static)^(1/3)`` (the CMOS cube law; an
    assumption for this GPU, not a measurement). 1.0 at or above the TDP; never above 1."""
    if limit_w >= tdp_w:
        return 1.0
    return max(0.0, (limit_w - static_w) / (tdp_w - static_w)) ** (1.0 / 3.0)


def family_prior(megatron: EfficiencySpec, name: str) -> EfficiencySpec:
    """The profile ``name`` of a system whose Megatron profile is ``megatron``, before any row of
    that framework: the hardware terms as fitted on the other frameworks, the framework's
    structural terms (:data:`FAMILY_STRUCTURE`)."""
    ratios = FAMILY_KERNEL_RATIO.get(name, {})
    kernels = {t: getattr(megatron, t) * r for t, r in ratios.items()}
    what = [f"{t}={v} ({FAMILY_TERM_SOURCES[t, v]})" for t, v in FAMILY_STRUCTURE.get(name, {}).items()] + [
        f"{t}={kernels[t]:.3g} (the megatron profile's {getattr(megatron, t):.3g} x {r:g}: {FAMILY_TERM_SOURCES[t]})"
        for t, r in ratios.items()]
    return megatron.model_copy(update={**FAMILY_STRUCTURE.get(name, {}), **kernels, "source": (
        f"{name} family prior: {'; '.join(what) if what else 'no structural terms'}; every other term the "
        f"megatron profile's ({megatron.source})")})


def profile_name(framework: str | None, compiled: bool = True) -> str:
    """The profile a framework runs with (``None``: ``megatron``, the catalog default)."""
    if framework is None:
        return "megatron"
    fw = framework.strip().lower()
    if fw in PROFILES and fw not in FRAMEWORK_PROFILE:
        return fw
    if fw not in FRAMEWORK_PROFILE:
        from plan_search.models.io import InputError

        raise InputError(f"framework: {framework!r} has no efficiency profile; use one of {', '.join(PROFILES)}")
    name = FRAMEWORK_PROFILE[fw]
    return "torchtitan-eager" if name == "torchtitan" and not compiled else name


@functools.lru_cache(maxsize=1)
def load_profiles() -> dict[str, dict[str, EfficiencySpec]]:
    """``{system: {profile: EfficiencySpec}}`` from :data:`PROFILES_FILE` (empty if absent; the
    document the catalog reads for its megatron overlays, parsed once)."""
    from plan_search.hardware.catalog import profiles_document

    doc = profiles_document()
    return {sys: {name: EfficiencySpec(**spec) for name, spec in (profs or {}).items()}
            for sys, profs in (doc.get("systems") or {}).items()}


def _eager(spec: EfficiencySpec) -> EfficiencySpec:
    return spec.model_copy(update={**FAMILY_STRUCTURE["torchtitan-eager"], "source": (
        "torchtitan eager = the compiled profile with kernel_fusion eager (unfused element-wise passes, "
        f"planner.costmodel.compute.unfused_membound_fwd_bytes); compiled: {spec.source}")})


def profile_for(cluster: ClusterSpec, name: str) -> EfficiencySpec:
    """The efficiency of ``cluster`` under profile ``name``."""
    if name == "megatron":
        return cluster.efficiency
    if name == "torchtitan-eager":
        return _eager(profile_for(cluster, "torchtitan"))
    table = load_profiles()
    own = table.get(cluster.name, {}).get(name)
    if own is not None:
        return own
    # A profile fitted on one system stays there: its fitted kernel terms mix the framework's kernels
    # with that system's own figures (torchtitan's were fitted on 500 W H100s, whose derated peaks
    # are an assumption: carried as ratios they made torchtitan's cuBLAS GEMMs 12% faster than
    # Megatron's on every other GPU). Another system gets the framework's family prior: its own
    # Megatron fit with the framework's structural terms, which are never faster kernels.
    return family_prior(cluster.efficiency, name)


def file_efficiency(cluster: ClusterSpec) -> dict[str, tuple]:
    """The efficiency terms ``cluster``'s own file sets explicitly (``hardware.resolve`` credits them
    in ``sources`` as ``efficiency.<term>``): term -> (its value, the file that sets it)."""
    from plan_search.hardware.resolve import FILE_EFFICIENCY_PREFIX

    out = {}
    for key, where in cluster.sources.items():
        name = key[len(FILE_EFFICIENCY_PREFIX):]
        if key.startswith(FILE_EFFICIENCY_PREFIX) and name in EfficiencySpec.model_fields and name != "source":
            out[name] = (getattr(cluster.efficiency, name), where)
    return out


def for_framework(cluster: ClusterSpec, framework: str | None, compiled: bool = True) -> ClusterSpec:
    """``cluster`` with the efficiency of ``framework``'s profile (unchanged for Megatron/NeMo or
    no framework). A term the cluster file sets itself (``efficiency: {kernel_fusion: eager}``)
    wins over the profile's value: the profile is a framework default, the file the user's own
    figure; the profile's ``source`` then names the terms kept."""
    name = profile_name(framework, compiled)
    if name == "megatron":
        return cluster
    spec = profile_for(cluster, name)
    own = file_efficiency(cluster)
    if own:
        kept = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, (v, _) in own.items())
        where = sorted({w for _, w in own.values()})
        spec = spec.model_copy(update={**{k: v for k, (v, _) in own.items()}, "source": (
            f"{kept} kept from {', '.join(where)} over the {name} profile (a cluster file's explicit value wins "
            f"over a framework default); the rest: {spec.source}")})
    return cluster.model_copy(update={"efficiency": spec})
