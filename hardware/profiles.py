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
- ``torchtitan-eager``: the compiled profile with its kernel efficiencies (GEMM, attention,
  memory-bound) scaled by :data:`EAGER_OVER_COMPILED`.

A system without a profile of its own for a framework takes the reference system's profile
relative to the reference's Megatron profile (:data:`REFERENCE_SYSTEM`): ratios for the kernel
efficiencies, the profile's own values for the communication and overhead terms.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

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
#: files (their selective AC is torchtitan's op-level SAC, not a plan of this planner), so this
#: ratio, not a fit, separates the eager profile from the compiled one.
EAGER_OVER_COMPILED = round((5762 / 6667 + 5605 / 6514) / 2, 4)
#: Terms that are kernel efficiencies (scaled for eager, carried as ratios to other systems).
KERNEL_TERMS = ("gemm_eff_max", "attention_eff", "bmm_attention_eff", "hbm_eff")
REFERENCE_SYSTEM = "h100-sxm"


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
    """``{system: {profile: EfficiencySpec}}`` from :data:`PROFILES_FILE` (empty if absent)."""
    if not PROFILES_FILE.is_file():
        return {}
    doc = yaml.safe_load(PROFILES_FILE.read_text(encoding="utf-8")) or {}
    return {sys: {name: EfficiencySpec(**spec) for name, spec in (profs or {}).items()}
            for sys, profs in (doc.get("systems") or {}).items()}


def _eager(spec: EfficiencySpec) -> EfficiencySpec:
    upd = {t: getattr(spec, t) * EAGER_OVER_COMPILED for t in KERNEL_TERMS}
    return spec.model_copy(update={**upd, "source": f"torchtitan eager = compiled x {EAGER_OVER_COMPILED} on "
                                   f"{', '.join(KERNEL_TERMS)} (torchtitan 2024-12 benchmark Tables 1 and 3); "
                                   f"compiled: {spec.source}"})


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
    ref = table.get(REFERENCE_SYSTEM, {}).get(name)
    if ref is None:
        return cluster.efficiency
    from plan_search.hardware.catalog import get_cluster

    ref_base = get_cluster(REFERENCE_SYSTEM).efficiency
    upd = {t: min(1.0, getattr(cluster.efficiency, t) * getattr(ref, t) / getattr(ref_base, t)) for t in KERNEL_TERMS}
    keep = {k: v for k, v in ref.model_dump().items() if k not in KERNEL_TERMS and k != "source"}
    return cluster.efficiency.model_copy(update={
        **keep, **upd, "source": f"{name} profile of {REFERENCE_SYSTEM} carried to {cluster.name}: kernel "
        f"efficiencies as ratios to {REFERENCE_SYSTEM}'s megatron profile, the rest as fitted ({ref.source})"})


def for_framework(cluster: ClusterSpec, framework: str | None, compiled: bool = True) -> ClusterSpec:
    """``cluster`` with the efficiency of ``framework``'s profile (unchanged for Megatron/NeMo or
    no framework)."""
    name = profile_name(framework, compiled)
    if name == "megatron":
        return cluster
    return cluster.model_copy(update={"efficiency": profile_for(cluster, name)})
