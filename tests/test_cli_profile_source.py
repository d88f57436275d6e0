"""plan-estimate's efficiency source line reads as text: a framework's family prior lists its terms
as ``term=value (where from)`` (it printed a Python dict, ``{'kernel_fusion': 'compiled', ...}``),
and a list of calibration rows is printed as runs the table wraps between, never inside a number."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate_main

LLAMA = ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "8", "--zero", "3", "--recompute", "full"]


def _source_block(stdout: str) -> list[str]:
    """The table's lines of the efficiency source: its first line and the wrapped (indented) rest."""
    lines = stdout.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("  source: "))
    block = [lines[i]]
    for ln in lines[i + 1:]:
        if not ln.startswith("  "):
            break
        block.append(ln)
    return block


def _source_text(*args) -> tuple[str, dict]:
    r = CliRunner().invoke(estimate_main, [*LLAMA, *args])
    assert r.exit_code in (0, 3), r.output
    text = " ".join(" ".join(_source_block(r.stdout)).split())
    j = CliRunner().invoke(estimate_main, [*LLAMA, *args, "--format", "json"])
    return text[len("source: "):], json.loads(j.stdout)["efficiency"]


def test_family_prior_terms_are_readable_text():
    text, eff = _source_text("--framework", "torchtitan")
    assert not re.search(r"[{}]|': ", text), text  # no Python dict
    assert text.startswith("torchtitan family prior: kernel_fusion=compiled (torch.compile per block")
    # the kernel ratio's result is the priced attention efficiency, with where the ratio comes from
    assert f"attention_eff={eff['attention_eff']:.3g} (the megatron profile's " in text
    assert "FlashAttention-2 over cuDNN fused attention" in text and eff["kernel_fusion"] == "compiled"
    assert "; every other term the megatron profile's (" in text

    text, eff = _source_text("--framework", "deepspeed")
    assert text.startswith("deepspeed family prior: zero3_flat=True (DeepSpeed ZeRO-3 per-module flat "
                           "collectives); every other term")
    assert eff["zero3_flat"] is True and not re.search(r"[{}]", text)


def test_row_lists_print_as_runs_and_wrap_between_them():
    rows = [1001, 1002, 1003, 1004, 1005, 1006, 1016, 1017, 1030] + list(range(1040, 1080, 3))
    source = f"efficiency.source=fitted on the rows [{','.join(map(str, rows))}] of runs.csv"
    r = CliRunner().invoke(estimate_main, [*LLAMA, "--set", source])
    assert r.exit_code in (0, 3), r.output
    block = _source_block(r.stdout)
    text = " ".join(" ".join(block).split())
    runs = "1001-1006, 1016-1017, 1030, " + ", ".join(map(str, range(1040, 1080, 3)))
    assert f"source: fitted on the rows [{runs}] of runs.csv" in text
    # every printed line ends between items: no number is cut by the wrap
    for a, b in zip(block, block[1:]):
        assert not (a[-1].isdigit() and b.strip()[0].isdigit()), (a, b)
    # the JSON keeps the source as given
    j = CliRunner().invoke(estimate_main, [*LLAMA, "--set", source, "--format", "json"])
    assert json.loads(j.stdout)["efficiency"]["source"] == source.split("=", 1)[1]
