"""The candidate plans of a search, enumerated with numpy as :class:`PlanArrays` columns.

One call of :func:`enumerate_space` gives every plan of one model on one system for a set of
GPU counts, global batches and one sequence length that passes every rule of
:class:`planner.plan.Plan` and :meth:`Plan.check_against` (the tests check that the plans
rebuilt by :meth:`Space.plan` validate and give back the same row), within the user's
:class:`planner.request.Knobs` bounds:

- ``tp`` divides the heads and the ffn width, tp and the kv heads divide one another, and the
  tp group stays inside the NVLink domain (tp divides the domain size) unless cross-node tp is
  allowed (then tp may also be a multiple of the domain size);
- ``pp`` divides the layers, or, when it does not and ``pp > 2``, splits them as Megatron's
  uneven first/last stages do (the rule of :mod:`planner.calibration`): middle stages take
  ``ceil(l/p)`` layers and the first and last share the rest equally (skipped when the rest is
  odd or when an end stage would hold fewer than 2 layers or less than half a middle stage:
  such splits exist only to make a GPU count divide); an odd rest goes to ends one layer apart, and
  a model with multi-token prediction gets the last stage alone short (:func:`lighter_end_splits`);
- ``cp`` powers of two with ``seq_len % (2 cp) == 0`` (FlashAttention is always on);
- ``dp = N / (tp pp cp)`` an integer, ``global_batch % (dp * micro_batch) == 0``;
- ``vpp`` 1, or a divisor of the layers per (middle) stage with ``pp > 1``, ``pp vpp <= l`` and
  the micro-batches per step a multiple of ``pp``;
- ``micro_batch`` powers of two (or the user's values);
- ZeRO 0-3 (above 0 only with dp > 1: one replica has nothing to shard, the plans would be
  the same execution);
- recomputation none / selective / full (every layer) / partial (full on ``k`` layers per stage,
  ``1 <= k <`` the largest stage; duplicates of another ``k`` dropped);
- sequence parallelism on when tp > 1 (both settings if asked);
- mixture of experts (:func:`expert_domain`): ``ep`` a power of two dividing the experts with at
  most :data:`MAX_LOCAL_EXPERTS` experts per GPU, ``etp`` 1 (and the row's tp for experts at least
  as wide as the hidden size), ``etp * ep`` dividing the stage's ``tp*cp*dp`` GPUs (parallel
  folding); (1, 1) for a
  dense model. Each layout row is crossed with its valid (ep, etp) pairs before the micro-batch
  cross, so a MoE space is a few times a dense one (4 values of ep for 8 to 256 experts at most 6);
- every other knob of :class:`Plan` (precision, FlashAttention, fp32 gradients, the overlaps,
  ...: :func:`~plan_search.planner.costmodel.knobs.broadcast_knobs`) as the request gives it, a
  value or a set; the space is crossed with every combination (by default the Plan's defaults
  alone, so a search and ``plan-estimate`` price a plan with the same knobs). A combination
  that a rule excludes on some rows (FlashAttention off with cp > 1) drops those rows. A search
  (``recipes=True``) spans the recipe knobs its user left unset as the framework's performance
  recipes do on the GPU (:func:`recipe_knobs`), those that never slow a plan resolved per row
  (:data:`RESOLVED_KNOBS`); each front point's knobs are then what its plan says, and its
  ``plan-estimate`` command carries them.

The enumeration crosses small arrays stage by stage (layouts, then micro-batches, virtual
stages, ZeRO, recomputation, sequence parallelism), masking after each cross, so no Plan object
is built; :meth:`Space.plan` turns row ``i`` back into a :class:`Plan`. Row order is fixed by
the construction (global batch, tp, cp, pp, dp, micro-batch, vpp, ZeRO, recomputation, SP, in
that nesting), which is the stable order every tie is broken by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec

from dataclasses import fields as dc_fields

from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.plan import Plan, imbalance_bound_problem, pad_capacity_problem
from plan_search.planner.search.request import MIN_CP_TOKENS, Knobs, knob_combinations, knob_values

#: PlanArrays columns the enumeration builds itself; every other column comes from the
#: broadcast knobs of the row's combination.
CORE_COLUMNS = ("num_gpus", "tp", "pp", "dp", "cp", "vpp", "zero", "mb", "gb", "seq", "recompute", "rc_layers",
                "sp", "first", "mid", "last", "ep", "etp")

RC_NONE, RC_SELECTIVE, RC_FULL, RC_PARTIAL = 0, 1, 2, 3
RC_NAMES = ("none", "selective", "full", "full")
#: Default partial-recomputation depths: these fractions of the largest stage, rounded up.
PARTIAL_FRACTIONS = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class Space:
    """Candidates of one (model, system): the plan columns plus what a :class:`Plan` needs back."""

    model: ModelSpec
    cluster: ClusterSpec
    x: PlanArrays
    rc_kind: np.ndarray  # RC_* per row (partial vs full is not in PlanArrays' recompute code)
    uneven: np.ndarray  # first/last stage layers given explicitly
    combos: tuple  # the broadcast knobs' combinations (dicts of Plan fields)
    combo: np.ndarray  # per row: index into combos

    def __len__(self) -> int:
        return len(self.x)

    def take(self, idx) -> "Space":
        return Space(self.model, self.cluster, self.x.take(idx), self.rc_kind[idx], self.uneven[idx],
                     self.combos, self.combo[idx])

    def plan(self, i: int) -> Plan:
        """Row ``i`` as a validated :class:`Plan`."""
        x = self.x
        g = lambda col: int(getattr(x, col)[i])  # noqa: E731
        kind = int(self.rc_kind[i])
        kw = {}
        if bool(self.uneven[i]):
            kw = dict(first_stage_layers=g("first"), last_stage_layers=g("last"))
            if _accounted(g("pp"), g("first"), g("mid"), g("last"), self.model.num_layers):
                # the same split as Megatron's embedding/loss accounting makes it (issue 12)
                kw = dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
        # the split is the row's (pp_domain), whatever accounting a broadcast combination carries
        kw = {"account_for_embedding_in_pipeline_split": False, "account_for_loss_in_pipeline_split": False, **kw}
        return Plan(
            num_gpus=g("num_gpus"), tp=g("tp"), pp=g("pp"), dp=g("dp"), cp=g("cp"), vpp=g("vpp"),
            zero=g("zero"), micro_batch=g("mb"), global_batch=g("gb"), seq_len=g("seq"),
            recompute=RC_NAMES[kind], recompute_layers=g("rc_layers") if kind == RC_PARTIAL else None,
            sequence_parallel=bool(x.sp[i]), ep=g("ep"), etp=g("etp"), **{**self.combos[int(self.combo[i])], **kw},
        )


def space_of_plans(model: ModelSpec, cluster: ClusterSpec, plans: Sequence[Plan]) -> Space:
    """A :class:`Space` holding exactly ``plans`` (e.g. the framework-conformed candidates)."""
    from plan_search.planner.costmodel.knobs import broadcast_knobs

    x = PlanArrays.from_plans(plans, model.num_layers)
    kind = np.array([RC_PARTIAL if p.recompute_layers is not None else
                     {"none": RC_NONE, "selective": RC_SELECTIVE, "full": RC_FULL}[p.recompute] for p in plans],
                    dtype=np.int64)
    # uneven: given end stages, or the split Megatron's embedding/loss accounting makes (a conformed plan's): without
    # it plan(i) rebuilt the plan with the accounting off, another split than the one priced (issue 24: the
    # front's command then priced 14x5|13x2 and plan-estimate --framework megatron refused it)
    uneven = np.array([p.first_stage_layers is not None or p.last_stage_layers is not None or (
        p.pp > 1 and (p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split))
        for p in plans], dtype=bool)
    names = [k.name for k in broadcast_knobs()]
    combos: list[dict] = []
    combo = np.zeros(len(plans), dtype=np.int64)
    for i, p in enumerate(plans):
        c = {n: getattr(p, n) for n in names}
        if c not in combos:
            combos.append(c)
        combo[i] = combos.index(c)
    return Space(model, cluster, x, kind, uneven, tuple(combos), combo)


def valid_combinations(combos: list[dict]) -> list[dict]:
    """The broadcast-knob combinations that are valid plans by themselves (the Plan rules between
    broadcast knobs: grad_bf16_copy needs fp32_grads, no bf16_layers under delayed scaling, ...),
    checked on a probe shape every rule tying them to an enumerated knob accepts (pp 2, vpp 1, two
    micro-batches, dp = dp_shard); those rules are :func:`_combo_row_mask`'s. Without this a set
    like ``--grad-bf16-copy both --fp32-grads both`` priced the impossible pair, and the search
    failed when it won. None valid: the first combination's rule as an InputError."""
    from pydantic import ValidationError

    from plan_search.models.io import validation_message

    out, first = [], None
    for c in combos:
        d = int(c.get("dp_shard") or 1)
        try:
            Plan(num_gpus=2 * d, pp=2, dp=d, global_batch=2 * d, seq_len=2, **c)
        except ValidationError as exc:
            first = first or exc
            continue
        out.append(c)
    if not out:
        raise InputError(validation_message(first))
    return out


def combo_columns(combo: dict, num_layers: int) -> dict[str, object]:
    """The PlanArrays columns (other than :data:`CORE_COLUMNS`) of a broadcast-knob combination:
    read from a probe plan through :meth:`PlanArrays.from_plans`, the one encoding of a plan."""
    probe = Plan.probe(**{"num_gpus": 1, "dp": 1, "global_batch": 1, "seq_len": 2, **combo})
    cols = PlanArrays.from_plans([probe], num_layers)
    return {f.name: getattr(cols, f.name)[0] for f in dc_fields(PlanArrays) if f.name not in CORE_COLUMNS}


def constant_column(value, n: int, dtype=None) -> np.ndarray:
    """A column holding ``value`` on all ``n`` rows, as a read-only broadcast view (stride 0): the
    same values as ``np.full`` without writing them (a search space has ~20 such columns: the
    broadcast knobs and the sequence length); :func:`concat_columns` keeps it one view."""
    v = np.asarray(value, dtype=dtype if dtype is not None else np.asarray(value).dtype)
    return np.broadcast_to(v, (n,))


def concat_columns(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)``, but the parts that are all one value as one broadcast view
    (:func:`constant_column`) when each part is such a view of the same value."""
    first = parts[0]
    if all(p.ndim == 1 and p.strides == (0,) and p.dtype == first.dtype for p in parts):
        vals = {p[0].item() for p in parts if len(p)}
        if len(vals) == 1:
            return constant_column(vals.pop(), sum(len(p) for p in parts), first.dtype)
    return np.concatenate(parts)


def _take_rows(x: PlanArrays, idx: np.ndarray) -> PlanArrays:
    """``x.take(idx)`` keeping its one-value columns (:func:`constant_column`) one value, not copied."""
    return PlanArrays(**{f.name: (constant_column(col[0] if len(col) else 0, len(idx), col.dtype)
                                  if col.ndim == 1 and col.strides == (0,) else col[idx])
                         for f in dc_fields(PlanArrays) for col in (getattr(x, f.name),)})


def _combo_row_mask(combo: dict, x: PlanArrays) -> np.ndarray:
    """Rows of ``x`` on which a combination is a valid plan (the Plan rules that tie a broadcast
    knob to an enumerated one)."""
    ok = np.ones(len(x), dtype=bool)
    if combo.get("flash_attention") is False:
        ok &= x.cp == 1  # context parallelism needs FlashAttention (Plan rule)
    if combo.get("dp_shard"):
        ok &= x.dp % int(combo["dp_shard"]) == 0  # shard groups must divide dp (Plan rule, issue 12)
    if combo.get("recompute_modules"):  # a module set belongs to selective recomputation (Plan rule, issue 29)
        ok &= x.recompute == 1
    if combo.get("pp_schedule") == "dualpipe":  # even pp, vpp 1, even micro-batch count (Plan rule, issue 13)
        ok &= (x.pp % 2 == 0) & (x.vpp == 1) & (x.m % 2 == 0)
    return ok


# ------------------------------------------------------------------ knob domains
def _divisors(n: int) -> np.ndarray:
    n = int(n)
    small = np.arange(1, int(np.sqrt(n)) + 1)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


def given_degrees(name: str, cand: np.ndarray, ok: np.ndarray, given, why) -> np.ndarray:
    """The degrees of knob ``name`` the space keeps: ``cand[ok]``. A set the user ``given``
    (``--tp 1..16``, ``--ep 4,8,12``) filters the space like any default domain: the values that
    break a rule are dropped; only when none is left is the request refused, with ``name: why()``.
    The one rule of every degree knob's user values (tp, cp, pp, ep, etp)."""
    out = cand[ok]
    if given and out.size == 0:
        raise InputError(f"{name}: {why()}")
    return out


def tp_domain(model: ModelSpec, cluster: ClusterSpec, knobs: Knobs) -> np.ndarray:
    """Tensor-parallel degrees allowed by the model's shape, the NVLink domain and the bounds."""
    dom = cluster.node.intra_domain_size
    cand = np.asarray(knobs.tp, dtype=np.int64) if knobs.tp else _divisors(model.num_heads)
    a, g, f = model.num_heads, model.num_kv_heads, model.ffn_hidden_size or 0
    ok = (a % cand == 0) & ((g % cand == 0) | (cand % g == 0)) & (f % cand == 0)
    inside = dom % cand == 0
    across = (cand % dom == 0) if knobs.allow_cross_node_tp else np.zeros_like(ok)
    return given_degrees("tp", cand, ok & (inside | across), knobs.tp,
                         lambda: _tp_refusal(model, cluster, knobs, cand, ok))


def _tp_refusal(model: ModelSpec, cluster: ClusterSpec, knobs: Knobs, cand: np.ndarray, ok: np.ndarray) -> str:
    """Why each asked tp is refused, the real reason first, and the degrees that would work."""
    dom = cluster.node.intra_domain_size
    a, g, f = model.num_heads, model.num_kv_heads, model.ffn_hidden_size or 0
    why = []
    for v, shape_ok in zip(cand.tolist(), ok.tolist()):
        if not shape_ok:
            bad = [f"num_heads {a}"] if a % v else []
            bad += [f"the {g} kv heads"] if (g % v and v % g) else []
            bad += [f"ffn_hidden_size {f}"] if f % v else []
            why.append(f"{v} does not divide {' or '.join(bad)} of {model.name}")
        elif knobs.allow_cross_node_tp:
            why.append(f"{v} is neither a divisor nor a multiple of the {dom}-GPU NVLink domain of {cluster.name}")
        else:
            why.append(f"a tp group of {v} does not fit evenly in the {dom}-GPU NVLink domain of {cluster.name}, "
                       f"so it would cross the slower inter-node links")
    heads = _divisors(a)
    good = heads[((g % heads == 0) | (heads % g == 0)) & (f % heads == 0) & (dom % heads == 0)]
    hint = "; --allow-cross-node-tp allows multiples of the domain" if not knobs.allow_cross_node_tp else ""
    return "; ".join(why) + f"; degrees that work: {', '.join(map(str, good.tolist()))}{hint}"


def _pp_domain_given_ends(model: ModelSpec, knobs: Knobs):
    """The pipeline splits when the user fixes the first and/or last stage's layers: every pp
    (of the knob, else every pp > 1) whose split with those ends is a valid Plan."""
    l = model.num_layers
    cands = knobs.pp or list(range(2, l + 1))
    rows, why = [], []
    for pp in cands:
        for f in knobs.first_stage_layers or [None]:
            for la in knobs.last_stage_layers or [None]:
                if pp < 2:
                    continue
                try:
                    probe = Plan(num_gpus=pp, pp=pp, global_batch=pp, seq_len=2, first_stage_layers=f,
                                 last_stage_layers=la, recompute="none")
                    probe.check_against(model)
                except (ValueError, InputError) as exc:
                    from plan_search.models.io import error_text

                    why.append(f"at pp {pp}: {' '.join(error_text(exc).split())}")
                    continue
                fs, mid, ls = probe.stage_layers(l)
                rows.append((pp, fs, mid, ls))
    if not rows:
        if not why:  # every pp asked for is 1
            raise InputError(f"first_stage_layers/last_stage_layers: an uneven split needs pp > 1 (got pp {knobs.pp}); "
                             "drop them or allow a larger pp")
        raise InputError(
            f"first_stage_layers: no pipeline split of {l} layers with first {knobs.first_stage_layers} and last "
            f"{knobs.last_stage_layers} layers (pp {knobs.pp or 'any'}); the middle stages must split the rest evenly"
            + f" ({'e.g. ' if len(why) > 1 else ''}{why[0]})")
    a = np.asarray(rows, dtype=np.int64)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3], np.ones(len(a), dtype=bool)


def pp_domain(model: ModelSpec, knobs: Knobs):
    """(pp, first, mid, last, uneven) arrays of the allowed pipeline splits."""
    if knobs.first_stage_layers or knobs.last_stage_layers:
        return _pp_domain_given_ends(model, knobs)
    l = model.num_layers
    cand = np.asarray(knobs.pp, dtype=np.int64) if knobs.pp else np.arange(1, l + 1, dtype=np.int64)
    cand = cand[cand <= l]
    even = l % cand == 0
    mid_u = -(-l // cand)
    edge = l - (cand - 2) * mid_u
    # end stages of at least 2 layers and half a middle stage: thinner ends (pp 49 for 96 layers,
    # one layer each) exist only to make a GPU count divide, nobody runs them
    thick = (edge // 2 >= np.maximum(2, (mid_u + 1) // 2)) if not knobs.pp else (edge > 1)
    uneven_ok = (~even) & (cand > 2) & (edge % 2 == 0) & thick
    two = (~even) & (cand == 2)  # two stages, odd layers: the balanced split (Plan.split), ceil(l/2) first
    keep = even | uneven_ok | two
    p = cand[keep]
    uneven = uneven_ok[keep]
    two = two[keep]
    mid = np.where(uneven, mid_u[keep], l // p)
    first = np.where(uneven, edge[keep] // 2, np.where(p == 1, l, l // p))
    mid = np.where(p == 1, l, mid)
    last = np.where(two, l // 2, first)
    first = np.where(two, l - l // 2, first)
    mid = np.where(two, first, mid)
    extra = lighter_end_splits(l, cand[cand > 2], bool(knobs.pp), model.mtp_num_layers)  # issue 13
    if extra.size:
        known = set(zip(p.tolist(), first.tolist(), last.tolist()))
        extra = np.unique(extra, axis=0)
        extra = extra[[(a, b, d) not in known for a, b, d in extra[:, [0, 1, 3]].tolist()]].reshape(-1, 4)
        order = np.argsort(np.concatenate([p, extra[:, 0]]), kind="stable")
        p, first, mid, last = (np.concatenate([col, extra[:, j]])[order] for j, col in enumerate((p, first, mid, last)))
        uneven = np.concatenate([uneven, np.ones(len(extra), dtype=bool)])[order]
    given_degrees("pp", p, np.ones(p.size, dtype=bool), knobs.pp,
                  lambda: f"none of {list(knobs.pp)} divides num_layers {l} or splits it unevenly "
                          "(middle stages ceil(l/pp) layers, the first and last stages sharing the rest)")
    return p, first, mid, last, uneven


def lighter_end_splits(num_layers: int, pps, given: bool = False, mtp_layers: int = 0) -> np.ndarray:
    """Rows ``(pp, first, mid, last)`` of the uneven splits :func:`pp_domain`'s symmetric rule leaves out
    (issue 13), for ``pp > 2`` with middle stages of ``m = ceil(l/pp)`` layers:

    - with multi-token prediction, the last stage alone ``pp*m - l`` layers short, the first full:
      Megatron-Bridge's DeepSeek-V3 layouts (NVIDIA-NeMo/Megatron-Bridge
      src/megatron/bridge/recipes/deepseek/deepseek_v3.py @ 355cef45,
      ``set_deepseek_v3_pipeline_model_parallel_layout``: pp 16 ``4|4x14|1 + mtp + loss``, pp 8
      ``8|8x6|5 + mtp + loss``, pp 4 ``16|16x2|13 + mtp + loss``), the output layer, the loss and
      the MTP depths weighing on the last stage (without them
      DeepSeek-V3's 61 layers had no split at pp 8 or 16);
    - otherwise ends one layer apart when they share an odd rest (either way round).

    End stages obey :func:`pp_domain`'s thickness rule (at least 2 layers and half a middle stage,
    unless ``pp`` is ``given``), the last stage counting its ``mtp_layers`` as layers. One or two rows
    per ``pp`` at most (the search's size: every added split multiplies the rows of its ``pp``).
    Megatron runs them with --decoder-first/last-pipeline-num-layers."""
    rows = []
    for pp in (int(v) for v in np.asarray(pps).tolist()):
        if pp <= 2 or pp > num_layers:
            continue
        m = -(-num_layers // pp)
        edge = num_layers - (pp - 2) * m  # the ends' share
        if edge == 2 * m:
            continue  # pp divides the layers: the even split
        need = 1 if given else max(2, (m + 1) // 2)
        lo, last = edge // 2, edge - m
        if mtp_layers and last >= 1 and last + mtp_layers >= need:
            rows.append((pp, m, m, last))
        elif edge % 2 and lo >= need:
            rows += [(pp, lo + 1, m, lo), (pp, lo, m, lo + 1)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


def cp_domain(seq_len: int, knobs: Knobs) -> np.ndarray:
    if knobs.cp:
        cand = np.asarray(knobs.cp, dtype=np.int64)
    else:
        top = knobs.max_cp or max(1, seq_len // MIN_CP_TOKENS)
        cand = 2 ** np.arange(0, int(np.log2(top)) + 1, dtype=np.int64)
    return given_degrees("cp", cand, (cand == 1) | (seq_len % (2 * cand) == 0), knobs.cp,
                         lambda: f"none of {list(knobs.cp)} is 1 or divides seq_len/2 ({seq_len}/2)")


def micro_batch_domain(knobs: Knobs, max_gb: int) -> np.ndarray:
    if knobs.micro_batch:
        return np.asarray(knobs.micro_batch, dtype=np.int64)
    top = min(knobs.max_micro_batch, max_gb)
    return 2 ** np.arange(0, int(np.log2(top)) + 1, dtype=np.int64)


def vpp_domain(knobs: Knobs, num_layers: int) -> np.ndarray:
    if knobs.vpp:
        return np.asarray(knobs.vpp, dtype=np.int64)
    return np.arange(1, min(knobs.max_vpp or num_layers, num_layers) + 1, dtype=np.int64)


#: Default expert-parallel domain: ``num_experts / ep`` local experts at most this many. Fewer
#: GPUs per expert group multiply the expert weights, gradients and optimizer states per GPU;
#: 32 local experts keeps ep = 1 for Mixtral (8) and GPT-OSS-20B (32), and ep >= 4 for Qwen3's
#: 128 and ep >= 8 for DeepSeek-V3's 256 experts (the published runs use ep 8-64 for those).
MAX_LOCAL_EXPERTS = 32


def expert_domain(model: ModelSpec, cluster: ClusterSpec, knobs: Knobs):
    """(ep, etp) candidate pairs, before the per-layout rule of :func:`expert_pair_ok`.

    Dense model: (1, 1) only. MoE: ``ep`` the powers of two dividing ``num_experts`` with at most
    :data:`MAX_LOCAL_EXPERTS` experts per rank (or the user's ``ep``); ``etp`` 1 (the
    Megatron-MoE ModelZoo's and Megatron-Bridge's setting for fine-grained experts) and, for
    experts at least as wide as the hidden size (Mixtral, GPT-OSS), also equal to the row's
    ``tp`` (Megatron-LM's default when ``--expert-tensor-parallel-size`` is not given), dividing
    the expert width; or the user's ``etp``. Splitting an expert narrower than the hidden size
    only shrinks GEMMs that are already small (DeepSeek-V3's 2048 of 7168, Qwen3's 768-1536): the
    default leaves it out, which halves DeepSeek-V3's space (a front measured unchanged).
    The user's lists are checked against the model here.
    """
    one = np.ones(1, dtype=np.int64)
    if not model.is_moe:  # a dense model keeps ep = etp = 1 of the user's values
        for name, vals in (("ep", knobs.ep), ("etp", knobs.etp)):
            v = np.asarray(vals or [], dtype=np.int64)
            given_degrees(name, v, v == 1, vals,
                          lambda name=name: f"{model.name} is a dense model (no experts); {name} must be 1")
        return one, one
    E, fe = model.num_experts, model.expert_ffn_hidden_size
    if knobs.ep:  # the user's values: those dividing the experts (as --tp's those dividing the heads)
        ep = np.asarray(knobs.ep, dtype=np.int64)
        ep = given_degrees("ep", ep, E % ep == 0, knobs.ep,
                           lambda: f"none of {list(knobs.ep)} divides num_experts {E} of {model.name}; use "
                                   f"divisors: {', '.join(map(str, _divisors(E).tolist()))}")
    else:
        ep = 2 ** np.arange(0, int(np.log2(E)) + 1, dtype=np.int64)
        ep = ep[(E % ep == 0) & (E // ep <= MAX_LOCAL_EXPERTS)]
        ep = ep if ep.size else np.asarray([E], dtype=np.int64)
    dom = max(cluster.node.intra_domain_size, 1)  # etp groups offered and hinted: up to one NVLink domain
    if knobs.etp:
        etp = np.asarray(knobs.etp, dtype=np.int64)
        etp = given_degrees("etp", etp, fe % etp == 0, knobs.etp,
                            lambda: f"none of {list(knobs.etp)} divides expert_ffn_hidden_size {fe} of "
                                    f"{model.name}; use divisors: "
                                    f"{', '.join(map(str, [d for d in _divisors(fe).tolist() if d <= dom]))}")
    else:
        etp = 2 ** np.arange(0, int(np.log2(dom)) + 1, dtype=np.int64)
        etp = etp[fe % etp == 0]
        if fe < model.hidden_size:  # fine-grained experts: etp 1 only (see the docstring)
            etp = etp[:1]
        etp = -etp  # negative: "equal to the row's tp" (or 1), see expert_pair_ok
    ep_g, etp_g = (a.ravel() for a in np.meshgrid(ep, etp, indexing="ij"))
    return ep_g, etp_g


def expert_pair_ok(EP, ETP, group, tp):
    """Mask rows x pairs: ``etp * ep`` divides the stage's ``tp*cp*dp`` GPUs; a default-domain
    ``etp`` (stored negated) is kept when it is 1 or equal to the row's ``tp``."""
    etp = np.abs(ETP)[None, :]
    ok = group[:, None] % (EP[None, :] * etp) == 0
    default = ETP[None, :] < 0
    return ok & (~default | (etp == 1) | (etp == tp[:, None]))


# ------------------------------------------------------------------ enumeration
def _pairs(ok: np.ndarray):
    """Row and column indices of the true cells of a 2-D mask, row-major (rows outer)."""
    r, c = np.nonzero(ok)
    return r, c


#: Cells of a candidate mask built at once: the crosses below are made in row chunks of at
#: most this many cells, so memory stays bounded (~tens of MB) whatever the domains.
CHUNK_CELLS = 1 << 21


def _too_many(max_candidates: int, n: int | None = None) -> InputError:
    count = f"{n:,} candidates exceed" if n is not None else "the candidates (at this stage already) exceed"
    return InputError(
        f"search: {count} max_candidates {max_candidates:,}; bound some knobs "
        "(--tp, --pp, --micro-batch ...) or fewer GPU counts"
    )


def _pairs_chunked(n_rows: int, n_cols: int, mask, max_candidates: int):
    """:func:`_pairs` of the ``n_rows x n_cols`` mask ``mask(rows_slice)``, built in row chunks
    (same row-major order); :class:`InputError` as soon as more than ``max_candidates`` cells are
    true -- every later stage keeps at least one row per row of this one in the default domains,
    so the space would exceed the bound anyway."""
    step = max(1, CHUNK_CELLS // max(n_cols, 1))
    rs, cs, total = [], [], 0
    for a in range(0, n_rows, step):
        r, c = np.nonzero(mask(slice(a, min(a + step, n_rows))))
        total += len(r)
        if total > max_candidates:
            raise _too_many(max_candidates)
        rs.append(r + a)
        cs.append(c)
    if not rs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(rs), np.concatenate(cs)


def _accounted(p, first, mid, last, num_layers) -> bool:
    """Is this uneven split the one Megatron's ``--account-for-embedding/loss-in-pipeline-split``
    make (first and last one layer short of the middle, ``(l + 2) / pp`` slots per stage)? Such a
    split allows ``pp * vpp`` up to ``l + 2`` (Plan.check_against)."""
    return p > 2 and first == last == mid - 1 and p * mid == num_layers + 2


def _vpp_table(P: np.ndarray, M: np.ndarray, V: np.ndarray, num_layers: int):
    """Per pipeline split ``j`` the virtual-stage values it allows whatever the micro-batches:
    ``1`` (when in ``V``) and the ``v > 1`` of ``V`` dividing the middle-stage layers with
    ``pp * v <= l``, in ``V``'s order; as a padded table (-1 = none) and its width. The per-row
    rule "micro-batches a multiple of pp" is applied later, on this table's few columns, so the
    cross is rows x (divisors of a stage) rather than rows x every value of ``V``."""
    rows = []
    for p, mid in zip(P.tolist(), M.tolist()):
        slots = num_layers + 2 if _accounted(p, mid - 1, mid, mid - 1, num_layers) else num_layers
        hi = np.searchsorted(V, slots // p, side="right") if p > 1 else np.searchsorted(V, 1, side="right")
        cand = V[:hi]
        if p == 2 and num_layers % 2:  # the balanced split of odd layers: no interleaving (Plan rule)
            rows.append(cand[cand == 1])
            continue
        rows.append(cand[(cand == 1) | ((p > 1) & (mid % cand == 0))])
    width = max([len(r) for r in rows] + [1])
    table = np.full((len(rows), width), -1, dtype=np.int64)
    for j, r in enumerate(rows):
        table[j, : len(r)] = r
    return table


def _recompute_choices(knobs: Knobs):
    """(kind, k) choices; a negative k is a fraction of the largest stage."""
    choices: list[tuple[int, float]] = []
    for r in knobs.recompute:
        if r == "partial":
            if knobs.recompute_layers:
                choices += [(RC_PARTIAL, float(k)) for k in knobs.recompute_layers]
            else:
                choices += [(RC_PARTIAL, -f) for f in PARTIAL_FRACTIONS]
        else:
            choices.append(({"none": RC_NONE, "selective": RC_SELECTIVE, "full": RC_FULL}[r], 0.0))
    return choices


def _recompute_table(choices, F, M, La, num_layers):
    """Per pipeline split (rows) and recompute choice (columns): is it a distinct valid plan,
    and its ``rc_layers`` column value."""
    L = np.maximum(np.maximum(F, M), La)[:, None]
    kind = np.array([c[0] for c in choices], dtype=np.int64)[None, :]
    spec = np.array([c[1] for c in choices])[None, :]
    k = np.where(spec < 0, np.ceil(-spec * L), spec).astype(np.int64)
    partial = kind == RC_PARTIAL
    ok = ~partial | ((k >= 1) & (k < L))
    # two partial choices with the same k are the same plan: keep the first (only the default
    # fractions of a stage can coincide; the user's recompute_layers are distinct values)
    fractions = [j for j, c in enumerate(choices) if c[0] == RC_PARTIAL and c[1] < 0]
    for j in fractions:
        for i in fractions:
            if i < j:
                ok[:, j] &= k[:, i] != k[:, j]
    rc_layers = np.where(kind == RC_FULL, num_layers, np.where(partial, k, 0))
    return ok, np.broadcast_to(rc_layers, ok.shape), np.broadcast_to(kind, ok.shape)


def _tolerant_layouts(gb: int, tol: float, counts, t0, c0, pi0, prod0, max_candidates: int):
    """Layouts of :func:`enumerate_space` step 1 with a batch tolerance: (tp, cp, pp) triples
    crossed with the GPU counts they divide; dp = count / (tp cp pp); the batch is the multiple
    of dp nearest ``gb`` (ties: the larger), kept when within ``gb x (1 +- tol)``."""
    lo = max(1, int(np.ceil(gb * (1.0 - tol) - 1e-9)))
    hi = int(np.floor(gb * (1.0 + tol) + 1e-9))
    r, j = _pairs_chunked(len(prod0), len(counts), lambda rows: counts[None, :] % prod0[rows, None] == 0,
                          max_candidates)
    d = counts[j] // prod0[r]
    b = np.maximum(1, np.floor(gb / d + 0.5).astype(np.int64)) * d
    ok = (b >= lo) & (b <= hi)
    r, d, b = r[ok], d[ok], b[ok]
    return b, t0[r], c0[r], pi0[r], d, prod0[r] * d


# ------------------------------------------------------------------ the recipes' knobs (issue 23)
#: Knobs whose preferred value is never slower, on a row where it can run, and changes no memory term, so a
#: search resolves each per row instead of crossing its values (prune before pricing): the preferred value where
#: the row can run it, else the other. Each claim is the cost model's own formula:
#: - moe_overlap: hides a share of the dispatch behind compute (dispatch.ep_layer_comm: hidden >= 0);
#: - overlap_tp_comm: hides a share of the TP communication (step._layer_comm: tp_keep <= 1);
#: - moe_grouped_gemm fused: one kernel call instead of one per local expert, same roofline
#:   (experts._grouped_gemm_s: calls 1 vs groups);
#: - fp8_attention: the attention rate times compute.fp8_sdpa_speedup, preferred where that is > 1 (the
#:   rank's sequence, seq/cp, from ~1K tokens on Blackwell).
#: - moe_dispatcher flex: sends each token once per rank (and node) it reaches, not once per expert, pads in its
#:   dispatch (experts.fp8_pad_bytes 0) and needs no second permutation (experts.sort_chunks_bytes 0): never more
#:   MoE-layer work; its exchange (dispatch.exchange_s) forwards inside the remote nodes, so it is preferred
#:   where that exchange is not the longer one (every row of DeepSeek-V3, Qwen3, GPT-OSS and Mixtral on A100,
#:   H100, B300 and GB200 when this was written: flex never slower on 200,000 rows priced both ways), and the
#:   exposed exchange grows with the exchange (dispatch.ep_layer_comm).
#: memory.py reads none of them. The pipeline schedule (DualPipe holds two stages' weights) is crossed as given.
RESOLVED_KNOBS = {"moe_overlap": (True, False), "overlap_tp_comm": (True, False),
                  "moe_grouped_gemm": ("fused", "loop"), "fp8_attention": (True, False),
                  "moe_dispatcher": ("flex", "alltoall")}


def recipe_knobs(knobs: Knobs, given, framework: str | None, cluster: ClusterSpec,
                 model: ModelSpec) -> tuple[Knobs, dict[str, tuple]]:
    """The search's knobs on ``cluster`` with the recipe knobs its user left unset (not in ``given``, the
    knob names the request set) at what the framework's current performance recipes search there
    (:func:`planner.frameworks.recipes.searched_values`, per precision asked: the union), and the knobs to
    resolve per row (:data:`RESOLVED_KNOBS`: ``{knob: (preferred, fallback)}``) for :func:`enumerate_space`'s
    ``resolve``. A knob the user gives pins it; a knob with one searched value is set to it."""
    from plan_search.planner.frameworks.recipes import RECIPE_KNOBS, searched_values

    precisions = knob_values(knobs, "precision")
    spans: dict[str, list] = {}
    for prec in precisions:
        for k, vals in searched_values(framework, cluster, prec, model.is_moe).items():
            spans.setdefault(k, [])
            spans[k] += [v for v in vals if v not in spans[k]]
    update, resolve = {}, {}
    for k in RECIPE_KNOBS:
        if k in given or k not in spans:
            continue
        vals = spans[k]
        if k == "pp_schedule" and not model.is_moe:
            vals = vals[:1]  # DualPipe's gain is the EP exchange it hides under the paired micro-batch: MoE only
        pref = RESOLVED_KNOBS.get(k)
        if pref and set(vals) == set(pref):
            update[k] = [pref[1]]  # the enumeration's value; the row's is resolved (pref[0] where it runs)
            resolve[k] = pref
        else:
            update[k] = list(vals)
    return knobs.model_copy(update=update), resolve


def _row_plan(model, x: PlanArrays, i: int, rc_kind: int, uneven: bool, combo: dict) -> Plan:
    """Row ``i`` of ``x`` as a Plan (a :class:`Space` row's rebuild, before the Space exists)."""
    sp = Space(model, None, x.take(np.array([i])), np.array([rc_kind]), np.array([uneven]), (combo,),
               np.zeros(1, dtype=np.int64))
    return sp.plan(0)


#: The enumerated columns dispatch.exchange_s reads (its tokens per GPU: mb, seq, cp, tp; the expert grid: ep, etp);
#: the others it reads (precision, routing, imbalance, padding) are one value per combination. tests/test_recipes.py
#: checks the preference grouped so equals the preference priced row by row.
EXCHANGE_COLUMNS = ("ep", "etp", "tp", "cp", "mb", "seq")

#: Per resolved knob, the row fields its framework rules read, coded small (one np.unique over an int per row).
_RULE_FIELDS = {
    "moe_overlap": lambda x, rc: ((np.minimum(x.ep, 2) * 3 + np.minimum(x.pp, 2)) * 3 + np.minimum(x.vpp, 2)) * 4 + rc,
    "moe_grouped_gemm": lambda x, rc: np.minimum(x.etp, 2),
    "overlap_tp_comm": lambda x, rc: np.minimum(x.tp, 2) * 2 + x.sp.astype(np.int64),
}


def _preferred_rows(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, kind8, uneven, combo: dict, knob: str,
                    values: tuple, framework: str | None) -> np.ndarray:
    """Rows of ``x`` (built with ``combo``, whose ``knob`` is the fallback ``values[1]``) on which the preferred
    ``values[0]`` can run and is worth it: a valid Plan combination, and under ``framework`` no rule broken that the
    fallback does not break (the framework's own rules, planner.frameworks.rules.check, on one row of each group of
    rows those rules cannot tell apart: the expert, tensor and pipeline degrees' kinds, the recomputation)."""
    n = len(x)
    want = {**combo, knob: values[0]}
    try:
        valid_combinations([want])
    except InputError:
        return np.zeros(n, dtype=bool)
    ok = np.ones(n, dtype=bool)  # and only where it changes something (a tie keeps the fallback, the Plan's)
    if knob == "moe_overlap":
        ok &= (x.ep > 1) & bool(model.is_moe)
    elif knob == "overlap_tp_comm":
        ok &= x.tp > 1
    elif knob == "moe_grouped_gemm":
        ok &= bool(model.is_moe)
    elif knob == "moe_dispatcher":
        from plan_search.planner.costmodel.dispatch import exchange_s
        from plan_search.planner.costmodel.plan import DISPATCHER_CODES as _codes

        ok &= (x.ep > 1) & bool(model.is_moe)
        if ok.any():  # priced once per group of rows with the same exchange (:data:`EXCHANGE_COLUMNS`)
            from plan_search.planner.costmodel.arrays import group_rows

            rep, inv = group_rows([getattr(x, c) for c in EXCHANGE_COLUMNS], n)
            one = x.take(rep)
            with_disp = lambda v: PlanArrays(**{f.name: (np.full(len(rep), _codes[v]) if f.name == "moe_disp"  # noqa: E731
                                                         else getattr(one, f.name)) for f in dc_fields(PlanArrays)})
            better = exchange_s(model, cluster, with_disp(values[0])) <= exchange_s(model, cluster, with_disp(values[1]))
            ok &= better[inv.ravel()]
    elif knob == "fp8_attention":
        from types import SimpleNamespace

        on = SimpleNamespace(fp8_attn=np.ones(n, dtype=bool), seq=x.seq, cp=x.cp)
        ok &= np.asarray(compute.fp8_sdpa_speedup(cluster, on)) > 1.0
    if framework is None or not ok.any():
        return ok
    from plan_search.planner.frameworks.rules import check

    # the fields the rules on this knob read (planner.frameworks.rules: the EP overlap's ep, recomputation and
    # virtual stages; the fused MLP's etp; TP overlap's tp and sequence parallelism), as one small code per row:
    # every other rule reads the same on both values, and only the rules the preferred value adds count. The
    # framework check of the search's answer (front.restrict_to_framework) checks every field of each plan.
    sig = _RULE_FIELDS.get(knob, lambda x, k: np.zeros(len(x), dtype=np.int64))(x, np.asarray(kind8, dtype=np.int64))
    keys, first, inverse = np.unique(sig, return_index=True, return_inverse=True)
    good = np.zeros(len(keys), dtype=bool)
    for j, i in enumerate(first.tolist()):
        base = _row_plan(model, x, i, int(kind8[i]), bool(uneven[i]), combo)
        try:
            pref = base.model_copy(update={knob: values[0]})
            Plan(**pref.model_dump())
        except (ValueError, InputError):
            continue
        had = {v.rule.id for v in check(framework, base, model, cluster)}
        good[j] = {v.rule.id for v in check(framework, pref, model, cluster)} <= had
    return ok & good[inverse.ravel()]


def enumerate_space(
    model: ModelSpec,
    cluster: ClusterSpec,
    gpu_counts: Sequence[int],
    global_batches: Sequence[int],
    seq_len: int,
    knobs: Knobs | None = None,
    max_candidates: int = 5_000_000,
    batch_tolerance: float = 0.0,
    resolve: dict[str, tuple] | None = None,
    framework: str | None = None,
    recipes: bool = False,
) -> Space:
    """Every valid candidate (see the module docstring) as one :class:`Space`.

    ``batch_tolerance`` > 0: each global batch is a target; every layout takes the batch nearest
    it that its dp divides (ties: the larger), if that batch is within ``target x (1 +-
    tolerance)``, instead of only the dp that divide the target exactly.

    ``resolve`` (:func:`recipe_knobs`): ``{knob: (preferred, fallback)}``: each row takes the preferred value
    where it can run it (under ``framework``'s rules, None: the Plan's) and the fallback elsewhere, one row per
    layout rather than one per value (the values' combinations, :class:`Space` ``combos``, say which).
    ``recipes``: the recipe knobs the knobs' user did not give (``Knobs._user_given``) take what ``framework``'s
    recipes search on ``cluster`` (:func:`recipe_knobs`, which also gives ``resolve``): what a search enumerates."""
    knobs = knobs or Knobs()
    if recipes:
        knobs, resolve = recipe_knobs(knobs, knobs._user_given, framework, cluster, model)
    combos = valid_combinations(knob_combinations(knobs))
    for c in combos:
        if c.get("precision"):
            compute.check_precision(cluster, c["precision"])  # issue 12: names the GPUs that have it
    if any(c.get("moe_pad_to_capacity") for c in combos) and (problem := pad_capacity_problem(model)):
        raise InputError(problem)
    for imb in getattr(knobs, "moe_imbalance", None) or []:  # given: above E/k no layout holds it
        if problem := imbalance_bound_problem(model, imb):
            raise InputError(problem)
    l = model.num_layers
    if any((b or 0) > l for b in (knobs.bf16_layers or [])):  # Plan.check_against's rule, as plan-estimate
        raise InputError(f"bf16_layers: {max(knobs.bf16_layers)} exceeds num_layers {l} of {model.name}")
    counts = np.unique(np.asarray(list(gpu_counts), dtype=np.int64))
    T = tp_domain(model, cluster, knobs)
    C = cp_domain(seq_len, knobs)
    P, F, M, La, U = pp_domain(model, knobs)
    MB = micro_batch_domain(knobs, int(max(global_batches) * (1 + batch_tolerance)))
    V = vpp_domain(knobs, l)

    # 1. layouts (gb, tp, cp, pp, dp) whose product is a requested GPU count: (tp, cp, pp)
    # triples (those whose product can still reach a count) crossed with the divisors of gb
    top = int(counts.max()) if len(counts) else 0
    t0, c0, pi0 = (a.ravel() for a in np.meshgrid(T, C, np.arange(len(P)), indexing="ij"))
    prod0 = t0 * c0 * P[pi0]
    live = prod0 <= top  # also keeps prod * d below the int64 range (top <= 10**7, d <= 10**8)
    t0, c0, pi0, prod0 = t0[live], c0[live], pi0[live], prod0[live]
    parts = []
    for gb in sorted(set(int(g) for g in global_batches)):
        if batch_tolerance > 0:
            parts.append(_tolerant_layouts(gb, batch_tolerance, counts, t0, c0, pi0, prod0, max_candidates))
            continue
        D = _divisors(gb)
        r1, j1 = _pairs_chunked(len(prod0), len(D), lambda rows: np.isin(prod0[rows, None] * D[None, :], counts),
                                max_candidates)
        d = D[j1]
        parts.append((np.full(len(r1), gb, dtype=np.int64), t0[r1], c0[r1], pi0[r1], d, prod0[r1] * d))
    gb1, tp1, cp1, pi1, dp1, n1 = (np.concatenate([p[j] for p in parts]) for j in range(6))
    # 1b. expert layouts (MoE): (ep, etp) pairs whose product divides the stage's tp*cp*dp GPUs
    EP, ETP = expert_domain(model, cluster, knobs)
    if model.is_moe:
        group1 = tp1 * cp1 * dp1
        re, je = _pairs_chunked(len(gb1), len(EP), lambda rows: expert_pair_ok(EP, ETP, group1[rows], tp1[rows]),
                                max_candidates)
        gb1, tp1, cp1, pi1, dp1, n1 = (a[re] for a in (gb1, tp1, cp1, pi1, dp1, n1))
        ep1, etp1 = EP[je], np.abs(ETP[je])
    else:  # dense: (1, 1) on every row, no cross
        ep1 = etp1 = np.ones(len(gb1), dtype=np.int64)
    # 2. micro-batch: dp * mb divides the global batch
    r2, j2 = _pairs_chunked(len(gb1), len(MB), lambda rows: gb1[rows, None] % (dp1[rows, None] * MB[None, :]) == 0,
                            max_candidates)
    mb2 = MB[j2]
    m2 = gb1[r2] // (dp1[r2] * mb2)
    pi2 = pi1[r2]
    # 3. virtual stages: 1, or v > 1 dividing the middle stage with pp*v <= l (the table) when
    # the micro-batches are a multiple of pp
    VT = _vpp_table(P, M, V, l)
    r3, j3 = _pairs_chunked(
        len(r2), VT.shape[1],
        lambda rows: (VT[pi2[rows]] == 1) | ((VT[pi2[rows]] > 1) & (m2[rows] % P[pi2[rows]] == 0)[:, None]),
        max_candidates)
    lay3 = r2[r3]  # layout row of each stage-3 row
    mb3, v3 = mb2[r3], VT[pi2[r3], j3]
    # 4-6. ZeRO x recomputation x sequence parallelism, masked together
    Z = np.asarray(knobs.zero, dtype=np.int64)
    choices = _recompute_choices(knobs)
    rc_ok, rc_layers_t, rc_kind_t = _recompute_table(choices, F, M, La, l)
    S = np.asarray(knobs.sequence_parallel, dtype=bool)
    zi, ri, si = (a.ravel() for a in np.meshgrid(np.arange(len(Z)), np.arange(len(choices)),
                                                 np.arange(len(S)), indexing="ij"))
    dp3, tp3, pi3 = dp1[lay3], tp1[lay3], pi1[lay3]
    # the three masks are independent: count the candidates before building their cross
    z_ok = (dp3[:, None] > 1) | (Z == Z.min())[None, :]  # one replica: ZeRO shards nothing
    s_ok = (tp3[:, None] > 1) | (np.arange(len(S)) == 0)[None, :]  # SP off by itself at tp 1: keep one
    n = int((z_ok.sum(1) * rc_ok.sum(1)[pi3] * s_ok.sum(1)).sum())
    if n > max_candidates:
        raise _too_many(max_candidates, n)
    if len(combos) * n > max_candidates:  # before the cross is built (issue 15: refused at once)
        raise _too_many(max_candidates, len(combos) * n)
    r, combo = _pairs_chunked(len(lay3), len(zi),
                              lambda rows: z_ok[rows][:, zi] & rc_ok[pi3[rows]][:, ri] & s_ok[rows][:, si],
                              max_candidates)
    lay = lay3[r]
    pi = pi1[lay]
    tp = tp1[lay]
    z, rci, spi = zi[combo], ri[combo], si[combo]
    kind = rc_kind_t[pi, rci]
    c64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    core = dict(
        num_gpus=c64(n1[lay]), tp=c64(tp), pp=c64(P[pi]), dp=c64(dp1[lay]), cp=c64(cp1[lay]),
        vpp=c64(v3[r]), zero=c64(Z[z]), mb=c64(mb3[r]), gb=c64(gb1[lay]),
        seq=constant_column(seq_len, n, np.int64), recompute=c64(np.minimum(kind, RC_FULL)),
        rc_layers=c64(rc_layers_t[pi, rci]), sp=S[spi] & (tp > 1),
        first=c64(F[pi]), mid=c64(M[pi]), last=c64(La[pi]), ep=c64(ep1[lay]), etp=c64(etp1[lay]),
    )
    kind8, uneven = kind.astype(np.int8), U[pi].astype(bool)
    blocks = []
    all_combos = list(combos)
    if resolve:  # every combination a resolved row may take, in a fixed order: the pieces of one search agree
        for c in combos:
            names = [k for k in resolve if c.get(k) == resolve[k][1]]
            for value in range(1, 1 << len(names)):
                r = {**c, **{k: resolve[k][0] for bit, k in enumerate(names) if value >> bit & 1}}
                if r not in all_combos:
                    all_combos.append(r)
    for ci, c in enumerate(combos):
        extra = combo_columns(c, l)
        x = PlanArrays(**core, **{k: constant_column(v, n) for k, v in extra.items()})
        keep = _combo_row_mask(c, x)
        idx = np.flatnonzero(keep) if not keep.all() else None
        block = (x if idx is None else _take_rows(x, idx), kind8 if idx is None else kind8[idx],
                 uneven if idx is None else uneven[idx], np.full(int(keep.sum()), ci, dtype=np.int64))
        if resolve and len(block[0]):
            blocks += _resolved_blocks(model, cluster, block, c, resolve, framework, all_combos, l)
        else:
            blocks.append(block)
    combos = tuple(all_combos)
    if len(blocks) == 1:
        x, k8, un, cidx = blocks[0]
    else:
        x = PlanArrays(**{f.name: concat_columns([getattr(b[0], f.name) for b in blocks]) for f in dc_fields(PlanArrays)})
        k8, un, cidx = (np.concatenate([b[j] for b in blocks]) for j in (1, 2, 3))
    return Space(model, cluster, x, k8, un, tuple(combos), cidx)


def _resolved_blocks(model, cluster, block, combo: dict, resolve: dict, framework, all_combos: list, num_layers: int):
    """``block`` (rows of one combination, the resolved knobs at their fallbacks) with each row's resolved knobs at
    the value :func:`_preferred_rows` gives it: the columns those knobs set, and the row's combination (listed up
    front in ``all_combos`` by :func:`enumerate_space`). One block, the rows in their order."""
    x, k8, un, _ = block
    n = len(x)
    code = np.zeros(n, dtype=np.int64)
    names = [k for k in resolve if combo.get(k) == resolve[k][1]]
    for bit, k in enumerate(names):
        code |= _preferred_rows(model, cluster, x, k8, un, combo, k, resolve[k], framework).astype(np.int64) << bit
    values = np.unique(code).tolist()
    if values == [0]:
        return [block]
    variants = [{**combo, **{k: resolve[k][0] for bit, k in enumerate(names) if v >> bit & 1}} for v in values]
    index = np.zeros(max(values) + 1, dtype=np.int64)
    index[values] = np.arange(len(values))
    slot = index[code]  # each row's variant
    cols = [combo_columns(c, num_layers) for c in variants]
    out = {}
    for f in dc_fields(PlanArrays):
        if f.name not in cols[0]:
            out[f.name] = getattr(x, f.name)
        elif all(np.array_equal(c[f.name], cols[0][f.name]) for c in cols[1:]):
            out[f.name] = constant_column(cols[0][f.name], n)
        else:
            out[f.name] = np.asarray([c[f.name] for c in cols])[slot]
    cidx = np.asarray([all_combos.index(c) for c in variants], dtype=np.int64)[slot]
    return [(PlanArrays(**out), k8, un, cidx)]
