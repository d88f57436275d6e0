"""Fuzz every input path: model YAML/JSON and HuggingFace configs, hardware YAML and ``--set``
overrides, the options of every command, JSON search requests and runs CSVs; and file-system
faults (issue 15): every kind of output path for every command that writes a file, and tables and
journals damaged at random before a sweep resumes them (signals, full disks and the fixed cases:
``tests/test_robustness.py``).

The rule each test checks (issue #7): an input ends with a result, or with exit code 2 and ONE
line on stderr, ``error: ...`` naming what is wrong -- never a traceback, never an internal
exception dressed up as bad input, never a hang. At the API level that means the only
exceptions are :class:`models.io.InputError` (and pydantic's ``ValidationError`` when a
document is validated directly), :class:`planner.request.NoFeasiblePlan` for a valid request
nothing satisfies; every call runs under a wall-clock bound (:func:`bounded`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import stat
import string
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import event, example, given, settings
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st
from pydantic import ValidationError

from plan_search.cli.calibrate import main as calibrate_cli
from plan_search.cli.catalog import main as catalog_cli
from plan_search.cli.estimate import main as estimate_cli
from plan_search.cli.search import main as search_cli
from plan_search.hardware.catalog import catalog_names, get_cluster
from plan_search.hardware.overrides import MAX_SET_LENGTH, apply_overrides, valid_keys
from plan_search.hardware.resolve import resolve_cluster
from plan_search.hardware.spec import ClusterSpec
from plan_search.models.hf import from_hf_config
from plan_search.models.io import MAX_DOCUMENT_BYTES, InputError, load_document, parse_document
from plan_search.models.resolve import resolve_model
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.search.request import NoFeasiblePlan, SearchRequest
from plan_search.planner.search.front import search

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
N = settings.default.max_examples  # the profile's budget (tests/conftest.py)


def budget(weight: float) -> settings:
    """This test's share of the profile's example budget (by its cost per example)."""
    return settings(max_examples=max(5, int(N * weight)))


# ------------------------------------------------------------------ bounds and checks
class Hang(Exception):
    """A call ran past its wall-clock bound."""


@contextlib.contextmanager
def bounded(seconds: float = 30.0):
    """Fail (raise :class:`Hang`) when the body runs longer than ``seconds``."""

    def alarm(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


#: Phrases of internal errors that must never reach a user as an "error:" line.
INTERNAL = ("Traceback", "object has no attribute", "unsupported operand", "zero-size array",
            "index out of", "out of bounds", "Python int too large", "NoneType", "not subscriptable",
            "invalid literal", "division by zero", "unhashable", "takes no", "positional argument",
            "not iterable", "not callable", "maximum recursion", "Unable to allocate", "cannot convert",
            "RuntimeWarning", "overflow encountered", "invalid value encountered", "codec can't", "[Errno")


def tally(name: str) -> None:
    """Count an outcome in hypothesis' statistics (--hypothesis-show-statistics)."""
    try:
        event(name)
    except InvalidArgument:  # not inside a @given test
        pass


def run(cmd, args, input=None, seconds: float = 60.0):
    with bounded(seconds):
        return CliRunner().invoke(cmd, [str(a) for a in args], input=input, catch_exceptions=True)


def check_cli(r, codes=(0, 2, 3), progress: str | tuple[str, ...] | None = None) -> str:
    """The exit-code and stderr contract; returns the one error line (or '')."""
    out, err = r.stdout, r.stderr
    assert not isinstance(r.exception, Hang), r.exception
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    for phrase in INTERNAL:
        assert phrase not in out + err, (phrase, err[-2000:])
    assert r.exit_code in codes, (r.exit_code, err[-2000:])
    tally(f"exit {r.exit_code}")
    lines = [ln for ln in err.splitlines() if ln.strip() and not (progress and ln.startswith(progress))]
    if r.exit_code == 2:
        assert len(lines) == 1, err
        line = lines[0]
        assert line.startswith("error: "), line
        body = line[len("error: "):]
        # names what is wrong: "field: ..." (documents, values) or click's "Invalid value for
        # '--x'", "No such option: --x", "Missing option '--x'", "unexpected extra argument (x)"
        assert ":" in body or "'" in body or "(" in body, line
        return line
    if r.exit_code == 3:
        assert len(lines) == 1 and lines[0].startswith("infeasible: "), err
        return lines[0]
    assert r.exit_code == 0 and not lines, err
    return ""


def api_call(fn, *args, allowed=(InputError,), seconds: float = 30.0, **kw):
    """``fn(*args)`` or one of the ``allowed`` exceptions (whose message is one line)."""
    try:
        with bounded(seconds):
            return fn(*args, **kw)
    except allowed as exc:
        tally(type(exc).__name__)
        msg = str(exc)
        assert msg.strip(), type(exc)
        if isinstance(exc, InputError):
            assert "\n" not in msg, msg
        return exc


def finite_estimate(est) -> None:
    """Every figure of an estimate a number, never NaN or infinite."""
    d = est.model_dump()
    stack = [d]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, float):
            assert math.isfinite(v), d
    assert est.step_time_s > 0 and est.memory.peak_gib > 0


# ------------------------------------------------------------------ value strategies
SPECIAL_NUMBERS = [0, -1, -0.0, 0.5, 1.5, 1e-300, 1e300, 2**31, 2**63, 2**64 + 1, 10**30, 10**400,
                   float("nan"), float("inf"), -float("inf"), True, False]
scalars = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=-3, max_value=5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", " ", "1", "1e3", "abc", "\u00e9\u4e2d\U0001f600", "\x00", "a\nb"]),
)
json_like = st.recursive(scalars, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=6), ch,
                                                                                          max_size=4),
                         max_leaves=12)
keys = st.one_of(st.text(min_size=1, max_size=16), st.sampled_from(["__class__", "base", "name", "\u00e9", "a.b"]))


@st.composite
def mutated(draw, base: dict, fields: list[str], nested: dict | None = None, plausible: dict | None = None):
    """``base`` with a few fields dropped, set to odd values, or extra fields added (also one
    level down into the ``nested`` sections). A field with a ``plausible`` strategy (dotted
    ``section.field`` for nested ones) gets a plausible value half of the time, so that valid
    documents with unusual values are generated as well as broken ones."""
    doc = json.loads(json.dumps(base))
    plausible = plausible or {}

    def value(name):
        if name in plausible and draw(st.booleans()):
            return draw(plausible[name])
        return draw(st.one_of(scalars, json_like))

    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "set", "set", "set", "extra", "nested", "nested"]))
        if op == "drop" and doc:
            doc.pop(draw(st.sampled_from(sorted(doc))))
        elif op == "set":
            name = draw(st.sampled_from(fields))
            doc[name] = value(name)
        elif op == "extra" and draw(st.integers(0, 2)) == 0:
            doc[draw(keys)] = draw(scalars)
        elif op == "nested" and nested:
            sec = draw(st.sampled_from(sorted(nested)))
            part = doc.setdefault(sec, {})
            if not isinstance(part, dict):
                continue
            name = draw(st.sampled_from(nested[sec]) | keys)
            part[name] = value(f"{sec}.{name}")
    return doc


def small_ints(lo: int = 1, hi: int = 64) -> st.SearchStrategy:
    return st.integers(lo, hi)


def int_lists(*values: int) -> st.SearchStrategy:
    return st.lists(st.sampled_from(values), min_size=1, max_size=3)


def dump(doc, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, allow_nan=True)
    return yaml.safe_dump(doc, allow_unicode=True)


raw_documents = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([
        b"", b"\n", b"   ", b"\xff\xfe\x00", b"\xef\xbb\xbf{}", b"[]", b"42", b"null", b"~", b"- a\n- b\n",
        b"{", b"{a: 1}", b"{\"a\": NaN}", b"a: !!python/object/apply:os.system ['true']\n",
        b"a: !!binary aGVsbG8=\n", b"? [a, b]\n: 1\n", b"a: &x 1\nb: *y\n", b"\t- tab\n",
        b"[" * 100_000 + b"]" * 100_000, b"{\"a\":" * 50_000 + b"1" + b"}" * 50_000,
        b"a:\n" + b"".join(b" " * i + b"b:\n" for i in range(1, 3000)),
        b"x: " + b"9" * 10_000 + b"\n", b"x: 1" + b"0" * 5000 + b".0\n",
        "name: \u202e\u0000\ud7ff\n".encode("utf-8"),
    ]),
)


def laughs(depth: int = 25, width: int = 10, key: str = "base") -> str:
    """A 'billion laughs' YAML: aliases that expand to width**depth elements when traversed."""
    lines = ["a0: &a0 [" + ",".join(["lol"] * width) + "]"]
    for i in range(1, depth):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"{key}: *a{depth - 1}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


_counter = iter(range(10**9))


def write(work: Path, content: bytes | str, suffix: str = ".yaml") -> Path:
    p = work / f"f{next(_counter)}{suffix}"
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return p


# ------------------------------------------------------------------ models: our schema
MODEL = dict(num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2, ffn_hidden_size=512, vocab_size=1000,
             seq_len=512, global_batch=16, activation="swiglu", position="rotary", norm="rmsnorm", bias=False,
             dropout=False)
MODEL_FIELDS = sorted(ModelSpec.model_fields) + ["base"]
MODEL_PLAUSIBLE = {
    "num_layers": small_ints(1, 48), "hidden_size": st.sampled_from([64, 96, 128, 256, 384, 1000, 4096]),
    "num_heads": st.sampled_from([1, 2, 3, 4, 8, 16]), "num_kv_heads": st.sampled_from([1, 2, 4, 8]),
    "head_dim": st.sampled_from([16, 32, 64, 128]), "ffn_hidden_size": st.sampled_from([64, 512, 1000, 1536]),
    "vocab_size": st.sampled_from([1, 100, 32000, 256000, 10**8]),
    "seq_len": st.sampled_from([1, 128, 512, 2048, 32768, 10**6]), "global_batch": st.sampled_from([1, 7, 16, 512]),
    "activation": st.sampled_from(["gelu", "relu2", "swiglu", "geglu", "silu"]),
    "position": st.sampled_from(["learned", "rotary", "alibi"]), "norm": st.sampled_from(["layernorm", "rmsnorm"]),
    "tied_embeddings": st.booleans(), "bias": st.booleans(), "qkv_bias": st.booleans(), "dropout": st.booleans(),
    "num_experts": st.sampled_from([0, 1, 8]), "experts_per_token": st.sampled_from([0, 1, 2]),
    "first_dense_layers": small_ints(0, 4), "moe_layer_freq": small_ints(1, 3),
    "base": st.sampled_from(["gpt3", "llama3.1-8b", "mixtral-8x7b", "gpt3.yaml", "nope"]),
    "name": st.text(max_size=30), "aliases": st.lists(st.text(max_size=5), max_size=2),
}
TINY = ModelSpec(name="tiny", **MODEL)
A100 = get_cluster("a100-80gb")


def _model_ok(spec: ModelSpec) -> None:
    assert spec.num_heads % spec.num_kv_heads == 0 and spec.head_dim > 0
    # a valid spec is priced without error or non-finite figure (or refused with one line: MoE)
    plan = Plan(num_gpus=1, micro_batch=1, global_batch=1, seq_len=min(spec.seq_len, 4096))
    est = api_call(estimate, spec, A100, plan, tokens=1e9)
    if not isinstance(est, InputError):
        finite_estimate(est)


@budget(1.0)
@given(doc=mutated(MODEL, MODEL_FIELDS, plausible=MODEL_PLAUSIBLE), fmt=st.sampled_from(["yaml", "json"]))
@example(doc={**MODEL, "base": "gpt3"}, fmt="yaml")
@example(doc={"base": "llama3.1-8b", "num_layers": 0}, fmt="yaml")
@example(doc={"base": ["x"] * 3}, fmt="json")
@example(doc={**MODEL, "num_layers": 10**400}, fmt="json")
@example(doc={**MODEL, "hidden_size": float("nan")}, fmt="json")
@example(doc={**MODEL, "first_dense_layers": 10**30}, fmt="json")
def test_model_document(work, doc, fmt):
    p = write(work, dump(doc, fmt), "." + fmt)
    spec = api_call(resolve_model, str(p))
    if isinstance(spec, ModelSpec):
        _model_ok(spec)


@budget(1.0)
@given(raw=raw_documents, suffix=st.sampled_from([".yaml", ".json", ".yml", ""]))
def test_model_file_bytes(work, raw, suffix):
    p = write(work, raw, suffix)
    api_call(resolve_model, str(p))


def test_model_document_alias_bomb(work):
    """Aliases that expand exponentially are rejected in bounded time, wherever they sit."""
    for key in ("base", "name", "num_layers", "aliases", "source"):
        api_call(resolve_model, str(write(work, laughs(key=key))), seconds=10)
    hf = laughs(key="num_hidden_layers") + "model_type: llama\n"
    api_call(resolve_model, str(write(work, hf, ".json")), seconds=10)
    for key in ("mlp_only_layers", "word_embed_proj_dim", "hidden_act", "num_local_experts"):
        doc = json.loads((DATA / "hf" / "qwen1.5-moe-a2.7b.json").read_text())
        text = laughs(key=key) + "".join(f"{k}: {json.dumps(v)}\n" for k, v in doc.items() if k != key)
        api_call(resolve_model, str(write(work, text)), seconds=10)


def test_model_document_too_large(work):
    p = write(work, b"# " + b"x" * (MAX_DOCUMENT_BYTES + 10) + b"\n")
    exc = api_call(resolve_model, str(p))
    assert isinstance(exc, InputError) and "limit" in str(exc)


@budget(0.5)
@given(ref=st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "~", "~/", "~nobody/x.yaml", ".", "..", "/", "/dev/null", "/dev/zero", "/proc/self/mem",
                     "/etc", "/nonexistent/x.yaml", "gpt3.yaml", "GPT3", "llama3 70b", "x" * 5000, "a\x00b",
                     "../" * 50, "C:\\x.json", "gpt3.json", "models/catalog.yaml"]),
))
def test_model_reference(ref):
    """Any --model text: a catalog name, a file, or one line saying which is missing."""
    spec = api_call(resolve_model, ref, allowed=(InputError,))
    assert isinstance(spec, (ModelSpec, InputError))


def test_model_paths_without_surprises(work, monkeypatch):
    """Directories, symlinks (also dangling and looping), '~' and special files."""
    d = work / "paths"
    d.mkdir()
    (d / "m.yaml").write_text(yaml.safe_dump(MODEL))
    (d / "link.yaml").symlink_to(d / "m.yaml")
    (d / "dangling.yaml").symlink_to(d / "gone.yaml")
    (d / "loop.yaml").symlink_to(d / "loop.yaml")
    (d / "cfgdir").mkdir()
    (d / "cfgdir" / "config.json").write_text((DATA / "hf" / "llama3.1-8b.json").read_text())
    (d / "emptydir").mkdir()
    (d / "dir.yaml").mkdir()
    fifo = d / "fifo.yaml"
    os.mkfifo(fifo)
    monkeypatch.setenv("HOME", str(d))
    assert resolve_model(str(d / "link.yaml")).name == "link"
    assert resolve_model(str(d / "cfgdir")).num_layers == 32
    assert resolve_model("~/m.yaml").hidden_size == 256
    for bad in ("dangling.yaml", "loop.yaml", "emptydir", "dir.yaml", "fifo.yaml"):
        exc = api_call(resolve_model, str(d / bad), seconds=5)
        assert isinstance(exc, InputError), (bad, exc)
    exc = api_call(resolve_model, "/proc/self/mem", seconds=5)
    assert isinstance(exc, (InputError, ModelSpec))


# ------------------------------------------------------------------ models: HuggingFace config.json
HF = json.loads((DATA / "hf" / "llama3.1-8b.json").read_text())
HF_MOE = json.loads((DATA / "hf" / "qwen1.5-moe-a2.7b.json").read_text())
HF_FIELDS = sorted(set(HF) | set(HF_MOE) | {
    "n_layer", "n_embd", "n_head", "num_layers", "d_model", "n_inner", "ffn_dim", "n_positions", "seq_length",
    "multi_query", "new_decoder_architecture", "kv_lora_rank", "word_embed_proj_dim", "text_config", "head_dim",
    "kv_channels", "num_local_experts", "n_routed_experts", "n_shared_experts", "first_k_dense_replace",
    "moe_layer_freq", "num_experts_per_tok", "decoder_sparse_step", "mlp_only_layers", "activation_function",
    "alibi", "position_embedding_type", "rotary_pct", "layer_norm_epsilon", "padded_vocab_size", "bias",
    "resid_pdrop", "moe_intermediate_size", "shared_expert_intermediate_size", "multi_query_group_num",
})

HF_PLAUSIBLE = {
    "num_hidden_layers": small_ints(1, 48), "n_layer": small_ints(1, 48), "hidden_size": st.sampled_from([64, 256, 4096]),
    "num_attention_heads": st.sampled_from([1, 4, 8, 32]), "num_key_value_heads": st.sampled_from([1, 2, 8, 32]),
    "intermediate_size": st.sampled_from([128, 14336]), "vocab_size": st.sampled_from([100, 128256]),
    "hidden_act": st.sampled_from(["silu", "gelu", "gelu_new", "relu", "relu2", "swish", "tanh"]),
    "model_type": st.sampled_from(["llama", "gpt2", "qwen2_moe", "mixtral", "deepseek_v3", "bloom", "falcon", ""]),
    "max_position_embeddings": st.sampled_from([1, 2048, 131072]), "tie_word_embeddings": st.booleans(),
    "num_experts": st.sampled_from([0, 1, 4, 60]), "num_local_experts": st.sampled_from([0, 8]),
    "num_experts_per_tok": st.sampled_from([1, 2, 4, 100]), "decoder_sparse_step": st.sampled_from([1, 2, 3]),
    "mlp_only_layers": st.lists(small_ints(0, 40), max_size=3), "first_k_dense_replace": small_ints(0, 3),
    "moe_layer_freq": small_ints(1, 3), "n_routed_experts": st.sampled_from([8, 64]),
    "n_shared_experts": small_ints(0, 2), "moe_intermediate_size": st.sampled_from([64, 1408]),
    "head_dim": st.sampled_from([64, 128]), "multi_query": st.booleans(), "rope_scaling": st.none(),
    "attention_bias": st.booleans(), "mlp_bias": st.booleans(), "attention_dropout": st.sampled_from([0.0, 0.1]),
    "rope_scaling.original_max_position_embeddings": st.sampled_from([1, 8192]),
}


@budget(1.0)
@given(doc=st.one_of(mutated(HF, HF_FIELDS, {"rope_scaling": ["original_max_position_embeddings", "factor"],
                                             "text_config": ["num_hidden_layers", "hidden_size"]}, HF_PLAUSIBLE),
                     mutated(HF_MOE, HF_FIELDS, plausible=HF_PLAUSIBLE)))
@example(doc={**HF, "model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [0, 1]})
@example(doc={**HF, "num_local_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 0})
@example(doc={**HF, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": 0})
@example(doc={**HF, "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1000})
@example(doc={**HF, "num_local_experts": 8, "num_experts_per_tok": 9})
@example(doc={**HF, "text_config": {"num_hidden_layers": 2}, "num_hidden_layers": None})
@example(doc={"model_type": "llama", "text_config": [1]})
@example(doc={**HF, "rope_scaling": {"original_max_position_embeddings": -1}})
@example(doc={**HF, "mlp_only_layers": [True], "decoder_sparse_step": 1, "num_experts": 4, "num_experts_per_tok": 1})
@example(doc={**HF_MOE, "num_hidden_layers": 1e300})  # walked range(layers) for the MoE pattern: a hang
@example(doc={**HF_MOE, "mlp_only_layers": list(range(200_000))})  # list membership per layer: quadratic
def test_hf_config(work, doc):
    spec = api_call(from_hf_config, doc, "fuzz")
    if isinstance(spec, ModelSpec):
        _model_ok(spec)
    p = work / f"hf{next(_counter)}" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(doc, allow_nan=True))
    again = api_call(resolve_model, str(p.parent))
    # a config that reads through the file path reads the same directly (unless it is not
    # recognised as a HF config at all, then it is our schema and fails on an HF key)
    if isinstance(spec, ModelSpec) and isinstance(again, ModelSpec):
        assert again.model_dump(exclude={"name", "source"}) == spec.model_dump(exclude={"name", "source"})


# ------------------------------------------------------------------ hardware: cluster YAML
CLUSTER_FIELDS = sorted(ClusterSpec.model_fields) + ["base"]
CLUSTER_SECTIONS = {
    "gpu": ["name", "memory_gib", "hbm_bandwidth_gbps", "peak_tflops", "tdp_w", "sources"],
    "node": ["gpus_per_node", "intra_link", "intra_domain_size", "intra_node_gbps", "inter_node_gbps",
             "intra_latency_us", "inter_latency_us", "sources"],
    "efficiency": sorted(type(A100.efficiency).model_fields),
}
PARTIAL = {"base": "a100", "name": "lab", "node": {"inter_node_gbps": 12.5}, "gpu": {"peak_tflops": {"bf16": 290}},
           "price_per_gpu_hour_usd": 1.1}
FULL = A100.model_dump(mode="json")
CLUSTER_PLAUSIBLE = {
    "base": st.sampled_from(["a100", "h100", "gb200-nvl72", "v100-32gb", "mi300x", "nope"]),
    "price_per_gpu_hour_usd": st.sampled_from([0, 0.5, 2.5, 1e6]), "pue": st.sampled_from([1, 1.5, 10]),
    "storage_read_gbps": st.sampled_from([1e-3, 1, 1e9]), "storage_write_gbps": st.sampled_from([1e-3, 1, 1e9]),
    "gpu.memory_gib": st.sampled_from([0.5, 16, 80, 100_000]), "gpu.hbm_bandwidth_gbps": st.sampled_from([1e-3, 1, 3000, 1e6]),
    "gpu.peak_tflops": st.sampled_from([{"bf16": 1e-3}, {"fp16": 100}, {"bf16": 900, "fp8": 1800}, {"fp8": 1}]),
    "gpu.tdp_w": st.sampled_from([1, 700, 100_000]),
    "node.gpus_per_node": st.sampled_from([1, 2, 4, 8, 72, 4096]), "node.intra_domain_size": st.sampled_from([1, 8, 72]),
    "node.intra_node_gbps": st.sampled_from([1e-3, 32, 450, 1e6]), "node.inter_node_gbps": st.sampled_from([1e-3, 25, 1e6]),
    "node.intra_link": st.sampled_from(["nvlink", "pcie", "ethernet"]),
    "node.intra_latency_us": st.sampled_from([0, 5, 1e6]), "node.inter_latency_us": st.sampled_from([0, 10, 1e6]),
    **{f"efficiency.{k}": st.sampled_from([1e-3, 0.5, 1.0]) for k in CLUSTER_SECTIONS["efficiency"] if k != "source"},
    "efficiency.gemm_dim_scale": st.sampled_from([1e-3, 600, 1e6]),
    "efficiency.step_overhead_s": st.sampled_from([0, 0.05, 1e4]),
}


def _cluster_ok(c: ClusterSpec) -> None:
    plan = Plan(num_gpus=16, tp=2, pp=2, micro_batch=1, global_batch=16, seq_len=512, zero=3)
    est = api_call(estimate, TINY, c, plan, tokens=1e9)
    if not isinstance(est, InputError):
        finite_estimate(est)


@budget(1.0)
@given(doc=st.one_of(mutated(PARTIAL, CLUSTER_FIELDS, CLUSTER_SECTIONS, CLUSTER_PLAUSIBLE),
                     mutated(FULL, CLUSTER_FIELDS, CLUSTER_SECTIONS, CLUSTER_PLAUSIBLE)),
       fmt=st.sampled_from(["yaml", "json"]))
@example(doc={**PARTIAL, "gpu": {"hbm_bandwidth_gbps": 1e-300}}, fmt="yaml")
@example(doc={**PARTIAL, "efficiency": {"zero3_bw_eff": 1e-300, "gemm_eff_max": 1e-300}}, fmt="yaml")
@example(doc={**PARTIAL, "node": {"inter_node_gbps": 1e-300, "intra_node_gbps": 1e-300}}, fmt="yaml")
@example(doc={**PARTIAL, "gpu": {"peak_tflops": {"bf16": 1e-300}}}, fmt="yaml")
@example(doc={**PARTIAL, "gpu": {"memory_gib": 1e-300}}, fmt="yaml")
@example(doc={**PARTIAL, "storage_read_gbps": 1e-300, "storage_write_gbps": 1e-300}, fmt="yaml")
@example(doc={**PARTIAL, "node": {"gpus_per_node": 3, "intra_domain_size": 9}}, fmt="yaml")
@example(doc={**PARTIAL, "base": {"a": 1}}, fmt="yaml")
def test_cluster_document(work, doc, fmt):
    p = write(work, dump(doc, fmt), "." + fmt)
    c = api_call(resolve_cluster, str(p))
    if isinstance(c, ClusterSpec):
        _cluster_ok(c)


@budget(0.5)
@given(raw=raw_documents, suffix=st.sampled_from([".yaml", ".json"]))
def test_cluster_file_bytes(work, raw, suffix):
    api_call(resolve_cluster, str(write(work, raw, suffix)))


def test_cluster_alias_bomb(work):
    for key in ("base", "name", "gpu", "sources", "aliases", "price_source"):
        api_call(resolve_cluster, str(write(work, laughs(key=key))), seconds=10)


@budget(0.5)
@given(ref=st.one_of(st.text(max_size=30), st.sampled_from(
    ["", "a100", "A100 80GB", "h100,a100", "~/x.yaml", "/", ".", "/dev/null", "x.yaml", "catalog.yaml", "a" * 3000])))
def test_gpu_reference(ref):
    c = api_call(resolve_cluster, ref)
    assert isinstance(c, (ClusterSpec, InputError))


# ------------------------------------------------------------------ --set overrides
SET_KEYS = valid_keys(A100) + ["gpu", "node", "efficiency", "gpu.peak_tflops", "gpu.peak_tflops.fp8",
                               "gpu.peak_tflops.int4", "gpu.sources.x", "sources.y", "name", "aliases", "gpu.",
                               ".gpu", "gpu..name", "node.gpus_per_node.x", "efficiency.source", "__class__"]
set_values = st.one_of(
    st.sampled_from(["0", "-1", "1e-300", "1e300", "1e999", ".nan", ".inf", "-.inf", "nan", "inf", "0x10", "0o7",
                     "1_000", "true", "null", "~", "[]", "{}", "[1, 2]", "{bf16: 1}", "{bf16: -1}", "'3000'",
                     "\"x\"", "&a 1", "*a", "!!binary aGk=", "!!python/name:os.system", "a: b", "- 1", "{", "]",
                     "2e3", "10" * 50, "9" * 5000, "é", "\x00", "  12  ", "|\n x", "1:2", "1.5"]),
    st.text(max_size=20),
    st.integers().map(str), st.floats().map(repr),
)


@budget(1.5)
@given(items=st.lists(st.one_of(
    st.tuples(st.sampled_from(SET_KEYS) | st.text(max_size=20), set_values).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.text(max_size=30), st.sampled_from(["=", "=1", "a=", "x" * (MAX_SET_LENGTH + 1), "gpu.memory_gib"]),
), min_size=1, max_size=3), base=st.sampled_from(["a100-80gb", "h100-sxm", "gb200-nvl72", "v100-32gb"]))
@example(items=["gpu.memory_gib=[" + laughs().split("[", 1)[1].split("]", 1)[0] + "]"], base="a100-80gb")
@example(items=["node.intra_domain_size=3"], base="a100-80gb")
@example(items=["gpu.peak_tflops={}"], base="a100-80gb")
@example(items=["gpu.peak_tflops.bf16=1e-300"], base="a100-80gb")
@example(items=["efficiency.hbm_eff=1e-300", "gpu.hbm_bandwidth_gbps=1e-300"], base="a100-80gb")
def test_set_overrides(items, base):
    if base not in catalog_names():
        base = "a100-80gb"
    c = api_call(apply_overrides, get_cluster(base), items)
    if isinstance(c, ClusterSpec):
        _cluster_ok(c)


def test_set_alias_bomb():
    """A --set value is at most MAX_SET_LENGTH characters, but aliases could still expand it."""
    width, depth = 4, 28  # 4**28 = 7e16 elements in under 1000 characters
    parts = ["&a0 [" + ",".join(["1"] * width) + "]"]
    for i in range(1, depth):
        parts.append(f"&a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    value = "[" + ",".join(parts) + "]"
    assert len(value) < MAX_SET_LENGTH
    for key in ("gpu.memory_gib", "gpu.name", "gpu.peak_tflops", "name", "gpu.sources.x"):
        api_call(apply_overrides, A100, [f"{key}={value}"], seconds=10)


# ------------------------------------------------------------------ CLI options
@pytest.fixture(scope="module")
def tiny_file(work) -> Path:
    p = work / "tiny.yaml"
    p.write_text(yaml.safe_dump({**MODEL, "num_layers": 8}))
    return p


INT_TEXT = st.one_of(st.integers(-3, 9).map(str), st.sampled_from(
    ["0", "-1", "1", "2", "4", "8", "16", "1e3", "1.5", "nan", "inf", "", " ", "x", "1,2", "1..4", "4..1", "1..8:2",
     "2**70", "9" * 30, "1e30", "0x10", "1_6", "8,,16", "..", "1..", "1..8:0", "1..8:-1", "1..10000000",
     "\u0661", "\u00b2"]))
FLOAT_TEXT = st.one_of(st.floats().map(repr), st.sampled_from(
    ["0", "-1", "0.1", "0.5", "1", "0.99", "1e-300", "1e300", "nan", "inf", "-inf", "x", "", "1e999"]))


def mostly(good, bad, bad_percent: int = 20) -> st.SearchStrategy:
    """``good`` values, and ``bad`` ones ``bad_percent`` % of the time."""
    good = good if isinstance(good, st.SearchStrategy) else st.sampled_from(good)
    bad = bad if isinstance(bad, st.SearchStrategy) else st.sampled_from(bad)
    return st.integers(0, 99).flatmap(lambda r: bad if r < bad_percent else good)


@st.composite
def options(draw, table: dict, p_each: int = 4) -> list[str]:
    """Each option of ``table`` (name -> value strategy, None for a flag) with probability 1/p_each."""
    out: list[str] = []
    for name, values in table.items():
        if draw(st.integers(0, p_each - 1)) == 0:
            out += [name] if values is None else [name, draw(values)]
    return out


SEARCH_OPTIONS = {
    "--gpu": mostly(["a100", "h100", "a100,h100", "v100-32gb", "gb200-nvl72", "mi300x"],
                    ["nope", "", ",", "a100,,", "/dev/null", "x.yaml"]),
    "--tp": mostly(["1", "2", "1,2", "2..4", "8"], INT_TEXT), "--pp": mostly(["1", "2", "1..4", "3"], INT_TEXT),
    "--cp": mostly(["1", "2", "1,2"], INT_TEXT), "--vpp": mostly(["1", "2", "1,2"], INT_TEXT),
    "--micro-batch": mostly(["1", "2", "1,2,4"], INT_TEXT), "--zero": mostly(["0", "1", "0,3", "0..3"], INT_TEXT),
    "--recompute-layers": mostly(["1", "1,2"], INT_TEXT), "--global-batch": mostly(["8", "16", "16,32", "8..64"], INT_TEXT),
    "--seq-len": mostly(["256", "512", "1024"], INT_TEXT), "--max-cp": mostly(["1", "4"], INT_TEXT),
    "--max-vpp": mostly(["1", "4"], INT_TEXT), "--max-micro-batch": mostly(["1", "4", "16"], INT_TEXT),
    "--workers": mostly(["1", "2"], INT_TEXT), "--seed": mostly(["0", "5"], INT_TEXT),
    "--deadline-days": mostly(["0.001", "1", "30"], FLOAT_TEXT), "--budget-usd": mostly(["1", "1e3", "1e9"], FLOAT_TEXT),
    "--max-power-kw": mostly(["0.5", "10", "1e4"], FLOAT_TEXT),
    "--memory-headroom": mostly(["0", "0.1", "0.5"], FLOAT_TEXT), "--max-comm-ratio": mostly(["0.05", "0.3", "1"], FLOAT_TEXT),
    "--tokens": mostly(["300e9", "1B", "5T", "1e6"], ["0", "-1", "1e18", "1e30", "x", "nan", "1e-9"]),
    "--recompute": mostly(["none", "full,selective", "partial", "none,full"], ["bogus", "", ","]),
    "--precision": mostly(["bf16", "fp8", "fp16"], ["fp4", ""]),
    "--objective": mostly(["fastest", "cheapest", "fewest-gpus", "least-energy", "best-mfu"], ["x"]),
    "--solver": mostly(["cpsat", "exhaustive"], ["x"]), "--format": mostly(["table", "json", "csv"], ["xml"]),
    "--sequence-parallel": mostly(["on", "off", "both"], ["x"]),
    "--set": mostly(["gpu.memory_gib=40", "node.inter_node_gbps=12.5", "efficiency.hbm_eff=0.5"],
                    ["node.inter_node_gbps=0", "x=1", "gpu.name=", "=", "gpu.memory_gib=[1]"]),
    "--allow-cross-node-tp": None, "--bf16-grads": None, "--no-overlap-tp-comm": None,
}


@st.composite
def search_args(draw, tiny: str):
    model = draw(mostly([tiny], ["tiny-nonexistent", "", "gpt3", "/dev/null", "~nobody/x.yaml"], 15))
    args = ["--model", model] if model != "" or draw(st.booleans()) else []
    if model == "gpt3":  # keep the space small: a few GPU counts
        args += ["--gpus", draw(st.sampled_from(["8", "64", "1024", "64,128", "8..32"]))]
    else:
        args += draw(options({"--gpus": mostly(["8", "16", "8..64", "8,16,32", "1..64:1", "4,8"], INT_TEXT),
                              "--max-gpus": mostly(["8", "32", "64"], INT_TEXT),
                              "--min-gpus": mostly(["1", "8", "16"], INT_TEXT),
                              "--max-nodes": mostly(["1", "2", "4"], INT_TEXT)}, 2))
    args += draw(options(SEARCH_OPTIONS))
    args += draw(mostly([[]], [["--schema", "request"], ["--schema", "result"], ["--schema", "x"], ["--bogus"],
                               ["extra-arg"], ["--gpus"], ["--request", "/nonexistent.json"]], 10))
    if "--time-limit" not in args:
        args += ["--time-limit", draw(st.sampled_from(["5", "5", "0.01", "1e-9"]))]
    return args


@budget(1.0)
@given(data=st.data())
def test_plan_search_options(tiny_file, data):
    args = data.draw(search_args(str(tiny_file)))
    r = run(search_cli, args)
    check_cli(r)
    if r.exit_code == 0 and "--format" in args and "--schema" not in args:
        fmt = args[len(args) - 1 - args[::-1].index("--format") + 1]
        if fmt == "json":
            json.loads(r.stdout)


ESTIMATE_OPTIONS = {
    "--tp": mostly(["1", "2", "4", "8"], INT_TEXT), "--pp": mostly(["1", "2", "4"], INT_TEXT),
    "--dp": mostly(["1", "2", "4"], INT_TEXT), "--cp": mostly(["1", "2"], INT_TEXT), "--vpp": mostly(["1", "2"], INT_TEXT),
    "--zero": mostly(["0", "1", "2", "3"], INT_TEXT), "--global-batch": mostly(["8", "16", "64"], INT_TEXT),
    "--seq-len": mostly(["256", "512", "2048"], INT_TEXT), "--recompute-layers": mostly(["1", "2"], INT_TEXT),
    "--first-stage-layers": mostly(["1", "3"], INT_TEXT), "--last-stage-layers": mostly(["1", "3"], INT_TEXT),
    "--memory-headroom": mostly(["0", "0.1", "0.9"], FLOAT_TEXT), "--checkpoint-interval-h": mostly(["0.5", "1"], FLOAT_TEXT),
    "--tokens": mostly(["300e9", "1B", "1e6"], ["0", "-1", "1e18", "1e30", "x", "nan", "inf"]),
    "--recompute": mostly(["none", "selective", "full"], ["x"]), "--precision": mostly(["bf16", "fp8", "fp16"], ["x"]),
    "--set": mostly(["gpu.memory_gib=40", "gpu.peak_tflops.fp8=1000", "node.intra_domain_size=4"],
                    ["efficiency.hbm_eff=2", "x=1", "gpu.name=", "gpu.memory_gib=1e-300"]),
    "--format": mostly(["table", "json"], ["yaml"]),
    "--no-flash-attention": None, "--no-sequence-parallel": None, "--bf16-grads": None, "--overlap-tp-comm": None,
    "--no-overlap-grad-reduce": None, "--no-overlap-param-gather": None,
    "--framework": mostly(["megatron", "deepspeed", "torchtitan", "nemo"], ["x", "MEGATRON", ""]),
    "--emit": None,
}


@st.composite
def estimate_args(draw, tiny: str):
    args = ["--model", draw(mostly([tiny, "gpt3", "llama3.1-8b"], ["mixtral-8x7b", "nope", ""], 15)),
            "--gpu", draw(mostly(["a100", "h100", "v100-32gb", "gb200-nvl72"], ["nope", ""], 10)),
            "--num-gpus", draw(mostly(["1", "2", "8", "16", "64"], ["0", "-8", "1e3", "10000001", "x"], 10)),
            "--micro-batch", draw(mostly(["1", "2"], ["0", "x", "1000001"], 10))]
    return args + draw(options(ESTIMATE_OPTIONS)) + draw(mostly([[]], [["--bogus"], ["--tp"]], 5))


@budget(1.0)
@given(data=st.data())
def test_plan_estimate_options(tiny_file, data):
    args = data.draw(estimate_args(str(tiny_file)))
    check_cli(run(estimate_cli, args))


@pytest.mark.parametrize("name", ["front.png", "front.svg", "front.pdf", "front.txt", "", ".", "no/such/dir/f.png",
                                  "f.png/", "\x00.png"])
def test_plan_search_plot_paths(work, tiny_file, name):
    """--plot (planner/plots.py): a drawing or one error line, before or after the search."""
    target = str(work / name) if name not in ("", "\x00.png") else name
    r = run(search_cli, ["--model", tiny_file, "--gpus", "8,16", "--global-batch", "16", "--time-limit", "5",
                         "--plot", target])
    check_cli(r, progress="wrote ")


def test_plan_estimate_usage_errors_are_one_line():
    r = run(estimate_cli, ["--model", "gpt3", "--gpu", "a100", "--num-gpus", "x", "--micro-batch", "1"])
    check_cli(r)


@budget(0.5)
@given(args=st.one_of(
    st.tuples(st.sampled_from(["models", "gpus"]), st.sampled_from([[], ["--format", "json"], ["--format", "table"]]))
    .map(lambda t: [t[0], *t[1]]),
    st.tuples(mostly(["gpt3", "a100", "llama3.1-8b", "h100-sxm", "A100 80GB"], st.text(max_size=10)),
              st.sampled_from([[], ["--kind", "gpu"], ["--kind", "model"], ["--format", "json"]]))
    .map(lambda t: ["show", t[0], *t[1]]),
    st.lists(st.one_of(st.sampled_from(["models", "gpus", "show", "--format", "json", "xml", "--kind", "auto", "-h",
                                        "--bogus", "", "\u00e9"]), st.text(max_size=10)), max_size=5),
))
def test_plan_catalog_options(args):
    r = run(catalog_cli, args)
    check_cli(r, codes=(0, 2))
    if r.exit_code == 0 and "--format" in args and args[args.index("--format") + 1:][:1] == ["json"] \
            and not {"-h", "--help"} & set(args):
        json.loads(r.stdout)


RUNS_HEADER = (DATA / "runs" / "small-runs.csv").read_text().splitlines()[0]
RUNS_ROWS = (DATA / "runs" / "small-runs.csv").read_text().splitlines()[1:]


@st.composite
def runs_csv(draw) -> str:
    """The test runs file with cells replaced by odd values, rows dropped, columns cut."""
    import csv
    import io

    header = next(csv.reader([RUNS_HEADER]))
    rows = [next(csv.reader([r])) for r in RUNS_ROWS]
    rows = draw(st.lists(st.sampled_from(rows), min_size=0, max_size=3))
    rows = [list(r) for r in rows]
    for r in rows:
        for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
            j = draw(st.integers(0, len(r) - 1))
            r[j] = draw(st.sampled_from(["", "0", "-1", "nan", "inf", "1e300", "x", "1.5", "full", "no", "yes",
                                         "A100-SXM4-80GB", "H100", "999999999", "\u00e9"]) | st.text(max_size=8))
    if draw(st.integers(0, 9)) == 0:
        header = header[: draw(st.integers(0, len(header)))]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


@budget(0.15)
@given(text=mostly(runs_csv(), st.text(max_size=100), 10),
       gpu=mostly(["a100", "a100-80gb"], ["h100", "nope", ""], 20),
       extra=mostly([[], ["--set", "node.inter_node_gbps=12.5"]],
                    [["--iters", "0"], ["--iters", "x"], ["--set", "gpu.memory_gib=-1"]], 20))
@example(text="", gpu="a100", extra=[])
@example(text="\x00\xff", gpu="a100", extra=[])
def test_plan_calibrate_options(work, text, gpu, extra):
    runs = write(work, text, ".csv")
    out = work / f"out{next(_counter)}.yaml"
    r = run(calibrate_cli, [runs, "--gpu", gpu, "-o", out, "--iters", "2", *extra])
    check_cli(r, codes=(0, 2), progress="plan-calibrate:")


def _runs_row(**cells) -> str:
    import csv
    import io

    header = next(csv.reader([RUNS_HEADER]))
    row = next(csv.reader([RUNS_ROWS[0]]))
    for k, v in cells.items():
        row[header.index(k)] = v
    buf = io.StringIO()
    csv.writer(buf).writerows([header, row])
    return buf.getvalue()


@pytest.mark.parametrize("cell", ["a\x0cb", "a\u2028b", "a\x1cb"])
def test_calibrate_runs_cell_with_a_line_separator(work, cell):
    r = run(calibrate_cli, [write(work, _runs_row(model=cell), ".csv"), "--gpu", "a100", "-o",
                            work / "o.yaml", "--iters", "1"])
    check_cli(r, codes=(0, 2), progress="plan-calibrate:")


@pytest.mark.parametrize("cells", [{"layers": "nan"}, {"num_gpus": "inf"}, {"seq_len": "inf"},
                                   {"measured_tflops_per_gpu": "-5"}])
def test_calibrate_runs_bad_numbers_name_the_column(work, cells):
    r = run(calibrate_cli, [write(work, _runs_row(**cells), ".csv"), "--gpu", "a100", "-o",
                            work / "o.yaml", "--iters", "1"])
    line = check_cli(r, codes=(0, 2), progress="plan-calibrate:")
    assert r.exit_code == 0 or next(iter(cells)) in line, line


def test_plan_calibrate_paths(work):
    """runs file missing / a directory / the output file itself / a directory / unwritable."""
    runs = DATA / "runs" / "small-runs.csv"
    for args in ([work / "missing.csv", "--gpu", "a100", "-o", work / "o.yaml"],
                 [work, "--gpu", "a100", "-o", work / "o.yaml"],
                 [runs, "--gpu", "a100", "-o", runs],
                 [runs, "--gpu", "a100", "-o", work]):
        line = check_cli(run(calibrate_cli, [*args, "--iters", "1"]), codes=(2,), progress="plan-calibrate:")
        assert any(w in line for w in ("runs", "RUNS", "output", "-o")), line


def test_plan_calibrate_binary_runs_file(work):
    binary = write(work, b"\xff\xfe\x00\x01" * 100, ".csv")
    line = check_cli(run(calibrate_cli, [binary, "--gpu", "a100", "-o", work / "o.yaml", "--iters", "1"]),
                     codes=(2,), progress="plan-calibrate:")
    assert "runs" in line and "codec" not in line, line


# ------------------------------------------------------------------ JSON search requests
REQUEST = {"model": "tiny", "gpu": ["a100-80gb"], "gpus": [8, 16], "global_batch": [16], "time_limit_s": 5,
           "tokens": 1e9, "knobs": {"tp": [1, 2], "pp": [1, 2]}}
REQUEST_FIELDS = sorted(SearchRequest.model_fields)
KNOB_FIELDS = ["tp", "pp", "cp", "vpp", "micro_batch", "zero", "recompute", "recompute_layers", "sequence_parallel",
               "allow_cross_node_tp", "max_cp", "max_vpp", "max_micro_batch"]
REQUEST_PLAUSIBLE = {
    "gpu": st.lists(st.sampled_from(["a100", "h100", "v100-32gb", "gb200-nvl72", "mi300x", "A100 80GB", "nope"]),
                    min_size=1, max_size=2),
    "gpus": int_lists(1, 2, 4, 8, 16, 24, 64, 72), "min_gpus": small_ints(1, 32), "max_gpus": st.sampled_from([8, 16, 64]),
    "gpus_step": st.sampled_from([1, 4, 8]), "max_nodes": small_ints(1, 8), "global_batch": int_lists(1, 8, 16, 48),
    "seq_len": st.sampled_from([64, 512, 2048, 4096]), "tokens": st.sampled_from([1, 1e6, 1e9, 1e12, 9.9e17]),
    "deadline_days": st.sampled_from([1e-6, 0.01, 1, 30, 1e6]), "budget_usd": st.sampled_from([1e-3, 10, 1e4, 1e9]),
    "max_power_kw": st.sampled_from([1e-3, 1, 10, 1e4]), "memory_headroom": st.sampled_from([0, 0.1, 0.5, 0.999]),
    "max_comm_ratio": st.sampled_from([1e-9, 0.01, 0.2, 1.0]),
    "precision": st.sampled_from(["bf16", "fp16", "fp8"]), "overlap_tp_comm": st.booleans(), "fp32_grads": st.booleans(),
    "objective": st.sampled_from(["fastest", "cheapest", "fewest-gpus", "least-energy", "best-mfu"]),
    "solver": st.sampled_from(["cpsat", "exhaustive"]), "time_limit_s": st.sampled_from([1e-6, 0.05, 2]),
    "workers": st.sampled_from([1, 2]), "seed": st.sampled_from([0, 7, 2**31 - 1]),
    "checkpoint_interval_h": st.sampled_from([1e-3, 1, 1e6]), "framework": st.sampled_from(["megatron", "nemo", None]),
    "sets": st.lists(st.sampled_from(["gpu.memory_gib=40", "node.inter_node_gbps=12.5", "efficiency.hbm_eff=0.5",
                                      "gpu.peak_tflops.fp8=600", "price_per_gpu_hour_usd=0"]), max_size=2),
    "knobs.tp": int_lists(1, 2, 4, 8), "knobs.pp": int_lists(1, 2, 3, 4, 8), "knobs.cp": int_lists(1, 2, 4),
    "knobs.vpp": int_lists(1, 2, 4), "knobs.micro_batch": int_lists(1, 2, 3, 4), "knobs.zero": int_lists(0, 1, 2, 3),
    "knobs.recompute": st.lists(st.sampled_from(["none", "selective", "full", "partial"]), min_size=1, max_size=2),
    "knobs.recompute_layers": int_lists(1, 2, 5), "knobs.sequence_parallel": st.sampled_from([[True], [False], [True, False]]),
    "knobs.allow_cross_node_tp": st.booleans(), "knobs.max_cp": small_ints(1, 8), "knobs.max_vpp": small_ints(1, 8),
    "knobs.max_micro_batch": small_ints(1, 16),
}


def _safe_request(doc: dict) -> dict:
    """Keep a fuzzed request's space small enough for a unit test (the bounds themselves are
    fuzzed elsewhere): few GPU counts unless the request lists them."""
    doc = dict(doc)
    if not isinstance(doc.get("gpus"), list):
        doc.setdefault("max_gpus", 64)
    doc.setdefault("time_limit_s", 5)
    return doc


@budget(1.0)
@given(doc=mutated(REQUEST, REQUEST_FIELDS, {"knobs": KNOB_FIELDS}, REQUEST_PLAUSIBLE))
@example(doc={**REQUEST, "knobs": {"micro_batch": [2**62]}})
@example(doc={**REQUEST, "knobs": {"tp": [2**63 - 1]}})
@example(doc={**REQUEST, "knobs": {"vpp": [5000]}})
@example(doc={**REQUEST, "knobs": {"cp": [2**40]}})
@example(doc={**REQUEST, "knobs": {"recompute_layers": [10**12], "recompute": ["partial"]}})
@example(doc={**REQUEST, "gpus": [10**8], "global_batch": [10**8]})
@example(doc={**REQUEST, "deadline_days": float("nan")})
@example(doc={**REQUEST, "budget_usd": float("inf")})
@example(doc={**REQUEST, "max_power_kw": 1e-300})
@example(doc={**REQUEST, "gpus": [True, 8]})
@example(doc={**REQUEST, "gpus": [8.5]})
@example(doc={**REQUEST, "gpus": ["8"]})
@example(doc={**REQUEST, "knobs": {"tp": [float("nan")]}})
@example(doc={**REQUEST, "sets": ["gpu.memory_gib=1e-300"]})
@example(doc={**REQUEST, "gpu": ["a100", "A100-80GB", "a100-sxm"]})
def test_search_request_api(doc):
    doc = _safe_request(doc)
    req = api_call(SearchRequest.model_validate, doc, allowed=(ValidationError,))
    if isinstance(req, ValidationError):
        return
    res = api_call(search, req, model=TINY, allowed=(InputError, NoFeasiblePlan))
    if isinstance(res, (InputError, NoFeasiblePlan)):
        return
    assert res.recommended.feasible and (res.front or not res.stats.proven_optimal)  # cut short: maybe no point
    for fp in res.front:
        for v in (fp.days, fp.step_time_s, fp.memory_gib, fp.energy_kwh):
            assert math.isfinite(v) and v > 0, fp
        assert math.isfinite(fp.cost_usd) and fp.cost_usd >= 0, fp  # a price of 0 is allowed


@budget(0.5)
@given(doc=mutated({**REQUEST, "model": "TINY"}, REQUEST_FIELDS, {"knobs": KNOB_FIELDS}, REQUEST_PLAUSIBLE),
       fmt=st.sampled_from(["yaml", "json"]), stdin=st.booleans())
def test_search_request_cli(work, tiny_file, doc, fmt, stdin):
    doc = _safe_request(doc)
    if doc.get("model") == "TINY":
        doc["model"] = str(tiny_file)
    text = dump(doc, fmt)
    if stdin:
        r = run(search_cli, ["--request", "-"], input=text)
    else:
        r = run(search_cli, ["--request", write(work, text, "." + fmt)])
    check_cli(r)


@budget(0.5)
@given(raw=raw_documents, stdin=st.booleans())
def test_search_request_bytes(work, raw, stdin):
    if stdin:
        r = run(search_cli, ["--request", "-"], input=raw)
    else:
        r = run(search_cli, ["--request", write(work, raw, ".json")])
    check_cli(r, codes=(2,))


def test_search_request_size_bounds(work):
    """Files and stdin alike: a request over MAX_DOCUMENT_BYTES is refused without reading it all."""
    big = b'{"model": "gpt3", "sets": [' + b'"x=1",' * (MAX_DOCUMENT_BYTES // 6 + 10) + b'"x=1"]}'
    for r in (run(search_cli, ["--request", write(work, big, ".json")]), run(search_cli, ["--request", "-"], input=big)):
        line = check_cli(r, codes=(2,))
        assert "limit" in line
    for key in ("model", "gpu", "sets"):
        r = run(search_cli, ["--request", write(work, laughs(key=key))], seconds=20)
        check_cli(r, codes=(2,))


def test_documents_are_read_safely():
    """YAML through yaml.safe_load only; no eval/exec; every document through models.io."""
    offenders = []
    for pkg in ("models", "hardware", "planner", "cli"):
        for f in (ROOT / pkg).rglob("*.py"):
            text = f.read_text(encoding="utf-8")
            for i, line in enumerate(text.splitlines(), 1):
                code = line.split("#", 1)[0]
                if "yaml.load(" in code and "SafeLoader" not in code:
                    offenders.append(f"{f.name}:{i}: {line.strip()}")
                if "yaml.unsafe_load" in code or "yaml.full_load" in code or "yaml.Loader" in code:
                    offenders.append(f"{f.name}:{i}: {line.strip()}")
                for bad in ("eval(", "exec(", "pickle.load", "marshal.load", "__import__("):
                    j = code.find(bad)
                    while j >= 0:
                        before = code[j - 1] if j else " "
                        if not (before.isalnum() or before in "_."):  # literal_eval, .eval( are fine
                            offenders.append(f"{f.name}:{i}: {line.strip()}")
                        j = code.find(bad, j + 1)
    assert not offenders, offenders
    with pytest.raises(InputError):
        parse_document("a: !!python/object/apply:os.system ['true']\n")


def test_load_document_special_files(work):
    for p in ("/dev/null", "/dev/zero", str(work), "/proc/self/mem", "/nonexistent"):
        exc = api_call(load_document, p, seconds=5)
        assert isinstance(exc, (InputError, dict)), (p, exc)


# ------------------------------------------------------------------ plan-sweep and plan-allocate files
from plan_search.cli.allocate import main as allocate_cli  # noqa: E402
from plan_search.cli.sweep import main as sweep_cli  # noqa: E402


def _no_internal_messages(frame_path: Path) -> None:
    """A sweep's per-scenario 'message' column holds input/infeasibility messages, never an
    internal error dressed up as a scenario error."""
    import csv

    if not frame_path.is_file():
        return
    with frame_path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            msg = row.get("message") or ""
            for phrase in INTERNAL:
                assert phrase not in msg, (phrase, msg)


def _axis(good: list, bad: list) -> st.SearchStrategy:
    """An axis' values: good ones, with a bad one among them a fifth of the time."""
    vals = st.lists(st.sampled_from(good), min_size=1, max_size=3, unique_by=repr)
    return mostly(vals, st.tuples(vals, st.sampled_from(bad)).map(lambda t: [*t[0], t[1]]), 20)


SWEEP_AXES = {
    "gpus": _axis([8, 16, [8, 16]], [0, -8, "x", 10**9]),
    "gpu": _axis(["a100", "h100", ["a100", "h100"]], ["nope", 3, ""]),
    "global_batch": _axis([8, 16, 32], [0, 7.5]),
    "tokens": _axis([1e9, "300B", "1.5T"], ["x", -1, 0]),
    "seq_len": _axis([256, 512], [0, 10**9]),
    "node.inter_node_gbps": _axis([12.5, 25, 50], [0, 1e-300, "x"]),
    "gpu.memory_gib": _axis([16, 80], [-1]),
    "knobs.zero": _axis([0, 1, 3, [0, 3]], [7]),
    "knobs.tp": _axis([1, 2, [1, 2]], [0]),
    "memory_headroom": _axis([0, 0.1], [1.5]),
    "objective": _axis(["fastest", "cheapest"], ["x"]),
    "model": _axis(["TINY"], ["nope"]),
}


@st.composite
def sweep_docs(draw, tiny: str) -> dict:
    base = {"model": tiny, "gpu": "a100", "gpus": [8, 16], "global_batch": [16], "tokens": 1e9, "time_limit_s": 5}
    doc = {"base": draw(mostly(st.just(base), mutated(base, REQUEST_FIELDS, {"knobs": KNOB_FIELDS},
                                                        REQUEST_PLAUSIBLE).map(_safe_request), 30))}
    axes = draw(st.lists(st.sampled_from(sorted(SWEEP_AXES)), max_size=3, unique=True))
    doc["sweep"] = {a: [tiny if v == "TINY" else v for v in draw(SWEEP_AXES[a])] for a in axes}
    if draw(st.integers(0, 9)) == 0:
        doc["sweep"][draw(keys)] = draw(json_like)
    doc["combine"] = draw(mostly(["product", "product", "zip"], st.one_of(scalars, json_like), 10))
    if draw(st.integers(0, 9)) == 0:
        doc[draw(keys)] = draw(scalars)
    return doc


@budget(0.3)
@given(data=st.data(), fmt=st.sampled_from(["yaml", "json"]))
def test_sweep_file(work, tiny_file, data, fmt):
    doc = data.draw(sweep_docs(str(tiny_file)))
    src = write(work, dump(doc, fmt), "." + fmt)
    out = work / f"sweep{next(_counter)}.csv"
    r = run(sweep_cli, [src, "-o", out, "--workers", "1", "-q"], seconds=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("  scenario ")]
    assert "Traceback" not in r.stdout + r.stderr and (r.exception is None or isinstance(r.exception, SystemExit)), \
        repr(r.exception)
    assert r.exit_code in (0, 2, 3), (r.exit_code, r.stderr[-2000:])
    tally(f"exit {r.exit_code}")
    if r.exit_code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        for phrase in INTERNAL:
            assert phrase not in lines[0], (phrase, lines[0])
    _no_internal_messages(out)


@pytest.mark.parametrize("knobs", ["-1", "[1]", "x"])
def test_sweep_base_knobs_not_a_mapping(work, knobs):
    """Fixed in ff838e8: a TypeError traceback (-1, [1]) or dict()'s own message (x)."""
    src = write(work, f"base: {{model: gpt3, gpus: [8], knobs: {knobs}}}\nsweep: {{}}\n")
    line = check_cli(run(sweep_cli, [src, "-o", work / f"s{next(_counter)}.csv", "--workers", "1", "-q"]), codes=(2,))
    assert "knobs" in line, line


@budget(0.3)
@given(raw=raw_documents)
def test_sweep_file_bytes(work, raw):
    r = run(sweep_cli, [write(work, raw, ".yaml"), "-o", work / f"s{next(_counter)}.csv", "--workers", "1", "-q"])
    check_cli(r, codes=(2,))


POOL = {"free": {"a100-80gb": 16}}


@st.composite
def allocate_docs(draw, tiny: str):
    pool = draw(mostly(st.sampled_from([POOL, {"free": {"a100-80gb": {"nodes": 2}}},
                                        {"free": {"a100-80gb": 8, "h100-sxm": {"gpus": 16, "nodes": 2}}}]), st.one_of(
        st.builds(lambda k, v: {"free": {k: v}}, st.sampled_from(["a100-80gb", "h100", "nope", "", "x.yaml"]),
                  st.one_of(scalars, st.fixed_dictionaries({"gpus": scalars}), st.fixed_dictionaries({"nodes": scalars}),
                            st.sampled_from([0, 8, 10**7, {"nodes": 10**6}, {"gpus": 8, "nodes": 1}]))),
        mutated(POOL, ["free"], {"free": ["a100-80gb", "h100-sxm"]}),
        json_like), 20))
    job = {"name": "a", "model": tiny, "tokens": "1B", "search": {"time_limit_s": 5}}
    jobs = draw(st.lists(mostly(st.just(job), mutated(job, ["name", "model", "tokens", "deadline_days", "weight",
                                                             "priority", "gpu", "global_batch", "seq_len", "max_gpus",
                                                             "min_gpus", "search"],
                                                       {"search": ["time_limit_s", "knobs", "sets", "precision",
                                                                   "memory_headroom", "budget_usd", "gpus"]}), 25),
                         min_size=1, max_size=3))
    for i, j in enumerate(jobs):  # distinct names, unless a mutation chose one
        if isinstance(j, dict) and j.get("name") == "a":
            j["name"] = f"job{i}"
        if isinstance(j, dict) and isinstance(j.get("search"), dict):
            j["search"].setdefault("time_limit_s", 5)
    return pool, draw(mostly(st.just({"jobs": jobs}), st.one_of(json_like, st.just(jobs), st.just({"jobs": []})), 10))


@budget(0.3)
@given(data=st.data(), stdin=st.sampled_from([None, "pool", "jobs"]),
       extra=mostly([[], ["--objective", "cost"], ["--objective", "makespan"], ["--allow-unscheduled"],
                     ["--format", "json"]],
                    [["--objective", "x"], ["--time-limit", "0"], ["--time-limit", "nan"], ["--schema", "x"]], 15))
def test_allocate_files(work, tiny_file, data, stdin, extra):
    pool, jobs = data.draw(allocate_docs(str(tiny_file)))
    args, text = [], None
    for name, doc in (("pool", pool), ("jobs", jobs)):
        if stdin == name:
            args += [f"--{name}", "-"]
            text = dump(doc, "json")
        else:
            args += [f"--{name}", write(work, dump(doc, "yaml"), ".yaml")]
    r = run(allocate_cli, [*args, "--time-limit", "5", *extra], input=text, seconds=120)
    check_cli(r, codes=(0, 2, 3, 4))  # 4: a result the time limit cut (loaded machine)


@budget(0.2)
@given(raw=raw_documents, which=st.sampled_from(["pool", "jobs"]))
def test_allocate_file_bytes(work, tiny_file, raw, which):
    good = {"pool": write(work, dump(POOL, "yaml")),
            "jobs": write(work, dump({"jobs": [{"name": "a", "model": str(tiny_file), "tokens": "1B"}]}, "yaml"))}
    good[which] = write(work, raw, ".yaml")
    check_cli(run(allocate_cli, ["--pool", good["pool"], "--jobs", good["jobs"], "--time-limit", "5"]), codes=(2,))


# ------------------------------------------------------------------ paths and extremes
def test_cluster_and_request_paths_without_surprises(work, tiny_file, monkeypatch):
    """--gpu FILE and --request FILE: symlinks followed, '~' expanded, directories, dangling or
    looping links, FIFOs and missing files refused with one line (no hang on a FIFO)."""
    d = work / "cpaths"
    d.mkdir()
    (d / "c.yaml").write_text(yaml.safe_dump(PARTIAL))
    (d / "link.yaml").symlink_to(d / "c.yaml")
    (d / "dangling.yaml").symlink_to(d / "gone.yaml")
    (d / "loop.yaml").symlink_to(d / "loop.yaml")
    (d / "dir.yaml").mkdir()
    os.mkfifo(d / "fifo.yaml")
    (d / "req.json").write_text(json.dumps({"model": str(tiny_file), "gpu": ["~/c.yaml"], "gpus": [8],
                                            "global_batch": [16], "time_limit_s": 5}))
    monkeypatch.setenv("HOME", str(d))
    assert resolve_cluster(str(d / "link.yaml")).node.inter_node_gbps == 12.5
    assert resolve_cluster("~/c.yaml").name == "lab"
    for bad in ("dangling.yaml", "loop.yaml", "dir.yaml", "fifo.yaml", "missing.yaml"):
        exc = api_call(resolve_cluster, str(d / bad), seconds=5)
        assert isinstance(exc, InputError), (bad, exc)
        check_cli(run(search_cli, ["--request", d / bad], seconds=5), codes=(2,))
    check_cli(run(search_cli, ["--request", "~/req.json"]), codes=(0,))
    check_cli(run(search_cli, ["--request", d]), codes=(2,))


def _big_model_file(work: Path, name: str, **dims) -> Path:
    p = work / f"{name}.yaml"
    p.write_text(yaml.safe_dump(dims))
    return p


def test_ten_trillion_parameter_model_on_a_million_gpus_cli(work):
    """`plan-search --model ten-t.yaml --gpus 1048576`: a result with finite figures (the
    objective's integer scaling is ordinal, nothing overflows)."""
    p = _big_model_file(work, "ten-t", num_layers=256, hidden_size=57344, num_heads=448, num_kv_heads=64,
                        ffn_hidden_size=229376, vocab_size=256000, seq_len=8192, global_batch=16384,
                        activation="swiglu", position="rotary", norm="rmsnorm", bias=False, dropout=False)
    r = run(search_cli, ["--model", p, "--gpu", "h100", "--gpus", "1048576", "--format", "json", "--tp", "8",
                         "--time-limit", "30"])
    check_cli(r, codes=(0,))
    doc = json.loads(r.stdout)
    assert 9e12 < doc["inputs"]["params"] < 2e13 and doc["stats"]["proven_optimal"]
    for fp in doc["front"]:
        assert fp["num_gpus"] == 1048576
        for k in ("days", "cost_usd", "step_time_s", "energy_kwh", "memory_gib"):
            assert isinstance(fp[k], float) and math.isfinite(fp[k]) and fp[k] > 0, (k, fp[k])


def test_largest_valid_model_is_answered_in_bounded_time(work):
    """Every dimension at its bound (220,000T parameters, 10,000 layers): at a million GPUs and
    over the default range, one 'infeasible:' line within the time limit plus a few seconds
    (the default range stops at max_candidates, and says so)."""
    p = _big_model_file(work, "biggest", num_layers=10_000, hidden_size=1_000_000, num_heads=100_000,
                        num_kv_heads=1000, ffn_hidden_size=10_000_000, vocab_size=100_000_000, seq_len=100_000_000,
                        global_batch=100_000_000)
    import time

    for extra in (["--gpus", "1048576"], ["--time-limit", "2"]):
        t = time.perf_counter()
        r = run(search_cli, ["--model", p, "--gpu", "h100", *extra], seconds=60)
        line = check_cli(r, codes=(3,))
        assert time.perf_counter() - t < 30, extra
        tally(line[:40])


# ------------------------------------------------------------------ file-system faults (issue 15)
#: Kinds of output path a careless user gives; each is made fresh in its own directory.
OUTPUT_KINDS = ("new", "regular", "directory", "fifo", "dev-null", "input itself", "hard link to input",
                "symlink to input", "dangling symlink", "missing directory", "file as directory", "symlink to regular",
                "odd suffix")


def _make_output(d: Path, kind: str, src: Path, suffix: str) -> Path:
    p = d / f"out{suffix}"
    if kind == "odd suffix":
        return d / "out.xyz"
    if kind == "regular":
        p.write_text("keep me\n")
    elif kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev-null":
        return Path("/dev/null")
    elif kind == "input itself":
        return src
    elif kind == "hard link to input":
        os.link(src, p)
    elif kind == "symlink to input":
        os.symlink(src, p)
    elif kind == "dangling symlink":
        os.symlink(d / "nowhere.csv", p)
    elif kind == "missing directory":
        return d / "no" / "such" / f"out{suffix}"
    elif kind == "file as directory":
        (d / "f").write_text("x")
        return d / "f" / f"out{suffix}"
    elif kind == "symlink to regular":
        (d / f"real{suffix}").write_text("keep me\n")
        os.symlink(d / f"real{suffix}", p)
    return p


def _snapshot(d: Path) -> dict:
    out = {}
    for p in sorted(d.rglob("*")):
        st_ = os.lstat(p)
        kind = "fifo" if stat.S_ISFIFO(st_.st_mode) else "dir" if stat.S_ISDIR(st_.st_mode) else \
            "link" if stat.S_ISLNK(st_.st_mode) else "file"
        out[p.relative_to(d)] = (kind, p.read_bytes() if kind == "file" else os.readlink(p) if kind == "link" else "")
    return out


@settings(budget(0.03), deadline=None)  # whole commands: a loaded machine takes seconds per example
@given(kind=st.sampled_from(OUTPUT_KINDS), overwrite=st.booleans(),
       command=st.sampled_from(["sweep", "sweep-plot", "calibrate", "search-plot"]))
def test_output_paths(work, tiny_file, kind, overwrite, command):
    """Every kind of output path, for every command that writes a file: a result, or exit 2 with
    one line, and then nothing in the directory changed (a refusal comes before any work); no
    input, device or FIFO is ever replaced; no temporary file is left behind."""
    import tempfile

    d = Path(tempfile.mkdtemp(dir=work))
    runs = DATA / "runs_small.csv" if (DATA / "runs_small.csv").exists() else ROOT / "planner" / "published_runs.csv"
    if command.startswith("sweep"):
        src = write(d, yaml.safe_dump({"base": {"model": str(tiny_file), "gpus": [8], "global_batch": [16],
                                                "tokens": 1e9}, "sweep": {"seq_len": [256, 512]}}))
    elif command == "calibrate":
        src = d / "runs.csv"
        src.write_bytes(runs.read_bytes())
    else:
        src = tiny_file
    out = _make_output(d, kind, src, ".png" if command.endswith("plot") else ".csv")
    before = _snapshot(d)
    src_bytes = src.read_bytes()
    if command == "sweep":
        r = run(sweep_cli, [src, "-o", out, "--workers", "1", "-q"] + (["--overwrite"] if overwrite else []),
                seconds=120)
    elif command == "sweep-plot":
        pytest.importorskip("matplotlib")
        r = run(sweep_cli, [src, "-o", d / "table.csv", "--plot", out, "--workers", "1", "-q"], seconds=120)
    elif command == "calibrate":
        r = run(calibrate_cli, [src, "--gpu", "a100-80gb", "-o", out, "--iters", "1"], seconds=300)
    else:
        pytest.importorskip("matplotlib")
        r = run(search_cli, ["--model", tiny_file, "--gpus", "8", "--global-batch", "16", "--plot", out])
    line = check_cli(r, codes=(0, 2), progress=("plan-calibrate:", "wrote "))
    tally(f"{command} {kind}: exit {r.exit_code}")
    assert src.read_bytes() == src_bytes  # an input is never replaced
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    refused = {"directory", "fifo", "dev-null", "input itself", "hard link to input", "symlink to input",
               "file as directory", "dangling symlink"}
    if command.endswith("plot"):
        refused.add("odd suffix")  # not a picture format: refused before the work
    if command == "sweep" and not overwrite:
        # plan-sweep resumes into its own table: a file of something else is refused unless --overwrite
        refused |= {"regular", "symlink to regular"}
    if kind in refused:
        assert r.exit_code == 2, (kind, command, r.stdout[-500:])
        assert _snapshot(d) == before, line  # refused before any work
        assert "Errno" not in line and ".tmp" not in line
    else:
        assert r.exit_code == 0, (kind, command, r.stderr[-500:])
        if kind == "symlink to regular":
            assert out.is_symlink()  # the link kept, its target replaced
    assert not [p for p in d.rglob("*") if ".tmp" in p.name]


@pytest.fixture(scope="module")
def clean_sweep(work, tiny_file):
    """A finished three-scenario sweep: (sweep file, its table's bytes)."""
    src = write(work, yaml.safe_dump({"base": {"model": str(tiny_file), "gpus": [8, 16], "global_batch": [16],
                                               "tokens": 1e9}, "sweep": {"seq_len": [256, 512, 1024]}}))
    out = work / "clean.csv"
    check_cli(run(sweep_cli, [src, "-o", out, "--workers", "1", "-q"], seconds=120), codes=(0,))
    return src, out.read_bytes()


@budget(0.012)
@given(data=st.data())
def test_damaged_journals_and_tables_resume(work, clean_sweep, data):
    """A finished sweep's table and journal damaged at random (cut, bytes flipped, lines
    duplicated or dropped, garbage appended): the rerun ends with the table of a clean run,
    exit 0, and no traceback. (tests/test_robustness.py has the fixed cases.)"""
    import tempfile

    from plan_search.planner.sweep import journal_path

    d = Path(tempfile.mkdtemp(dir=work))
    src, clean = clean_sweep
    out = d / "t.csv"
    out.write_bytes(clean)
    lines = clean.split(b"\n")
    # everything drawn up front, as fractions: the files' lengths vary with the timing column
    target = data.draw(st.sampled_from(["table", "journal", "both"]))
    damage = data.draw(st.sampled_from(["cut", "flip", "duplicate", "drop", "garbage"]))
    where = data.draw(st.floats(0.0, 1.0))
    xor = data.draw(st.integers(1, 255))
    garbage = data.draw(st.binary(max_size=60))

    def damaged(raw: bytes) -> bytes:
        if damage == "cut":
            return raw[: int(where * len(raw))]
        if damage == "flip" and raw:
            i = min(int(where * len(raw)), len(raw) - 1)
            return raw[:i] + bytes([raw[i] ^ xor]) + raw[i + 1:]
        rows = raw.split(b"\n")
        i = min(int(where * len(rows)), len(rows) - 1)
        if damage == "duplicate":
            return b"\n".join(rows[: i + 1] + rows[i:])
        if damage == "drop":
            return b"\n".join(rows[:i] + rows[i + 1:])
        return raw + garbage

    if target in ("table", "both"):
        out.write_bytes(damaged(clean))
    if target in ("journal", "both"):
        entries = []
        df = pd.read_csv(io.BytesIO(clean))
        for key, g in df.groupby("scenario_key", sort=False):
            rows = json.loads(g.drop(columns=["scenario", "scenario_key", "seq_len"]).to_json(orient="records"))
            entries.append(json.dumps({"key": key, "n_rows": len(rows), "rows": rows}))
        journal_path(out).write_bytes(damaged("\n".join(entries).encode() + b"\n"))
    r = run(sweep_cli, [src, "-o", out, "--workers", "1", "-q"], seconds=120)
    lines_err = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("resume:")]
    for phrase in INTERNAL:
        assert phrase not in r.stdout + r.stderr, (phrase, r.stderr[-1000:])
    tally(f"{target} {damage}: exit {r.exit_code}")
    if r.exit_code == 2:  # a table damaged past reading (its header): one line, and --overwrite helps
        assert len(lines_err) == 1 and "--overwrite" in lines_err[0], r.stderr
        r = run(sweep_cli, [src, "-o", out, "--workers", "1", "-q", "--overwrite"], seconds=120)
    assert r.exit_code == 0, r.stderr
    a, b = pd.read_csv(out), pd.read_csv(io.BytesIO(clean))
    assert lines and not journal_path(out).exists()
    if damage == "flip" and target != "journal":
        # a changed digit can leave a valid row (another MFU): the table is whole and consistent
        assert list(a.columns) == list(b.columns) and len(a) == len(b)
        assert (a["num_gpus"] == a["tp"] * a["pp"] * a["dp"] * a["cp"]).all()
    else:
        pd.testing.assert_frame_equal(a.drop(columns=["search_s"]), b.drop(columns=["search_s"]))
