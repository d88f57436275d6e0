"""GPU, node and cluster specifications, and the calibrated efficiency terms of the cost model.

Unit conventions (one for the whole project):

- Bandwidth: **GB/s per GPU per direction** (1 GB = 1e9 bytes). Conversions:
  an A100's "600 GB/s NVLink" is the bidirectional sum, so 300 GB/s per direction; an H100's
  "900 GB/s" is 450; PCIe 4.0 x16 is 32 GB/s per direction (5.0 x16: 64); a 200 Gb/s
  InfiniBand HDR NIC is 200/8 = 25 GB/s, 400 Gb/s NDR is 50 GB/s. See :func:`gbit_to_gbyte`
  and :func:`bidirectional_to_per_direction`.
- HBM bandwidth: GB/s (datasheet figure, 1e9 bytes/s).
- Memory capacity: GiB (2**30 bytes), as the driver reports it usable.
- Compute: dense (not 2:4 sparse) peak TFLOP/s (1e12 FLOP/s) per precision.
- Latency: microseconds (``_us``). Power: watts. Prices: USD per GPU-hour.

A :class:`ClusterSpec` is the "system" document of the Calculon split: GPU + node + network +
price + storage + the efficiency terms fitted on published runs (``plan-calibrate``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


#: Lower bounds of the rates (GB/s, TFLOP/s) and of the efficiency fractions. Zero is excluded
#: by the physics; these floors also keep every figure of the cost model finite (the slowest
#: step of the largest valid model stays far below the float range), so a what-if such as
#: ``--set gpu.hbm_bandwidth_gbps=1e-300`` is refused by name instead of pricing plans at
#: infinity or NaN.
MIN_RATE = 1e-3
MIN_FRACTION = 1e-3


def _check_floors(spec, floors: dict[str, float]) -> None:
    for name, floor in floors.items():
        value = getattr(spec, name)
        if value < floor:
            raise ValueError(f"{name}: {value:g} is below the smallest value modelled, {floor:g}")


def gbit_to_gbyte(gbit_per_s: float) -> float:
    """Network line rate (Gb/s) to GB/s: 200 Gb/s HDR InfiniBand -> 25 GB/s."""
    return gbit_per_s / 8.0


def bidirectional_to_per_direction(gbps_bidirectional: float) -> float:
    """Marketing "bidirectional" aggregate to the per-direction figure this project uses."""
    return gbps_bidirectional / 2.0


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]


class GPUSpec(_Frozen):
    """One accelerator, from its datasheet. Every figure's source is in ``sources``."""

    name: str = Field(min_length=1)
    memory_gib: float = Field(gt=0, le=100_000, description="usable device memory, GiB")
    hbm_bandwidth_gbps: float = Field(gt=0, le=1_000_000, description="memory bandwidth, GB/s")
    peak_tflops: dict[Precision, float] = Field(
        description="dense peak TFLOP/s per precision (tensor cores where they exist)"
    )
    tdp_w: float = Field(gt=0, le=100_000, description="board power, W")
    block_scaling: bool = Field(
        default=False,
        description="tensor cores apply per-block scale factors in hardware (MXFP8, NVFP4: Blackwell's "
        "5th-generation tensor cores); the mxfp8 and nvfp4 recipes need it",
    )
    architecture: Literal["volta", "ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"] | None = Field(
        default=None,
        description="the vendor's architecture of the die, which says what a kernel measurement taken on one "
        "part of it applies to (planner.costmodel.compute.cudnn_sdpa_speedup: cuDNN's Hopper measurements); "
        "None where a GPU file does not state it: no architecture-specific measurement is applied",
    )
    sources: dict[str, str] = Field(default_factory=dict, description="field -> datasheet / paper")

    @model_validator(mode="after")
    def _check_peaks(self) -> "GPUSpec":
        if "bf16" not in self.peak_tflops and "fp16" not in self.peak_tflops:
            raise ValueError("peak_tflops: needs at least a bf16 or fp16 entry")
        for k, v in self.peak_tflops.items():
            if not (MIN_RATE <= v < 1e7):
                raise ValueError(f"peak_tflops.{k}: {v} must be a TFLOP/s figure between {MIN_RATE:g} and 1e7")
        _check_floors(self, {"hbm_bandwidth_gbps": MIN_RATE})
        return self

    def peak(self, precision: str) -> float:
        """Dense peak for ``precision``; bf16 falls back to fp16 (V100) and vice versa."""
        if precision in self.peak_tflops:
            return self.peak_tflops[precision]
        if precision == "bf16" and "fp16" in self.peak_tflops:
            return self.peak_tflops["fp16"]
        if precision == "fp16" and "bf16" in self.peak_tflops:
            return self.peak_tflops["bf16"]
        raise ValueError(
            f"precision: {self.name} has no {precision} peak; use one of {sorted(self.peak_tflops)}"
        )


class NodeSpec(_Frozen):
    """A server (or rack) and its links. Bandwidths are GB/s per GPU per direction."""

    gpus_per_node: int = Field(gt=0, le=4096)
    intra_link: Literal["nvlink", "nvswitch", "infinity_fabric", "pcie"] = "nvswitch"
    intra_domain_size: int = Field(
        gt=0, le=100_000, description="GPUs that reach each other over intra_node_gbps (NVLink domain)"
    )
    intra_node_gbps: float = Field(gt=0, le=1_000_000, description="per GPU per direction")
    inter_node_gbps: float = Field(gt=0, le=1_000_000, description="NIC bandwidth per GPU per direction")
    intra_latency_us: float = Field(default=5.0, ge=0, le=1e6, description="per collective step")
    inter_latency_us: float = Field(default=10.0, ge=0, le=1e6, description="per collective step")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> "NodeSpec":
        _check_floors(self, {"intra_node_gbps": MIN_RATE, "inter_node_gbps": MIN_RATE})
        if self.intra_domain_size % self.gpus_per_node and self.gpus_per_node % self.intra_domain_size:
            raise ValueError(
                f"intra_domain_size: {self.intra_domain_size} must divide or be a multiple of "
                f"gpus_per_node {self.gpus_per_node}"
            )
        return self


class EfficiencySpec(_Frozen):
    """Achievable fractions of the peaks, fitted on published runs (``plan-calibrate``).

    - GEMM efficiency of a local matrix multiply whose smaller weight dimension is ``d``:
      ``gemm_eff_max * (1 - exp(-d / gemm_dim_scale))`` of the dense peak. Tensor parallelism
      divides ``d`` and so lowers the efficiency (a calibrated curve, never the raw peak).
    - ``fp8_gemm_eff_ratio``: FP8 GEMMs reach this fraction of the BF16 efficiency at the FP8 peak.
      Default 1.0, not fitted: at equal sizes cuBLASLt reaches about the same fraction of peak in
      FP8 as in BF16 (8192^3 E4M3 GEMM on H100 SXM: 1609 TFLOP/s = 81% of 1979; cuBLASLt FP8
      cross-check report, 2026-05-24, gitea.d-robotics.cc test_gpu_scripts); the casts and
      transposes FP8 adds are priced as memory-bound work (``planner.costmodel.compute.lowp_cast_bytes``).
      The same ratio applies to MXFP8 and NVFP4 GEMMs at their peaks (not fitted: no published
      FP4/MX GEMM efficiency in the calibration data; Megatron-Bridge's GB200/GB300 Llama-3-70B SFT
      rows run MXFP8 7-10% slower than per-tensor FP8 at the same plan, which this ratio does not
      represent).
    - ``attention_eff``: fraction of the bf16 peak FlashAttention kernels reach on the attention
      products. Default 0.33, a cited prior, not fitted: FlashAttention-2 forward, causal, head
      dim 128, seq 8K on H100 SXM5 runs at 333 TFLOP/s (Shah et al. 2024, FlashAttention-3,
      Fig. "Attention forward speed, head dim 128"). A100: FlashAttention-2 reaches 50-73% of
      peak (Dao 2023, FlashAttention-2, abstract).
    - ``bmm_attention_eff``: the same for unfused attention (batched GEMMs of width ``head_dim``
      with a materialised softmax, the pre-FlashAttention Megatron-LM path); fitted.
    - ``hbm_eff``: achievable fraction of HBM bandwidth for memory-bound kernels.
    - ``intra_bw_eff`` / ``inter_bw_eff``: NCCL bus bandwidth as a fraction of the link peak.
    - ``zero3_bw_eff``: fraction of that bus bandwidth reached by ZeRO-3 / FSDP parameter
      gathers and gradient reduce-scatters (per-module collectives; implementation dependent).
    - ``*_overlap``: fraction of a communication that overlap hides when it is enabled.
    - ``framework_overhead_gib``: memory outside PyTorch's allocator besides NCCL's buffers (CUDA
      context, library handles; NCCL per communicator: ``planner.costmodel.memory``); a prior.
      ``fragmentation``: the caching allocator's reserved-but-unused memory as a fraction of the bytes
      allocated and freed every micro-batch (stored activations, ZeRO-3 gathers).
    - ``step_overhead_s``: fixed per-step cost (data loader, optimizer launch, logging).
    - Mixture of experts (``planner.costmodel.experts`` / ``dispatch``): ``a2a_bw_eff`` achievable
      fraction of the link bandwidth for the token all-to-all (many small messages: below a ring's
      ``*_bw_eff``; DeepEP's README measures 153-158 GB/s of H800's 200 GB/s NVLink intranode and
      43-47 GB/s of 50 GB/s RDMA internode, NCCL all-to-all well below); ``grouped_gemm_eff`` the
      grouped expert GEMMs' efficiency relative to a dense GEMM of the same shape (several small
      GEMMs in one kernel, the permuted token layout); ``ep_overlap`` the fraction of dispatch and
      combine hidden when ``moe_overlap`` is on (Megatron ``--overlap-moe-expert-parallel-comm``,
      DeepSeek-V3's DualPipe); ``moe_membound_eff`` scales the router, permutation and
      un-permutation bytes (gather/scatter kernels, not streaming); ``grouped_gemm_rows_scale`` the
      grouped GEMMs' loss with few token rows per expert (``planner.costmodel.experts.rows_efficiency``);
      ``grouped_gemm_call_s`` the time each local expert's GEMM adds (one cuBLAS GEMM per expert:
      ``planner.costmodel.experts.GROUPED_GEMM_CALL_NOTE``).
      The six defaults are the values
      shared by every system in the joint fit of ``python bench/moe_fidelity.py --refit --write``
      (2026-12-02: the 61 MoE rows of ``planner/runs_2026_12.csv`` with a step time or tokens/s --
      Megatron-Bridge 25.09-26.06 on H100/B200/B300/GB200/GB300, Megatron-MoE-ModelZoo Qwen3-235B on
      H100, NeMo AutoModel on H100, the DeepSeek-V3 production run on H800 -- and the dense SFT
      Llama-3-70B rows 1011-1014 on GB200/GB300, with a GEMM efficiency per die and a fused-attention
      efficiency for Blackwell, the HGX and NVL72 parts of a die alike); the systems with rows carry them, with the rows each term saw, in the
      megatron entries of ``hardware/efficiency_profiles.yaml``. The fit minimises Huber's loss of the
      log errors (``bench/moe_fidelity.HUBER_DELTA``: a few rows are gross measurement errors). At that
      fit (with the grouped GEMMs' per-expert call time, fitted 35.9 us, one call per GEMM under the fused
      grouped MLP, ``Plan.moe_grouped_gemm``; the flex dispatcher's tokens sent once per rank,
      ``dispatch.ranks_per_token``, and AutoModel's round-robin routing, ``dispatch.round_robin_hit``; the
      alltoall dispatcher's second permutation priced, ``experts.SORT_CHUNKS_BYTES``, the routed rows'
      low-precision casts, ``experts.expert_cast_bytes``, GPT-OSS's eager activation clamp and
      expert bias, ``experts.CLAMP_FWD_BYTES`` and ``EXPERT_BIAS_FWD_BYTES``, its unfused YaRN RoPE and
      window-layer floor, ``compute.yarn_rope_bytes`` and ``compute.window_floor_s``, Transformer Engine's FP8
      row padding under the alltoall and allgather dispatchers, ``experts.FP8_PAD_BYTES``, and
      ``grouped_gemm_rows_scale``: the token rows per expert at which a grouped GEMM keeps 1 - 1/e of its
      efficiency, fitted 125, about one 128-row tile) the median error was 9.5%, p90 32.5%;
      leave-one-model-out DeepSeek-V3 7.9%, Qwen3-235B 10.0%. Today's figures are ``python bench/moe_fidelity.py``'s output, quoted in the README
      ("Calibration and fidelity": "Mixture-of-experts step time ..."). The MoE terms
      are weakly identified (``ep_overlap`` and Blackwell's ``attention_eff`` move across the
      leave-one-model-out refits) and the rows disagree by container version (the same configuration
      2x apart, in opposite directions for two models): see the benchmark's output.
    """

    gemm_eff_max: float = Field(default=0.80, gt=0, le=1)
    gemm_dim_scale: float = Field(default=600.0, gt=0, le=1e6)
    fp8_gemm_eff_ratio: float = Field(default=1.0, gt=0, le=1)
    attention_eff: float = Field(default=0.33, gt=0, le=1)
    bmm_attention_eff: float = Field(default=0.45, gt=0, le=1)
    hbm_eff: float = Field(default=0.80, gt=0, le=1)
    intra_bw_eff: float = Field(default=0.75, gt=0, le=1)
    inter_bw_eff: float = Field(default=0.8, gt=0, le=1)
    zero3_bw_eff: float = Field(default=1.0, gt=0, le=1)
    dp_overlap: float = Field(default=0.8, ge=0, le=1)
    tp_overlap: float = Field(default=0.6, ge=0, le=1)
    pp_overlap: float = Field(default=0.5, ge=0, le=1)
    cp_overlap: float = Field(default=0.8, ge=0, le=1)
    framework_overhead_gib: float = Field(default=2.0, ge=0, le=1e4)
    # fitted by bench/memory_fidelity.py --fit on the 11 torchtitan rows with a measured reserved
    # peak (planner.costmodel.memory.MEMORY_FIT_NOTE; leave-one-table-out fits 0.27-0.38)
    fragmentation: float = Field(default=0.31, ge=0, le=10)
    step_overhead_s: float = Field(default=0.05, ge=0, le=1e4)
    a2a_bw_eff: float = Field(default=0.8762, gt=0, le=1)
    grouped_gemm_eff: float = Field(default=0.7134, gt=0, le=1)
    ep_overlap: float = Field(default=0.6665, ge=0, le=1)
    moe_membound_eff: float = Field(default=0.455, gt=0, le=1)
    grouped_gemm_call_s: float = Field(
        default=3.639e-05, ge=0, le=1e-2, description="seconds each local expert's GEMM adds to a grouped expert GEMM "
        "(one cuBLAS GEMM and quantize per expert in Transformer Engine's GroupedLinear: "
        "planner.costmodel.experts.GROUPED_GEMM_CALL_NOTE; overlapped when padded to capacity: expert_gemms_fwd_s)")
    grouped_gemm_rows_scale: float = Field(
        default=124.5, ge=0, le=1e6, description="token rows per expert at which a grouped expert GEMM reaches "
        "1 - 1/e of its efficiency (planner.costmodel.experts.rows_efficiency); 0: no dependence on the rows")
    kernel_fusion: Literal["fused", "compiled", "eager"] = Field(
        default="fused", description="how the framework runs the element-wise ops between GEMMs: fused "
        "(Transformer Engine / Megatron kernels), compiled (torch.compile, one Inductor kernel per chain), "
        "eager (PyTorch ops, one memory-bound pass each): planner.costmodel.compute.unfused_membound_fwd_bytes")
    selective_ac: Literal["core_attn", "op"] = Field(
        default="core_attn", description="what recompute selective recomputes: core_attn (Megatron's "
        "--recompute-modules core_attn, Korthikanti et al. 2022: the attention core) or op (torchtitan's op-level "
        "SAC, activation_checkpoint.selective_ac_option 'op': every second matmul and every non-compute op; "
        "planner.costmodel.memory.op_sac_saved_bytes_per_token)")
    fsdp2: bool = Field(
        default=False, description="ZeRO-3 runs as PyTorch FSDP2 (fully_shard per block and a root unit with the "
        "embedding and output layer): the all-gather copy-out and the reduce-scatter copy-in run on the compute "
        "stream and the root's gather and last reduce-scatter cannot be prefetched (planner.costmodel.comm."
        "fsdp2_step_terms)")
    zero3_flat: bool = Field(
        default=False, description="ZeRO-3 collectives as flat per-module rings, each GPU's whole traffic over its "
        "NIC once the shard group leaves the NVLink domain (DeepSpeed ZeRO-3 as Narayanan et al. 2021 Table 2 "
        "measured it); off: NCCL rings with the group's members per NVLink domain (FSDP2, Megatron-FSDP)")
    source: str = Field(default="defaults (not fitted)")

    @model_validator(mode="after")
    def _check(self) -> "EfficiencySpec":
        _check_floors(self, dict.fromkeys(("gemm_eff_max", "fp8_gemm_eff_ratio", "attention_eff", "bmm_attention_eff",
                                           "hbm_eff", "intra_bw_eff", "inter_bw_eff", "zero3_bw_eff",
                                           "a2a_bw_eff", "grouped_gemm_eff", "moe_membound_eff"), MIN_FRACTION))
        return self


class ClusterSpec(_Frozen):
    """A system to train on: GPUs in their usual node, its network, price, storage, efficiencies."""

    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    gpu: GPUSpec
    node: NodeSpec
    price_per_gpu_hour_usd: float = Field(ge=0, le=1e6)
    price_date: str = ""
    price_source: str = ""
    pue: float = Field(default=1.2, ge=1, le=10, description="datacenter power usage effectiveness")
    energy_price_usd_per_kwh: float = Field(default=0.10, ge=0, le=1e3)
    storage_read_gbps: float = Field(default=100.0, gt=0, le=1e9, description="aggregate, GB/s")
    storage_write_gbps: float = Field(default=50.0, gt=0, le=1e9, description="aggregate, GB/s")
    failures_per_1000_gpu_days: float | None = Field(
        default=None, ge=0, le=1e6, description="job-interrupting failures per 1,000 GPU-days; None: the GPU "
        "type's preset (planner.costmodel.goodput.preset_for); 0: no failures")
    restart_minutes: float | None = Field(
        default=None, ge=0, le=1e6, description="minutes to detect a failure and restart, before the checkpoint "
        "is read; None: planner.costmodel.goodput.RESTART_S_DEFAULT")
    efficiency: EfficiencySpec = EfficiencySpec()
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        _check_floors(self, {"storage_read_gbps": MIN_RATE, "storage_write_gbps": MIN_RATE})
        return self
