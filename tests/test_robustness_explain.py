"""Issue 24: infeasible messages blame the right thing.

- an expert count with no small power-of-two divisor (33, 100,000 experts) leaves the default ep choices
  unable to divide any GPU count: the message names ep and its domain (it blamed the layout);
- a pipeline schedule that cannot apply (dualpipe with an odd number of micro-batches) is named;
- the "smallest footprint" plan is named with every knob that makes its footprint (its ep/etp were left
  out, and the plan named had another footprint): re-estimating what the line names gives the GiB stated."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main

MOE = ("name: {name}\nnum_layers: 16\nhidden_size: 2048\nnum_heads: 16\nvocab_size: 32000\nseq_len: 4096\n"
       "num_experts: {E}\nexperts_per_token: 2\nexpert_ffn_hidden_size: 1024\nactivation: swiglu\n")


def _infeasible(args) -> str:
    r = CliRunner().invoke(search_main, [*args, "--time-limit", "30"])
    line = r.output.strip()
    assert r.exit_code == 3 and len(line.splitlines()) == 1 and line.startswith("infeasible: "), (r.exit_code, line)
    return line


def test_an_expert_count_without_a_small_divisor_names_ep(tmp_path):
    m33 = tmp_path / "moe33.yaml"
    m33.write_text(MOE.format(name="moe33", E=33))
    line = _infeasible(["--model", str(m33), "--gpu", "h100", "--gpus", "64"])
    assert "ep: the default expert-parallel degrees of moe33's 33 experts (ep 33 itself" in line, line
    assert "give --ep from the divisors of 33 that divide a count (1: --ep 1 keeps 33 experts per GPU)" in line, line
    assert "tp x pp x cp x dp must equal" not in line, line
    r = CliRunner().invoke(search_main, ["--model", str(m33), "--gpu", "h100", "--gpus", "64", "--ep", "1",
                                         "--time-limit", "30", "--format", "json"])
    assert r.exit_code == 0, r.output  # the advice works
    assert json.loads(r.output)["recommended"]["plan"]["ep"] == 1
    big = tmp_path / "moe100k.yaml"
    big.write_text(MOE.format(name="moe100k", E=100_000))
    line = _infeasible(["--model", str(big), "--gpu", "h100", "--gpus", "64"])
    assert "ep: the default expert-parallel degrees of moe100k's 100,000 experts" in line, line
    assert "(1, 2, 4, 8, 16, 32: --ep 32 keeps 3,125 experts per GPU)" in line, line


def test_a_schedule_that_cannot_apply_is_named():
    args = ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "8", "--global-batch", "3"]
    line = _infeasible([*args, "--pp-schedule", "dualpipe"])
    assert "pp_schedule: dualpipe needs an even pp, vpp 1 and an even number of micro-batches" in line, line
    assert "use pp_schedule 1f1b" in line and "tp x pp x cp x dp must equal" not in line, line
    r = CliRunner().invoke(search_main, [*args, "--pp-schedule", "1f1b,dualpipe", "--time-limit", "30"])
    assert r.exit_code == 0, r.output


def test_the_smallest_footprint_plan_is_named_with_the_knobs_that_make_it():
    line = _infeasible(["--model", "deepseek-v3", "--gpu", "h100", "--gpus", "64"])
    m = re.search(r"the smallest footprint is ([\d.]+) GiB per GPU, (tp\S+ pp\S+ dp\S+ cp\S+ vpp\S+(?: ep\S+ etp\S+)? "
                  r"mb\S+ zero\S+ \S+)(?: \(([^)]*)\))? on (\d+) GPUs", line)
    assert m, line
    gib, head, extra, n = float(m.group(1)), m.group(2).split(), m.group(3), m.group(4)
    assert any(w.startswith("ep") and w != "ep1" for w in head), line  # an expert-parallel plan names its ep
    args = ["--model", "deepseek-v3", "--gpu", "h100", "--gpus", n, "--memory-headroom", "0.07", "--format", "json"]
    names = {"tp": "--tp", "pp": "--pp", "dp": "--dp", "cp": "--cp", "vpp": "--vpp", "ep": "--ep", "etp": "--etp",
             "mb": "--micro-batch", "zero": "--zero"}
    for w in head[:-1]:
        k = re.match(r"[a-z]+", w).group(0)
        args += [names[k], w[len(k):]]
    args += ["--recompute", head[-1]]
    for pair in (extra.split(", ") if extra else []):
        k, v = pair.split(" ", 1)
        opt = "--" + k.replace("_", "-")
        args += [opt] if v == "on" else [f"--no-{opt[2:]}"] if v == "off" else [opt, v]
    r = CliRunner().invoke(estimate_main, args)
    assert r.exit_code in (0, 3), r.output  # 3: it does not fit, which is the point
    est, _ = json.JSONDecoder().raw_decode(r.output[r.output.index("{"):])  # stderr's infeasible line follows
    assert round(est["memory"]["peak_gib"], 1) == gib, (est["memory"]["peak_gib"], line)
