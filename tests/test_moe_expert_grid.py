"""Expert degrees that cannot regroup a pipeline stage's GPUs (etp*ep must divide tp*cp*dp,
Megatron-Core parallel folding) are refused naming ep/etp, the product, the GPUs and the fix, by
plan-estimate and by plan-search with forced ep/etp (which said only "no valid plan ... tp x pp x
cp x dp must equal the GPU count"): one rule, plan.expert_grid_problem."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli_helpers import one_stderr_line
import plan_search
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main

MIXTRAL64 = ["--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64"]


_one_line = one_stderr_line


@pytest.mark.parametrize("args,says", [
    (["--ep", "8", "--etp", "16"],
     "ep: etp*ep = 16*8 = 128 exceeds the 64 GPUs of a pipeline stage (tp*cp*dp = 1*1*64)"),
    (["--tp", "8", "--pp", "8", "--ep", "8", "--etp", "2"],
     "ep: etp*ep = 2*8 = 16 exceeds the 8 GPUs of a pipeline stage (tp*cp*dp = 8*1*1)"),
])
def test_plan_estimate_names_the_expert_grid_rule(args, says):
    r = CliRunner().invoke(estimate_main, MIXTRAL64 + args)
    assert r.exit_code == 2
    line = _one_line(r)
    assert says in line and "lower ep or etp" in line


def test_plan_search_with_forced_ep_etp_says_which_rule():
    r = CliRunner().invoke(search_main, MIXTRAL64 + ["--ep", "8", "--etp", "16"])
    assert r.exit_code == 3
    line = _one_line(r)
    assert "etp*ep = 16*8 = 128 exceeds the 64 GPUs asked" in line
    assert "lower ep or etp so that etp*ep divides 64, or use a multiple of 128 GPUs" in line
    assert "nearest counts that work: 128 h100-sxm GPUs" in line  # checked by evaluating 128 GPUs
    assert "tp x pp x cp x dp must equal" not in line

    # with pp given, the stage is what the experts regroup
    with pytest.raises(plan_search.NoFeasiblePlan) as e:
        plan_search.search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep=8, etp=8, pp=2)
    assert e.value.reason == "space"
    assert ("etp*ep = 8*8 = 64 exceeds the 32 GPUs of a pipeline stage (64 GPUs / pp 2)" in str(e.value)
            and "a lower pp" in str(e.value))

    # degrees that do fit are searched, and the front keeps them
    front = plan_search.search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep=8, etp=8).front
    assert front and all((p.plan.ep, p.plan.etp, p.plan.edp) == (8, 8, 1) for p in front)
