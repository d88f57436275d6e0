"""What the pipeline's end stages hold and how the layers are split (issues 12 and 13).

- DeepSeek-V3's multi-token-prediction depth sits on the last stage (Megatron-Core
  ``mtp_on_this_rank``): its weights (with that stage's copy of the input embedding), its activations
  (alive with the loss) and, under full recomputation, its re-run forward, checked against the
  formulas through ``plan_search.estimate`` by comparing the model with and without MTP.
- Llama 3.1 405B as Meta/Megatron run it: 126 layers at pp 16 with 8 virtual stages, the embedding
  and the loss counted as a layer each (7|8x14|7), in plan-estimate, plan-search and the emitted
  Megatron arguments; balanced uneven splits when pp does not divide the layers.
- The search's lighter end stages.
"""

from __future__ import annotations

import pytest

import plan_search as ps
from plan_search.models import counting
from plan_search.models.catalog import get_model
from plan_search.models.spec import ModelSpec

GIB = 2.0**30
DSV3 = get_model("deepseek-v3")


def _no_mtp(m: ModelSpec) -> ModelSpec:
    d = m.model_dump()
    d.update(mtp_num_layers=0, name=m.name + "-no-mtp")
    return ModelSpec.model_validate(d)


def _mtp_expected(m: ModelSpec, tp: int, ep: int, tokens: int, pp: int):
    """(weight bytes, activation bytes) one MTP depth adds on the last stage, from the counting alone:
    bf16 weights of its non-expert part and the embedding copy over tp, its routed experts over ep;
    activations with every layer recomputed (sequence parallel): the block's input (2h) and the
    depth's own tensors (norm inputs 4h, projection input 2h x 2 B, final-norm and head inputs 4h, all
    /tp) plus the fp32 logits 4V/tp and 8-byte token ids."""
    h, V = m.hidden_size, m.vocab_size
    routed = m.num_experts * counting.mlp_params(m, m.expert_ffn_hidden_size)
    emb = V * h if pp > 1 else 0
    weights = 2.0 * ((counting.mtp_params(m) - routed + emb) / tp + routed / ep)
    acts = tokens * 2 * h / tp + tokens * ((4 * h + 4 * h + 4 * h) / tp + 4 * V / tp + 8)
    return weights, acts


@pytest.mark.parametrize("plan", [
    # the last stage the fullest (18 layers against 13|15|15): with and without MTP it is the worst stage
    dict(num_gpus=256, tp=2, pp=4, ep=32, global_batch=256, seq_len=4096, recompute="full",
         first_stage_layers=13, last_stage_layers=18),
    dict(num_gpus=256, tp=8, pp=1, ep=32, global_batch=256, seq_len=4096, recompute="full"),
])
def test_mtp_weights_and_activations_on_the_last_stage(plan):
    with_mtp = ps.estimate(DSV3, "h100", **plan)
    without = ps.estimate(_no_mtp(DSV3), "h100", **plan)
    assert with_mtp.memory.worst_stage == without.memory.worst_stage == ("last" if plan["pp"] > 1 else "only")
    w, a = _mtp_expected(DSV3, plan["tp"], plan["ep"], plan["seq_len"], plan["pp"])
    assert (with_mtp.memory.weights_gib - without.memory.weights_gib) * GIB == pytest.approx(w, rel=1e-9)
    assert (with_mtp.memory.activations_gib - without.memory.activations_gib) * GIB == pytest.approx(a, rel=1e-9)
    # DeepSeek-V3: 11.7B MTP parameters, of them 11.3B routed experts; the embedding copy is 0.93B
    assert counting.mtp_params(DSV3) / 1e9 == pytest.approx(11.7, abs=0.1)
    # its FLOPs are in the step (one more MoE block, projection and head on the last stage) and, under
    # full recomputation of every layer, its block's forward is redone
    assert with_mtp.step_time_s > without.step_time_s
    assert with_mtp.time.recompute_s > without.time.recompute_s


def test_mtp_block_not_recomputed_with_partial_recomputation():
    """Megatron skips the MTP layer's recomputation under --recompute-method block (partial)."""
    plan = dict(num_gpus=256, tp=2, pp=4, ep=32, global_batch=256, seq_len=4096, recompute="full",
                recompute_layers=15, first_stage_layers=13, last_stage_layers=18)
    with_mtp = ps.estimate(DSV3, "h100", **plan)
    without = ps.estimate(_no_mtp(DSV3), "h100", **plan)
    assert with_mtp.memory.worst_stage == without.memory.worst_stage == "last"
    assert with_mtp.time.recompute_s == pytest.approx(without.time.recompute_s, rel=1e-12)
    _, recomputed_acts = _mtp_expected(DSV3, 2, 32, 4096, 4)
    block_input = 4096 * 2 * DSV3.hidden_size / 2
    own = recomputed_acts - block_input
    # the block keeps its whole stored set (MoE: dispatched tokens, expert inputs), not only its input
    block = (with_mtp.memory.activations_gib - without.memory.activations_gib) * GIB - own
    assert block > 20 * block_input
