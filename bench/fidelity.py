"""Fidelity benchmark: the cost model against every published run with a complete configuration.

    python bench/fidelity.py            # built-in (catalog) efficiencies, per-row table, summaries
    python bench/fidelity.py --loso     # + leave-one-source-out refits
    python bench/fidelity.py --refit    # refit on all runs first (what the catalog values came from)

Per row: measured and predicted step time, signed error, the plan the planner used, and which
knobs the source left out (the planner picked those within the published degrees: the fastest
plan that fits). Then the median and 90th-percentile absolute error per source and overall.
Floors (issue 3): overall median <= 8%, p90 <= 15%, every source's median <= 12%, and the
left-out source's median <= 12% when fitting on the others.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path


from plan_search.hardware.catalog import get_cluster  # noqa: E402
from plan_search.hardware.spec import EfficiencySpec  # noqa: E402
from plan_search.planner.costmodel.arrays import PlanArrays  # noqa: E402
from plan_search.planner.calibration import error_summary, fit_efficiency, load_runs, predict  # noqa: E402
from plan_search.planner.costmodel.evaluate import evaluate  # noqa: E402




#: Systems that reuse the fit of another system's chip (same compute die and clocks).
SIBLINGS = {"a100-80gb": ["a100-40gb"], "h100-sxm": ["h200"]}
CATALOG = Path(__file__).resolve().parents[1] / "hardware" / "catalog.yaml"


def write_catalog(fitted: dict, records) -> None:
    """Replace the ``efficiency:`` block of each fitted system (and its siblings) in the catalog."""
    import datetime
    import re

    text = CATALOG.read_text()
    default = EfficiencySpec().model_dump()
    for g, eff in fitted.items():
        n = sum(1 for r in records if r.gpu == g)
        groups = ", ".join(sorted({r.group for r in records if r.gpu == g}))
        values = {k: v for k, v in eff.model_dump().items() if k != "source" and v != default[k]}
        for name in [g] + SIBLINGS.get(g, []):
            note = "" if name == g else f" Reused for {name}: same compute die as {g}; its memory is priced separately."
            src = (f"fitted {datetime.date.today()} by python bench/fidelity.py --refit --write-catalog "
                   f"(plan-calibrate's fit) on the {n} {g} rows of planner/published_runs.csv ({groups}); "
                   f"terms not listed are EfficiencySpec defaults (priors; attention_eff is the cited "
                   f"FlashAttention prior, not fitted).{note}")
            block = "  efficiency:\n" + "".join(f"    {k}: {float(f'{v:.4g}')}\n" for k, v in values.items())
            block += f'    source: "{src}"\n'
            m = re.search(rf"^{re.escape(name)}:\n", text, re.M)
            if not m:
                continue
            end = re.search(r"^\S", text[m.end():], re.M)
            stop = m.end() + (end.start() if end else len(text) - m.end())
            entry = text[m.end():stop]
            entry = re.sub(r"^  efficiency:\n(?:^    .*\n)*", "", entry, flags=re.M)
            price = re.search(r"^  price_per_gpu_hour_usd:", entry, re.M)
            entry = entry[: price.start()] + block + entry[price.start():]
            text = text[: m.end()] + entry + text[stop:]
    CATALOG.write_text(text)
    print(f"wrote fitted efficiencies of {', '.join(fitted)} into {CATALOG}")


def summarize(preds, title: str) -> dict:
    by = defaultdict(list)
    for p in preds:
        by[p.record.group].append(p)
    print(f"\n{title}")
    print(f"{'source':24s} {'n':>3s} {'median':>8s} {'p90':>8s}")
    out = {}
    for g in sorted(by):
        s = error_summary(by[g])
        out[g] = s
        print(f"{g:24s} {s['n']:3d} {100 * s['median']:7.1f}% {100 * s['p90']:7.1f}%")
    s = error_summary(preds)
    out["overall"] = s
    print(f"{'overall':24s} {s['n']:3d} {100 * s['median']:7.1f}% {100 * s['p90']:7.1f}%")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loso", action="store_true", help="leave-one-source-out refits")
    ap.add_argument("--refit", action="store_true", help="refit every GPU on all its runs first")
    ap.add_argument("--quiet", action="store_true", help="no per-row table")
    ap.add_argument("--verbose", action="store_true", help="per-row errors and fitted terms of each refit")
    ap.add_argument("--iters", type=int, default=400, help="Nelder-Mead iterations per fit")
    ap.add_argument("--write-catalog", action="store_true",
                    help="with --refit: write the fitted terms into hardware/catalog.yaml (the built-in values)")
    args = ap.parse_args()

    records = load_runs()
    gpus = sorted({r.gpu for r in records})
    clusters = {g: get_cluster(g) for g in gpus}
    if args.refit:
        for g in gpus:
            t0 = time.perf_counter()
            eff = fit_efficiency([r for r in records if r.gpu == g], clusters[g], iters=args.iters)
            clusters[g] = clusters[g].model_copy(update={"efficiency": eff})
            print(f"refit {g} in {time.perf_counter() - t0:.1f} s: {eff.model_dump()}")
    if args.refit and args.write_catalog:
        write_catalog({g: clusters[g].efficiency for g in gpus}, records)
    preds = [predict(r, clusters[r.gpu]) for r in records]
    if not args.quiet:
        print(f"{'#':>3s} {'source':20s} {'run':40s} {'measured':>9s} {'predicted':>9s} {'error':>7s}  plan [free knobs]")
        for p in preds:
            r = p.record
            free = f" [picked: {','.join(r.free_knobs)}]" if r.free_knobs else ""
            flag = "" if p.feasible else " (no candidate fits!)"
            print(
                f"{r.index:3d} {r.group[:20]:20s} {r.label[:40]:40s} {r.measured_step_s:9.3f} "
                f"{p.predicted_step_s:9.3f} {100 * p.error:+6.1f}%  {p.plan.label}{free}{flag}"
            )
        print("(measured step time from: " + ", ".join(sorted({r.measured_from for r in records})) + ")")
    with_memory = [r for r in records if r.measured_memory_gb]
    if with_memory:
        print(f"\nmemory where measured ({len(with_memory)} rows):")
        for p in preds:
            if p.record.measured_memory_gb:
                e = evaluate(p.record.model, clusters[p.record.gpu], PlanArrays.from_plans([p.plan], p.record.model.num_layers))
                got = float(e["memory_peak_gib"][0]) * 2**30 / 1e9
                print(f"  {p.record.label[:40]:40s} measured {p.record.measured_memory_gb:7.1f} GB, "
                      f"predicted {got:7.1f} GB ({100 * (got / p.record.measured_memory_gb - 1):+.1f}%)")
    else:
        print("memory: no row of the runs file has a measured memory figure; memory is not validated here")
    summary = summarize(preds, "Built-in efficiencies" + (" (refit)" if args.refit else ""))
    ok = (
        summary["overall"]["median"] <= 0.08
        and summary["overall"]["p90"] <= 0.15
        and all(v["median"] <= 0.12 for k, v in summary.items() if k != "overall")
    )
    print(f"floors (median<=8%, p90<=15%, each source median<=12%): {'MET' if ok else 'NOT MET'}")

    if args.loso:
        print("\nLeave-one-source-out (fit on the other sources of the same GPU, predict the left-out one)")
        print(f"{'left out':24s} {'n':>3s} {'median':>8s} {'p90':>8s}")
        worst = 0.0
        for g in sorted({r.group for r in records}):
            test = [r for r in records if r.group == g]
            gpu = test[0].gpu
            train = [r for r in records if r.group != g and r.gpu == gpu]
            # Start from the generic priors, not the catalog's values (fitted on every source,
            # the left-out one included): nothing of the left-out source leaks into its fit.
            base = get_cluster(gpu).model_copy(update={"efficiency": EfficiencySpec()})
            eff = fit_efficiency(train, base, iters=args.iters)
            c = base.model_copy(update={"efficiency": eff})
            lp = [predict(r, c) for r in test]
            s = error_summary(lp)
            worst = max(worst, s["median"])
            print(f"{g:24s} {s['n']:3d} {100 * s['median']:7.1f}% {100 * s['p90']:7.1f}%")
            if args.verbose:
                terms = {k: round(v, 3) for k, v in eff.model_dump().items() if isinstance(v, float)}
                print(f"    fitted without it: {terms}")
                print("    " + " ".join(f"{p.record.index}:{100 * p.error:+.0f}%" for p in lp))
        print(f"leave-one-source-out floor (each <= 12%): {'MET' if worst <= 0.12 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
