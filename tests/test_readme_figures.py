"""The fidelity figures README.md prints are the benchmarks' own output: each table cell and
sentence figure below is compared with what ``bench/fidelity.py``, ``bench/memory_fidelity.py``
and ``bench/moe_fidelity.py`` print on this tree (built-in efficiencies; a few seconds each).
The leave-one-out columns come from the benchmarks' refitting modes (``--loso``, ``--lomo``,
minutes to a quarter of an hour) and are not re-run here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: README's row labels (their start) -> the source names bench/fidelity.py prints
SOURCES = {
    "Narayanan et al. 2021, Table 1": "narayanan2021-table1",
    "Narayanan et al. 2021, Table 2": "narayanan2021-table2",
    "Korthikanti et al. 2022": "korthikanti2022",
    "Megatron-Core r0.8": "megatron-core-2024",
    "NeMo 24.07": "nemo-24.07",
    "NeMo long-sequence": "nemo-long-seq",
    "Megatron-Bridge": "megatron-bridge",
    "NeMo AutoModel": "nemo-automodel",
    "torchtitan 2024-12": "torchtitan-2024-12",
    "all": "overall",
}


def _bench(*args: str) -> str:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: a floor not met, still a report
    return out.stdout


@pytest.fixture(scope="module")
def dense() -> dict[str, tuple[str, str, str]]:
    text = _bench("bench/fidelity.py", "--quiet", "--no-memory")
    block = text.split("per source", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in block.splitlines():
        m = re.match(r"^(\S+)\s+(\d+)\s+([\d.]+%)\s+([\d.]+%)", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    assert "overall" in rows, text[-2000:]
    return rows


def _readme_rows() -> dict[str, tuple[str, str, str]]:
    table = README.split("| source | runs | median | p90 |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or set(cells[0]) <= {"-"}:
            continue
        key = next((v for k, v in SOURCES.items() if cells[0].startswith(k)), None)
        assert key is not None, f"README row {cells[0]!r} names no benchmark source"
        rows[key] = (cells[1], cells[2], cells[3])
    return rows


def test_readme_dense_table_is_the_benchmarks_output(dense):
    readme = _readme_rows()
    assert set(readme) == set(dense), (sorted(readme), sorted(dense))
    for key, (n, median, p90) in readme.items():
        assert (n, median, p90) == dense[key], f"README row {key}: {n} {median} {p90} vs bench {dense[key]}"


def test_readme_memory_figures_are_the_benchmarks_output():
    text = _bench("bench/memory_fidelity.py")
    m = re.search(r"median \|error\| ([\d.]+)%.*?max under-prediction (-[\d.]+)%", text)
    assert m, text[-2000:]
    assert f"predicted within a median {m.group(1)} % (worst {m.group(2)} %)" in " ".join(README.split())


def test_readme_moe_figures_are_the_benchmarks_output():
    text = _bench("bench/moe_fidelity.py")
    m = re.search(r"== all MoE rows: n=\s*(\d+)\s+median\s+([\d.]+)%\s+p90\s+([\d.]+)%", text)
    assert m, text[-2000:]
    n, median, p90 = m.groups()
    flat = " ".join(README.split())
    assert f"over the {n} published MoE runs with a complete configuration the median error is {median} % " \
           f"and the p90 {p90} %" in flat


# ------------------------------------------------------------------ prose figures (docs/figures.py)
def _figures_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "docs" / "figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prose_figures_are_computed_and_current():
    """Issue 24: README's prose quoted 233,820 candidates where its first example printed 251,532, an
    efficiency of 81 % where the table said 87 %, and a Llama-3.1-70B row of the 'Why 80 %' table from an
    older model. Each marked figure is recomputed from the searches it describes (docs/figures.py)."""
    p = subprocess.run([sys.executable, str(ROOT / "docs" / "figures.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    names = {n for _, n in _figures_module().marked()}
    # the figures the issue found drifting are marked, with every cell of the 'Why 80 %' table
    assert {"gpt3-a100.candidates", "gpt3-a100.fewest-eff", "why.llama70b.cheapest", "why.llama70b.e9",
            "why.llama70b.e8", "why.llama70b.e7", "why.llama70b.fastest"} <= names, sorted(names)
    # sentences that quote an example's output read it from that block (question 1's minimums and question 6's
    # GPU types had drifted: 'tp4 pp6' for a tp8 pp3 H200 plan, $545k for $512k ...)
    assert {"fewest-175b.h200.layout", "fewest-1t.h200.recompute", "types.cheapest.cost", "types.h200.more",
            "deadline4.up-more", "first.cheapest.pp", "growth.pick.cost", "growth.after3.more",
            "growth.16k.bubble"} <= names, sorted(names)
    assert all(f"why.{m}.{c}" in names for m in ("gpt3", "llama8b", "llama70b")
               for c in ("cheapest", "e9", "e8", "e7", "fastest"))


def test_a_stale_prose_figure_is_caught(tmp_path):
    fig = _figures_module()
    doc = tmp_path / "doc.md"
    doc.write_text("up to <!-- figure: gpt3-a100.max-gpus -->8,193<!-- /figure --> GPUs\n")
    fig.FIGURES = {**fig.FIGURES, "gpt3-a100.max-gpus": lambda: "8,192"}  # no search needed for the mechanism
    assert fig.process(doc, check=True) == [f"{doc}: gpt3-a100.max-gpus: '8,193' -> '8,192'"]
    assert "8,193" in doc.read_text()
    assert fig.process(doc, check=False) and "-->8,192<!--" in doc.read_text()
    assert fig.process(doc, check=True) == []
    doc.write_text("<!-- figure: no-such -->1<!-- /figure -->")
    with pytest.raises(SystemExit, match="unknown figure 'no-such'"):
        fig.process(doc, check=True)
