"""Host offload (issue 11): the host link of a GPU and the time optimizer and activation offload cost.

- Host link, GB/s per GPU per direction (hardware/spec.py's convention): NVLink-C2C on Grace
  systems (GB200/GB300/GH200) 450 (900 GB/s bidirectional, NVIDIA GB200 NVL72 and Grace Hopper
  datasheets); PCIe 5.0 x16 64 (H100/H200/H800, B200/B300 hosts, MI300X/MI325X; 32 GT/s x 16
  lanes); PCIe 4.0 x16 32 (A100, L40S); PCIe 3.0 x16 16 (V100). :data:`HOST_LINK_EFF` of it is
  reached (a prior: pinned-memory copies reach ~80% of the PCIe line rate).
- Optimizer offload (ZeRO-Offload, Ren et al. 2021, Sec. 4): every step the gradient shard goes
  to the host (2 or 4 B/param), the CPU runs Adam on it, and the updated bf16 parameters come
  back (2 B/param). The CPU step streams ~30 B/param (fp32 parameter, gradient, two moments read;
  parameter and moments written; bf16 copy) at :data:`HOST_MEMORY_GBPS_PER_GPU` (a prior: a
  two-socket host's DDR5, ~300 GB/s a socket, shared by four GPUs at ~50% achieved). Not
  overlapped with the GPU's compute (the step waits for it).
- Activation offload: each micro-batch's stored layer activations go out in the forward and come
  back in the backward; the copies hide behind the stage's compute, the rest is exposed.
- Fine-grained activation offload (``Plan.offload_modules``, Megatron-Core
  ``--fine-grained-activation-offloading --offload-modules``, issue 29): each named module's input
  (:func:`offloaded_bytes_per_token`) goes out and comes back; the same copy pricing.
"""

from __future__ import annotations

import re

import numpy as np

from plan_search.hardware.spec import ClusterSpec

from plan_search.planner.costmodel.arrays import PlanArrays

_HOST_LINKS = [(r"gb200|gb300|gh200|grace", 450.0), (r"h100|h200|h800|b200|b300|mi300|mi325", 64.0),
               (r"a100|l40", 32.0), (r"v100", 16.0)]
#: Fraction of the host link's rate the copies reach (a prior, not fitted: no offload run measured).
HOST_LINK_EFF = 0.8
#: Host memory bandwidth available to one GPU's CPU optimizer step, GB/s (a prior, see above).
HOST_MEMORY_GBPS_PER_GPU = 40.0
CPU_ADAM_BYTES_PER_PARAM = 30.0


def host_link_gbps(cluster: ClusterSpec) -> float:
    """Per-direction GB/s between one GPU and host memory (PCIe or NVLink-C2C), by system name."""
    name = f"{cluster.name} {cluster.gpu.name}".lower()
    for pat, gbps in _HOST_LINKS:
        if re.search(pat, name):
            return gbps
    return 32.0  # unknown: PCIe 4.0 x16


def optimizer_offload_s(shard_params, x: PlanArrays, cluster: ClusterSpec):
    """Seconds per step of the host optimizer for ``shard_params`` parameters of optimizer shard."""
    link = host_link_gbps(cluster) * 1e9 * HOST_LINK_EFF
    g = np.where(x.fp32_grads, 4.0, 2.0)
    copies = (g + 2.0) * shard_params / link
    cpu = CPU_ADAM_BYTES_PER_PARAM * shard_params / (HOST_MEMORY_GBPS_PER_GPU * 1e9)
    return copies + cpu


def activation_offload_exposed_s(bytes_per_microbatch, compute_per_microbatch_s, x: PlanArrays,
                                 cluster: ClusterSpec):
    """Exposed seconds per micro-batch of copying the stored activations out and back."""
    link = host_link_gbps(cluster) * 1e9 * HOST_LINK_EFF
    copy = 2.0 * bytes_per_microbatch / link
    return np.where(x.act_offload, np.maximum(0.0, copy - compute_per_microbatch_s), 0.0)


def offloaded_bytes_per_token(model, x: PlanArrays):
    """Bytes per token per layer, on one GPU, the named modules' inputs take (``Plan.offload_modules``;
    Megatron-Core docs "Fine-grained Activation Offloading": "Each module offloads its input activation"):
    ``attn_norm`` the layer input (``2 h``), ``qkv_linear`` the normed input (``2 h`` at the GEMM input
    width), ``core_attn`` Q, K and V (``2 q + 4 kv``), ``attn_proj`` the attention output (``q`` at the GEMM
    input width), ``mlp_norm`` the residual sum (``2 h``), ``expert_fc1`` the permuted expert inputs (the
    routed rows per token x ``h`` at the GEMM input width), ``moe_act`` the expert activation inputs (the
    routed rows per token x ``f_e / etp`` at the activation's input bytes); the ``h``-wide tensors split
    over tp under sequence parallelism, the others over tp. MoE terms are per MoE layer (mean over the
    layers: ``num_moe_layers / num_layers``). Zero without a named set."""
    from plan_search.planner.costmodel import compute, experts
    from plan_search.planner.costmodel.plan import OFFLOAD_MODULES

    mask = np.asarray(x.off_mod, dtype=np.int64)
    if not np.any(mask):
        return np.zeros(len(x))
    on = {m: (mask & (1 << i)) > 0 for i, m in enumerate(OFFLOAD_MODULES)}
    m = model
    t = x.tp.astype(float)
    sp = np.where(x.sp, t, 1.0)
    g = compute.gemm_input_bytes(x)
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    out = (np.where(on["attn_norm"], 2.0 * m.hidden_size / sp, 0.0)
           + np.where(on["qkv_linear"], m.hidden_size * g / sp, 0.0)
           + np.where(on["core_attn"], (2.0 * q + 4.0 * kv) / t, 0.0)
           + np.where(on["attn_proj"], q * g / t, 0.0)
           + np.where(on["mlp_norm"], 2.0 * m.hidden_size / sp, 0.0))
    if m.is_moe:
        T = compute.tokens_per_gpu(x)
        rows_per_token = experts.routed_rows(m, x) / T
        share = m.num_moe_layers / m.num_layers
        fe = m.expert_ffn_hidden_size / x.etp
        out = out + share * rows_per_token * (np.where(on["expert_fc1"], m.hidden_size * g, 0.0)
                                              + np.where(on["moe_act"], experts.activation_input_bytes(m, x) * fe, 0.0))
    return out


def module_offload_exposed_s(bytes_per_microbatch, compute_per_microbatch_s, x: PlanArrays, cluster: ClusterSpec):
    """Exposed seconds per micro-batch of copying the named modules' inputs out and back (as
    :func:`activation_offload_exposed_s`)."""
    link = host_link_gbps(cluster) * 1e9 * HOST_LINK_EFF
    copy = 2.0 * bytes_per_microbatch / link
    return np.where(np.asarray(x.off_mod) > 0, np.maximum(0.0, copy - compute_per_microbatch_s), 0.0)
