"""Regenerate (or check) the figures README.md and docs/*.md quote in their prose.

    python docs/figures.py            # rewrite every marked figure with its computed value
    python docs/figures.py --check    # exit 1 naming every figure that is stale

The command examples are docs/examples.py's; a figure *in a sentence or a table cell* is marked

    ... up to <!-- figure: gpt3-a100.max-gpus -->8,192<!-- /figure --> GPUs ...

(both comments are invisible once rendered) and computed here by the function of its name, from the
public API the commands use (``plan_search.search``: the same front, figures and pick as
``plan-search``, each search run once per call of this script). A marked text that differs from its
value is stale; an unknown name is an error; ``tests/test_readme_figures.py`` runs ``--check``, so a
prose figure cannot drift from the example it describes (README quoted 233,820 candidates of GPT-3's
default range where its example printed 251,532, and an efficiency of 81 % where the table said 87 %).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- figure: (?P<name>[\w.\-]+) -->(?P<text>.*?)<!-- /figure -->", re.S)


# ------------------------------------------------------------------ formatting (as the prose writes them)
def gpus(n: float) -> str:
    return f"{int(n):,}"


def days(d: float) -> str:
    """``176`` at 100 days and more, ``10.7`` below."""
    return f"{d:,.0f}" if d >= 100 else f"{d:.1f}"


def money(usd: float) -> str:
    """``$0.83M``, ``$1.47M``; ``$11.6M`` from ten million."""
    m = usd / 1e6
    return f"${m:.1f}M" if m >= 10 else f"${m:.2f}M"


def pct(x: float) -> str:
    return f"{100 * x:.0f}"


# ------------------------------------------------------------------ the searches the prose describes
@functools.lru_cache(maxsize=None)
def _search(model: str, gpu: str, tokens: str | None = None, **kw):
    import plan_search

    args = dict(model=model, gpu=[gpu], time_limit_s=120, **kw)  # not cut by a loaded machine: proven answers
    if tokens is not None:
        args["tokens"] = tokens
    return plan_search.search(**args)


def _front(res):
    return list(res.front)


def _cheapest(res):
    return min(_front(res), key=lambda p: (p.cost_usd, p.num_gpus))


def _fastest(res):
    return min(_front(res), key=lambda p: (p.days, p.num_gpus))


def _at(res, e: float):
    """The plan --min-efficiency e recommends: the fastest front point at scaling efficiency >= e."""
    return min((p for p in _front(res) if p.scaling_efficiency >= e - 1e-12), key=lambda p: (p.days, p.num_gpus))


# GPT-3 on A100s, no flags (README's first example: plan-search --model gpt3 --gpu a100)
def _gpt3():
    return _why("gpt3")  # 300B tokens: the default


def _fewest(res):
    return min(_front(res), key=lambda p: (p.num_gpus, p.days))


def _gpt3_counts():
    counts = next(iter(_gpt3().inputs.gpu_counts.values()))
    return counts if isinstance(counts, list) else None


# The "Why 80 %" table: plan-search --model M --gpu G --tokens T --min-efficiency E
WHY = {"gpt3": ("gpt3", "a100", "300B"), "llama8b": ("llama3.1-8b", "h100", "15T"),
       "llama70b": ("llama3.1-70b", "h100", "15T")}


def _why(key: str):
    model, gpu, tokens = WHY[key]
    return _search(model, gpu, tokens)


def _cell(p) -> str:
    return f"{gpus(p.num_gpus)}, {days(p.days)} d, {money(p.cost_usd)}"


def _why_figures() -> dict[str, Callable[[], str]]:
    out: dict[str, Callable[[], str]] = {}
    for key in WHY:
        out[f"why.{key}.cheapest"] = lambda key=key: (lambda p: f"{gpus(p.num_gpus)} GPUs, {days(p.days)} d, "
                                                                f"{money(p.cost_usd)}")(_cheapest(_why(key)))
        for e in (0.9, 0.8, 0.7):
            out[f"why.{key}.e{int(e * 10)}"] = lambda key=key, e=e: _cell(_at(_why(key), e))
        out[f"why.{key}.fastest"] = lambda key=key: (lambda p: f"{_cell(p)} (eff {pct(p.scaling_efficiency)} %)")(
            _fastest(_why(key)))
    return out


def _speedups() -> str:
    """At 80 %: how many times faster than the cheapest plan, the least and the most over the rows."""
    xs = [_cheapest(_why(k)).days / _at(_why(k), 0.8).days for k in WHY]
    return f"{min(xs):.0f}-{max(xs):.0f}"


def _step_up(key: str):
    """The next step up from the 80 % pick: the fastest plan (the old default)."""
    res = _why(key)
    pick, fast = _at(res, 0.8), _fastest(res)
    return pick, fast


FIGURES: dict[str, Callable[[], str]] = {
    # the first example's search
    "gpt3-a100.counts": lambda: gpus(len(_gpt3_counts())),
    "gpt3-a100.max-gpus": lambda: gpus(max(_gpt3_counts())),
    "gpt3-a100.candidates": lambda: gpus(_gpt3().stats.candidates),
    "gpt3-a100.fewest-gpus": lambda: gpus(_fewest(_gpt3()).num_gpus),
    "gpt3-a100.fewest-recompute-layers": lambda: str(_fewest(_gpt3()).plan.recompute_layers),
    "gpt3-a100.fewest-eff": lambda: pct(_fewest(_gpt3()).scaling_efficiency),
    "gpt3-a100.cheapest-over-fewest": lambda: f"{1 / _fewest(_gpt3()).scaling_efficiency:.2f}",
    "gpt3-a100.cheapest-gpus": lambda: gpus(_cheapest(_gpt3()).num_gpus),
    # the Why 80 % table and the sentences after it
    **_why_figures(),
    "why.speedups": _speedups,
    "why.llama8b.step-up-gpus": lambda: gpus(_step_up("llama8b")[1].num_gpus),
    "why.llama8b.pick-gpus": lambda: gpus(_step_up("llama8b")[0].num_gpus),
    "why.llama8b.step-up-days": lambda: (lambda a, b: f"{a.days - b.days:.0f}")(*_step_up("llama8b")),
    "why.llama8b.step-up-cost": lambda: (lambda a, b: f"+{100 * (b.cost_usd / a.cost_usd - 1):.0f}")(
        *_step_up("llama8b")),
    "why.llama70b.step-up-gpus": lambda: gpus(_step_up("llama70b")[1].num_gpus),
    "why.llama70b.pick-gpus": lambda: gpus(_step_up("llama70b")[0].num_gpus),
    "why.llama70b.step-up-days": lambda: (lambda a, b: f"{a.days - b.days:.0f}")(*_step_up("llama70b")),
    "why.llama70b.step-up-cost": lambda: (lambda a, b: f"+{100 * (b.cost_usd / a.cost_usd - 1):.0f}")(
        *_step_up("llama70b")),
    "why.llama70b.step-up-eff": lambda: pct(_step_up("llama70b")[1].scaling_efficiency),
    "why.gpt3.e9-gpus": lambda: gpus(_at(_why("gpt3"), 0.9).num_gpus),
    # "How the plan is chosen": plan-search --model gpt3 --gpu a100 --tokens 1T --deadline-days 30
    "deadline.gpt3-a100-1t-30d": lambda: (lambda e: f"{gpus(e.plan.num_gpus)} GPUs, {e.run.days:.1f} days, "
                                                    f"{money(e.run.cost_usd)}")(_deadline().recommended),
}


def _deadline():
    return _search("gpt3", "a100", "1T", deadline_days=30)


def process(path: Path, check: bool) -> list[str]:
    """The stale figures of ``path`` ('file: name: shown -> value'); rewritten unless ``check``."""
    text = path.read_text(encoding="utf-8")
    stale: list[str] = []

    def replace(m: re.Match) -> str:
        name = m.group("name")
        if name not in FIGURES:
            raise SystemExit(f"figures: {path.name}: unknown figure {name!r} (docs/figures.py FIGURES)")
        value = FIGURES[name]()
        if value != m.group("text"):
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            stale.append(f"{where}: {name}: {m.group('text')!r} -> {value!r}")
        return f"<!-- figure: {name} -->{value}<!-- /figure -->"

    new = MARKER.sub(replace, text)
    if not check and new != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, path)
    return stale


def marked(paths=FILES) -> list[tuple[Path, str]]:
    """Every (file, figure name) marked."""
    return [(p, m.group("name")) for p in paths for m in MARKER.finditer(p.read_text(encoding="utf-8"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if any figure is stale")
    args = ap.parse_args(argv)
    stale = [s for f in FILES for s in process(f, args.check)]
    if args.check and stale:
        print("stale figures (run python docs/figures.py):\n  " + "\n  ".join(stale))
        return 1
    print(f"{len(marked())} figures {'checked' if args.check else 'written'}"
          + (f"; {len(stale)} changed" if stale and not args.check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
