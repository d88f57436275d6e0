"""The search's shared per-layout terms (issue 13, speed) give the figures of pricing every candidate
on its own, bit for bit: evaluate.LayoutTerms prices memory.stage_layout_terms and step.layout_terms
once per group of candidates that differ only in their data-parallel degree (arrays.LAYOUT_FREE),
across the pieces of a space, and gathers them back. Checked on a dense and a MoE model (with MLA and
MTP: DeepSeek-V3's structure, and dualpipe), on whole spaces of several GPU counts: every memory
figure and every step-time figure, and the whole search result with sharing on and off."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import evaluate as ev
from plan_search.planner.costmodel import memory, step
from plan_search.planner.costmodel.arrays import LAYOUT_FREE
from plan_search.planner.search.front import search
from plan_search.planner.search.request import Knobs
from plan_search.planner.search.space import enumerate_space

CASES = {
    "dense": ("llama3.1-8b", "a100-40gb", [8, 16, 32, 64], 256, {}),
    "moe": ("deepseek-v3", "h100-sxm", [256, 512, 1024], 4096, {"pp_schedule": ["1f1b", "dualpipe"]}),
}


def _flat(d: dict, pre: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{pre}{k}."))
        else:
            out[f"{pre}{k}"] = np.asarray(v)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_shared_terms_equal_the_direct_path(case):
    name, gpu, counts, gb, knobs = CASES[case]
    model, cluster = get_model(name), get_cluster(gpu)
    # two pieces, as the search enumerates GPU counts: the second's layouts recur from the first's
    pieces = [enumerate_space(model, cluster, c, [gb], 4096, Knobs(**knobs)).x for c in (counts[:2], counts[2:])]
    shared = ev.LayoutTerms(model, cluster)
    groups = 0
    for x in pieces:
        g = shared.add(x)
        groups = len(shared.xu)
        rows = np.arange(0, len(x), 3)  # a subset, as the search times the rows that fit
        xs = x.take(rows)
        direct_mem = memory.peak_memory(model, cluster, xs)
        via_mem = memory.peak_memory(model, cluster, xs, _terms=shared.memory(g[rows]))
        direct_st, via_st = _flat(step.step_time(model, cluster, xs)), \
            _flat(step.step_time(model, cluster, xs, shared.step(g[rows])))
        for k in direct_mem:
            assert np.array_equal(direct_mem[k], via_mem[k]), k
        total = memory.peak_memory(model, cluster, xs, True, shared.memory(g[rows]))["total"]
        assert np.array_equal(total, direct_mem["total"])
        assert direct_st.keys() == via_st.keys()
        for k in direct_st:
            assert np.array_equal(direct_st[k], via_st[k]), k
    n = sum(len(x) for x in pieces)
    assert groups < 0.6 * n  # the sharing is real: groups of several candidates
    if case == "moe":  # the figures vary with dp inside a group: the per-row part is not shared
        assert np.unique(pieces[0].dp).size > 1


@pytest.mark.parametrize("req", [dict(model="deepseek-v3", gpu=["h100-sxm"], max_gpus=1024),
                                 dict(model="llama3.1-8b", gpu=["a100-40gb"], max_gpus=128),
                                 # NVL72: the GPUs per NVLink domain depend on the count (64, 72): in the key
                                 dict(model="mixtral-8x7b", gpu=["gb200-nvl72"], gpus=[64, 144, 288])])
def test_search_result_is_the_same_with_and_without_sharing(req, monkeypatch):
    def answer():
        doc = json.loads(search(**req).model_dump_json())
        for k in ("enumerate_s", "evaluate_s", "solve_s", "total_s"):
            doc["stats"].pop(k)
        return doc
    monkeypatch.setattr(ev, "SHARE_TERMS", True)
    on = answer()
    monkeypatch.setattr(ev, "SHARE_TERMS", False)
    assert answer() == on


@pytest.mark.parametrize("case", sorted(CASES))
def test_layout_terms_read_none_of_the_layout_free_columns(case):
    """Changing the columns of arrays.LAYOUT_FREE (shuffled across the candidates) leaves the shared
    terms unchanged: memory's whatever they become, step's with the pipeline-send key kept
    (:func:`step.layout_key_extra`). A term that starts reading one of them fails here."""
    name, gpu, counts, gb, knobs = CASES[case]
    model, cluster = get_model(name), get_cluster(gpu)
    x = enumerate_space(model, cluster, counts, [gb], 4096, Knobs(**knobs)).x
    rng = np.random.default_rng(0)
    cols = {f: np.ascontiguousarray(np.broadcast_to(getattr(x, f), len(x))) for f in LAYOUT_FREE}
    shuffled = dataclasses.replace(x, **{f: v[rng.permutation(len(x))] for f, v in cols.items()})
    for st in memory.STAGES:
        a = _flat(memory.stage_layout_terms(model, cluster, x, st))
        b = _flat(memory.stage_layout_terms(model, cluster, shuffled, st))
        assert all(np.array_equal(a[k], b[k]) for k in a), st
    # step: every LAYOUT_FREE column shuffled but dp and the GPU count (the pipeline-send key reads them)
    keep = {"dp", "num_gpus"}
    shuffled = dataclasses.replace(x, **{f: v[rng.permutation(len(x))] for f, v in cols.items() if f not in keep})
    a, b = _flat(step.layout_terms(model, cluster, x)), _flat(step.layout_terms(model, cluster, shuffled))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    changed = [f for f in LAYOUT_FREE if np.unique(cols[f]).size > 1]
    assert {"dp", "zero"} <= set(changed)  # the columns do vary in this space
