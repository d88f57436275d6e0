"""What each framework's current performance recipes set, per GPU architecture, for the knobs the planner models.

Plain data and two lookups:

- :func:`recipe_defaults` ``(framework, gpu, precision=None, moe=None) -> {knob: Setting(value, source)}``: the
  value the framework's current performance recipe for that GPU sets for each plan knob it sets, with where it is
  written (repository, file, release and commit). A knob a recipe does not set is absent: the framework's own
  default (:mod:`planner.frameworks.rules`) applies.
- :func:`searched_values` ``(framework, gpu, precision=None, moe=None) -> {knob: (values...)}``: the values of those
  knobs a default search spans on that GPU: the recipe's value first, then the alternatives the hardware and the
  framework can run (a user's value for a knob pins it; the caller does not ask for that knob).
- :func:`low_precision_recipe` ``(framework, gpu)``: the GPU's best low-precision recipe the framework runs (fp8 on
  Hopper, mxfp8 on Blackwell), for the answer's "the same question in low precision" line.

``framework`` ``None`` is the framework-free what-if: every value the cost model prices, DualPipe included.

Which recipes (read, not copied; each :class:`Setting` names its file):

- **Megatron-Bridge v0.6.0** (tag ``v0.6.0``, commit ``51885cf``, the NeMo 26.08 container: the newest release,
  2026-08-19), ``src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py`` and the model recipes they start from
  (``src/megatron/bridge/recipes/...``). Its recipes configure Megatron-Core, so they are the performance recipes of
  both ``nemo`` and ``megatron`` (Megatron-LM's training script takes the same Megatron-Core settings as flags:
  ``--moe-token-dispatcher-type flex``, ``--overlap-moe-expert-parallel-comm``, ``--tp-comm-overlap``, ...).
  Per GPU the flagship recipes are read: DeepSeek-V3 (MoE: the dispatcher, the overlap, the grouped GEMM, FP8
  attention) and Llama 3 70B (dense: TP-communication overlap). The recipes differ by model where they differ
  (Qwen3-235B on B200 keeps the all-to-all dispatcher); the search spans both values, so a model whose recipe
  differs from the flagship's still finds its own.
- **torchtitan v0.2.2** (tag ``v0.2.2``, commit ``73a0e69``): ``torchtitan/models/*/train_configs/*.toml`` and
  ``torchtitan/config/job_config.py``.
- **DeepSpeed** main at ``edaa7221`` (version 0.19.6): DeepSpeed publishes no per-GPU performance recipes; its
  MoE layer and config defaults are what a DeepSpeed run gets (``deepspeed/moe/sharded_moe.py``,
  ``deepspeed/runtime/tensor_parallel/config.py``).
- The framework-free what-if also spans DeepSeek's DualPipe (arXiv 2412.19437 Sec. 3.2.1), which none of the four
  frameworks implements (:mod:`planner.frameworks.rules` ``*-dualpipe``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

#: Frameworks with recipes here (planner.frameworks.rules.FRAMEWORKS); None is the framework-free what-if.
RECIPE_FRAMEWORKS = ("megatron", "nemo", "torchtitan", "deepspeed")

#: The knobs the recipes set and the default search spans (Plan fields).
RECIPE_KNOBS = ("moe_dispatcher", "moe_grouped_gemm", "moe_overlap", "pp_schedule", "overlap_tp_comm", "fp8_attention")

#: Knobs that act on MoE layers only (a dense model's search does not span them).
MOE_KNOBS = ("moe_dispatcher", "moe_grouped_gemm", "moe_overlap", "fp8_attention")

#: Block-scaled precision recipes (Blackwell): the fused grouped MLP and the recipes' FP8 attention run under them.
BLOCK_SCALED = ("mxfp8", "nvfp4")
LOW_PRECISION = ("fp8", "fp8-delayed", "fp8-current", "mxfp8", "nvfp4")


class Setting(NamedTuple):
    """A recipe's value of one knob and where it is written (``value, source = setting``)."""

    value: object
    source: str


# ------------------------------------------------------------------ sources, named once
MB_VERSION = "Megatron-Bridge v0.6.0 (51885cf, NeMo 26.08)"
_MB = "NVIDIA-NeMo/Megatron-Bridge@v0.6.0 (51885cf132b2, NeMo 26.08)"
_MB_PERF = f"{_MB} src/megatron/bridge/perf_recipes"
_MB_DSV3 = {
    "hopper": f"{_MB_PERF}/deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_1024gpu_h100_*_config (from "
              "recipes/deepseek/h100/deepseek_v3.py: moe_flex_dispatcher_backend hybridep through "
              "training/flex_dispatcher_backend.py apply_flex_dispatcher_backend -> moe_token_dispatcher_type flex; "
              "CommOverlapConfig(tp_comm_overlap=False), overlap_moe_expert_parallel_comm False; no op fuser)",
    "blackwell": f"{_MB_PERF}/deepseek/b300/deepseek_v3.py deepseek_v3_pretrain_256gpu_b300_fp8mx_config and "
                 "gb300/deepseek_v3.py ..._gb300_fp8mx_config (deepseek/common.py _enable_deepseek_full_iteration_mxfp8: "
                 "moe_token_dispatcher_type flex with hybridep, overlap_moe_expert_parallel_comm True, "
                 "use_transformer_engine_op_fuser True with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, "
                 "fp8_dot_product_attention True)",
    "blackwell-16bit": f"{_MB_PERF}/deepseek/b300/deepseek_v3.py deepseek_v3_pretrain_256gpu_b300_bf16_config "
                       "(hybridep flex from the model recipe; no EP overlap, no op fuser, bf16 attention)",
}
_MB_LLAMA = {
    "hopper": f"{_MB} src/megatron/bridge/recipes/llama/h100/llama3.py (Llama 3 70B pretrain: "
              "CommOverlapConfig(tp_comm_overlap=True)) used by perf_recipes/llama/h100/llama3.py "
              "llama3_70b_pretrain_64gpu_h100_bf16_config (tp 4, userbuffers tp_comm_overlap_cfg)",
    "blackwell": f"{_MB_PERF}/llama/b200/llama3.py llama3_70b_pretrain_64gpu_b200_{{bf16,fp8cs,fp8mx}}_config "
                 "(userbuffers tp_comm_overlap_cfg on the recipe's tp_comm_overlap); nvfp4: "
                 "llama3_70b_pretrain_64gpu_b200_nvfp4_config sets comm_overlap.tp_comm_overlap = False",
}
_MB_PRECISION = {
    "hopper": f"{_MB_PERF}/_common.py _perf_precision('fp8_cs') (bf16_with_fp8_current_scaling_mixed), the FP8 "
              "recipe of every H100 perf recipe",
    "blackwell": f"{_MB_PERF}/_common.py _perf_precision('fp8_mx') (bf16_with_mxfp8_mixed), the low-precision "
                 "recipe of the B200/B300/GB200/GB300 DeepSeek-V3 and Llama perf recipes",
}
_MB_SCHEDULE = (f"{_MB_PERF} (every Llama/DeepSeek/Qwen3 recipe with pp > 1 sets "
                "virtual_pipeline_model_parallel_size: Megatron-Core's interleaved 1F1B; no DualPipe schedule)")
_MCORE_DEFAULT = (f"{_MB} src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py before its flex backend is applied "
                  "(moe_token_dispatcher_type alltoall, overlap_moe_expert_parallel_comm False, tp_comm_overlap "
                  "False): no Megatron-Bridge performance recipe targets this GPU")
_TT = "pytorch/torchtitan@v0.2.2 (73a0e69)"
_TT_DSV3 = (f"{_TT} torchtitan/models/deepseek_v3/train_configs/deepseek_v3_671b.toml (expert_parallel_comm_backend "
            "not set: job_config.py default 'standard', the all-to-all; pipeline_parallel_schedule Interleaved1F1B; "
            "enable_async_tensor_parallel false)")
_TT_LLAMA = (f"{_TT} torchtitan/models/llama3/train_configs/llama3_405b.toml (tensor_parallel_degree 8, "
             "enable_async_tensor_parallel true)")
_TT_MM = f"{_TT} torchtitan/models/moe (GroupedExperts: torch._grouped_mm over the local experts)"
_TT_FP8 = f"{_TT} torchtitan/models/llama3/train_configs/llama3_405b.toml (converters float8: tensorwise FP8 linears)"
_DS = "deepspeedai/DeepSpeed@edaa7221 (0.19.6)"
_DS_MOE = f"{_DS} deepspeed/moe/sharded_moe.py MOELayer.forward (one blocking _AllToAll; no dispatch overlap)"
_DS_EXPERTS = f"{_DS} deepspeed/moe/experts.py Experts.forward (a loop over the local experts)"
_DS_TP = f"{_DS} deepspeed/runtime/tensor_parallel/config.py (AutoTP tp_overlap_comm default False)"
_DS_PIPE = f"{_DS} deepspeed/runtime/pipe/schedule.py TrainSchedule (1F1B)"
_DUALPIPE = "DeepSeek-V3 technical report, arXiv 2412.19437 Sec. 3.2.1 (DualPipe; deepseek-ai/DualPipe)"


@dataclass(frozen=True)
class Entry:
    """One recipe value: ``knob`` = ``value`` under ``framework`` on GPUs of ``architectures``, for ``precisions``
    (None: any) and models that are MoE or not (``moe`` None: both)."""

    framework: str
    architectures: tuple[str, ...]
    knob: str
    value: object
    source: str
    precisions: tuple[str, ...] | None = None
    moe: bool | None = None


_HOPPER, _BLACKWELL = ("hopper",), ("blackwell",)
_ANY_NVIDIA = ("volta", "ampere", "ada", "hopper", "blackwell")


def _mcore(fw: str) -> list[Entry]:
    """Megatron-Bridge's recipes, as ``fw`` (megatron or nemo) runs them."""
    E = Entry  # noqa: N806
    return [
        # MoE on Hopper: DeepSeek-V3's recipe (flex/HybridEP, no EP overlap, TE grouped GEMM loop, no TP overlap)
        E(fw, _HOPPER, "moe_dispatcher", "flex", _MB_DSV3["hopper"], moe=True),
        E(fw, _HOPPER, "moe_overlap", False, _MB_DSV3["hopper"], moe=True),
        E(fw, _HOPPER, "moe_grouped_gemm", "loop", _MB_DSV3["hopper"], moe=True),
        E(fw, _HOPPER, "overlap_tp_comm", False, _MB_DSV3["hopper"], moe=True),
        E(fw, _HOPPER, "fp8_attention", False, _MB_DSV3["hopper"], moe=True),
        # MoE on Blackwell, block-scaled recipes: full-iteration MXFP8 (flex, EP overlap, fused grouped MLP, FP8 attention)
        E(fw, _BLACKWELL, "moe_dispatcher", "flex", _MB_DSV3["blackwell"], moe=True),
        E(fw, _BLACKWELL, "moe_overlap", True, _MB_DSV3["blackwell"], BLOCK_SCALED, moe=True),
        E(fw, _BLACKWELL, "moe_grouped_gemm", "fused", _MB_DSV3["blackwell"], BLOCK_SCALED, moe=True),
        E(fw, _BLACKWELL, "fp8_attention", True, _MB_DSV3["blackwell"], BLOCK_SCALED, moe=True),
        # ... and in bf16 / fp8 current scaling: flex, no overlap, the grouped GEMM loop, bf16 attention
        E(fw, _BLACKWELL, "moe_overlap", False, _MB_DSV3["blackwell-16bit"], moe=True),
        E(fw, _BLACKWELL, "moe_grouped_gemm", "loop", _MB_DSV3["blackwell-16bit"], moe=True),
        E(fw, _BLACKWELL, "fp8_attention", False, _MB_DSV3["blackwell-16bit"], moe=True),
        E(fw, _BLACKWELL, "overlap_tp_comm", False, _MB_DSV3["blackwell"], moe=True),
        # dense: TP-communication overlap (userbuffers) with tp > 1, except NVFP4 on Blackwell
        E(fw, _HOPPER, "overlap_tp_comm", True, _MB_LLAMA["hopper"], moe=False),
        E(fw, _BLACKWELL, "overlap_tp_comm", False, _MB_LLAMA["blackwell"], ("nvfp4",), moe=False),
        E(fw, _BLACKWELL, "overlap_tp_comm", True, _MB_LLAMA["blackwell"], moe=False),
        E(fw, _HOPPER + _BLACKWELL, "pp_schedule", "1f1b", _MB_SCHEDULE),
        # no recipe for this GPU (Volta, Ampere, Ada): Megatron-Core's defaults
        E(fw, ("volta", "ampere", "ada"), "moe_dispatcher", "alltoall", _MCORE_DEFAULT, moe=True),
        E(fw, ("volta", "ampere", "ada"), "moe_overlap", False, _MCORE_DEFAULT, moe=True),
        E(fw, ("volta", "ampere", "ada"), "moe_grouped_gemm", "loop", _MCORE_DEFAULT, moe=True),
        E(fw, ("volta", "ampere", "ada"), "overlap_tp_comm", False, _MCORE_DEFAULT),
        E(fw, ("volta", "ampere", "ada"), "pp_schedule", "1f1b", _MCORE_DEFAULT),
    ]


ENTRIES: tuple[Entry, ...] = tuple(
    _mcore("megatron") + _mcore("nemo") + [
        Entry("torchtitan", _ANY_NVIDIA, "moe_dispatcher", "alltoall", _TT_DSV3, moe=True),
        Entry("torchtitan", _ANY_NVIDIA, "moe_overlap", False, _TT_DSV3, moe=True),
        Entry("torchtitan", _ANY_NVIDIA, "moe_grouped_gemm", "fused", _TT_MM, moe=True),
        Entry("torchtitan", _ANY_NVIDIA, "fp8_attention", False, _TT_FP8, moe=True),
        Entry("torchtitan", _ANY_NVIDIA, "pp_schedule", "1f1b", _TT_DSV3),
        Entry("torchtitan", _ANY_NVIDIA, "overlap_tp_comm", True, _TT_LLAMA, moe=False),
        Entry("torchtitan", _ANY_NVIDIA, "overlap_tp_comm", False, _TT_DSV3, moe=True),
        Entry("deepspeed", _ANY_NVIDIA, "moe_dispatcher", "alltoall", _DS_MOE, moe=True),
        Entry("deepspeed", _ANY_NVIDIA, "moe_overlap", False, _DS_MOE, moe=True),
        Entry("deepspeed", _ANY_NVIDIA, "moe_grouped_gemm", "loop", _DS_EXPERTS, moe=True),
        Entry("deepspeed", _ANY_NVIDIA, "fp8_attention", False, _DS_EXPERTS, moe=True),
        Entry("deepspeed", _ANY_NVIDIA, "pp_schedule", "1f1b", _DS_PIPE),
        Entry("deepspeed", _ANY_NVIDIA, "overlap_tp_comm", False, _DS_TP),
    ])

#: The values each framework can run, per knob, beyond the recipe's (what a default search may span); the rules of
#: planner.frameworks.rules still filter each plan (moe_overlap needs ep > 1 and virtual stages, ...). Each line
#: names the rule or the file that bounds it.
RUNS: dict[str | None, dict[str, tuple]] = {
    # Megatron-Core: alltoall and flex (DeepEP/HybridEP); EP overlap; TE's grouped GEMM loop or fused grouped MLP
    # (rule *-moe-fused-grouped-mlp: Blackwell, block-scaled); TP overlap (userbuffers); no DualPipe (*-dualpipe)
    "megatron": {"moe_dispatcher": ("alltoall", "flex"), "moe_overlap": (False, True),
                 "moe_grouped_gemm": ("loop", "fused"), "pp_schedule": ("1f1b",), "overlap_tp_comm": (False, True),
                 "fp8_attention": (False, True)},
    # NeMo as planner.frameworks.rules models it (NeMo 2.7.3 on Megatron-Core 0.16.1): no fused grouped MLP
    # (rules.MEMORY_KNOBS['nemo']), no TP-overlap callback in a recipe override (rule nemo-tp-comm-callback)
    "nemo": {"moe_dispatcher": ("alltoall", "flex"), "moe_overlap": (False, True), "moe_grouped_gemm": ("loop",),
             "pp_schedule": ("1f1b",), "overlap_tp_comm": (False,), "fp8_attention": (False, True)},
    # torchtitan: standard (all-to-all) or deepep; no EP overlap (its DualPipeV is not priced); torch._grouped_mm
    "torchtitan": {"moe_dispatcher": ("alltoall", "flex"), "moe_overlap": (False,), "moe_grouped_gemm": ("fused",),
                   "pp_schedule": ("1f1b",), "overlap_tp_comm": (False, True), "fp8_attention": (False,)},
    # DeepSpeed-MoE: one blocking all-to-all, a loop over the experts (rule deepspeed-moe-dispatch)
    "deepspeed": {"moe_dispatcher": ("alltoall",), "moe_overlap": (False,), "moe_grouped_gemm": ("loop",),
                  "pp_schedule": ("1f1b",), "overlap_tp_comm": (False, True), "fp8_attention": (False,)},
    # the framework-free what-if: everything the cost model prices
    None: {"moe_dispatcher": ("alltoall", "flex"), "moe_overlap": (False, True), "moe_grouped_gemm": ("loop", "fused"),
           "pp_schedule": ("1f1b", "dualpipe"), "overlap_tp_comm": (False, True), "fp8_attention": (False, True)},
}

#: The framework-free what-if's values when nothing else says: the Plan's defaults, with the sources of the choice.
_NONE_SOURCE = "the framework-free what-if: the best of every value the cost model prices (no recipe)"


def architecture(gpu) -> str | None:
    """The GPU's architecture (``hopper``, ``blackwell``, ...) from a ClusterSpec, a GPUSpec or the name itself."""
    if isinstance(gpu, str):
        return gpu.strip().lower() or None
    g = getattr(gpu, "gpu", gpu)
    return getattr(g, "architecture", None)


def _block_scaled(gpu) -> bool:
    g = getattr(gpu, "gpu", gpu)
    if isinstance(g, str):
        return architecture(g) == "blackwell"
    return bool(getattr(g, "block_scaling", False))


def recipe_defaults(framework: str | None, gpu, precision: str | None = None,
                    moe: bool | None = None) -> dict[str, Setting]:
    """``{knob: Setting(value, source)}``: what ``framework``'s current performance recipe sets on ``gpu`` (a
    ClusterSpec, GPUSpec or architecture name) for ``precision`` (None: its 16-bit recipe) and a MoE model or not
    (None: the MoE knobs and the dense ones, the dense value where they differ). The first matching entry wins
    (entries are ordered most specific first). Empty for the framework-free what-if and for a GPU without a
    stated architecture."""
    if framework is None:
        return {}
    arch = architecture(gpu)
    prec = precision or "bf16"
    out: dict[str, Setting] = {}
    for e in ENTRIES:
        if e.framework != framework or arch not in e.architectures or e.knob in out:
            continue
        if e.precisions is not None and prec not in e.precisions:
            continue
        if e.moe is not None and moe is not None and e.moe != moe:
            continue
        if e.moe is True and moe is None:
            continue  # a MoE-only value is not the dense default
        out[e.knob] = Setting(e.value, e.source)
    if moe is None:  # the MoE knobs too (no dense entry sets them)
        for k, s in recipe_defaults(framework, gpu, precision, True).items():
            out.setdefault(k, s)
    return out


def searched_values(framework: str | None, gpu, precision: str | None = None,
                    moe: bool | None = None) -> dict[str, tuple]:
    """``{knob: values}`` a default search spans on ``gpu`` under ``framework`` (None: the framework-free what-if):
    the recipe's value first, then every other value the framework runs (:data:`RUNS`) that the hardware and the
    precision support: the fused grouped MLP and FP8 attention only under a block-scaled recipe on a block-scaling
    GPU (Blackwell), FP8 attention only in a low-precision recipe (Plan's rule) on Blackwell (elsewhere the cost
    model runs it at the bf16 rate: a value that cannot win is not spanned). A dense model spans no MoE
    knob (each is the recipe's, or the Plan's default)."""
    runs = RUNS.get(framework, RUNS[None])
    defaults = recipe_defaults(framework, gpu, precision, moe)
    prec = precision or "bf16"
    out: dict[str, tuple] = {}
    for knob in RECIPE_KNOBS:
        vals = list(runs[knob])
        if knob == "moe_grouped_gemm" and not (prec in BLOCK_SCALED and _block_scaled(gpu)):
            vals = [v for v in vals if v != "fused"] or vals[:1]
        if knob == "fp8_attention" and not (prec in LOW_PRECISION and _block_scaled(gpu)):
            vals = [False]  # priced at the bf16 rate off Blackwell (compute.FP8_SDPA_SPEEDUP): nothing to gain
        if moe is False and knob in MOE_KNOBS:
            vals = vals[:1]
        d = defaults.get(knob)
        first = d.value if d is not None and d.value in vals else vals[0]
        if moe is False and knob in MOE_KNOBS:
            out[knob] = (first,)
            continue
        out[knob] = (first,) + tuple(v for v in vals if v != first)
    return out


def low_precision_recipe(framework: str | None, gpu) -> Setting | None:
    """The GPU's best low-precision recipe that ``framework`` runs, with its source: mxfp8 on Blackwell, FP8 with
    current scaling on Hopper (``fp8-current``; ``fp8``, delayed scaling, where the framework has no current
    scaling); None where the GPU has no FP8 tensor cores or the framework no low-precision recipe."""
    arch = architecture(gpu)
    caps = None
    if framework is not None:
        from plan_search.planner.frameworks.rules import allowed

        caps = allowed(framework).precision
    fp8 = {"torchtitan": _TT_FP8}.get(framework, f"{framework}'s FP8 recipe (delayed scaling), the nearest it runs "
                                                 f"to {_MB_PRECISION['hopper']}")
    if arch == "blackwell":
        want = [("mxfp8", _MB_PRECISION["blackwell"]), ("fp8-current", _MB_PRECISION["hopper"]), ("fp8", fp8)]
    elif arch == "hopper":
        want = [("fp8-current", _MB_PRECISION["hopper"]), ("fp8", fp8)]
    else:
        return None  # Ampere and older: no FP8 tensor cores; Ada and AMD: no performance recipe here
    for prec, src in want:
        if caps is None or prec in caps:
            return Setting(prec, src)
    return None


def with_recipe_defaults(framework: str, plan, model, cluster):
    """``plan`` (a :class:`~plan_search.planner.costmodel.plan.Plan`) with the recipe knobs its user left unset
    (not in ``plan.model_fields_set``) at ``framework``'s current performance-recipe values on ``cluster``
    (:func:`recipe_defaults` for the plan's precision and the model), each kept only where the plan stays valid and
    ``framework``'s rules accept it (the recipe's EP overlap needs virtual stages with pp > 1: a plan without them
    keeps the framework's own default), and the list of ``(knob, value, source)`` applied: what
    ``plan-estimate --framework X`` would price for the knobs a user does not give (not wired there yet: its
    outputs with ``--framework`` keep the frameworks' library defaults)."""
    from pydantic import ValidationError

    from plan_search.models.io import InputError
    from plan_search.planner.costmodel.plan import Plan
    from plan_search.planner.frameworks.rules import check

    given = set(plan.model_fields_set)
    fields = plan.model_dump(include=given)  # the plan as its user gave it: the framework fills the rest its way
    applied = []
    base_bad = {v.rule.id for v in check(framework, plan, model, cluster)}
    for knob, (value, source) in recipe_defaults(framework, cluster, plan.precision, model.is_moe).items():
        if knob in given or getattr(plan, knob) == value:
            continue
        try:
            q = Plan(**{**fields, knob: value})
            q.check_against(model)
        except (ValidationError, ValueError, InputError):
            continue
        if {v.rule.id for v in check(framework, q, model, cluster)} <= base_bad:
            plan, fields[knob] = q, value
            applied.append((knob, value, source))
    return plan, applied  # the recipe's values are set on the plan: rules.with_defaults does not reset them
