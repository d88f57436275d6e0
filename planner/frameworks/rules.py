"""What each training framework can run: its rules, written down once, with the version they come from.

Four frameworks, each read at one version (``VERSIONS``):

- ``megatron``: Megatron-LM ``megatron/training/arguments.py`` at commit ``000c4ac2`` (its flags and
  ``validate_args``) and Megatron-Core 0.16.1 (``TransformerConfig.__post_init__``, ``TransformerBlock``,
  the pipeline schedules), which it runs on.
- ``deepspeed``: DeepSpeed 0.19.8 (``runtime/pipe/engine.py``, ``runtime/engine.py``, ``runtime/config.py``,
  ``runtime/zero``, ``runtime/tensor_parallel``).
- ``torchtitan``: torchtitan 0.2.2, the last release configured by a TOML job file
  (``config/job_config.py``, ``distributed/parallel_dims.py``, ``distributed/pipeline_parallel.py``,
  ``distributed/activation_checkpoint.py``, ``models/llama3/infra/parallelize.py``, ``train.py``), with
  PyTorch 2.13's ``torch.distributed.pipelining`` schedules.
- ``nemo``: NeMo 2.0 as nemo-toolkit 2.7.3 (``nemo.lightning.MegatronStrategy``,
  ``MegatronMixedPrecision``, the ``llm`` recipes) on Megatron-Core 0.16.1 — Megatron's rules plus NeMo's.

How ZeRO stages map (the plan's ``zero``, :mod:`planner.plan`):

- megatron: 0 DDP; 1 ``--use-distributed-optimizer``; 2/3 Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params`` with the
  flags its user guide requires: ``--use-distributed-optimizer --no-gradient-accumulation-fusion
  --ckpt-format fsdp_dtensor``).
- nemo: the same through ``optim.config.use_distributed_optimizer`` and ``trainer.strategy.fsdp=megatron``
  with ``trainer.strategy.ddp.data_parallel_sharding_strategy``.
- deepspeed: ``zero_optimization.stage`` 0-3.
- torchtitan: 0 DDP (``data_parallel_replicate_degree``), 3 FSDP2 (``data_parallel_shard_degree``); no 1/2.

Megatron's distributed optimizer is ZeRO-1 (optimizer states sharded, gradients reduce-scattered into a
full buffer); ZeRO-2/3 exist only as Megatron-FSDP's sharding strategies. torch FSDP2 inside Megatron
(``--use-torch-fsdp2``) is not used: it is ZeRO-3 too but refuses pipeline parallelism, fp16 and tied
embeddings, and Megatron-FSDP covers the same plans.

The API:

- :func:`check` ``(framework, plan, model, cluster=None) -> list[Violation]``: every rule the plan breaks
  (empty: the framework can run it). :func:`require` raises :class:`~models.io.InputError` naming the first.
- :func:`normalize` ``(framework, plan, num_layers)``: the same plan with the knobs that have no effect
  (see ``_inert``: overlaps with one replica, the TP overlap without TP, the ZeRO stage with one replica in
  torchtitan, an explicit split equal to the even one) set to what the framework's configuration carries;
  the emitters write this plan and the readers give it back: ``from_x(to_x(p)) == normalize(x, p, l)``.
  The tests check that the estimate does not move.
- :func:`conform` ``(framework, plan, num_layers)``: the plan with the knobs the framework decides by
  itself (``Capabilities.decides``: sequence parallelism, gradient precision, the overlaps, the attention
  kernel) set its way; degrees, batch, recomputation, precision and ZeRO stage unchanged. A search can
  conform each candidate, then check it.
- :func:`runnable` ``(framework, plan, model, cluster=None)``: conform, then check: the plan to run, or None.
- :func:`allowed` ``(framework) -> Capabilities``: the knob space a search may use, and
  :meth:`Capabilities.knobs` to narrow a :class:`~planner.request.Knobs`.
- :func:`kept_args` ``(framework)``: the argument/key list kept in ``planner/data/framework_args`` (each
  file names its source), which the emitters validate every name against.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel.plan import Plan, choice_fields, grad_per_microbatch

FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "nemo")

MEGATRON_ARGS_COMMIT = "000c4ac24f61159c138b0975def722c65245983c"
VERSIONS = {
    "megatron": f"Megatron-LM arguments.py @ {MEGATRON_ARGS_COMMIT[:8]} on Megatron-Core 0.16.1",
    "deepspeed": "DeepSpeed 0.19.8",
    "torchtitan": "torchtitan 0.2.2 (TOML job config) with PyTorch 2.13 pipelining",
    "nemo": "NeMo 2.0 (nemo-toolkit 2.7.3) on Megatron-Core 0.16.1",
}

# Sources, named once.
_MLM = f"Megatron-LM megatron/training/arguments.py@{MEGATRON_ARGS_COMMIT[:8]}"
_MC = "megatron-core 0.16.1"
_DS = "deepspeed 0.19.8"
_TT = "torchtitan 0.2.2"
_NM = "nemo-toolkit 2.7.3"

DATA_DIR = Path(__file__).with_name("data") / "framework_args"


def _known(framework: str) -> str:
    fw = (framework or "").strip().lower()
    if fw not in FRAMEWORKS:
        raise InputError(f"framework: {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    return fw


# ------------------------------------------------------------------ rules


@dataclass(frozen=True)
class Rule:
    """One thing a framework cannot do, in its own words, and where that is written."""

    id: str
    framework: str
    text: str
    source: str
    test: Callable = field(repr=False, compare=False)  # (plan, model, cluster) -> detail str or None


@dataclass(frozen=True)
class Violation:
    rule: Rule
    detail: str

    def __str__(self) -> str:
        return f"{self.rule.id}: {self.rule.text} ({self.detail})"


def _named(*parts: tuple[str, bool]) -> Optional[str]:
    """A rule's detail naming the knobs at fault, each as ``knob value``: :func:`require` reads a detail's
    first word as the knob the rule is about (a detail led by anything else was never ranked by the knob
    its caller set)."""
    return ", ".join(text for text, bad in parts if bad) or None


def _uneven(p: Plan) -> bool:
    return p.pp > 1 and (p.first_stage_layers is not None or p.last_stage_layers is not None)


def rank_layers(p: Plan, num_layers: int) -> list[int]:
    """Transformer layers held by each pipeline rank, first to last (the plan's split)."""
    return p.split(num_layers)


def _fp8_gpu(p: Plan, cluster) -> Optional[str]:
    from plan_search.planner.costmodel.compute import supports_precision  # issue 12: every recipe

    if cluster is not None and not supports_precision(cluster, p.precision):
        return f"precision {p.precision} on {cluster.gpu.name}, which has no tensor cores for it"
    return None


# ---- Megatron-Core based (megatron, nemo)


def _mcore_rules(fw: str) -> list[Rule]:
    """The rules of Megatron-Core, which both Megatron-LM and NeMo 2.0 run on; Megatron-LM's own
    argument checks (validate_args) only for ``megatron``."""

    def R(rid, text, source, test):  # noqa: N802
        return Rule(f"{fw}-{rid}", fw, text, source, test)

    mlm = fw == "megatron"
    out = [
        R("alibi", "no ALiBi position embedding (position types: learned_absolute, rope" +
          (", mrope, relative, none)" if mlm else ")"),
          f"{_MLM} _add_network_size_args --position-embedding-type" if mlm
          else f"{_NM} nemo/collections/llm/gpt/model/base.py GPTConfig.position_embedding_type",
          lambda p, m, c: f"the model uses {m.position}" if m.position == "alibi" else None),
        R("fsdp-pp", "ZeRO-2/3 run as Megatron-FSDP, which this planner uses only without pipeline "
          "parallelism (its PP support is not established in the sources read; torch FSDP2 refuses PP)",
          (f"{_MLM} validate_args (--use-megatron-fsdp; --use-torch-fsdp2 asserts pipeline_model_parallel_size "
           "== 1); Megatron-Core developer guide, Megatron-FSDP user guide (required flags)") if mlm else
          (f"{_NM} MegatronStrategy (fsdp='megatron' is Megatron-FSDP, fsdp='pytorch' raises "
           "NotImplementedError)"),
          lambda p, m, c: f"zero {p.zero} with pp {p.pp}" if p.zero >= 2 and p.pp > 1 else None),
    ]
    if mlm:
        out += [
            R("overlap-param-gather", "overlapping the parameter all-gather needs the gradient-reduce overlap "
              "too (--overlap-param-gather requires --overlap-grad-reduce)", f"{_MLM} validate_args",
              lambda p, m, c: "overlap_param_gather without overlap_grad_reduce"
              if p.overlap_param_gather and not p.overlap_grad_reduce and p.zero >= 1 and p.dp > 1 else None),
            R("tp-comm-overlap", "TP communication/GEMM overlap needs sequence parallelism",
              f"{_MLM} validate_args (--tp-comm-overlap)",
              lambda p, m, c: "overlap_tp_comm without sequence_parallel"
              if p.overlap_tp_comm and p.tp > 1 and not p.sequence_parallel else None),
        ]
    out += [
        R("uneven-split", "pp must divide the layers, or an uneven split must give the first/last stage layers "
          "and split the rest evenly over the middle stages",
          f"{_MC} TransformerConfig.__post_init__ (num_layers_in_first/last_pipeline_stage: middle layers "
          "divisible by the middle stages); Megatron-LM validate_args (num_layers % pipeline size without them)",
          lambda p, m, c: _mcore_split(p, m)),
        R("vpp-uneven", "with virtual stages the first and last stage layers must divide by vpp",
          f"{_MC} TransformerConfig.__post_init__ (num_layers_in_first/last_pipeline_stage)",
          lambda p, m, c: _vpp_uneven(p, m)),
        R("offload-modules", "fine-grained activation offloading (--fine-grained-activation-offloading "
          "--offload-modules) is newer than the kept Megatron-LM flags (arguments.py@000c4ac2): the plan prices it "
          "(planner/costmodel/offload.py) but does not write it; drop offload_modules to emit",
          f"{_MLM} (the kept flags' commit); Megatron-Core docs, Fine-grained Activation Offloading",
          lambda p, m, c: f"offload_modules {p.offload_modules}" if p.offload_modules else None),
        R("recompute-vpp", "block recomputation counts layers per virtual chunk, so recompute_layers must be "
          "a multiple of vpp", f"{_MC} TransformerBlock._checkpointed_forward (recompute_method block)",
          lambda p, m, c: f"recompute_layers {p.recompute_layers}, vpp {p.vpp}"
          if p.recompute_layers is not None and p.vpp > 1 and p.recompute_layers % p.vpp else None),
        R("interleaved-microbatches", "the interleaved schedule takes micro-batches in groups of pp "
          "(microbatch_group_size_per_vp_stage = pp): at least pp of them, the remainder 0 or at least pp",
          f"{_MC} pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving",
          lambda p, m, c: f"{p.grad_accum} micro-batches, pp {p.pp}" if p.vpp > 1 and (
              p.grad_accum < p.pp or 0 < p.grad_accum % p.pp < p.pp) else None),
        R("fp8-gpu", "FP8 needs Transformer Engine on a GPU with FP8 tensor cores (Ada/Hopper or newer)",
          f"{_MLM} _add_transformer_engine_args (--fp8-format)" if mlm
          else f"{_NM} MegatronMixedPrecision(fp8=...) (Transformer Engine)", lambda p, m, c: _fp8_gpu(p, c)),
    ]
    return out


def _balanced_uneven(p: Plan, num_layers: int) -> bool:
    """The plan's default split when pp does not divide the layers (:meth:`Plan.split`), no ends given."""
    return (p.pp > 1 and not _uneven(p) and num_layers % p.pp != 0
            and not (p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split))


def _mcore_end_split(p: Plan, num_layers: int) -> tuple[list[int] | None, bool]:
    """(the balanced uneven split Megatron is given, whether its explicit first/last stage layers
    can write it: its middle stages equal); (None, False) when the plan has no such split."""
    if not _balanced_uneven(p, num_layers):
        return None, False
    s = p.split(num_layers)
    return s, len(set(s[1:-1])) <= 1


def _mcore_split(p: Plan, m: ModelSpec) -> Optional[str]:
    """A balanced split Megatron cannot write: its uneven pipeline takes explicit first/last stage
    layers and splits the rest evenly over the middle stages; the nearest split it can run instead."""
    s, writable = _mcore_end_split(p, m.num_layers)
    if s is None or writable:
        return None  # none, or written as --decoder-first/last-pipeline-num-layers by normalize()
    l, pp = m.num_layers, p.pp
    mid = -(-l // pp)
    rest = l - (pp - 2) * mid
    hint = f"; e.g. first_stage_layers {rest - rest // 2} and last_stage_layers {rest // 2}" if rest >= 2 else ""
    return f"balanced split {'|'.join(map(str, s))} has unequal middle stages{hint}"


def _vpp_uneven(p: Plan, m: ModelSpec) -> Optional[str]:
    if p.vpp == 1 or not _uneven(p):
        return None
    f, _, la = p.stage_layers(m.num_layers)
    if f % p.vpp or la % p.vpp:
        return f"first {f}, last {la}, vpp {p.vpp}"
    return None


def _nemo_devices(p: Plan, m: ModelSpec, c) -> Optional[str]:
    if c is None:
        return None
    g = c.node.gpus_per_node
    if p.num_gpus > g and p.num_gpus % g:
        return f"{p.num_gpus} GPUs are not whole nodes of {g}"
    return None


_NEMO_EXTRA = [
    Rule("nemo-attention", "nemo", "attention runs Transformer Engine's flash/fused kernels (attention_backend "
         "auto); unfused attention is not offered", f"{_MC} TransformerConfig.attention_backend; {_NM} recipes",
         lambda p, m, c: "flash_attention off" if not p.flash_attention else None),
    Rule("nemo-tp-comm-callback", "nemo", "TP communication overlap is switched on by adding "
         "MegatronCommOverlapCallback(tp_comm_overlap=True) to trainer.callbacks, which a recipe override "
         "cannot express; add it by hand and set overlap_tp_comm off here",
         f"{_NM} nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py",
         lambda p, m, c: "overlap_tp_comm on" if p.overlap_tp_comm and p.tp > 1 else None),
    Rule("nemo-devices", "nemo", "trainer.devices x trainer.num_nodes must be the GPU count",
         f"{_NM} nemo.lightning.Trainer (lightning devices/num_nodes)", _nemo_devices),
]


# ---- DeepSpeed


def _ds_zero0_grads(p: Plan, m, c) -> Optional[str]:
    if p.zero != 0:
        return None
    bf16_optimizer = p.pp > 1 and p.precision != "fp16"
    if bf16_optimizer and not p.fp32_grads:
        return "fp32_grads off: the pipeline engine's BF16 optimizer accumulates gradients in fp32; set it on"
    if not bf16_optimizer and p.fp32_grads:
        return "fp32_grads on: without ZeRO gradients accumulate in the model dtype; set it off"
    return None


_DS_RULES = [
    Rule("deepspeed-offload-modules", "deepspeed", "activation checkpoints offload whole (cpu_checkpointing), not "
         "per module: leave offload_modules unset", f"{_DS} runtime/activation_checkpointing/config.py",
         lambda p, m, c: f"offload_modules {p.offload_modules}" if p.offload_modules else None),
    Rule("deepspeed-pipe-zero", "deepspeed", "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
         f"{_DS} runtime/pipe/engine.py PipelineEngine.__init__",
         lambda p, m, c: f"zero {p.zero} with pp {p.pp}" if p.pp > 1 and p.zero >= 2 else None),
    Rule("deepspeed-vpp", "deepspeed", "the pipeline engine has one schedule (1F1B TrainSchedule), no "
         "interleaved virtual stages", f"{_DS} runtime/pipe/schedule.py",
         lambda p, m, c: f"vpp {p.vpp}" if p.vpp > 1 else None),
    Rule("deepspeed-uneven", "deepspeed", "PipelineModule's partition_method (parameters, uniform, type:regex) "
         "cannot pin the first/last stage layer counts", f"{_DS} runtime/pipe/module.py _partition_layers",
         lambda p, m, c: "uneven first/last stages" if _uneven(p) else None),
    Rule("deepspeed-cp", "deepspeed", "no ring context parallelism (Ulysses sequence_parallel_size is an "
         "all-to-all over heads, which the plan does not price)", f"{_DS} runtime/config.py, deepspeed/sequence",
         lambda p, m, c: f"cp {p.cp}" if p.cp > 1 else None),
    Rule("deepspeed-pipe-tp", "deepspeed", "with the pipeline engine, tensor parallelism comes from the model's "
         "own layers and mpu (Megatron-DeepSpeed), not from the config; AutoTP (tensor_parallel.autotp_size) "
         "is used only without pipeline parallelism", f"{_DS} runtime/engine.py (AutoTP), runtime/pipe/topology.py",
         lambda p, m, c: f"tp {p.tp} with pp {p.pp}" if p.pp > 1 and p.tp > 1 else None),
    Rule("deepspeed-sp", "deepspeed", "AutoTP shards the linear layers only: no sequence parallelism",
         f"{_DS} runtime/tensor_parallel/config.py TPTrainingConfig, module_inject/auto_tp.py",
         lambda p, m, c: "sequence_parallel on" if p.tp > 1 and p.sequence_parallel else None),
    Rule("deepspeed-fp8", "deepspeed", "the config has no FP8 training switch (FP8 would be the model code's, "
         "e.g. Transformer Engine layers)", f"{_DS} runtime/precision_config.py (bf16, fp16 only)",
         lambda p, m, c: "precision fp8" if p.precision == "fp8" else None),
    Rule("deepspeed-recompute", "deepspeed", "activation checkpointing recomputes whole layers "
         "(deepspeed.checkpointing, PipelineModule activation_checkpoint_interval); selective and "
         "per-stage-count recomputation are not configurable",
         f"{_DS} runtime/activation_checkpointing, runtime/pipe/module.py",
         lambda p, m, c: "recompute selective" if p.recompute == "selective"
         else f"recompute_layers {p.recompute_layers}" if p.recompute_layers is not None else None),
    Rule("deepspeed-grad-dtype", "deepspeed", "without ZeRO the gradient accumulation dtype is the engine's "
         "(model dtype; fp32 in the pipeline engine's BF16 optimizer)",
         f"{_DS} runtime/engine.py _do_optimizer_sanity_check, get_data_types", _ds_zero0_grads),
    Rule("deepspeed-zero0-overlap", "deepspeed", "without ZeRO the gradients are all-reduced after the "
         "backward, not overlapped with it", f"{_DS} runtime/engine.py allreduce_gradients",
         lambda p, m, c: "overlap_grad_reduce on" if p.zero == 0 and p.dp > 1 and p.overlap_grad_reduce
         else None),
    Rule("deepspeed-param-overlap", "deepspeed", "ZeRO-1/2 all-gather the updated parameters inside "
         "optimizer.step(), not overlapped with the forward", f"{_DS} runtime/zero/stage_1_and_2.py step",
         lambda p, m, c: "overlap_param_gather on" if p.zero in (1, 2) and p.dp > 1 and p.overlap_param_gather
         else None),
]


# ---- torchtitan


def titan_split(num_stages: int, num_layers: int, input_weight: int, output_weight: int) -> Optional[list[int]]:
    """Transformer layers per (virtual) stage as torchtitan 0.2.2 splits them
    (``generate_llm_fqn_per_model_part``: the embedding counts ``input_weight`` layers on the first stage,
    norm+output ``output_weight`` on the last, leftovers go to the first stages); None where it raises."""
    s, n = num_stages, num_layers
    if s < 1:
        return None
    if s == 1:
        return [n]
    eff = n + input_weight + output_weight
    if s > eff:
        return None
    per, extra = divmod(eff, s)
    if per == 0 or input_weight > per or output_weight > per:
        return None
    out, left = [], n
    for i in range(s):
        e = per + (1 if i < extra else 0)
        want = e - input_weight if i == 0 else e - output_weight if i == s - 1 else e
        take = max(0, min(want, left))
        out.append(take)
        left -= take
    return out


def _rank_totals(stages: list[int], pp: int) -> list[int]:
    """Per-rank totals under the loop placement (virtual stage ``s`` on rank ``s % pp``)."""
    tot = [0] * pp
    for i, k in enumerate(stages):
        tot[i % pp] += k
    return tot


@functools.lru_cache(maxsize=4096)
def _titan_layout(pp: int, vpp: int, num_layers: int, target: tuple[int, ...]):
    """(first_less, last_less, layers_per_stage or None) giving ``target`` layers per rank, or None."""
    if pp == 1:
        return (0, 0, None)
    s = pp * vpp
    best = None
    for iw in range(0, num_layers + 1):
        for ow in range(0, num_layers + 1):
            if best is not None and iw + ow >= sum(best[:2]):
                break
            split = titan_split(s, num_layers, iw, ow)
            if split is None or sum(split) != num_layers or _rank_totals(split, pp) != list(target):
                continue
            if vpp == 1:
                best = (iw, ow, None)
                continue
            eff = num_layers + iw + ow
            lps = next((x for x in range(1, eff + 1) if math.ceil(eff / x) == s), None)
            if lps is not None:
                best = (iw, ow, lps)
    return best


def titan_layout(p: Plan, num_layers: int):
    """torchtitan's pipeline split knobs for the plan: (first_less, last_less, layers_per_stage), or None."""
    return _titan_layout(p.pp, p.vpp, num_layers, tuple(rank_layers(p, num_layers)))


def titan_ac_freq(p: Plan, num_layers: int) -> Optional[int]:
    """The n of torchtitan's layer SAC (every n-th block on a rank checkpointed) that recomputes
    min(recompute_layers, layers) per stage, as the plan does; None if there is none."""
    k = p.recompute_layers
    totals = rank_layers(p, num_layers)
    for n in range(1, max(totals) + 1):
        if all(t // n == min(k, t) for t in totals):
            return n
    return None


def _titan_split_rule(p: Plan, m: ModelSpec, c) -> Optional[str]:
    if p.pp == 1 or titan_layout(p, m.num_layers) is not None:
        return None
    return f"layers per rank {rank_layers(p, m.num_layers)}"


_TT_RULES = [
    Rule("torchtitan-zero12", "torchtitan", "data parallelism is DDP (replicate) or FSDP2 (parameters, "
         "gradients and optimizer states sharded: ZeRO-3); no ZeRO-1/2",
         f"{_TT} models/llama3/infra/parallelize.py (apply_fsdp, apply_ddp)",
         lambda p, m, c: f"zero {p.zero}" if p.zero in (1, 2) and p.dp > 1 else None),
    Rule("torchtitan-ddp-1d", "torchtitan", "DDP (zero 0) has not supported > 1D parallelism: with tp, pp or "
         "cp use FSDP (zero 3)", f"{_TT} models/llama3/infra/parallelize.py parallelize_llama",
         lambda p, m, c: "zero 0 with tp/pp/cp" if p.zero == 0 and p.dp > 1 and (p.tp * p.pp * p.cp) > 1
         else None),
    Rule("torchtitan-cp-fsdp", "torchtitan", "context parallelism runs under FSDP (the fsdp mesh is dp_shard x "
         "cp): use zero 3", f"{_TT} distributed/parallel_dims.py build_mesh",
         lambda p, m, c: f"cp {p.cp} with zero {p.zero}" if p.cp > 1 and p.zero != 3 else None),
    Rule("torchtitan-sp", "torchtitan", "tensor parallelism always shards the norms along the sequence "
         "(SequenceParallel)", f"{_TT} models/llama3/infra/parallelize.py apply_tp",
         lambda p, m, c: "sequence_parallel off" if p.tp > 1 and not p.sequence_parallel else None),
    Rule("torchtitan-fp16", "torchtitan", "mixed precision is bf16 (training.mixed_precision_param: bfloat16 "
         "or float32); no fp16", f"{_TT} config/job_config.py Training",
         lambda p, m, c: "precision fp16" if p.precision == "fp16" else None),
    Rule("torchtitan-grads", "torchtitan", "gradients reduce in fp32 (training.mixed_precision_reduce: float32 "
         "only)", f"{_TT} config/job_config.py Training",
         lambda p, m, c: "fp32_grads off" if not p.fp32_grads else None),
    Rule("torchtitan-selective", "torchtitan", "selective AC is 'op' (every second matmul recomputed: priced "
         "on dense models, memory.op_sac_saved_bytes_per_token) or an integer (every n-th block fully: recompute "
         "full with recompute_layers); op-level SAC of a MoE or MLA model's blocks is not priced",
         f"{_TT} distributed/activation_checkpoint.py",
         lambda p, m, c: f"recompute selective on {m.name}, a MoE/MLA model" if p.recompute == "selective"
         and (m.is_moe or m.is_mla) else None),
    Rule("torchtitan-offload-modules", "torchtitan", "no per-module activation offloading (Megatron-Core's "
         "--offload-modules): leave offload_modules unset", f"{_TT} distributed/activation_checkpoint.py",
         lambda p, m, c: f"offload_modules {p.offload_modules}" if p.offload_modules else None),
    Rule("torchtitan-recompute-modules", "torchtitan", "selective AC is op-level or per block; Megatron's "
         "--recompute-modules sets are not a torchtitan setting: leave recompute_modules unset",
         f"{_TT} distributed/activation_checkpoint.py",
         lambda p, m, c: f"recompute_modules {p.recompute_modules}" if p.recompute_modules else None),
    Rule("torchtitan-ac-freq", "torchtitan", "layer SAC checkpoints every n-th block of a rank, so "
         "recompute_layers must be floor(layers/n) on every stage for one n",
         f"{_TT} distributed/activation_checkpoint.py _apply_layer_sac",
         lambda p, m, c: f"recompute_layers {p.recompute_layers} on {rank_layers(p, m.num_layers)}"
         if p.recompute_layers is not None and titan_ac_freq(p, m.num_layers) is None else None),
    Rule("torchtitan-attention", "torchtitan", "attention is SDPA (flash/cuDNN kernels); unfused attention is "
         "not a config switch", f"{_TT} models/attention.py",
         lambda p, m, c: "flash_attention off" if not p.flash_attention else None),
    Rule("torchtitan-seq", "torchtitan", "seq_len must divide by tp x 2 x cp", f"{_TT} distributed/parallel_dims.py "
         "seq_len_divisor", lambda p, m, c: f"seq_len {p.seq_len}, tp {p.tp}, cp {p.cp}"
         if p.seq_len % (2 * p.tp * p.cp) else None),
    Rule("torchtitan-split", "torchtitan", "the pipeline split is set by first/last_stage_less_layers (>= 0, at "
         "most a stage's share) and layers_per_stage; this one cannot be", f"{_TT} distributed/pipeline_parallel.py "
         "pipeline_llm, generate_llm_fqn_per_model_part", _titan_split_rule),
    Rule("torchtitan-interleaved", "torchtitan", "Interleaved1F1B needs the micro-batches to be a multiple of "
         "its rounds, max(1, micro-batches // pp)", "torch 2.13 distributed/pipelining/schedules.py "
         "ScheduleInterleaved1F1B", lambda p, m, c: f"{p.grad_accum} micro-batches, pp {p.pp}"
         if p.vpp > 1 and p.grad_accum % max(1, p.grad_accum // p.pp) else None),
    Rule("torchtitan-overlap", "torchtitan", "FSDP2 and DDP always overlap their communication with compute",
         f"{_TT} models/llama3/infra/parallelize.py (fully_shard prefetch, replicate buckets)",
         lambda p, m, c: _named(("overlap_grad_reduce off", not p.overlap_grad_reduce),
                                ("overlap_param_gather off", p.zero == 3 and not p.overlap_param_gather))
         if p.dp > 1 else None),
    Rule("torchtitan-fp8-gpu", "torchtitan", "float8 training needs a GPU with FP8 tensor cores (SM89+)",
         f"{_TT} components/quantization/float8.py", lambda p, m, c: _fp8_gpu(p, c)),
]


# ---- Mixture of experts (issue 13). Each rule names the file and version it was read at.

#: Megatron-LM's MoE flags and checks, read at the same commit as its other arguments
#: (``megatron/training/arguments.py`` ``_add_moe_args``, ``validate_args``), and the Megatron-Core
#: files of that commit: ``megatron/core/transformer/transformer_config.py`` (``__post_init__``),
#: ``megatron/core/transformer/moe/moe_layer.py`` (``MoELayer.forward``).
_MLM_MOE = f"Megatron-LM megatron/training/arguments.py@{MEGATRON_ARGS_COMMIT[:8]}"
_MC_MOE = f"Megatron-Core (Megatron-LM@{MEGATRON_ARGS_COMMIT[:8]})"
#: DeepSpeed-MoE read at the DeepSpeed repository's main branch, commit edaa7221 (version.txt 0.19.6;
#: the MoE code is unchanged in substance since 0.14): ``deepspeed/moe/layer.py`` (``MoE.__init__``),
#: ``deepspeed/moe/sharded_moe.py`` (``MOELayer``: all-to-all dispatch), ``deepspeed/runtime/engine.py``
#: (ZeRO-3), ``deepspeed/utils/groups.py`` (expert groups inside a pipeline stage).
_DS_MOE = "DeepSpeed main@edaa7221 (0.19.6)"
#: torchtitan 0.2.2 (tag v0.2.2): ``torchtitan/distributed/parallel_dims.py`` (ParallelDims, build_mesh),
#: ``torchtitan/config/job_config.py`` (Parallelism.expert_*), ``models/deepseek_v3/infra/parallelize.py``.
_TT_MOE = "torchtitan 0.2.2"


def _moe_overlap_mcore(p: Plan, m: ModelSpec, c) -> Optional[str]:
    if not p.moe_overlap or not m.is_moe:
        return None
    if p.ep == 1:
        return "moe_overlap needs ep > 1"
    if p.moe_dispatcher == "allgather":
        return "moe_overlap needs the alltoall or flex dispatcher"
    if p.recompute == "full":
        return "moe_overlap with full recomputation"
    if p.pp > 1 and p.vpp == 1:
        return "moe_overlap with pp > 1 needs virtual stages (vpp > 1)"
    return None


#: Where the fused grouped MLP's conditions are read (moe_grouped_gemm fused under Megatron-Core).
_TE_FUSED_MLP = ("NVIDIA/TransformerEngine@v2.17 (91bb9cf) transformer_engine/pytorch/ops/fused/grouped_mlp.py "
                 "fuse_grouped_mlp_ops (MXFP8 or NVFP4 recipe; GroupedLinear + SwiGLU/clamped quick-GEGLU + "
                 "GroupedLinear) and is_supported (NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, compute capability 10); "
                 "NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/experts.py _is_fused_impl_supported "
                 "(use_transformer_engine_op_fuser, TE >= 2.14, no expert tensor parallelism, SiLU or quick-GELU "
                 "GLU); NVIDIA-NeMo/Megatron-Bridge@f83545d scripts/performance/perf_plugins.py and "
                 "utils/overrides.py (cutedsl_fused_grouped_mlp: the env variable, use_transformer_engine_op_fuser, "
                 "moe_mlp_glu_interleave_size 32)")
#: The precision recipes the fused grouped MLP runs (block-scaled, Blackwell: _TE_FUSED_MLP's fuse_grouped_mlp_ops).
_FUSED_MLP_RECIPES = ("mxfp8", "nvfp4")
#: The GLU interleave the fused grouped MLP's weights are laid out in (Megatron-Bridge utils/overrides.py
#: cutedsl_fused_grouped_mlp: moe_mlp_glu_interleave_size 32, :data:`_TE_FUSED_MLP`); emit writes it.
FUSED_MLP_GLU_INTERLEAVE = 32


def _fused_grouped_mlp_mcore(p: Plan, m: ModelSpec, c) -> Optional[str]:
    if not m.is_moe or p.moe_grouped_gemm != "fused":
        return None
    from plan_search.planner.costmodel.compute import supports_precision

    if c is not None and not any(supports_precision(c, r) for r in _FUSED_MLP_RECIPES):  # not Blackwell
        return (f"moe_grouped_gemm fused on {c.gpu.name}, which has no MXFP8/NVFP4 block scaling (use "
                "moe_grouped_gemm loop, or a Blackwell GPU)")
    if p.precision not in _FUSED_MLP_RECIPES:
        return (f"moe_grouped_gemm fused with precision {p.precision} (use {' or '.join(_FUSED_MLP_RECIPES)}, or "
                "moe_grouped_gemm loop)")
    if p.etp > 1:
        return f"moe_grouped_gemm fused with etp {p.etp} (use etp 1, or moe_grouped_gemm loop)"
    if m.activation not in ("swiglu", "geglu"):
        return f"moe_grouped_gemm fused with activation {m.activation} (use moe_grouped_gemm loop)"
    return None


def _moe_rules_mcore(fw: str) -> list[Rule]:
    mlm = fw == "megatron"
    out = [
        Rule(f"{fw}-moe-sp", fw, "a MoE model with tensor parallelism trains with sequence parallelism",
             f"{_MC_MOE} megatron/core/transformer/moe/moe_layer.py MoELayer.forward (ValueError)",
             lambda p, m, c: f"tp {p.tp} without sequence_parallel"
             if m.is_moe and p.tp > 1 and not p.sequence_parallel else None),
        Rule(f"{fw}-moe-etp-bias", fw, "expert tensor parallelism (etp > 1) needs bias-free linear layers",
             f"{_MC_MOE} megatron/core/transformer/transformer_config.py __post_init__ "
             "('Bias in Moe is only supported when ETP==1')",
             lambda p, m, c: f"etp {p.etp} with biases" if m.is_moe and p.etp > 1 and m.bias else None),
        Rule(f"{fw}-moe-overlap", fw, "overlap_moe_expert_parallel_comm needs ep > 1, the alltoall/flex "
             "dispatcher, no full recomputation and, with pp > 1, virtual stages",
             f"{_MC_MOE} megatron/core/transformer/transformer_config.py __post_init__", _moe_overlap_mcore),
        Rule(f"{fw}-moe-fused-grouped-mlp", fw, "the fused grouped MLP (moe_grouped_gemm fused) is Transformer "
             "Engine's CuTe-DSL kernel: an MXFP8 or NVFP4 recipe on Blackwell (sm100), etp 1 and a gated SiLU or "
             "quick-GELU expert MLP", _TE_FUSED_MLP, _fused_grouped_mlp_mcore),
    ]
    if mlm:
        out.append(Rule(f"{fw}-moe-fp16", fw, "expert parallelism and grouped GEMMs are not supported with fp16",
                        f"{_MLM_MOE} validate_args ('Expert parallelism is not supported with fp16 training'; "
                        "--moe-grouped-gemm asserts bf16)",
                        lambda p, m, c: "precision fp16" if m.is_moe and p.precision == "fp16" else None))
    return out


_DS_MOE_RULES = [
    Rule("deepspeed-moe-zero3", "deepspeed", "native DeepSpeed MoE is not supported with ZeRO stage 3",
         f"{_DS_MOE} deepspeed/runtime/engine.py ('Native DeepSpeed MoE is not supported with ZeRO Stage 3')",
         lambda p, m, c: "zero 3" if m.is_moe and p.zero == 3 else None),
    Rule("deepspeed-moe-etp", "deepspeed", "experts are replicated over the tensor-parallel ranks "
         "(etp 1) or split over all of them (enable_expert_tensor_parallelism: etp = tp)",
         f"{_DS_MOE} deepspeed/moe/layer.py MoE.__init__",
         lambda p, m, c: f"etp {p.etp}, tp {p.tp}" if m.is_moe and p.etp not in (1, p.tp) else None),
    Rule("deepspeed-moe-dispatch", "deepspeed", "tokens are dispatched by one blocking all-to-all "
         "(_AllToAll): no allgather or flex dispatcher, no dispatch overlap",
         f"{_DS_MOE} deepspeed/moe/sharded_moe.py MOELayer.forward",
         lambda p, m, c: _named((f"moe_dispatcher {p.moe_dispatcher}", p.moe_dispatcher != "alltoall"),
                                ("moe_overlap on", p.moe_overlap)) if m.is_moe else None),
]


def _tt_ep_mesh(p: Plan, m: ModelSpec, c) -> Optional[str]:
    if not m.is_moe or p.ep * p.etp == 1:
        return None
    shard = p.dp if p.zero == 3 else 1  # FSDP shards over dp; DDP replicates (dp_replicate)
    if (shard * p.cp * p.tp) % (p.ep * p.etp):
        return f"ep*etp {p.ep * p.etp} does not divide dp_shard*cp*tp {shard * p.cp * p.tp}"
    return None


_TT_MOE_RULES = [
    Rule("torchtitan-moe-etp", "torchtitan", "expert tensor parallelism is 1 or equal to tp",
         f"{_TT_MOE} distributed/parallel_dims.py ParallelDims._validate ('Currently we only support ETP=TP "
         "or ETP=1')", lambda p, m, c: f"etp {p.etp}, tp {p.tp}" if m.is_moe and p.ep > 1 and p.etp not in (1, p.tp)
         else None),
    Rule("torchtitan-moe-mesh", "torchtitan", "the expert mesh (efsdp, ep, etp) is carved out of the FSDP "
         "shard x cp x tp ranks: ep*etp must divide dp_shard*cp*tp (with DDP, cp*tp)",
         f"{_TT_MOE} distributed/parallel_dims.py build_mesh (efsdp = fsdp*tp/(etp*ep))", _tt_ep_mesh),
    Rule("torchtitan-moe-dispatch", "torchtitan", "expert_parallel_comm_backend is standard (all-to-all) or "
         "deepep (flex, needs ep > 1); no allgather dispatcher; the EP/PP overlap needs the DualPipeV "
         "schedule, which the plan does not price",
         f"{_TT_MOE} config/job_config.py Parallelism.expert_parallel_comm_backend, "
         "pipeline_parallel_expert_parallel_overlap",
         lambda p, m, c: _named(("moe_dispatcher allgather", p.moe_dispatcher == "allgather"),
                                ("moe_dispatcher flex with ep 1", p.moe_dispatcher == "flex" and p.ep == 1),
                                ("moe_overlap on", p.moe_overlap)) if m.is_moe else None),
]


# ---- DeepSeek's DualPipe schedule (Plan.pp_schedule, issue 13): priced, but no framework here runs it
_DUALPIPE_WHERE = {
    "megatron": "Megatron-LM@d98e8a64 megatron/ (no DualPipe schedule; its nearest is the combined-1F1B EP "
                "overlap, moe_overlap: pipeline_parallel/combined_1f1b.py)",
    "nemo": "Megatron-Bridge@f83545d (Megatron-Core schedules: no DualPipe; moe_overlap is its EP overlap)",
    "deepspeed": "DeepSpeed main@edaa7221 deepspeed/runtime/pipe/schedule.py (TrainSchedule: 1F1B)",
    "torchtitan": "torchtitan 0.2.2 pipeline_parallel_schedule (torch ScheduleDualPipeV is the V-shape variant: "
                  "two stages of a 2*pp split per rank, one weight copy -- not the DualPipe priced here)",
}


def _dualpipe_rule(fw: str) -> Rule:
    return Rule(f"{fw}-dualpipe", fw, "the DualPipe schedule (DeepSeek-V3's, deepseek-ai/DualPipe) is not "
                "implemented: use pp_schedule 1f1b", _DUALPIPE_WHERE[fw],
                lambda p, m, c: "pp_schedule dualpipe" if p.pp_schedule == "dualpipe" else None)


# ---- data parallelism as each framework runs it (issue 12)


def _split_accounting_on(p: Plan, m, c) -> Optional[str]:
    """The pipeline-split accounting flags a plan sets, named (DeepSpeed's and torchtitan's split-accounting rule)."""
    return _named(("account_for_embedding_in_pipeline_split on", p.account_for_embedding_in_pipeline_split),
                  ("account_for_loss_in_pipeline_split on", p.account_for_loss_in_pipeline_split)) if p.pp > 1 else None


def _dp_rules(fw: str) -> list[Rule]:
    """The data-parallel knobs a framework offers: the gradient-reduction frequency is each
    framework's own (``grad_reduce`` default: :func:`planner.costmodel.plan.grad_per_microbatch`
    names the sources), partial sharding (``dp_shard``) where it exists, the embedding/loss
    accounting of the pipeline split where it exists."""

    def R(rid, text, source, test):  # noqa: N802
        return Rule(f"{fw}-{rid}", fw, text, source, test)

    out = [R("grad-reduce", "the gradient reduction runs when the framework runs it (DDP/distributed optimizer "
             "once per step, ZeRO-2 and FSDP every micro-batch, FSDP under pipelining once per step); "
             "grad_reduce must be default", {
                 "megatron": f"{_MC} pipeline_parallel/schedules.py (no_sync_func on all but the last micro-batch)",
                 "nemo": f"{_MC} pipeline_parallel/schedules.py (no_sync_func on all but the last micro-batch)",
                 "deepspeed": f"{_DS} runtime/zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads",
                 "torchtitan": "torch 2.13 distributed/pipelining/stage.py backward_maybe_with_nosync; "
                               f"{_TT} train.py (one backward per micro-batch)"}[fw],
             lambda p, m, c: f"grad_reduce {p.grad_reduce}" if p.grad_reduce != "default" and p.dp > 1 else None)]
    if fw in ("megatron", "nemo"):
        out.append(R("dp-shard", "partial sharding is the distributed optimizer's instances "
                     "(--num-distributed-optimizer-instances = dp/dp_shard): zero 1 only",
                     f"{_MLM} _add_distributed_args (--num-distributed-optimizer-instances)",
                     lambda p, m, c: f"dp_shard {p.dp_shard} with zero {p.zero}"
                     if p.dp_shard is not None and p.zero != 1 else None))
        out.append(R("reshard", "parameters stay sharded between forward and backward only under Megatron-FSDP's "
                     "optim_grads_params, which regathers them for the backward (reshard_after_forward on)",
                     f"{_MC} distributed/fsdp (Megatron-FSDP)",
                     lambda p, m, c: "reshard_after_forward off" if p.zero == 3 and not p.reshard_after_forward
                     else None))
    elif fw == "deepspeed":
        out.append(R("dp-shard", "no hybrid sharding in the configuration this planner writes (MiCS/hpZ are "
                     "other schemes): dp_shard must be dp", f"{_DS} runtime/zero/config.py",
                     lambda p, m, c: f"dp_shard {p.dp_shard}" if p.dp_shard is not None else None))
        out.append(R("split-accounting", "PipelineModule cannot count the embedding/loss as layers",
                     f"{_DS} runtime/pipe/module.py _partition_layers",
                     _split_accounting_on))
        out.append(R("reshard", "ZeRO-3 releases gathered parameters after use (stage3_max_reuse_distance aside): "
                     "reshard_after_forward on", f"{_DS} runtime/zero/partitioned_param_coordinator.py",
                     lambda p, m, c: "reshard_after_forward off" if p.zero == 3 and not p.reshard_after_forward
                     else None))
    elif fw == "torchtitan":
        out.append(R("hsdp", "HSDP (data_parallel_replicate_degree x data_parallel_shard_degree) shards with FSDP2: "
                     "dp_shard needs zero 3", f"{_TT} distributed/parallel_dims.py",
                     lambda p, m, c: f"dp_shard {p.dp_shard} with zero {p.zero}"
                     if p.dp_shard is not None and p.zero != 3 else None))
        out.append(R("split-accounting", "the pipeline split's input/output weights are first/last_stage_less_layers, "
                     "not Megatron's accounting flags: give the split as first/last_stage_layers",
                     f"{_TT} distributed/pipeline_parallel.py",
                     _split_accounting_on))
    return out


# ---- the memory knobs (issue 11): the loss, the optimizer's moments and master weights, the FP8 store of
# the activations' inputs, as each framework runs them

#: Where each framework's memory-knob facts are read (repo@commit path), named once.
_MLM_CE = (f"{_MLM} _add_training_args (--cross-entropy-loss-fusion, --cross-entropy-fusion-impl native|te); "
           "megatron/core/models/common/language_module/language_module.py@000c4ac2 compute_language_model_loss "
           "(fusion off: tensor_parallel.vocab_parallel_cross_entropy; native: fused_vocab_parallel_cross_entropy, "
           "the same fp32 softmax kept for the backward; te: te_parallel_cross_entropy); "
           "megatron/core/model_parallel_config.py@000c4ac2 (cross_entropy_loss_fusion False, impl 'native')")
_MLM_OPT = (f"{_MLM} _add_experimental_args (--use-precision-aware-optimizer, --main-params-dtype fp32|fp16, "
            "--exp-avg-dtype/--exp-avg-sq-dtype fp32|fp16|bf16|fp8, defaults fp32); "
            "megatron/core/optimizer/optimizer_config.py@000c4ac2 __post_init__ (precision-aware needs adam and "
            "the distributed optimizer; store_param_remainders True, no Megatron-LM flag; remainders kept only "
            "without an FP8 recipe or with delayed scaling: use_precision_aware_optimizer_no_fp8_or_ds_fp8); "
            "megatron/core/optimizer/distrib_optimizer.py@000c4ac2 (master_param int16 when store_param_remainders "
            "and bf16)")
_MLM_ACT = ("megatron/core/transformer/transformer_config.py@000c4ac2 activation_func_fp8_input_store (SwiGLU only, "
            "__post_init__); megatron/training/arguments.py@000c4ac2 has no flag for it "
            "(core_transformer_config_from_args copies only the args it has)")
_MLM_CLAMP = ("NVIDIA/Megatron-LM@core_r0.15.0 (to core_r0.18.0) megatron/core/fusions/fused_bias_geglu.py "
              "weighted_bias_quick_geglu_impl: the clamp (activation_func_clamp_value) runs in eager PyTorch before the "
              "fused kernel, no flag fuses it; NVIDIA-NeMo/Automodel@34f73e9 clamps inside a torch.compile'd function "
              "(planner/costmodel/experts.py clamp_bytes)")
_MLM_YARN = ("NVIDIA/Megatron-LM@core_v0.15.3 (to core_v0.18.0) megatron/training/arguments.py (position_embedding_type "
             "!= 'rope': apply_rope_fusion = False), rope_utils.py _apply_rotary_pos_emb_bshd "
             "(planner/costmodel/compute.py yarn_rope_bytes)")
_TT_LOSS = ("pytorch/torchtitan@73a0e697 (v0.2.2) torchtitan/components/loss.py cross_entropy_loss "
            "(torch.nn.functional.cross_entropy on pred.float()); config/job_config.py Optimizer (name, lr, betas, "
            "eps, weight_decay, implementation: no state dtype) and Training.mixed_precision_param (FSDP2 keeps the "
            "fp32 parameter shards the optimizer steps)")
_DS_PREC = ("deepspeedai/DeepSpeed@edaa7221 deepspeed/runtime/precision_config.py DeepSpeedBF16Config "
            "(bf16_master_weights_and_grads: bf16 master weights; bf16_optimizer_states only with it) and "
            "runtime/config.py; the loss is the model code's (no config key)")

_TT_GROUPED_MM = ("pytorch/torchtitan@b5bcd76 torchtitan/models/common/moe.py and models/gpt_oss/moe.py "
                  "(GroupedExperts: torch._grouped_mm over every local expert)")
_DS_EXPERTS = ("deepspeedai/DeepSpeed@edaa7221 deepspeed/moe/experts.py Experts.forward (a loop over the local "
               "experts' modules)")

#: How each framework routes tokens (Plan ``moe_routing``, issue 13; in :data:`MEMORY_KNOBS`): round-robin routing is
#: a benchmark switch of NeMo AutoModel (``fake_balanced_gate``, not a framework here) and torchtitan; the others
#: route by the gate's scores.
_MLM_ROUTER = ("NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/router.py (moe_router_force_load_balancing: "
               "apply_random_logits, moe_utils.py, then the top-k of those random scores)")
_TT_ROUTER = ("pytorch/torchtitan@73a0e697 (v0.2.2) config/job_config.py Debug.moe_force_load_balance and "
              "models/moe/moe.py _debug_force_load_balance_routing (token i to experts (i*k + j) mod E)")
_DS_ROUTER = "deepspeedai/DeepSpeed@edaa7221 deepspeed/moe/sharded_moe.py TopKGate (top-k of the gate's logits)"
_MCORE_ROUTING = ("Megatron-Core routes each token to the top-k of its router's scores (force balancing draws random "
                  "scores): moe_routing topk")

_MLM_MUON = ("NVIDIA/Megatron-LM main (2026): --optimizer muon; megatron/core/optimizer/optimizer_config.py muon_* fields "
             "(muon_num_ns_steps 5, muon_tp_mode blockwise, muon_split_qkv True, muon_scalar_optimizer adam); muon "
             "with use_distributed_optimizer routes to LayerWiseDistributedOptimizer (its tests); NeMo-RL "
             "docs/guides/muon-optimizer.md: use_precision_aware_optimizer not supported with Muon")

#: Per framework, the values of each memory knob (and of the kernel knobs act_clamp_fused, moe_grouped_gemm and
#: yarn_rope_fused, and moe_routing, issue 13) it can run; the first is its default
#: where the framework is
#: named (``with_defaults`` and the search's knobs, when the user gave none).
MEMORY_KNOBS: dict[str, dict[str, tuple]] = {
    # Megatron-Core's loss: vocab_parallel_cross_entropy by default (fp32 softmax kept, gradient in place:
    # Plan cross_entropy 'megatron'; the native fusion keeps the same bytes), TE's with --cross-entropy-fusion-impl
    # te. Master weights fp32, or bf16 remainders under the precision-aware optimizer; never none.
    "megatron": {"cross_entropy": ("megatron", "te"), "adam_moments_dtype": ("fp32", "bf16"),
                 "master_weights": ("fp32", "bf16_remainder"), "act_fp8_input_store": (False,),
                 "act_clamp_fused": (False,), "moe_grouped_gemm": ("loop", "fused"), "yarn_rope_fused": (False,),
                 "moe_routing": ("topk",), "optimizer": ("adam", "muon")},
    "nemo": {"cross_entropy": ("megatron", "te"), "adam_moments_dtype": ("fp32", "bf16"),
             "master_weights": ("fp32", "bf16_remainder"), "act_fp8_input_store": (False, True),
             "act_clamp_fused": (False,), "moe_grouped_gemm": ("loop",), "moe_routing": ("topk",),
             "optimizer": ("adam",)},
    # the model code's PyTorch loss (fp32 or bf16 logits); fp32 masters and moments (bf16 optimizer states need
    # bf16 master weights, which master_weights cannot state)
    "deepspeed": {"cross_entropy": ("pytorch", "pytorch_bf16"), "adam_moments_dtype": ("fp32",),
                  "master_weights": ("fp32",), "act_fp8_input_store": (False,), "act_clamp_fused": (False, True),
                  "moe_grouped_gemm": ("loop",), "moe_routing": ("topk",), "optimizer": ("adam",)},
    # the activation clamp is the model code's: fused when the user compiles it (torch.compile)
    "torchtitan": {"cross_entropy": ("pytorch",), "adam_moments_dtype": ("fp32",), "master_weights": ("fp32",),
                   "act_fp8_input_store": (False,), "act_clamp_fused": (False, True), "moe_grouped_gemm": ("fused",),
                   "moe_routing": ("topk", "round_robin"), "moe_pad_to_capacity": (False,), "fp8_attention": (False,),
                   "optimizer": ("adam",)},
}
_MEMORY_TEXT = {
    "megatron": {"cross_entropy": ("the loss is Megatron-Core's vocab-parallel cross entropy (fp32 softmax; fused "
                                   "natively with --cross-entropy-loss-fusion) or Transformer Engine's "
                                   "(--cross-entropy-fusion-impl te): cross_entropy megatron or te", _MLM_CE),
                 "adam_moments_dtype": ("Adam moments fp32, or bf16 with --use-precision-aware-optimizer", _MLM_OPT),
                 "master_weights": ("the distributed optimizer keeps fp32 master weights, or bf16 remainders under "
                                    "--use-precision-aware-optimizer: master_weights fp32 or bf16_remainder", _MLM_OPT),
                 "act_fp8_input_store": ("no Megatron-LM flag stores the activation inputs in FP8 "
                                         "(Megatron-Core's activation_func_fp8_input_store): act_fp8_input_store off",
                                         _MLM_ACT),
                 "act_clamp_fused": ("Megatron-Core clamps a clamped activation (GPT-OSS) in eager PyTorch: "
                                     "act_clamp_fused off", _MLM_CLAMP),
                 "moe_grouped_gemm": ("", _TE_FUSED_MLP),
                 "yarn_rope_fused": ("Megatron-LM turns rope fusion off for --position-embedding-type yarn "
                                     "(GPT-OSS): yarn_rope_fused off", _MLM_YARN),
                 "moe_routing": (_MCORE_ROUTING, _MLM_ROUTER),
                 "optimizer": ("", _MLM_MUON)},
    "nemo": {"cross_entropy": ("the loss is Megatron-Core's (model.config.cross_entropy_loss_fusion, "
                               "cross_entropy_fusion_impl native|te): cross_entropy megatron or te",
                               f"{_NM} GPTConfig on {_MC}; {_MLM_CE}"),
             "adam_moments_dtype": ("Adam moments fp32, or bf16 with optim.config.use_precision_aware_optimizer",
                                    f"{_NM} optim.config = {_MC} OptimizerConfig; {_MLM_OPT}"),
             "master_weights": ("master weights fp32, or bf16 remainders (optim.config.store_param_remainders): "
                                "master_weights fp32 or bf16_remainder", f"{_MC} OptimizerConfig; {_MLM_OPT}"),
             "act_fp8_input_store": ("", _MLM_ACT),
             "act_clamp_fused": ("Megatron-Core clamps a clamped activation (GPT-OSS) in eager PyTorch: "
                                 "act_clamp_fused off", f"{_NM} on {_MC}; {_MLM_CLAMP}"),
             "moe_grouped_gemm": ("Megatron-Core 0.16.1 (NeMo 2.7.3's) has no fused grouped MLP "
                                  "(use_transformer_engine_op_fuser arrives in core 0.18): moe_grouped_gemm loop",
                                  f"{_NM} on {_MC}; {_TE_FUSED_MLP}"),
             "moe_routing": (_MCORE_ROUTING, f"{_NM} on {_MC}; {_MLM_ROUTER}"),
             "optimizer": ("NeMo 2.7.3's Megatron-Core (0.16.1) is modelled with Adam; Muon is Megatron-LM's "
                           "--optimizer muon here: optimizer adam", f"{_NM} on {_MC}; {_MLM_MUON}")},
    "deepspeed": {"cross_entropy": ("the loss is the model code's PyTorch cross entropy (the config has no loss "
                                    "setting; Megatron's and TE's vocab-parallel losses come with Megatron-DeepSpeed's "
                                    "model code): cross_entropy pytorch or pytorch_bf16", _DS_PREC),
                  "adam_moments_dtype": ("optimizer states are fp32 (bf16_optimizer_states needs "
                                         "bf16_master_weights_and_grads: bf16 master weights, not a master_weights value)",
                                         _DS_PREC),
                  "master_weights": ("the ZeRO/BF16 optimizers keep fp32 master weights (bf16 ones, "
                                     "bf16_master_weights_and_grads, are not a master_weights value)", _DS_PREC),
                  "act_fp8_input_store": ("no FP8 activation store (FP8 would be the model code's)", _DS_PREC),
                  "act_clamp_fused": ("", _DS_PREC),
                  "moe_grouped_gemm": ("DeepSpeed-MoE runs its local experts as separate modules, one GEMM each: "
                                       "moe_grouped_gemm loop", _DS_EXPERTS),
                  "moe_routing": ("DeepSpeed-MoE's gate routes each token to the top-k of its scores: moe_routing "
                                  "topk", _DS_ROUTER),
                  "optimizer": ("the DeepSpeed engine the planner models steps (Fused)Adam: optimizer adam",
                                _DS_PREC)},
    "torchtitan": {"cross_entropy": ("the loss is torch cross_entropy on fp32 logits (pred.float()): "
                                     "cross_entropy pytorch", _TT_LOSS),
                   "adam_moments_dtype": ("the optimizer's states take the fp32 parameters' dtype: "
                                          "adam_moments_dtype fp32", _TT_LOSS),
                   "master_weights": ("FSDP2/DDP step the fp32 parameters: master_weights fp32", _TT_LOSS),
                   "act_fp8_input_store": ("no FP8 activation store: act_fp8_input_store off", _TT_LOSS),
                   "act_clamp_fused": ("", _TT_LOSS),
                   "moe_grouped_gemm": ("torchtitan runs a MoE layer's local experts as one torch._grouped_mm: "
                                        "moe_grouped_gemm fused", _TT_GROUPED_MM),
                   "moe_routing": ("", _TT_ROUTER),
                   "moe_pad_to_capacity": ("torchtitan's MoE routes dropless, every routed token computed (no "
                                           "capacity to pad to): moe_pad_to_capacity off", _TT_GROUPED_MM),
                   "fp8_attention": ("torchtitan's attention is PyTorch SDPA in bf16 (its float8 training converts "
                                     "the linear layers only): fp8_attention off",
                                     f"{_TT} components/quantization/float8.py (Float8Linear modules)"),
                   "optimizer": ("torchtitan's optimizers are torch.optim's Adam and AdamW (components/optimizer.py): "
                                 "optimizer adam", f"{_TT} components/optimizer.py")},
}


def _onoff(v) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


#: Plan precisions under which Megatron-Core's precision-aware optimizer keeps bf16 remainders of the fp32
#: master weights (store_param_remainders): no FP8 recipe, or delayed scaling (plan fp8 = delayed); sources: _MLM_OPT.
MCORE_REMAINDER_PRECISIONS = ("bf16", "fp8", "fp8-delayed")


def precision_aware_optimizer(p: Plan) -> bool:
    """Whether the plan needs Megatron-Core's precision-aware optimizer: bf16 Adam moments or bf16 master
    remainders (``--use-precision-aware-optimizer``, NeMo's ``optim.config.use_precision_aware_optimizer``)."""
    return p.adam_moments_dtype != "fp32" or p.master_weights == "bf16_remainder"


def _mcore_optimizer_precision(fw: str):
    """Megatron-Core's precision-aware optimizer (bf16 moments or bf16 master remainders): the distributed
    optimizer only; remainders only without an FP8 recipe or with delayed scaling, and Megatron-LM cannot turn
    them off there (no flag for store_param_remainders), so bf16 moments come with bf16 remainders."""
    remainder_ok = MCORE_REMAINDER_PRECISIONS

    def test(p: Plan, m, c) -> Optional[str]:
        if not precision_aware_optimizer(p):
            return None
        what = ", ".join(f"{k} {getattr(p, k)}" for k in ("adam_moments_dtype", "master_weights")
                         if getattr(p, k) != "fp32")
        if p.zero == 0:
            return f"{what} with zero 0: use zero 1 or more"
        if p.precision not in remainder_ok + ("fp8-current", "mxfp8"):
            return f"{what} with precision {p.precision}"
        if p.master_weights == "bf16_remainder" and p.precision not in remainder_ok:
            return f"master_weights bf16_remainder with precision {p.precision}: use master_weights fp32"
        if fw == "megatron" and p.master_weights == "fp32" and p.precision in remainder_ok:
            return f"{what} with master_weights fp32 on {p.precision}: use master_weights bf16_remainder"
        return None

    text = ("the precision-aware optimizer (bf16 Adam moments, bf16 master remainders) runs with the distributed "
            "optimizer (zero >= 1) and a bf16, FP8 delayed, FP8 current-scaling or MXFP8 recipe; the master weights "
            "are bf16 remainders exactly when there is no FP8 recipe or it is delayed scaling"
            + (" (Megatron-LM has no flag to keep fp32 masters there)" if fw == "megatron" else ""))
    return Rule(f"{fw}-optimizer-precision", fw, text, _MLM_OPT if fw == "megatron" else f"{_MC}; {_MLM_OPT}", test)


def _memory_rules(fw: str) -> list[Rule]:
    """One rule per memory knob whose value the framework cannot run (:data:`MEMORY_KNOBS`), and Megatron-Core's
    precision-aware optimizer's own."""
    out = []
    for knob, values in MEMORY_KNOBS[fw].items():
        text, source = _MEMORY_TEXT[fw][knob]
        if set(values) == set(choice_fields().get(knob, (False, True))):  # a knob not a choice is on/off
            continue  # every value runs
        out.append(Rule(f"{fw}-{knob.replace('_', '-')}", fw, text, source,
                        lambda p, m, c, k=knob, ok=values: f"{k} {_onoff(getattr(p, k))}"
                        if getattr(p, k) not in ok else None))
    if fw in ("megatron", "nemo"):
        out.append(_mcore_optimizer_precision(fw))
    out.append(_cp_comm_rule(fw))
    if fw == "megatron":
        out.append(Rule("megatron-muon", fw, "Muon runs with Adam's fp32 states (no precision-aware optimizer) "
                        "under plain data parallelism or the layer-wise distributed optimizer (zero 0 or 1)",
                        _MLM_MUON, _muon_mcore))
    if fw == "nemo":
        out.append(Rule("nemo-act-fp8-input-store", fw, "Megatron-Core stores the activation inputs in FP8 for "
                        "SwiGLU only", _MLM_ACT,
                        lambda p, m, c: f"act_fp8_input_store on with activation {m.activation}"
                        if p.act_fp8_input_store and m.activation != "swiglu" else None))
    return out


#: Per framework, the context-parallel exchanges it runs (Plan.cp_comm_type), with what it says and its source.
_CP_COMM = {
    "megatron": (("p2p", "a2a", "allgather"), "", f"{_MLM} --cp-comm-type (p2p, a2a, allgather, "
                 "a2a+p2p) and Transformer Engine context_parallel.py (a2a: heads divide by cp)"),
    "nemo": (("p2p", "a2a", "allgather"), "", f"{_NM} on {_MC} TransformerConfig.cp_comm_type (model.config.cp_comm_type)"),
    "torchtitan": (("p2p", "allgather"), "torchtitan's context parallelism is ring attention (torch context_parallel; "
                   "parallelism.context_parallel_rotate_method allgather or alltoall passes K/V around the ring): "
                   "cp_comm_type p2p or allgather", "pytorch/torchtitan v0.2.2 config/job_config.py "
                   "Parallelism.context_parallel_rotate_method"),
    "deepspeed": (("p2p",), "no ring context parallelism (Ulysses sequence_parallel_size is an engine option "
                  "the planner does not model): cp_comm_type p2p", "deepspeedai/DeepSpeed@edaa7221 runtime/config.py"),
}


def _cp_comm_rule(fw: str) -> Rule:
    from plan_search.planner.costmodel.context_parallel import a2a_heads_problem
    ok, text, source = _CP_COMM[fw]

    def test(p: Plan, m, c) -> Optional[str]:
        if p.cp <= 1:
            return None
        if p.cp_comm_type not in ok:
            return f"cp_comm_type {p.cp_comm_type} with cp {p.cp}"
        if p.cp_comm_type == "a2a":
            return a2a_heads_problem(m.num_heads, m.num_kv_heads, p.tp, p.cp)
        return None

    text = text or ("context parallelism exchanges by ring (p2p), all-gather or all-to-all (a2a, Ulysses: the "
                    "query heads and the key/value heads of a tensor-parallel rank divide by cp)")
    return Rule(f"{fw}-cp-comm-type", fw, text, source, test)


def _muon_mcore(p: Plan, m, c) -> Optional[str]:
    if p.optimizer != "muon":
        return None
    if p.zero >= 2:
        return f"optimizer muon with zero {p.zero}: use zero 1 (the layer-wise distributed optimizer) or 0"
    if precision_aware_optimizer(p):
        what = ", ".join(f"{k} {getattr(p, k)}" for k in ("adam_moments_dtype", "master_weights")
                         if getattr(p, k) != "fp32")
        return f"optimizer muon with {what}: use fp32 optimizer states"
    return None


def memory_defaults(framework: str, plan: Plan | None = None) -> dict:
    """The memory knobs' values the framework runs when the user sets none (the first of :data:`MEMORY_KNOBS`);
    with ``plan``, what it runs for that plan: under Megatron-Core (Megatron-LM, NeMo) bf16 Adam moments turn on
    the precision-aware optimizer, whose ``store_param_remainders`` defaults to True, so on a recipe that keeps
    remainders (:data:`MCORE_REMAINDER_PRECISIONS`) the master weights are bf16 remainders unless the plan
    says otherwise (sources: _MLM_OPT)."""
    fw = _known(framework)
    return _memory_defaults(fw, *((plan.adam_moments_dtype, plan.precision) if plan is not None else (None, None)))


def _memory_defaults(fw: str, adam_moments_dtype: str | None, precision: str | None) -> dict:
    """:func:`memory_defaults` for a plan with these Adam moments and precision (None, None: no plan)."""
    out = {k: v[0] for k, v in MEMORY_KNOBS[fw].items()}
    if (fw in ("megatron", "nemo") and adam_moments_dtype not in (None, "fp32")
            and precision in MCORE_REMAINDER_PRECISIONS):
        out["master_weights"] = "bf16_remainder"
    return out


def _memory_default_changes(framework: str, plan: Plan) -> dict:
    """The memory knobs ``plan`` leaves unset (not in ``plan.model_fields_set``) whose framework default
    (:func:`memory_defaults`) differs from the Plan's, with that default."""
    return {k: v for k, v in memory_defaults(framework, plan).items()
            if k not in plan.model_fields_set and getattr(plan, k) != v}


def with_memory_defaults(framework: str, plan: Plan) -> Plan:
    """The plan with the memory knobs it leaves unset at the framework's defaults: a plan that does not
    say which loss it computes runs the framework's (Megatron-Core's vocab-parallel cross entropy under
    Megatron and NeMo, not the Plan's PyTorch default, its upper bound)."""
    return _rebuild(plan, **_memory_default_changes(framework, plan))


RULES: dict[str, tuple[Rule, ...]] = {
    "megatron": tuple(_mcore_rules("megatron")) + tuple(_moe_rules_mcore("megatron")) + (_dualpipe_rule("megatron"),),
    "nemo": tuple(_mcore_rules("nemo")) + tuple(_NEMO_EXTRA) + tuple(_moe_rules_mcore("nemo"))
    + (_dualpipe_rule("nemo"),),
    "deepspeed": tuple(_DS_RULES) + tuple(_DS_MOE_RULES) + (_dualpipe_rule("deepspeed"),),
    "torchtitan": tuple(_TT_RULES) + tuple(_TT_MOE_RULES) + (_dualpipe_rule("torchtitan"),),
}
for _fw in RULES:
    RULES[_fw] = RULES[_fw] + tuple(_dp_rules(_fw)) + tuple(_memory_rules(_fw))


def rules(framework: str) -> tuple[Rule, ...]:
    return RULES[_known(framework)]


def check(framework: str, plan: Plan, model: ModelSpec, cluster=None) -> list[Violation]:
    """Every rule of ``framework`` the plan breaks; empty when the framework can run it.

    The plan's own model rules (:meth:`Plan.check_against`) come first, as a violation ``plan``. Knobs
    without effect are normalized first (a plan is not refused over them).
    """
    fw = _known(framework)
    try:
        plan.check_against(model)
    except InputError as exc:
        return [Violation(Rule("plan", fw, "the plan does not fit the model", "planner/plan.py",
                               lambda p, m, c: None), str(exc))]
    p = normalize(fw, plan, model.num_layers)
    out = []
    caps = _CAPS[fw]
    if p.precision not in caps.precision:  # issue 12: recipes the framework's emitter cannot express
        out.append(Violation(Rule(f"{fw}-precision", fw, f"runs the precision recipes {', '.join(caps.precision)}",
                                  "planner/frameworks/rules.py _CAPS", lambda p, m, c: None),
                             f"precision {p.precision}"))
    for r in RULES[fw]:
        detail = r.test(p, model, cluster)
        if detail:
            out.append(Violation(r, detail))
    return out


def require(framework: str, plan: Plan, model: ModelSpec, cluster=None, given=()) -> Plan:
    """The normalized plan, or :class:`InputError` ``framework: rule-id: text (detail)`` for the first rule;
    a rule about a knob in ``given`` (the fields the caller set) first: ``--framework torchtitan
    --moe-grouped-gemm loop`` names moe_grouped_gemm, not the zero left at the Plan's default."""
    fw = _known(framework)
    bad = check(fw, plan, model, cluster)
    if bad:
        bad.sort(key=lambda v: v.detail.split(" ", 1)[0] not in given)  # stable: the rules' order otherwise
        more = f" [+{len(bad) - 1} more]" if len(bad) > 1 else ""
        raise InputError(f"{fw}: {bad[0]}{more}")
    return normalize(fw, plan, model.num_layers)


#: Rules that read nothing a search enumerates but ``etp`` (only the plan's broadcast knobs, the model and the GPU),
#: so a search can test them before it enumerates (:func:`refuse_up_front`).
UP_FRONT_RULES = ("megatron-moe-fused-grouped-mlp", "nemo-moe-fused-grouped-mlp")


def refuse_up_front(framework: str, combos, model: ModelSpec, clusters, etp: int = 1) -> None:
    """:class:`InputError` ``framework: rule-id: text (detail)``, as :func:`require` words it, when every
    broadcast-knob combination of a search (``combos``, dicts of Plan knobs) on every GPU type of ``clusters``
    breaks one of :data:`UP_FRONT_RULES` at the narrowest ``etp`` the search may use: ``plan-search --framework
    megatron --moe-grouped-gemm fused`` in bf16 is refused before the search runs, not reported infeasible after
    its whole time limit. Nothing when some combination passes (the search filters the others plan by plan)."""
    fw = _known(framework)
    rules_ = [r for r in RULES[fw] if r.id in UP_FRONT_RULES]
    if not rules_:
        return
    first = None
    for combo in combos:
        p = Plan.probe(**{**combo, "etp": etp})
        for c in clusters:
            bad = next((Violation(r, d) for r in rules_ if (d := r.test(p, model, c))), None)
            if bad is None:
                return
            first = first or bad
    if first is not None:
        raise InputError(f"{fw}: {first}")


#: The rules :func:`unrunnable_rows` tests on a search's columns, per framework.
VECTOR_RULES = {"megatron": ("megatron-fsdp-pp",), "nemo": ("nemo-fsdp-pp",),
                "deepspeed": ("deepspeed-pipe-zero", "deepspeed-pipe-tp", "deepspeed-uneven", "deepspeed-cp",
                              "deepspeed-vpp"),
                "torchtitan": ("torchtitan-zero12", "torchtitan-ddp-1d")}


def unrunnable_rows(framework: str, x) -> "np.ndarray":
    """Rows of a search's candidates (``x``, its PlanArrays columns) that break one of ``framework``'s
    :data:`VECTOR_RULES` whatever :func:`conform` sets (it never changes the knobs they read on such rows): the
    rules most of a search's fastest candidates break, tested at once so that the plan-by-plan check (conform and
    check, ~0.1 ms a plan) reads only the others. The same conditions as the rules' tests (tests/
    test_search_span.py checks them against :func:`runnable` on sampled rows)."""
    import numpy as np

    fw = _known(framework)
    pp, tp, cp, dp, zero = x.pp, x.tp, x.cp, x.dp, x.zero
    if fw in ("megatron", "nemo"):
        return (zero >= 2) & (pp > 1)
    if fw == "deepspeed":
        uneven = (pp > 1) & ((x.first != x.last) | ((pp > 2) & (x.first != x.mid)))
        return ((pp > 1) & ((zero >= 2) | (tp > 1) | uneven)) | (cp > 1) | (x.vpp > 1)
    if fw == "torchtitan":
        return (dp > 1) & (((zero == 0) & (tp * pp * cp > 1)) | (zero == 1) | (zero == 2))
    return np.zeros(len(x), dtype=bool)


# ------------------------------------------------------------------ normalize / conform


def _rebuild(plan: Plan, **changes) -> Plan:
    if not changes:
        return plan
    data = plan.model_dump()
    data.update(changes)
    return Plan(**data)


_ALL_FIELDS = frozenset(Plan.model_fields)


def _copy(plan: Plan, **changes) -> Plan:
    """``plan`` with ``changes``, not validated yet (every field marked set, as :func:`_rebuild`'s new Plan has
    them): the steps of :func:`normalize` and :func:`conform`, which validate their result once (a search checks
    thousands of plans: each validation ~0.1 ms, five of them per plan conformed)."""
    changes = {k: v for k, v in changes.items() if getattr(plan, k) != v or type(getattr(plan, k)) is not type(v)}
    if not changes:
        return plan
    p = plan.model_copy(update=changes)
    object.__setattr__(p, "__pydantic_fields_set__", set(_ALL_FIELDS))
    return p


def _validated(p: Plan, given: Plan) -> Plan:
    """``p`` validated as a Plan (the same as :func:`_rebuild` building it), unless it is ``given`` unchanged."""
    return given if p is given else Plan(**p.model_dump())


def _inert(fw: str, p: Plan) -> dict:
    """Knobs with no effect on this plan, set to what ``fw``'s configuration carries."""
    ch: dict = {}
    if p.tp == 1 and p.overlap_tp_comm:
        ch["overlap_tp_comm"] = False
    # issue 12, data-parallel knobs: a shard group of the whole dp group (or without sharding) is
    # flat sharding; an explicit gradient-reduction frequency equal to the ZeRO-stage default is
    # the default (every framework reduces as that default says: planner.costmodel.plan.
    # grad_per_microbatch); parameters are resharded only under ZeRO-3
    if p.dp_shard is not None and (p.dp_shard == p.dp or p.zero == 0):
        ch["dp_shard"] = None
    if p.grad_reduce != "default" and p.grad_reduce_per_microbatch() == bool(
            grad_per_microbatch(0, p.zero, p.pp)):
        ch["grad_reduce"] = "default"
    if p.zero != 3 and not p.reshard_after_forward:
        ch["reshard_after_forward"] = True
    # gradients are reduced and states sharded over dp x cp (Megatron's and torchtitan's
    # data-parallel-with-context mesh): a knob of the data-parallel group is inert only when it is one GPU
    grad_inert = p.dp * p.cp == 1
    param_inert = p.dp * p.cp == 1 or p.zero == 0
    if fw == "megatron":
        if param_inert and p.overlap_param_gather and (p.zero == 0 or not p.overlap_grad_reduce):
            ch["overlap_param_gather"] = False
    elif fw == "nemo":
        if p.zero == 0 and p.overlap_param_gather:  # used only with the distributed optimizer / FSDP
            ch["overlap_param_gather"] = False
    elif fw == "deepspeed":
        if grad_inert and p.zero == 0 and p.overlap_grad_reduce:
            ch["overlap_grad_reduce"] = False
        if param_inert and p.zero != 3 and p.overlap_param_gather:
            ch["overlap_param_gather"] = False
    elif fw == "torchtitan":
        if p.dp * p.cp == 1:
            if p.zero != 0:
                ch["zero"] = 0
            if not p.overlap_grad_reduce:
                ch["overlap_grad_reduce"] = True
            if not p.overlap_param_gather:
                ch["overlap_param_gather"] = True
        elif p.zero == 0 and not p.overlap_param_gather:
            ch["overlap_param_gather"] = True
    return ch


def normalize(framework: str, plan: Plan, num_layers: int | None = None) -> Plan:
    """The plan with its knobs of no effect set the framework's way, and the memory knobs it leaves unset at
    the framework's defaults (:func:`with_memory_defaults`); with ``num_layers``, an explicit first/last split
    is written out in full (both ends), or dropped when it is the even split."""
    fw = _known(framework)
    given = plan
    # the memory knobs it leaves unset run the framework's way (with_memory_defaults)
    plan = _copy(plan, **_memory_default_changes(fw, plan))
    p = _copy(plan, **_inert(fw, plan))
    if num_layers is not None and fw in ("megatron", "nemo"):
        s, writable = _mcore_end_split(p, num_layers)  # issue 12: Megatron splits unevenly only through end stages
        if writable:
            p = _copy(p, first_stage_layers=s[0], last_stage_layers=s[-1])
    if num_layers is not None and _uneven(p):
        f, mid, la = p.stage_layers(num_layers)
        if num_layers % p.pp == 0 and f == la == num_layers // p.pp and (p.pp == 2 or mid == f):
            p = _copy(p, first_stage_layers=None, last_stage_layers=None)
        else:
            p = _copy(p, first_stage_layers=f, last_stage_layers=la)
    return _validated(p, given)


def conform(framework: str, plan: Plan, num_layers: int | None = None) -> Plan:
    """The plan with the knobs the framework decides set its way (see the module docstring)."""
    fw = _known(framework)
    p = normalize(fw, plan, num_layers)
    ch: dict = {}
    if fw == "megatron":
        if p.overlap_tp_comm and p.tp > 1 and not p.sequence_parallel:
            ch["overlap_tp_comm"] = False
        if p.overlap_param_gather and not p.overlap_grad_reduce and p.zero >= 1:
            ch["overlap_param_gather"] = False
    elif fw == "nemo":
        if p.overlap_tp_comm and p.tp > 1:
            ch["overlap_tp_comm"] = False
        if not p.flash_attention:
            ch["flash_attention"] = True
    elif fw == "deepspeed":
        if p.tp > 1 and p.sequence_parallel:
            ch["sequence_parallel"] = False
        if p.zero == 0:
            ch["fp32_grads"] = p.pp > 1 and p.precision != "fp16"
            ch["overlap_grad_reduce"] = False
        if p.zero in (0, 1, 2):
            ch["overlap_param_gather"] = False
    elif fw == "torchtitan":
        if p.tp > 1:
            ch["sequence_parallel"] = True
        if p.dp == 1 and p.cp > 1 and p.zero != 3:  # FSDP2 shards over the dp x cp mesh (parallel_dims)
            ch["zero"] = 3
        ch.update(flash_attention=True, fp32_grads=True, overlap_grad_reduce=True, overlap_param_gather=True)
    ch = {k: v for k, v in ch.items() if getattr(p, k) != v}
    if not ch:
        return normalize(fw, p, num_layers)
    q = _copy(p, **ch)
    out = normalize(fw, q, num_layers)
    return _validated(q, p) if out is q else out


def with_defaults(framework: str, plan: Plan) -> Plan:
    """The plan with the data-parallel knobs its user left unset (``plan.model_fields_set``) at the
    framework's own defaults: torchtitan reshards FSDP2 parameters after the forward only without
    pipeline parallelism (``fsdp_reshard_after_forward = "default"``: ``reshard_after_forward = not
    pp_enabled``, models/llama3/infra/parallelize.py apply_fsdp); the memory knobs at the framework's
    defaults (:func:`memory_defaults`: Megatron's and NeMo's loss is Megatron-Core's vocab-parallel cross
    entropy). The other knobs' defaults are the Plan's."""
    fw = _known(framework)
    ch = _memory_default_changes(fw, plan)  # taken from the plan as given: a rebuilt plan has every knob set
    if (fw == "torchtitan" and "reshard_after_forward" not in plan.model_fields_set and plan.zero == 3
            and plan.reshard_after_forward != (plan.pp == 1)):
        ch["reshard_after_forward"] = plan.pp == 1
    return _rebuild(plan, **ch) if ch else plan


def as_run(framework: str, plan: Plan, model: ModelSpec, cluster=None) -> Plan:
    """The plan ``framework`` runs for ``plan``: the knobs its user left unset at the framework's
    defaults (:func:`with_defaults`); :class:`InputError` naming the rule it breaks when the framework
    cannot run it (:func:`require`). What plan-estimate --framework and ``plan_search.estimate(...,
    framework=...)`` price."""
    given = plan.model_fields_set - {"num_gpus", "global_batch", "seq_len"}
    plan = with_defaults(framework, plan)
    require(framework, plan, model, cluster, given)
    return plan


def runnable(framework: str, plan: Plan, model: ModelSpec, cluster=None) -> Optional[Plan]:
    """The conformed plan when the framework can run it, else None (for a search's candidates)."""
    p = conform(framework, plan, model.num_layers)
    return None if check(framework, p, model, cluster) else p


# ------------------------------------------------------------------ capabilities


@dataclass(frozen=True)
class Capabilities:
    """The knob space a search may use for one framework (``check`` has the rules that remain)."""

    framework: str
    version: str
    zero: tuple[int, ...]
    zero_with_pp: tuple[int, ...]
    recompute: tuple[str, ...]  # the Knobs vocabulary: none, selective, full, partial
    precision: tuple[str, ...]
    tensor_parallel: bool
    pipeline_parallel: bool
    context_parallel: bool
    virtual_pipeline: bool
    uneven_stages: bool
    sequence_parallel: tuple[bool, ...]  # values usable when tp > 1
    decides: tuple[str, ...]  # knobs set by conform()
    notes: tuple[str, ...] = ()

    def knobs(self, base, model: ModelSpec | None = None):
        """``base`` (the search's :class:`~plan_search.planner.search.request.Knobs`) narrowed to
        this framework (the search passes its knobs down: the rules never import the search). A knob its
        user gave (``Knobs._user_given``) none of whose values the framework runs is refused
        (:func:`pinned_problem`: one line naming the rule, as plan-estimate refuses it), never replaced."""
        k = base
        bad = pinned_problem(self.framework, k, model)
        if bad:
            raise InputError(bad)
        upd = {
            "zero": [z for z in k.zero if z in self.zero] or list(self.zero[:1]),
            "recompute": [r for r in k.recompute if r in self.recompute] or list(self.recompute[:1]),
            "sequence_parallel": [s for s in k.sequence_parallel if s in self.sequence_parallel]
            or list(self.sequence_parallel[:1]),
        }
        if not self.context_parallel:
            upd["cp"] = [1]
        if not self.virtual_pipeline:
            upd["vpp"] = [1]
        if not self.pipeline_parallel:
            upd["pp"] = [1]
        if not self.tensor_parallel:
            upd["tp"] = [1]
        # the memory knobs: the framework's default when none is given, else the given values it runs; none of
        # them is bad input naming the values it runs (the search would find no plan)
        def asked(knob):
            return getattr(k, knob, None) or [Plan.model_fields[knob].default]

        # what memory_defaults makes of the moments and recipes asked (bf16 moments under Megatron-Core: bf16
        # master remainders where the recipe keeps them); the rules keep each plan's valid value
        defaults = [_memory_defaults(self.framework, a, p) for a in asked("adam_moments_dtype")
                    for p in asked("precision")]
        for name, ok in MEMORY_KNOBS[self.framework].items():
            given = getattr(k, name, None)
            if given is None:
                upd[name] = list(dict.fromkeys([ok[0]] + [d[name] for d in defaults]))
                continue
            keep = [v for v in given if v in ok]
            if not keep:
                raise InputError(f"{name}: {self.framework} cannot run {', '.join(map(_onoff, given))}; use "
                                 f"{' or '.join(map(_onoff, ok))} (rule {self.framework}-{name.replace('_', '-')}, "
                                 "planner/frameworks/rules.py)")
            upd[name] = keep
        return k.model_copy(update=upd)


def _pinned_values(caps: "Capabilities", knobs) -> dict[str, list]:
    """The knobs ``knobs``' user gave (``_user_given``) of which ``caps`` runs no value: {knob: values given}."""
    given = getattr(knobs, "_user_given", frozenset())
    runs = {"zero": lambda v: v in caps.zero, "recompute": lambda v: v in caps.recompute,
            "sequence_parallel": lambda v: v in caps.sequence_parallel,
            "cp": lambda v: v == 1 or caps.context_parallel, "vpp": lambda v: v == 1 or caps.virtual_pipeline,
            "pp": lambda v: v == 1 or caps.pipeline_parallel, "tp": lambda v: v == 1 or caps.tensor_parallel}
    for name, value in ALWAYS_SETS.get(caps.framework, {}).items():
        runs[name] = lambda v, value=value: v == value
    out = {}
    for name, ok in runs.items():
        vals = getattr(knobs, name, None)
        if name in given and vals and not any(ok(v) for v in vals):
            out[name] = list(vals)
    return out


#: Knobs a framework sets one way on every plan (:func:`conform`: torchtitan's FSDP2/SDPA/compiled setup, NeMo's
#: flash attention): a search that pins another value is refused, not answered with this one.
ALWAYS_SETS = {"torchtitan": {"flash_attention": True, "fp32_grads": True, "overlap_grad_reduce": True,
                              "overlap_param_gather": True},
               "nemo": {"flash_attention": True}}


def pinned_problem(framework: str, knobs, model: ModelSpec | None = None) -> Optional[str]:
    """Why ``framework`` cannot run a knob value the search's user pinned (``knobs._user_given``; the default
    value lists are narrowed silently): ``framework: rule-id: text (knob value)``, the rule plan-estimate names for
    a plan with that value (tested on a probe plan with the value, every other knob at the Plan's default), or
    the capability when no single rule says it. None when every pinned knob keeps a value the framework runs."""
    fw = _known(framework)
    bad = _pinned_values(_CAPS[fw], knobs)
    if not bad:
        return None
    name, vals = next(iter(bad.items()))
    for v in vals:
        degrees = {"tp": 1, "pp": 2 if name == "vpp" else 1, "cp": 1}
        if name in degrees:
            degrees[name] = int(v)
        n = 64 * degrees["tp"] * degrees["pp"] * degrees["cp"]
        probe = Plan.probe(**{"num_gpus": n, "dp": 64, **degrees, name: v})
        for r in RULES[fw]:
            try:
                detail = r.test(probe, model, None) if model is not None else None
            except Exception:  # noqa: BLE001 (a rule reading what a probe plan lacks: not this knob's rule)
                detail = None
            if detail and detail.split(" ", 1)[0] == name:
                more = f" [+{len(bad) - 1} more]" if len(bad) > 1 else ""
                return (f"{fw}: {Violation(r, detail)}{more}; leave --{name.replace('_', '-')} unset or use another "
                        "--framework")
    caps = _CAPS[fw]
    runs = {"zero": caps.zero, "recompute": caps.recompute, "sequence_parallel": caps.sequence_parallel,
            **{k: (v,) for k, v in ALWAYS_SETS.get(fw, {}).items()}}.get(name, (1,))
    return (f"{fw}: {name} {', '.join(map(_onoff, vals))}: {fw} {caps.version} runs {name} "
            f"{' or '.join(map(_onoff, runs))} (planner/frameworks/rules.py _CAPS); leave --{name.replace('_', '-')} "
            "unset or use another --framework")


_CAPS = {
    "megatron": Capabilities(
        "megatron", VERSIONS["megatron"], zero=(0, 1, 2, 3), zero_with_pp=(0, 1),
        recompute=("none", "selective", "full", "partial"),
        precision=("bf16", "fp16", "fp8", "fp8-delayed", "fp8-current", "mxfp8", "nvfp4"),
        tensor_parallel=True, pipeline_parallel=True, context_parallel=True, virtual_pipeline=True,
        uneven_stages=True, sequence_parallel=(True, False), decides=("overlap_tp_comm", "overlap_param_gather"),
        notes=("fp8 needs a GPU with FP8 tensor cores", "no ALiBi models")),
    "nemo": Capabilities(
        "nemo", VERSIONS["nemo"], zero=(0, 1, 2, 3), zero_with_pp=(0, 1),
        recompute=("none", "selective", "full", "partial"), precision=("bf16", "fp16", "fp8"),
        tensor_parallel=True, pipeline_parallel=True, context_parallel=True, virtual_pipeline=True,
        uneven_stages=True, sequence_parallel=(True, False),
        decides=("flash_attention", "overlap_tp_comm"),
        notes=("fp8 needs a GPU with FP8 tensor cores", "no ALiBi models",
               "GPU count in whole nodes beyond one node")),
    "deepspeed": Capabilities(
        "deepspeed", VERSIONS["deepspeed"], zero=(0, 1, 2, 3), zero_with_pp=(0, 1),
        recompute=("none", "full"), precision=("bf16", "fp16"), tensor_parallel=True,
        pipeline_parallel=True, context_parallel=False, virtual_pipeline=False, uneven_stages=False,
        sequence_parallel=(False,), decides=("sequence_parallel", "fp32_grads", "overlap_grad_reduce",
                                             "overlap_param_gather"),
        notes=("tp (AutoTP) only with pp = 1",)),
    "torchtitan": Capabilities(
        "torchtitan", VERSIONS["torchtitan"], zero=(0, 3), zero_with_pp=(3,),
        recompute=("none", "selective", "full", "partial"), precision=("bf16", "fp8"), tensor_parallel=True,
        pipeline_parallel=True, context_parallel=True, virtual_pipeline=True, uneven_stages=True,
        sequence_parallel=(True,), decides=("sequence_parallel", "flash_attention", "fp32_grads",
                                            "overlap_grad_reduce", "overlap_param_gather"),
        notes=("zero 0 (DDP) only without tp/pp/cp", "cp needs zero 3", "seq_len divisible by 2 tp cp",
               "partial recomputation only as every n-th block",
               "selective is op-level SAC (selective_ac_option op), dense models only")),
}


def allowed(framework: str) -> Capabilities:
    return _CAPS[_known(framework)]


# ------------------------------------------------------------------ kept argument lists


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str  # flag | int | float | str | bool | list | dict | any
    choices: tuple[str, ...] = ()


@functools.lru_cache(maxsize=None)
def kept_args(framework: str) -> dict[str, ArgSpec]:
    """The framework's argument/key list kept in ``planner/data/framework_args/<framework>.txt``."""
    fw = _known(framework)
    out: dict[str, ArgSpec] = {}
    for line in (DATA_DIR / f"{fw}.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        choices = tuple(parts[2].split("|")) if len(parts) > 2 else ()
        out[parts[0]] = ArgSpec(parts[0], parts[1], choices)
    return out


def kept_source(framework: str) -> str:
    """The header comment of the kept list (where it comes from)."""
    fw = _known(framework)
    head = []
    for line in (DATA_DIR / f"{fw}.txt").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        head.append(line[1:].strip())
    return " ".join(head)
