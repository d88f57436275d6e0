"""Megatron-MoE-ModelZoo launches: ``TP=2 PP=8 ... bash sbatch_benchmarking.sh <flags>`` lines of its
``best_practice/*/run_*.sh`` scripts, read as the Megatron-LM flags the wrapper builds.

What the wrapper does, transcribed (yanring/Megatron-MoE-ModelZoo@e8650517 ``sbatch_benchmarking.sh`` and
``runtime_configs/benchmarking/runtime.conf``): the model's flags are ``MODEL_ARGS`` of
``model_configs/benchmarking/<MODEL>.yaml`` (``true`` a switch, ``false`` left out, ``${VAR}`` substituted); the
environment defaults are the model's row of ``runtime.conf``; the wrapper then adds
``--num-virtual-stages-per-pipeline-rank VPP`` (VPP > 1, no layout flag), the uneven split of its table
(``NUM_LAYERS % PP``), the dispatcher of ``DISPATCHER`` (deepep by default), the precision recipe of ``PR``
(fp8: blockwise, mxfp8, bf16 with --tp-comm-overlap), ``A2A_OVERLAP`` and ``OPTIMIZER_OFFLOAD``; each node runs 8
ranks (4 with ``GB200_CLUSTER=1``). The YAML and runtime.conf are looked up in the repository layout around the
script (``../../model_configs``, ``../../runtime_configs``) or beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

from plan_search.models.io import InputError
import plan_search.planner.frameworks.read.shell as shell

SOURCE = "yanring/Megatron-MoE-ModelZoo@e8650517 sbatch_benchmarking.sh, runtime_configs/benchmarking/runtime.conf"
_TABLE = ("TP", "PP", "EP", "CP", "VPP", "MBS", "GBS", "NUM_LAYERS", "MOE_TOKEN_DISPATCHER", "MOE_GROUPED_GEMM",
          "NNODES", "RUN_TIME", "PRETRAIN", "SEQ_LEN", "DATASET", "PP_FIRST", "PP_LAST")


def is_modelzoo(cmd: shell.Command) -> int | None:
    for k, w in enumerate(cmd.words):
        if w.text.rsplit("/", 1)[-1] == "sbatch_benchmarking.sh":
            return k
    return None


def _find(path: Path, *parts: str) -> Path | None:
    for base in (path.parent.parent.parent, path.parent):
        p = base.joinpath(*parts)
        if p.is_file():
            return p
    return None


def _table_row(conf: Path, model: str) -> dict[str, str]:
    for line in conf.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*\[" + re.escape(model) + r"\]=\"(.*)\"", line)
        if m:
            return dict(zip(_TABLE, m.group(1).split()))
    return {}


def flags(cmd: shell.Command, k: int, script: shell.Script, path: str, lines_note: list) -> tuple[list, int, str]:
    """(Megatron flag words, world size, how) of one ModelZoo launch line."""
    import yaml

    here = Path(path)
    env: dict[str, str] = {}
    for name, v in script.vars.items():
        if isinstance(v, str):
            env[name] = v
    env.update(cmd.env)
    model = env.get("MODEL")
    if not model:
        raise InputError(f"megatron: line {cmd.line}: a ModelZoo launch without MODEL=<name>")
    yml = _find(here, "model_configs", "benchmarking", f"{model}.yaml")
    conf = _find(here, "runtime_configs", "benchmarking", "runtime.conf")
    if yml is None or conf is None:
        raise InputError(f"megatron: line {cmd.line}: a ModelZoo launch reads model_configs/benchmarking/{model}.yaml "
                         "and runtime_configs/benchmarking/runtime.conf of its repository: keep the script in the "
                         "repository's layout (best_practice/<model>/) or the two files beside it")
    row = _table_row(conf, model)
    for key, v in row.items():  # export X=${X:-table value}
        if not env.get(key):
            env[key] = v
    g = lambda key, d="": env.get(key) or d  # noqa: E731
    vpp, layers, pp = int(g("VPP", "1")), int(g("NUM_LAYERS", "0") or 0), int(g("PP", "1"))
    env["LAYERS_PER_VP"] = str(layers // pp // vpp) if vpp > 1 else "false"
    if layers % pp == 0:
        env["PP_FIRST"] = env["PP_LAST"] = "false"
    doc = yaml.safe_load(yml.read_text(encoding="utf-8")) or {}
    args = doc.get("MODEL_ARGS") or {}
    yline = {}
    for n, raw in enumerate(yml.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"\s*(--[A-Za-z0-9-]+)\s*:", raw)
        if m:
            yline.setdefault(m.group(1), n)
    words: list[shell.Word] = []

    def sub(v) -> str:
        return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), str(v))

    for flag, v in args.items():  # envsubst first, then yq drops "false" and makes "true" a switch
        v = "true" if v is True else "false" if v is False else sub(v)
        if v == "false":
            continue
        words.append(shell.Word(str(flag), -yline.get(str(flag), 0)))
        if v != "true":
            words.append(shell.Word(v, -yline.get(str(flag), 0)))
    extra = cmd.words[k + 1:]
    words += extra
    text = " ".join(w.text for w in words)

    def add(*ws):
        words.extend(shell.Word(w, cmd.line) for w in ws)

    has_layout = "--pipeline-model-parallel-layout" in text
    if vpp > 1 and not has_layout and "--num-virtual-stages-per-pipeline-rank" not in text and \
            "--num-layers-per-virtual-pipeline-stage" not in text:
        add("--num-virtual-stages-per-pipeline-rank", str(vpp))
    if layers % pp and not has_layout:
        add("--decoder-first-pipeline-num-layers", g("PP_FIRST"), "--decoder-last-pipeline-num-layers", g("PP_LAST"))
    offload = g("OPTIMIZER_OFFLOAD", "0") == "1"
    if offload:
        add("--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d")
    disp = g("DISPATCHER", "deepep")
    if disp == "alltoall":
        add("--moe-token-dispatcher-type", "alltoall")
    elif disp in ("deepep", "hybridep"):
        add("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", disp)
    pr = g("PR", "bf16")
    if pr == "fp8":
        add("--fp8-recipe", "blockwise", "--fp8-format", "e4m3")
        if not offload:
            add("--fp8-param-gather")
        add("--use-precision-aware-optimizer", "--main-grads-dtype", "fp32", "--main-params-dtype", "fp32",
            "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--moe-router-padding-for-fp8")
    elif pr == "bf16":
        add("--tp-comm-overlap")
    elif pr == "mxfp8":
        add("--fp8-recipe", "mxfp8", "--fp8-format", "e4m3")
        if not offload:
            add("--fp8-param-gather", "--reuse-grad-buf-for-mxfp8-param-ag", "--overlap-grad-reduce",
                "--overlap-param-gather")
        add("--use-precision-aware-optimizer", "--main-grads-dtype", "fp32", "--main-params-dtype", "fp32",
            "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--moe-router-padding-for-quantization")
    if g("A2A_OVERLAP", "0") == "1":
        add("--delay-wgrad-compute", "--overlap-moe-expert-parallel-comm")
    seq = g("SEQ_LEN")
    mpe = args.get("--max-position-embeddings")
    if seq and mpe and int(seq) > int(sub(mpe)):
        add("--max-position-embeddings", seq)
    per = 4 if g("GB200_CLUSTER", "0") == "1" else 8
    nodes = int(g("NNODES", "1"))
    lines_note.append((yml.name, conf.name))
    return words, nodes * per, f"ModelZoo: NNODES {nodes} x {per} ranks per node"
