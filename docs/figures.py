"""Regenerate (or check) the figures README.md and docs/*.md quote in their prose.

    python docs/figures.py            # rewrite every marked figure with its computed value
    python docs/figures.py --check    # exit 1 naming every figure that is stale

The command examples are docs/examples.py's; a figure *in a sentence or a table cell* is marked

    ... up to <!-- figure: gpt3-a100.max-gpus -->8,192<!-- /figure --> GPUs ...

(both comments are invisible once rendered) and computed here by the function of its name, from the
public API the commands use (``plan_search.search``: the same front, figures and pick as
``plan-search``, each search run once per call of this script), or read from the output of the README
example the sentence describes (:func:`example`; run ``docs/examples.py`` first, then this script). A marked text that differs from its
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


# ------------------------------------------------------------------ figures read from the examples' own output
# The README's command examples are real output, kept current by docs/examples.py and checked by
# tests/test_docs.py; a sentence that quotes one reads its figure from that block here (no search run).
@functools.lru_cache(maxsize=None)
def example(command: str) -> str:
    """The output shown for ``command`` (an example of README.md), without its ``$`` lines."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_examples", ROOT / "docs" / "examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for m in mod.DIRECTIVE.finditer((ROOT / "README.md").read_text(encoding="utf-8")):
        if m.group("cmd") == command:
            return "\n".join(line for line in m.group("body").splitlines() if not line.startswith("$ "))
    raise SystemExit(f"figures: no README example runs {command!r}")


def table(command: str, head: str) -> list[dict]:
    """The rows of the example's table whose header line starts with ``head`` (columns by the header's
    words; a row's extra words, the landmarks, under 'notes')."""
    lines = example(command).splitlines()
    i = next(k for k, line in enumerate(lines) if line.lstrip().startswith(head.strip()) and k + 1 < len(lines)
             and lines[k + 1].strip() and set(lines[k + 1].strip()) <= {"-", " "})  # a header: a rule under it
    cols = lines[i].replace("step s", "step_s").split()  # one column, two words in the header
    rows = []
    for line in lines[i + 2:]:
        cells = line.split()
        if len(cells) < len(cols) or set(line.strip()) <= {"-", " "}:
            break
        row = dict(zip(cols, cells))
        row["notes"] = " ".join(cells[len(cols):])
        rows.append(row)
    return rows


def _row(rows: list[dict], **match) -> dict:
    return next(r for r in rows if all(r.get(k) == v for k, v in match.items()))


def recompute_phrase(rc: str) -> str:
    """``f4`` -> 'full recomputation of 4 layers per stage' (the tables' rc column)."""
    if rc.startswith("f") and rc[1:].isdigit():
        return f"full recomputation of {rc[1:]} layers per stage"
    return {"full": "full recomputation", "none": "no recomputation", "sel": "selective recomputation"}.get(rc, rc)


FEWEST_175B = "plan-sweep fewest-175b.yaml -o fewest-175b.csv --summary -q"
FEWEST_1T = "plan-sweep fewest-1t.yaml -o fewest-1t.csv --summary -q"
THREE_TYPES = "plan-search --model gpt3-175b --gpu a100,h100,h200 --deadline-days 30 --time-limit 60"
DEADLINE_4 = "plan-search --model gpt3.yaml --gpu a100 --gpus 256,512,1024,2048 --deadline-days 30"
FIRST = "plan-search --model gpt3 --gpu a100 --time-limit 60"  # the README's first example (a limit a loaded machine cannot cut)


def _sweep_row(command: str, gpu: str) -> dict:
    return _row(table(command, "# GPU"), GPU=gpu)


def _layout(r: dict) -> str:
    return f"tp{r['tp']} pp{r['pp']}"


def _per_gpu(command: str) -> str:
    """The recommended plan's tokens/s per GPU ('(488/GPU)')."""
    import re as _re

    return _re.search(r"tokens/s \(([\d,]+)/GPU\)", example(command)).group(1)


def _front_rows(command: str) -> list[dict]:
    return table(command, "GPUs")


def _money_k(text: str) -> float:
    """'512k' / '1.00M' -> dollars."""
    return float(text[:-1]) * (1e3 if text.endswith("k") else 1e6)


def _examples_figures() -> dict[str, Callable[[], str]]:
    f: dict[str, Callable[[], str]] = {}
    for name, gpu in (("a100", "a100-80gb"), ("h100", "h100-sxm"), ("h200", "h200")):
        for cmd, tag in ((FEWEST_175B, "175b"), (FEWEST_1T, "1t")):
            f[f"fewest-{tag}.{name}.gpus"] = lambda cmd=cmd, gpu=gpu: _sweep_row(cmd, gpu)["GPUs"]
            f[f"fewest-{tag}.{name}.layout"] = lambda cmd=cmd, gpu=gpu: _layout(_sweep_row(cmd, gpu))
            f[f"fewest-{tag}.{name}.recompute"] = lambda cmd=cmd, gpu=gpu: recompute_phrase(_sweep_row(cmd, gpu)["rc"])
    three = lambda: _front_rows(THREE_TYPES)  # noqa: E731
    cheapest = lambda: next(r for r in three() if "cheapest" in r["notes"])  # noqa: E731
    h200_same = lambda: _row(three(), GPUs=cheapest()["GPUs"], system="h200")  # noqa: E731
    balanced = lambda: next(r for r in three() if "balanced" in r["notes"])  # noqa: E731
    f["types.cheapest.gpus"] = lambda: cheapest()["GPUs"]
    f["types.cheapest.system"] = lambda: {"h100-sxm": "H100s", "h200": "H200s", "a100-80gb": "A100s"}[cheapest()["system"]]
    f["types.cheapest.cost"] = lambda: "$" + cheapest()["$"]
    f["types.h200.days"] = lambda: h200_same()["days"]
    f["types.h200.more"] = lambda: f"{100 * (_money_k(h200_same()['$']) / _money_k(cheapest()['$']) - 1):.0f}"

    def a100_cheapest():
        import re as _re

        m = _re.search(r"a100-80gb: dominated.*?its cheapest (\$[\d.]+[kM]) in ([\d.]+) days on ([\d,]+)",
                       " ".join(example(THREE_TYPES).split()))
        return m

    f["types.a100.gpus"] = lambda: a100_cheapest().group(3)
    f["types.a100.cost"] = lambda: a100_cheapest().group(1)
    f["types.a100.per-gpu"] = lambda: _per_gpu(DEADLINE_4)
    f["types.h100.per-gpu"] = lambda: _per_gpu(THREE_TYPES)
    f["types.balanced.gpus"] = lambda: balanced()["GPUs"]
    f["types.balanced.days"] = lambda: balanced()["days"]
    f["types.balanced.cost"] = lambda: "$" + balanced()["$"]
    # the 30-day example on four counts: the pick and the next count up
    four = lambda: _front_rows(DEADLINE_4)  # noqa: E731
    pick = lambda: next(r for r in four() if r["notes"].startswith("*"))  # noqa: E731
    up = lambda: next(r for r in four() if int(r["GPUs"].replace(",", "")) > int(pick()["GPUs"].replace(",", "")))  # noqa: E731
    f["deadline4.pick"] = lambda: pick()["GPUs"]
    f["deadline4.up"] = lambda: up()["GPUs"]
    f["deadline4.up-more"] = lambda: f"{100 * (_money_k(up()['$']) / _money_k(pick()['$']) - 1):.0f}"
    # the first example's cheapest plan: its uneven pipeline split as the pp column shows it
    first_cheapest = lambda: next(r for r in table(FIRST, "GPUs") if "cheapest" in r["notes"])  # noqa: E731
    f["first.cheapest.pp"] = lambda: first_cheapest()["pp"]
    f["first.cheapest.stages"] = lambda: first_cheapest()["pp"].split(":")[0]
    f["first.cheapest.ends"] = lambda: first_cheapest()["pp"].split(":")[1]
    # question 2: how time and cost change as the GPU count grows (the --all front on eight H100 counts)
    grow = lambda: _front_rows(GROWTH)  # noqa: E731
    n = lambda r: int(r["GPUs"].replace(",", ""))  # noqa: E731
    pick2 = lambda: next(r for r in grow() if r["notes"].startswith("*"))  # noqa: E731
    cheap2 = lambda: next(r for r in grow() if "cheapest" in r["notes"])  # noqa: E731

    def doublings_upto_pick():
        rows = [r for r in grow() if n(cheap2()) <= n(r) <= n(pick2())]
        return [(_money_k(b["$"]) / _money_k(a["$"]) - 1) for a, b in zip(rows, rows[1:])]

    def after(k: int):
        """The k-th count past the pick: its speed-up over the one before and its extra cost."""
        rows = sorted(grow(), key=n)
        i = rows.index(pick2()) + k
        a, b = rows[i - 1], rows[i]
        return float(a["days"]) / float(b["days"]), _money_k(b["$"]) / _money_k(a["$"]) - 1, b

    f["growth.more-money"] = lambda: (lambda xs: f"{100 * min(xs):.0f}-{100 * max(xs):.0f}")(doublings_upto_pick())
    f["growth.pick.gpus"] = lambda: pick2()["GPUs"]
    f["growth.pick.days"] = lambda: pick2()["days"]
    f["growth.pick.cost"] = lambda: "$" + pick2()["$"]
    f["growth.cheapest.days"] = lambda: cheap2()["days"]
    f["growth.cheapest.cost"] = lambda: "$" + cheap2()["$"]
    f["growth.cheapest.gpus"] = lambda: cheap2()["GPUs"]
    for k in (1, 2, 3):
        f[f"growth.after{k}.gpus"] = lambda k=k: after(k)[2]["GPUs"]
        f[f"growth.after{k}.speedup"] = lambda k=k: f"{after(k)[0]:.2f}x"
        f[f"growth.after{k}.more"] = lambda k=k: f"+{100 * after(k)[1]:.0f}"
    f["growth.after1.eff"] = lambda: after(1)[2]["eff"].rstrip("%")
    f["growth.after3.cost"] = lambda: "$" + after(3)[2]["$"]
    f["growth.after3.days"] = lambda: after(3)[2]["days"]
    return f


@functools.lru_cache(maxsize=None)
def _bubble_16k():
    """plan-estimate --model gpt3-175b --gpu h100-sxm --gpus 16384 --tp 8 --pp 32 --recompute none (question 2)."""
    import plan_search

    return plan_search.estimate("gpt3-175b", "h100-sxm", num_gpus=16384, tp=8, pp=32, recompute="none")


FIGURES["growth.16k.bubble"] = lambda: f"{_bubble_16k().time.bubble_s:.2f}"
FIGURES["growth.16k.step"] = lambda: f"{_bubble_16k().step_time_s:.2f}"
GROWTH = "plan-search --model gpt3-175b --gpu h100-sxm --gpus 128,256,512,1024,2048,4096,8192,16384 --all"
FIGURES.update(_examples_figures())


@functools.lru_cache(maxsize=None)
def _goodput() -> dict:
    """README question 7: bench/goodput.py's figures (issue 25), computed once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_goodput", ROOT / "bench" / "goodput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = dict(mod.measure())
    f["first_order_65k"] = mod.first_order(f["e65"])
    return f


def _goodput_figures() -> dict[str, Callable[[], str]]:
    g = lambda key: _goodput()[key]  # noqa: E731
    out: dict[str, Callable[[], str]] = {
        "goodput.llama3": lambda: f"{g('llama3').goodput:.3f}",
        "goodput.llama3-steps": lambda: str(g("llama3").checkpoint_interval_steps),
        "goodput.llama3-interval": lambda: f"{g('llama3').checkpoint_interval_s:.0f}",
        "goodput.sync-16k": lambda: f"{g('sync')[16_384].goodput:.3f}",
        "goodput.mtbf-65k": lambda: f"{g('e65').recovery.mtbf_h:.2f}",
        "goodput.65k": lambda: f"{g('e65').goodput:.3f}",
        "goodput.first-order-65k": lambda: f"{g('first_order_65k'):.3f}",
        "goodput.deadline": lambda: f"{g('deadline'):g}",
        "goodput.blind-gpus": lambda: gpus(g("off_d").recommended.plan.num_gpus),
        "goodput.blind-days": lambda: f"{g('off_d').recommended.run.days:.2f}",
        "goodput.blind-priced-days": lambda: f"{g('blind_priced').run.days:.2f}",
        "goodput.pick-gpus": lambda: gpus(g("on_d").recommended.plan.num_gpus),
        "goodput.pick-days": lambda: f"{g('on_d').recommended.run.days:.2f}",
    }
    for n in (2048, 8192, 32_768, 65_536):
        out[f"goodput.async-{n}"] = lambda n=n: f"{g('async')[n].goodput:.3f}"
    return out


FIGURES.update(_goodput_figures())


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
