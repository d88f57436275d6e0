"""The search space's oracle for the tests: every plan of a knob domain, found by constructing
Plan objects over all knob values (Plan's validation is the judge; the loops skip only what its
arithmetic rejects anyway). tests/test_search.py checks the default domains with it,
tests/test_properties.py random ones."""

from __future__ import annotations

import math
from itertools import product

from plan_search.models.io import InputError
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.search.request import MIN_CP_TOKENS, Knobs
from plan_search.planner.search.space import PARTIAL_FRACTIONS


def splits_of(model, pp, knobs):
    """The pipeline splits the space offers for ``pp`` (as Plan keywords), written out by hand: even when
    pp divides the layers; else middle stages of ceil(l/pp) layers and the ends sharing the rest --
    equally when it is even (issue 12), one layer apart either way round when it is odd, or, for a model
    with multi-token prediction, the last stage alone short (Megatron-Bridge's DeepSeek-V3 layouts; issue 13);
    end stages of >= 2 layers and half a middle one (the last counting its MTP depths), >= 1 with pp given."""
    l = model.num_layers
    if pp <= 2 or l % pp == 0:
        return [{}]
    mid = -(-l // pp)
    edge = l - (pp - 2) * mid
    need = max(2, -(-mid // 2)) if not knobs.pp else 1
    out = []
    if edge % 2 == 0 and (edge // 2 >= need if not knobs.pp else edge > 1):
        split = dict(first_stage_layers=edge // 2, last_stage_layers=edge // 2)
        if edge // 2 == mid - 1 and pp * mid == l + 2:  # the split Megatron's embedding/loss accounting makes
            split = dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
        out.append(split)
    last = edge - mid
    if model.mtp_num_layers and last >= 1 and last + model.mtp_num_layers >= need:
        out.append(dict(first_stage_layers=mid, last_stage_layers=last))
    elif edge % 2 and edge // 2 >= need:
        out += [dict(first_stage_layers=edge // 2 + 1, last_stage_layers=edge // 2),
                dict(first_stage_layers=edge // 2, last_stage_layers=edge // 2 + 1)]
    return [dict(t) for t in {tuple(sorted(d.items())) for d in out}]


def brute_force(model, cluster, counts, gb, seq, knobs: Knobs) -> set:
    """Every plan of ``knobs``' domains, found by constructing Plan objects over all knob values."""
    l = model.num_layers
    dom = cluster.node.intra_domain_size
    out = set()
    cps = [c for c in (1, 2, 4, 8) if c <= max(1, seq // MIN_CP_TOKENS)]
    for n, tp, pp, cp in product(counts, range(1, 17), range(1, l + 1), cps):
        if n % (tp * pp * cp) or (dom % tp and not (knobs.allow_cross_node_tp and tp % dom == 0)):
            continue
        if cp > 1 and seq % (2 * cp):
            continue
        dp = n // (tp * pp * cp)
        splits = splits_of(model, pp, knobs)
        for split in splits:
            mbs = [m for m in (1, 2, 4, 8) if m <= knobs.max_micro_batch]
            for mb, vpp in product(mbs, range(1, min(knobs.max_vpp or l + 2, l + 2) + 1)):
                if gb % (dp * mb):
                    continue
                for zero in ([z for z in knobs.zero] if dp > 1 else [min(knobs.zero)]):
                    base = dict(num_gpus=n, tp=tp, pp=pp, cp=cp, vpp=vpp, micro_batch=mb, global_batch=gb, seq_len=seq,
                                zero=zero, **split)
                    try:
                        probe = Plan(**base, recompute="none")
                        probe.check_against(model)
                    except (ValueError, InputError):
                        continue
                    f, mid, la = probe.stage_layers(l)
                    L = max(f, mid, la)
                    variants = []
                    for r in knobs.recompute:
                        if r == "partial":
                            ks = []
                            for frac in PARTIAL_FRACTIONS:
                                k = math.ceil(frac * L)
                                if 1 <= k < L and k not in ks:
                                    ks.append(k)
                            variants += [dict(recompute="full", recompute_layers=k) for k in ks]
                        else:
                            variants.append(dict(recompute=r))
                    for sp_on in knobs.sequence_parallel:
                        if not sp_on and tp == 1 and True in knobs.sequence_parallel:
                            continue  # the same plan as with SP on
                        for v in variants:
                            p = Plan(**base, **v, sequence_parallel=sp_on)
                            p.check_against(model)
                            out.add(p)
    return out
