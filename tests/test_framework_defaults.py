"""A framework's defaults never replace what the user wrote: a cluster file's explicit efficiency
terms win over the framework's kernel-efficiency profile (through the plan-estimate CLI and the API)."""

from __future__ import annotations

from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.estimate import main as estimate_cli

H100 = "h100-sxm"
LLAMA = dict(num_gpus=64, tp=8, pp=1, zero=3, micro_batch=1, global_batch=64, seq_len=8192, recompute="full")
LLAMA_ARGS = ("--model", "llama3.1-70b", "--num-gpus", "64", "--tp", "8", "--pp", "1", "--zero", "3",
              "--micro-batch", "1", "--global-batch", "64", "--seq-len", "8192", "--recompute", "full")


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(estimate_cli, list(args), catch_exceptions=False)
    return r.exit_code, r.output


def test_cluster_file_kernel_fusion_wins_over_the_torchtitan_profile(tmp_path):
    lab = tmp_path / "lab.yaml"
    lab.write_text("base: h100-sxm\nefficiency:\n  kernel_fusion: eager\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("base: h100-sxm\nprice_per_gpu_hour_usd: 2.0\n")
    eager_file = ps.estimate("llama3.1-70b", str(lab), framework="torchtitan", **LLAMA).step_time_s
    compiled = ps.estimate("llama3.1-70b", H100, framework="torchtitan", **LLAMA).step_time_s
    eager_set = ps.estimate("llama3.1-70b", H100, framework="torchtitan", sets=["efficiency.kernel_fusion=eager"],
                            **LLAMA).step_time_s
    # the file's eager is priced (Llama's unfused RMSNorm/RoPE/SwiGLU passes): as the --set spelling, slower
    # than torchtitan's compiled default, which a file without the term still gets
    assert eager_file == eager_set and eager_file > compiled * 1.01
    assert ps.estimate("llama3.1-70b", str(plain), framework="torchtitan", **LLAMA).step_time_s == compiled
    code, out = _cli(*LLAMA_ARGS, "--gpu", str(lab), "--framework", "torchtitan")
    flat = " ".join(out.split())
    assert code in (0, 3), out
    assert "kernel fusion eager" in flat and "kernel_fusion=eager kept from cluster file lab.yaml over the " \
        "torchtitan profile" in flat
    code, out = _cli(*LLAMA_ARGS, "--gpu", str(plain), "--framework", "torchtitan")
    assert code in (0, 3) and "kernel fusion compiled" in " ".join(out.split()) and "kept from" not in out


def test_cluster_file_efficiency_terms_win_in_the_search(tmp_path):
    # every term the file sets (here two) is kept, in the search as in the estimate: the same as --set
    lab = tmp_path / "lab.yaml"
    lab.write_text("base: h100-sxm\nefficiency:\n  kernel_fusion: eager\n  attention_eff: 0.5\n")
    kw = dict(model="llama3.1-8b", framework="torchtitan", gpus=[8], tp=[1], pp=[1], zero=[3], recompute=["full"],
              tokens=1e9)
    r_file = ps.search(gpu=[str(lab)], **kw)
    r_set = ps.search(gpu=[H100], sets=["efficiency.kernel_fusion=eager", "efficiency.attention_eff=0.5"], **kw)
    assert r_file.recommended.step_time_s == r_set.recommended.step_time_s
    assert r_file.recommended.step_time_s != ps.search(gpu=[H100], **kw).recommended.step_time_s
