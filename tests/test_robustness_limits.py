"""Issue 24: outputs and limits that bound.

- a GPU-count range of millions of counts echoes as its range (``inputs.gpu_counts`` 'LO..HI:STEP'), not
  as a list (10^7 counts printed 169 MB of JSON and took 1 GB);
- ``--time-limit inf`` (0, nan, 1e9) is refused stating the accepted range;
- a key given twice in a JSON or YAML document is refused (it was silently taken last);
- plan-allocate cut by its time limit exits 4 (documented), not 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from plan_search.cli.allocate import main as allocate_main
from plan_search.cli.search import main as search_main
from plan_search.planner.search.request import ECHO_COUNTS_MAX, compact_counts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
TINY = ("name: tiny\nnum_layers: 4\nhidden_size: 256\nnum_heads: 4\nvocab_size: 1000\nseq_len: 512\n"
        "global_batch: 64\n")


def _runner():
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart already
        return CliRunner()


def test_compact_counts():
    assert compact_counts([8, 16, 24]) == [8, 16, 24]
    assert compact_counts(list(range(8, 8 * (ECHO_COUNTS_MAX + 2), 8))) == f"8..{8 * (ECHO_COUNTS_MAX + 1)}:8"
    irregular = [1, 2, 4] + list(range(8, 8 * 100, 8))
    assert compact_counts(irregular) == irregular  # not evenly spaced: the list
    import numpy as np

    assert compact_counts(np.arange(1, 10_000_001)) == "1..10000000:1"


def test_a_range_of_millions_of_gpu_counts_echoes_as_its_range(tmp_path):
    model = tmp_path / "tiny.yaml"
    model.write_text(TINY)
    r = _runner().invoke(search_main, ["--model", str(model), "--gpu", "h100", "--gpus", "1..2000000:1",
                                       "--time-limit", "3", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert len(r.stdout) < 2_000_000, len(r.stdout)  # the list alone was ~17 MB
    doc = json.loads(r.stdout)
    assert doc["inputs"]["gpu_counts"] == {"h100-sxm": "1..2000000:1"}
    assert doc["front"] and all(1 <= p["plan"]["num_gpus"] <= 2_000_000 for p in doc["front"])


@pytest.mark.parametrize("limit", ["inf", "0", "nan", "1e9", "-1"])
def test_time_limit_out_of_range_states_the_range(limit):
    r = _runner().invoke(search_main, ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "64",
                                       "--time-limit", limit])
    assert r.exit_code == 2, r.output
    assert "--time-limit" in r.stderr and "must be a number of seconds in (0, 86400]" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text, suffix, key",
    [
        ('{"model": "llama3.1-8b", "gpu": "h100", "gpus": [64], "gpus": [8]}', ".json", "'gpus'"),
        ('{"model": "llama3.1-8b", "gpu": "h100", "knobs": {"tp": [2], "tp": [4]}}', ".json", "'tp'"),
        ("model: llama3.1-8b\ngpu: h100\ngpus: [64]\nknobs:\n  tp: 2\n  tp: 4\n", ".yaml", "'tp'"),
        ("model: llama3.1-8b\nmodel: gpt3\ngpu: h100\n", ".yaml", "'model'"),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path, text, suffix, key):
    path = tmp_path / f"req{suffix}"
    path.write_text(text)
    r = _runner().invoke(search_main, ["--request", str(path)])
    assert r.exit_code == 2, r.output
    assert f"key {key} is given twice in one mapping; keep one" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_model_file_with_a_key_twice_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(TINY + "num_layers: 8\n")
    r = _runner().invoke(search_main, ["--model", str(path), "--gpu", "h100", "--gpus", "8"])
    assert r.exit_code == 2 and "key 'num_layers' is given twice" in r.stderr, r.stderr


def test_a_yaml_merge_may_still_be_overridden(tmp_path):
    path = tmp_path / "req.yaml"
    path.write_text("model: llama3.1-8b\ngpu: h100\ngpus: [64]\ntime_limit_s: 5\nknobs:\n  <<: {tp: 2, pp: 1}\n"
                    "  tp: 4\n")
    r = _runner().invoke(search_main, ["--request", str(path)])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["request"]["knobs"]["tp"] == [4]


def test_allocate_cut_by_its_time_limit_exits_4(monkeypatch):
    """A result the limit cut is printed as usual and exits 4 with one 'cut:' line (a scheduler reading
    exit 0 took it as final). The cut is forced here (a search stopped), so the test cannot pass by load."""
    import plan_search.planner.allocate as alloc

    real = alloc.allocate

    def cut(*args, **kwargs):
        res = real(*args, **kwargs)
        solver = res.solver.model_copy(update={"proven_optimal": False, "searches_proven": False,
                                               "time_limited_jobs": ["chat-8b"]})
        return res.model_copy(update={"solver": solver})

    args = ["--pool", str(EXAMPLES / "pool.yaml"), "--jobs", str(EXAMPLES / "jobs.yaml"), "--time-limit", "60",
            "--format", "json"]
    r = _runner().invoke(allocate_main, args)
    assert r.exit_code == 0 and json.loads(r.stdout)["solver"]["proven_optimal"], r.stderr
    monkeypatch.setattr(alloc, "allocate", cut)
    r = _runner().invoke(allocate_main, args)
    assert r.exit_code == 4, (r.exit_code, r.stderr)
    assert json.loads(r.stdout)["solver"]["proven_optimal"] is False
    assert r.stderr.strip() == ("cut: the allocation is not proven optimal (the searches of 1 job(s) stopped or "
                                "skipped); raise --time-limit")


def test_allocate_exit_code_says_whether_the_limit_cut_it():
    """Unforced: with a short limit the code is 3 (nothing found), or 4 exactly when the result is not proven."""
    args = ["--pool", str(EXAMPLES / "pool.yaml"), "--jobs", str(EXAMPLES / "jobs.yaml"), "--time-limit", "0.5",
            "--format", "json"]
    r = _runner().invoke(allocate_main, args)
    assert r.exit_code in (0, 3, 4), (r.exit_code, r.stderr)
    if r.exit_code != 3:
        proven = json.loads(r.stdout)["solver"]["proven_optimal"]
        assert (r.exit_code == 4) == (not proven), (r.exit_code, proven)


def test_parquet_has_an_extra_and_says_so(monkeypatch):
    """plan-sweep offers Parquet; the 'parquet' extra installs pyarrow (and 'dev', which CI installs, too:
    tests/test_sweep.py's Parquet round trip runs there), and without it the refusal names the extra."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("pyarrow") for d in extras["parquet"])
    assert any(d.startswith("pyarrow") for d in extras["dev"])
    assert "the `parquet` extra pyarrow for\n`plan-sweep --format parquet`" in (ROOT / "README.md").read_text()
    import importlib

    from plan_search.models.io import InputError
    from plan_search.planner.sweep import require_parquet

    require_parquet()  # installed here: no error
    real = importlib.import_module

    def no_parquet(name, *args, **kwargs):
        if name in ("pyarrow", "fastparquet"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", no_parquet)
    with pytest.raises(InputError, match=r"pip install 'plan-search\[parquet\]'"):
        require_parquet()
