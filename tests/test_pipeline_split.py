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


# ------------------------------------------------------------------ Llama 3.1 405B's published split
def _cli(main, *args):
    from click.testing import CliRunner

    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in r.output
    return r


LLAMA405 = ("--model", "llama3.1-405b", "--gpu", "h100", "--global-batch", 2048, "--seq-len", 8192)


def test_405b_pp16_vpp8_with_embedding_and_loss_accounting():
    """Meta's 405B run (Dubey et al. 2024 Sec. 3.3.1: 16K H100, TP 8, PP 16, 126 layers, the first and
    last stage one layer short): Megatron's --account-for-embedding/loss-in-pipeline-split makes
    (126 + 2) / 16 = 8 slots per stage, 7 | 8 x 14 | 7 layers, and 8 virtual stages of one slot."""
    from plan_search.cli.estimate import main

    r = _cli(main, *LLAMA405, "--gpus", 16384, "--tp", 8, "--pp", 16, "--vpp", 8,
             "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
             "--framework", "megatron", "--emit")
    assert r.exit_code in (0, 3), r.output  # 3: priced, over memory with selective recomputation
    assert "7|8x14|7 layers (embedding and loss counted as a layer)" in " ".join(r.output.split())
    assert "--account-for-embedding-in-pipeline-split" in r.output
    assert "--account-for-loss-in-pipeline-split" in r.output
    assert "--num-virtual-stages-per-pipeline-rank 8" in r.output
    e = ps.estimate("llama3.1-405b", "h100", num_gpus=16384, tp=8, pp=16, vpp=8, global_batch=2048, seq_len=8192,
                    account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    assert e.plan.split(126) == [7] + [8] * 14 + [7]
    # without the accounting Megatron (and plan-estimate) refuse pp*vpp = 128 > 126 layers
    r = _cli(main, *LLAMA405, "--gpus", 16384, "--tp", 8, "--pp", 16, "--vpp", 8)
    assert r.exit_code == 2 and "exceeds num_layers 126" in r.output


def test_405b_search_finds_the_accounted_split():
    from plan_search.cli.search import main

    r = _cli(main, *LLAMA405, "--gpus", 16384, "--tp", 8, "--pp", 16)
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "uneven stages: first 7, last 7 layers" in out
    assert "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split" in out.replace("\\ ", "")


@pytest.mark.parametrize("pp,split,flags", [
    (5, "26|25x4 layers (balanced: 5 does not divide 126)",
     ["--decoder-first-pipeline-num-layers 26", "--decoder-last-pipeline-num-layers 25"]),
    (4, None, None),
])
def test_balanced_uneven_split_estimated_and_emitted(pp, split, flags):
    """pp not dividing the layers: priced on the balanced split (leftovers to the first stages, as
    torchtitan does) and printed; Megatron runs it only through explicit end stages with even middle
    stages, so the emitted flags carry them, and a split it cannot write is refused with the rule."""
    from plan_search.cli.estimate import main

    args = (*LLAMA405, "--gpus", pp * 32, "--tp", 8, "--pp", pp, "--global-batch", 64, "--recompute", "full")
    r = _cli(main, *args)
    assert r.exit_code in (0, 3), r.output
    e = ps.estimate("llama3.1-405b", "h100", num_gpus=pp * 32, tp=8, pp=pp, global_batch=64, seq_len=8192,
                    recompute="full")
    assert max(e.plan.split(126)) == -(-126 // pp) and sum(e.plan.split(126)) == 126
    r = _cli(main, *args, "--framework", "megatron", "--emit")
    if flags:
        assert split in " ".join(r.output.split())
        for f in flags:
            assert f in r.output
        # the emitted split is the priced one: same step time as the explicit plan
        ex = ps.estimate("llama3.1-405b", "h100", num_gpus=pp * 32, tp=8, pp=pp, global_batch=64, seq_len=8192,
                         recompute="full", first_stage_layers=26, last_stage_layers=25)
        assert ex.step_time_s == pytest.approx(e.step_time_s, rel=1e-12)
    else:
        assert r.exit_code == 2
        assert r.output.strip().count("\n") == 0
        assert "megatron-uneven-split" in r.output and "32|32|31|31" in r.output
        assert "first_stage_layers 31 and last_stage_layers 31" in r.output


# ------------------------------------------------------------------ lighter end stages in the search
def test_search_puts_mtp_and_loss_on_a_lighter_last_stage():
    """DeepSeek-V3 (61 layers, MTP) at pp 16 had no split in the space (the ends' 5 layers are odd);
    the search now offers Megatron-Bridge's layout, 4 | 4 x 14 | 1 + MTP + loss, which is faster than
    the ends one layer apart, and the Megatron flags carry it (searched for Megatron: its
    --decoder-last-pipeline-num-layers 1 takes no virtual stages)."""
    r = ps.search(model="deepseek-v3", gpu="h100", gpus=[2048], knobs=dict(pp=[16], tp=[2]), framework="megatron")
    best = min(r.front, key=lambda p: p.step_time_s)
    assert (best.plan.first_stage_layers, best.plan.last_stage_layers) == (4, 1)
    assert best.plan.split(61) == [4] * 15 + [1]
    kw = {k: v for k, v in best.plan.model_dump().items() if k not in ("first_stage_layers", "last_stage_layers")}
    steps = {fl: ps.estimate("deepseek-v3", "h100", **kw, first_stage_layers=fl[0], last_stage_layers=fl[1]).step_time_s
             for fl in ((4, 1), (3, 2), (2, 3))}
    assert steps[(4, 1)] == pytest.approx(best.step_time_s, rel=1e-9)
    assert steps[(4, 1)] < steps[(3, 2)] < steps[(2, 3)]
    args = " ".join(ps.to_megatron_args(best.plan, get_model("deepseek-v3")))
    assert "--decoder-first-pipeline-num-layers 4" in args and "--decoder-last-pipeline-num-layers 1" in args
    assert "--mtp-num-layers 1" in args


def test_search_offers_ends_one_layer_apart():
    """Without MTP, an odd rest is shared by ends one layer apart, either way round (it was skipped)."""
    m = get_model("qwen3-235b-a22b")  # 94 layers: pp 5 leaves 94 - 3*19 = 37 for the ends
    r = ps.search(model=m, gpu="h100", gpus=[640], knobs=dict(pp=[5], tp=[4], ep=[8], recompute=["full"]),
                  objective="fastest")
    ends = {(p.plan.first_stage_layers, p.plan.last_stage_layers) for p in r.front}
    assert ends and ends <= {(19, 18), (18, 19)}


@pytest.mark.parametrize("ends, named", [
    (("--first-stage-layers", 59), "first_stage_layers: 59 leaves fewer than one layer"),  # was priced [59, 1, 1, 0]
    (("--last-stage-layers", 59), "last_stage_layers: 59 leaves fewer than one layer"),  # was [0, 1, 1, 59]
    (("--first-stage-layers", 61, "--last-stage-layers", 1), "first_stage_layers + last_stage_layers: 61 + 1"),
])
def test_given_end_stage_leaving_a_stage_empty_is_refused(ends, named):
    """Review (issue 13): an end stage so large that another stage gets no layer exits 2 with one line
    naming the knob and the most it may hold (58 at pp 4 of 61 layers), in plan-estimate and the API;
    the search, which probes splits with the same check, no longer builds a Plan with a 0-layer end."""
    from plan_search.cli.estimate import main
    from plan_search.cli.search import main as search_main
    from plan_search.models.io import InputError

    r = _cli(main, "--model", "deepseek-v3", "--gpu", "h100", "--gpus", 512, "--tp", 2, "--pp", 4, "--ep", 8, *ends)
    assert r.exit_code == 2 and named in r.output and "or lower pp" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    kw = {ends[i].lstrip("-").replace("-", "_"): ends[i + 1] for i in range(0, len(ends), 2)}
    with pytest.raises(InputError, match=named.replace("+", r"\+")):
        ps.estimate("deepseek-v3", "h100", num_gpus=512, tp=2, pp=4, ep=8, **kw)
    ok = ps.estimate("deepseek-v3", "h100", num_gpus=512, tp=2, pp=4, ep=8, first_stage_layers=58)
    assert ok.plan.split(61) == [58, 1, 1, 1]
    # qwen3-30b-a3b (48 layers): first 46 at pp 4 gave "last_stage_layers: Input should be greater than 0"
    r = _cli(search_main, "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", 64, "--pp", 4,
             "--first-stage-layers", 46, "--time-limit", 10)
    assert r.exit_code == 2 and "first_stage_layers: no pipeline split of 48 layers" in r.output, r.output


def test_search_split_refusal_says_why():
    """Review (issue 13): plan-search --first-stage-layers at pp 1 said 'the middle stages must split the
    rest evenly'; it says an uneven split needs pp > 1. A refused split names the probe's reason."""
    from plan_search.cli.search import main

    base = ("--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", 64, "--time-limit", 10)
    r = _cli(main, *base, "--pp", 1, "--first-stage-layers", 3)
    assert r.exit_code == 2 and "an uneven split needs pp > 1 (got pp [1])" in r.output, r.output
    r = _cli(main, *base, "--pp", 2, "--first-stage-layers", 40)
    assert r.exit_code == 2 and "(at pp 2: first_stage_layers: 40 leaves fewer than one layer" in r.output, r.output
    r = _cli(main, *base, "--first-stage-layers", 40)
    assert r.exit_code == 2 and "(e.g. at pp 2: first_stage_layers: 40 leaves" in r.output, r.output
    assert all(len(x.output.strip().splitlines()) == 1 for x in [r])
    from plan_search.models.io import InputError

    with pytest.raises(InputError) as exc:  # the Plan's field check, as one line (the CLI refuses 0 itself)
        ps.search(model="mixtral-8x7b", gpu="h100", gpus=[64], pp=[2], first_stage_layers=[0], time_limit_s=10)
    assert "(at pp 2: first_stage_layers: Input should be greater than 0 (got 0))" in str(exc.value)
