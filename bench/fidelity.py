"""Fidelity benchmark: step time of the cost model against every dense published run with a
complete configuration (``planner/published_runs.csv`` and the dense rows of
``planner/runs_2026_12.csv``).

    python bench/fidelity.py             # built-in efficiencies (catalog + hardware/efficiency_profiles.yaml)
    python bench/fidelity.py --loso      # + leave-one-source-out: refit without a source, predict it
    python bench/fidelity.py --loso-source torchtitan-2024-12   # one held-out unit only (per row)
    python bench/fidelity.py --refit     # refit every profile on all rows first (what the built-in values came from)
    python bench/fidelity.py --refit --write-profiles   # write the torchtitan/deepspeed profiles
    python bench/fidelity.py --refit --write-catalog    # write the megatron profile into hardware/catalog.yaml

Each row is predicted with its framework's kernel-efficiency profile (``hardware/profiles.py``:
``megatron`` for Megatron-LM/NeMo/Megatron-Bridge/NeMo AutoModel, ``torchtitan`` for torchtitan,
``deepspeed`` for the DeepSpeed ZeRO-3 rows of Narayanan et al. Table 2). Per row: measured and
predicted step time, signed error, the plan the planner used and the knobs the source left out
(the planner takes the fastest plan that fits within the published degrees). Then the median and
90th-percentile absolute error per source, per GPU type and overall, and which rows each fitted
term saw.

The fits (:func:`fit_all`, one recipe for the built-in values and for every leave-one-out refit):

1. ``megatron`` on each system with at least ``MIN_ROWS_FOR_ALL_TERMS`` rows (A100, H100): the
   terms its rows identify (``planner.calibration._relevant_terms``), generic priors;
2. ``megatron`` on the other systems (GB200, GB300: a few rows each): only ``gemm_eff_max``, the
   rest from the reference system's fit (``h100-sxm``), which is also the prior;
3. ``torchtitan`` (H100 rows): the identifiable terms plus ``attention_eff`` (its long-sequence CP
   rows identify SDPA's attention efficiency), prior the ``h100-sxm`` megatron fit;
4. ``deepspeed`` (A100 ZeRO-3 rows): ``gemm_eff_max`` and ``zero3_bw_eff`` with flat per-module
   ZeRO-3 collectives (``zero3_flat``), the rest from the ``a100-80gb`` megatron fit.

The rows state how their sources ran (``planner.calibration.SOURCE_CONVENTIONS``); the Megatron-Bridge
rows, for one, Transformer Engine's attention at cuDNN 9.19 (``Plan.cudnn_sdpa``: a measured release
ratio on the profile's rate, nothing fitted; ``bench/bridge_diagnosis.py``).

A profile with no rows left (its rows held out) is its prior: the held-out rows are predicted by
what the other sources carry over. Floors (issue 12): overall median <= 5%, p90 <= 12%, every
source's median <= 8%; every held-out unit's median <= 10%.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.profiles import FA2_OVER_CUDNN, FAMILY_STRUCTURE, PROFILES_FILE, family_prior, for_framework
from plan_search.hardware.spec import EfficiencySpec
from plan_search.planner.calibration import (MIN_ROWS_FOR_ALL_TERMS, _relevant_terms, error_summary,
                                             fit_efficiency, load_all_runs, predict)

REFERENCE = "h100-sxm"
#: Systems that reuse the fit of another system's chip (same compute die and clocks).
SIBLINGS = {"a100-80gb": ["a100-40gb"], "h100-sxm": ["h200", "h100-96gb-500w"]}
CATALOG = Path(__file__).resolve().parents[1] / "hardware" / "catalog.yaml"
#: Terms the torchtitan fit moves from its family prior (the rest: the prior's), each a kernel or
#: overlap mechanism of its own: its GEMMs (torchao Float8 through torch._scaled_mm, compiled),
#: and its AsyncTP (SymmetricMemory micro-pipelining, not TE's userbuffers). Its attention kernel
#: (FlashAttention-2 where TE runs cuDNN) is a sourced ratio of the family prior, not fitted
#: (hardware.profiles.FA2_OVER_CUDNN).
TORCHTITAN_TERMS = ["gemm_eff_max", "tp_overlap"]
FLOORS = {"median": 0.05, "p90": 0.12, "source_median": 0.08, "loso_median": 0.10}


def _rows(recs) -> str:
    return ",".join(str(r.index) for r in sorted(recs, key=lambda r: r.index))


_CACHE: dict = {}


def _fit(recs, cluster, iters, terms=None, prior=None):
    """fit_efficiency, memoised on (rows, system, terms, prior): a leave-one-out refit whose rows
    and prior did not change reuses the fit (same inputs, same deterministic result)."""
    key = (tuple(sorted((r.index, r.measured_step_s) for r in recs)), cluster.name, cluster.efficiency.model_dump_json(),
           tuple(terms) if terms else None, prior.model_dump_json() if prior else None, iters)
    if key not in _CACHE:
        _CACHE[key] = fit_efficiency(recs, cluster, terms=terms, iters=iters, prior=prior)
    return _CACHE[key]


def fit_all(records, iters: int = 300, systems=()) -> tuple[dict, dict]:
    """``{(system, profile): EfficiencySpec}`` fitted on ``records`` by the recipe of the module
    docstring, and ``{(system, profile): (terms, rows, prior)}`` saying what each fit saw.
    ``systems``: further systems to give a profile (their rows held out: the recipe's prior)."""
    by = defaultdict(list)
    for r in records:
        by[(r.gpu, r.profile)].append(r)
    fits, saw = {}, {}
    systems = sorted({r.gpu for r in records} | {REFERENCE} | set(systems))
    # 1. megatron on the well-covered systems (generic priors)
    for g in systems:
        recs = by.get((g, "megatron"), [])
        if len(recs) >= MIN_ROWS_FOR_ALL_TERMS:
            fits[(g, "megatron")] = _fit(recs, get_cluster(g).model_copy(
                update={"efficiency": EfficiencySpec()}), iters)
            saw[(g, "megatron")] = (_relevant_terms(recs), _rows(recs), "EfficiencySpec defaults")
    ref = fits.get((REFERENCE, "megatron"), get_cluster(REFERENCE).efficiency)
    # 2. megatron on the thinly covered systems: the reference fit carried over, gemm_eff_max fitted
    for g in systems:
        if (g, "megatron") in fits:
            continue
        recs = by.get((g, "megatron"), [])
        prior = ref.model_copy(update={"source": f"{REFERENCE} megatron fit carried to {g}"})
        if recs:
            fits[(g, "megatron")] = _fit(recs, get_cluster(g), iters, prior=prior)
            saw[(g, "megatron")] = (["gemm_eff_max"], _rows(recs), f"{REFERENCE} megatron fit")
        else:
            fits[(g, "megatron")] = prior
            saw[(g, "megatron")] = ([], "", f"{REFERENCE} megatron fit (no rows of its own)")
    # 3. torchtitan: prior the system's (or the reference's) megatron fit
    for g in systems:
        recs = by.get((g, "torchtitan"), [])
        if not recs:
            continue
        prior = family_prior(fits.get((g, "megatron"), ref), "torchtitan")
        terms = TORCHTITAN_TERMS if len(recs) >= MIN_ROWS_FOR_ALL_TERMS else ["gemm_eff_max"]
        fits[(g, "torchtitan")] = _fit(recs, get_cluster(g), iters, terms=terms, prior=prior)
        saw[(g, "torchtitan")] = (terms, _rows(recs), f"the torchtitan family prior (compiled kernel fusion, attention_eff x "
                                                     f"{FA2_OVER_CUDNN} FlashAttention-2/cuDNN) on the {g} megatron fit")
    # 4. deepspeed: flat ZeRO-3 collectives, kernel efficiency and ZeRO-3 bandwidth fitted
    for g in systems:
        recs = by.get((g, "deepspeed"), [])
        if not recs:
            continue
        prior = family_prior(fits.get((g, "megatron"), ref), "deepspeed")
        fits[(g, "deepspeed")] = _fit(recs, get_cluster(g), iters, terms=["gemm_eff_max", "zero3_bw_eff"],
                                      prior=prior)
        saw[(g, "deepspeed")] = (["gemm_eff_max", "zero3_bw_eff"], _rows(recs), f"{g} megatron fit, zero3_flat")
    for k, spec in fits.items():
        terms, rows, prior = saw.get(k, ([], "", ""))
        fits[k] = spec.model_copy(update={"source": (
            f"fitted by bench/fidelity.py ({k[1]} profile of {k[0]}): {', '.join(terms) or 'no term'} on rows "
            f"{rows or 'none'} of planner/published_runs.csv (+1000: runs_2026_12.csv); other terms from {prior}")})
    return fits, saw


def cluster_of(rec, fits: dict | None):
    """The system of a record under its profile: ``fits`` (a refit) or the built-in values."""
    base = get_cluster(rec.gpu)
    if fits is None:
        return for_framework(base, None if rec.profile == "megatron" else rec.profile)
    spec = fits.get((rec.gpu, rec.profile))
    if spec is None:  # the profile's rows were held out: its family prior on the system's megatron fit
        spec = family_prior(fits[(rec.gpu, "megatron")], rec.profile)
    return base.model_copy(update={"efficiency": spec})


def summarize(preds, title: str, key) -> dict:
    by = defaultdict(list)
    for p in preds:
        by[key(p.record)].append(p)
    print(f"\n{title}")
    print(f"{'':30s} {'n':>3s} {'median':>8s} {'p90':>8s} {'signed median':>14s}")
    out = {}
    for g in sorted(by):
        s = error_summary(by[g])
        s["signed"] = float(np.median([p.error for p in by[g]]))
        out[g] = s
        print(f"{g:30s} {s['n']:3d} {100 * s['median']:7.1f}% {100 * s['p90']:7.1f}% {100 * s['signed']:+13.1f}%")
    s = error_summary(preds)
    out["overall"] = s
    print(f"{'overall':30s} {s['n']:3d} {100 * s['median']:7.1f}% {100 * s['p90']:7.1f}%")
    return out


def loso_unit(rec) -> str:
    """A held-out unit: a source, with its Blackwell rows held out on their own (they are the
    only rows of their systems) and its torchtitan rows a source of their own already."""
    black = rec.gpu.startswith(("gb", "b2", "b3"))
    return f"{rec.group}@blackwell" if black else rec.group


#: torchtitan 2024-12 benchmark Tables 1 and 3 (Llama 3.1 8B, FSDP, LBS 2, bf16, selective op AC, priced as
#: recompute selective under the torchtitan profiles since issue 29):
#: TPS/GPU eager and torch.compile'd on 8 and 128 GPUs (benchmarks/llama3_h100_202412_torchtitan.md
#: @820504e20). Not rows of the fits (their peaks are rows of bench/memory_fidelity.py's KNOWN_PEAKS); the
#: eager/compiled ratio is printed under op-level selective (the runs') and full recomputation.
EAGER_TABLES = [("Table 1", 8, 16, 5762, 6667), ("Table 3", 128, 256, 5605, 6514)]


def eager_check(fits: dict | None = None) -> None:
    """Predicted eager/compiled throughput ratio of the torchtitan tables against the measured one:
    the eager profile differs from the compiled one only by its unfused element-wise bytes."""
    import plan_search as ps

    print("\ntorchtitan eager vs torch.compile (structural: unfused element-wise bytes, no fitted term), "
          "Llama 3.1 8B bf16 FSDP on h100-96gb-500w")
    comp_c = cluster_of(type("R", (), {"gpu": "h100-96gb-500w", "profile": "torchtitan"})(), fits)
    eag_c = comp_c.model_copy(update={"efficiency": comp_c.efficiency.model_copy(
        update=FAMILY_STRUCTURE["torchtitan-eager"])})
    for table, n, gb, eager_tps, compiled_tps in EAGER_TABLES:
        out = []
        for rc in ("selective", "full"):
            kw = dict(num_gpus=n, zero=3, micro_batch=2, global_batch=gb, seq_len=8192, recompute=rc,
                      precision="bf16", reshard_after_forward=True)
            comp = ps.estimate("llama3.1-8b", comp_c, **kw).step_time_s
            eag = ps.estimate("llama3.1-8b", eag_c, **kw).step_time_s
            out.append(f"{rc} {comp / eag:.3f}")
        print(f"  {table} ({n} GPUs): measured eager/compiled TPS {eager_tps / compiled_tps:.3f}; predicted "
              f"({', '.join(out)} recomputation)")


def loso_predict(records, unit: str, iters: int = 300):
    """Held-out rows of ``unit`` and their predictions by profiles refitted on the other rows only
    (:func:`fit_all`, same recipe; the held-out rows are asserted absent from every fit)."""
    test = [r for r in records if loso_unit(r) == unit]
    train = [r for r in records if loso_unit(r) != unit]
    f, saw = fit_all(train, iters=iters, systems={r.gpu for r in records})
    held = {r.index for r in test}
    for k, (_, rows, _) in saw.items():
        assert not held & {int(i) for i in rows.split(",") if i}, f"{k} saw held-out rows"
    return test, [predict(r, cluster_of(r, f)) for r in test]


def write_profiles(fits: dict, saw: dict) -> None:
    doc = {"about": ("Kernel-efficiency profiles per framework (hardware/profiles.py). torchtitan/deepspeed "
                     "entries: python bench/fidelity.py --refit --write-profiles; megatron entries: python "
                     "bench/moe_fidelity.py --refit --write, laid over the catalog's efficiency block of the "
                     "system (hardware/catalog.py: each term listed replaces the catalog's). Each entry's source "
                     "names the rows each fitted term saw (row numbers: planner/runs_2026_12.csv data rows from "
                     "0, +1000)."),
           "systems": {}}
    default = EfficiencySpec().model_dump()
    old = yaml.safe_load(PROFILES_FILE.read_text(encoding="utf-8")) if PROFILES_FILE.is_file() else {}
    for g, profs in ((old or {}).get("systems") or {}).items():  # megatron entries: bench/moe_fidelity.py's
        if isinstance(profs, dict) and "megatron" in profs:
            doc["systems"].setdefault(g, {})["megatron"] = profs["megatron"]
    for (g, prof), spec in sorted(fits.items()):
        if prof == "megatron":
            continue
        vals = {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in spec.model_dump().items()
                if k == "source" or v != default[k]}
        doc["systems"].setdefault(g, {})[prof] = vals
    PROFILES_FILE.write_text(yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    print(f"wrote {PROFILES_FILE}")


def write_catalog(fits: dict, only: list[str]) -> None:
    """Replace the ``efficiency:`` block of the given systems (and their siblings) in the catalog
    with their megatron fit."""
    text = CATALOG.read_text()
    default = EfficiencySpec().model_dump()
    for g in only:
        eff = fits[(g, "megatron")]
        values = {k: v for k, v in eff.model_dump().items() if k != "source" and v != default[k]}
        for name in [g] + SIBLINGS.get(g, []):
            note = "" if name == g else f" Reused for {name}: same compute die as {g}."
            block = "  efficiency:\n" + "".join(
                f"    {k}: {float(f'{v:.4g}') if isinstance(v, float) else v}\n" for k, v in values.items())
            block += f'    source: "{eff.source}{note}"\n'
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
    print(f"wrote the megatron efficiency of {', '.join(only)} into {CATALOG}")


#: Issue 29's floors over the FSDP-only runs (torchtitan; NeMo AutoModel dense, here, and MoE, priced by
#: bench/moe_fidelity.py's loader and profiles): median, p90, each held-out source's median, |signed mean|.
FSDP_FLOORS = {"median": 0.08, "p90": 0.15, "loso_median": 0.12, "signed_mean": 0.05}
FSDP_GROUPS = ("torchtitan-2024-12", "nemo-automodel")


def fsdp_report(preds, loso_preds=None) -> dict:
    """Step-time error over the FSDP-only runs: the dense rows of ``preds`` whose source is an FSDP stack
    (:data:`FSDP_GROUPS`) and the NeMo AutoModel MoE rows (bench/moe_fidelity.py: its loader, its
    built-in profiles, the fastest candidate that fits). ``loso_preds``: the dense rows' held-out
    predictions (leave-one-source-out); the MoE rows' held-out figure is bench/moe_fidelity.py --loso's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from moe_fidelity import load_moe_runs, predict as moe_predict  # the one MoE completion (not copied)

    rows = [(p.record.index, p.record.group, p.record.label, p.error) for p in preds if p.record.group in FSDP_GROUPS]
    runs, _ = load_moe_runs(verbose=False)
    for r in runs:
        if r.group in FSDP_GROUPS:
            step, plan, _ = moe_predict(r, get_cluster(r.gpu))
            rows.append((r.index, r.group + " (MoE)", f"{r.model_key} x{r.n}", step / r.measured_step_s - 1.0))
    e = np.array([v for *_, v in rows])
    out = {"n": len(e), "median": float(np.median(np.abs(e))), "p90": float(np.percentile(np.abs(e), 90)),
           "signed_mean": float(np.mean(e))}
    print(f"\nFSDP-only runs (issue 29): {len(e)} rows -- " + ", ".join(
        f"{i} {100 * v:+.1f}%" for i, _, _, v in sorted(rows)))
    for g in sorted({g for _, g, _, _ in rows}):
        ge = np.array([v for _, gg, _, v in rows if gg == g])
        print(f"  {g:30s} n={len(ge):2d} median {100 * np.median(np.abs(ge)):5.1f}%  signed mean {100 * ge.mean():+5.1f}%")
    ok = (out["median"] <= FSDP_FLOORS["median"] and out["p90"] <= FSDP_FLOORS["p90"]
          and abs(out["signed_mean"]) <= FSDP_FLOORS["signed_mean"])
    print(f"FSDP-only floors (median <= 8%, p90 <= 15%, |signed mean| <= 5%): {'MET' if ok else 'NOT MET'} (median "
          f"{100 * out['median']:.1f}%, p90 {100 * out['p90']:.1f}%, signed mean {100 * out['signed_mean']:+.1f}%)")
    if loso_preds:
        held = [p for p in loso_preds if p.record.group in FSDP_GROUPS]
        by = defaultdict(list)
        for p in held:
            by[loso_unit(p.record)].append(abs(p.error))
        worst = max(float(np.median(v)) for v in by.values())
        print("FSDP-only leave-one-source-out (dense rows; each held-out source's median <= 12%): " + ", ".join(
            f"{u} {100 * float(np.median(v)):.1f}%" for u, v in sorted(by.items()))
            + f" -> {'MET' if worst <= FSDP_FLOORS['loso_median'] else 'NOT MET'}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loso", action="store_true", help="leave-one-source-out refits")
    ap.add_argument("--loso-source", action="append", metavar="UNIT", default=[],
                    help="leave-one-source-out for this held-out unit only (repeatable; e.g. torchtitan-2024-12, "
                         "megatron-bridge@blackwell); implies --loso")
    ap.add_argument("--refit", action="store_true", help="refit every profile on all rows first")
    ap.add_argument("--quiet", action="store_true", help="no per-row table")
    ap.add_argument("--iters", type=int, default=300, help="Nelder-Mead iterations per fit")
    ap.add_argument("--write-profiles", action="store_true", help="with --refit: write hardware/efficiency_profiles.yaml")
    ap.add_argument("--write-catalog", nargs="*", metavar="SYSTEM",
                    help="with --refit: write these systems' megatron fit into hardware/catalog.yaml")
    ap.add_argument("--fit-thin", nargs="*", metavar="SYSTEM",
                    help="fit only these thinly covered systems' megatron profile (gemm_eff_max on their rows, "
                         "the rest the built-in h100-sxm values) and write it into hardware/catalog.yaml")
    ap.add_argument("--no-memory", action="store_true", help="skip bench/memory_fidelity.py")
    args = ap.parse_args()

    t0 = time.perf_counter()
    records = load_all_runs()
    fits = None
    if args.fit_thin:
        ref = get_cluster(REFERENCE).efficiency
        thin = {}
        for g in args.fit_thin:
            recs = [r for r in records if r.gpu == g and r.profile == "megatron"]
            prior = ref.model_copy(update={"source": f"built-in {REFERENCE} megatron values"})
            eff = fit_efficiency(recs, get_cluster(g), terms=["gemm_eff_max"], iters=args.iters, prior=prior)
            thin[(g, "megatron")] = eff.model_copy(update={"source": (
                f"fitted by python bench/fidelity.py --fit-thin (megatron profile of {g}): gemm_eff_max on rows "
                f"{_rows(recs)} of planner/runs_2026_12.csv (+1000; Megatron-Bridge 26.06 SFT Llama-3-70B, fp8 and "
                f"mxfp8); every other term the built-in {REFERENCE} value ({ref.source[:60]}...)")})
            print(f"{g}: gemm_eff_max {thin[(g, 'megatron')].gemm_eff_max:.4f} on rows {_rows(recs)}")
        write_catalog(thin, list(args.fit_thin))
        return 0
    if args.refit:
        fits, saw = fit_all(records, iters=args.iters)
        print(f"refit {len(fits)} profiles in {time.perf_counter() - t0:.0f} s")
        print("\nwhich rows each fitted term saw (row numbers: published_runs.csv data rows from 0; "
              "+1000: runs_2026_12.csv)")
        for k in sorted(saw):
            terms, rows, prior = saw[k]
            print(f"  {k[0]:12s} {k[1]:11s} fitted {', '.join(terms) or '-'} on rows [{rows}]; rest from {prior}")
        if args.write_profiles:
            write_profiles(fits, saw)
        if args.write_catalog:
            write_catalog(fits, args.write_catalog)
    else:
        seen = sorted({(r.gpu, r.profile) for r in records})
        print("efficiency of each (system, profile), built in:")
        for g, prof in seen:
            c = cluster_of(next(r for r in records if r.gpu == g and r.profile == prof), None)
            print(f"  {g:12s} {prof:11s} {c.efficiency.source[:150]}")
    preds = [predict(r, cluster_of(r, fits)) for r in records]
    if not args.quiet:
        print(f"\n{'#':>4s} {'source':20s} {'run':34s} {'gpu':12s} {'meas s':>8s} {'pred s':>8s} {'error':>7s}  plan [free knobs]")
        for p in preds:
            r = p.record
            free = f" [picked: {','.join(r.free_knobs)}]" if r.free_knobs else ""
            flag = "" if p.feasible else " (no candidate fits!)"
            print(f"{r.index:4d} {r.group[:20]:20s} {r.label[:34]:34s} {r.gpu[:12]:12s} {r.measured_step_s:8.3f} "
                  f"{p.predicted_step_s:8.3f} {100 * p.error:+6.1f}%  {p.plan.label} ({r.profile}){free}{flag}")
        print("(measured step time from: " + ", ".join(sorted({r.measured_from for r in records})) + ")")
    title = "Step-time error" + (" (refit on all rows)" if args.refit else " (built-in efficiencies)")
    by_src = summarize(preds, title + ", per source", lambda r: r.group)
    summarize(preds, title + ", per GPU type", lambda r: r.gpu)
    summarize(preds, title + ", per profile", lambda r: r.profile)
    ov = by_src["overall"]
    worst = max(v["median"] for k, v in by_src.items() if k != "overall")
    ok = ov["median"] <= FLOORS["median"] and ov["p90"] <= FLOORS["p90"] and worst <= FLOORS["source_median"]
    print(f"floors (median <= 5%, p90 <= 12%, each source's median <= 8%): {'MET' if ok else 'NOT MET'} "
          f"(median {100 * ov['median']:.1f}%, p90 {100 * ov['p90']:.1f}%, worst source {100 * worst:.1f}%)")

    units = sorted({loso_unit(r) for r in records})
    if args.loso_source:
        unknown = [u for u in args.loso_source if u not in units]
        if unknown:
            print(f"loso-source: unknown unit {unknown[0]!r}; use one of {', '.join(units)}", file=sys.stderr)
            return 2
        units, args.loso = sorted(set(args.loso_source)), True
    held = []
    if args.loso:
        print("\nLeave-one-source-out: refit every profile without the unit's rows (same recipe), predict them")
        print(f"{'held out':34s} {'n':>3s} {'median':>8s} {'p90':>8s} {'signed median':>14s}")
        worst = 0.0
        for u in units:
            test, lp = loso_predict(records, u, iters=args.iters)
            held += lp
            if args.loso_source:
                for p in lp:
                    print(f"    {p.record.index:4d} {p.record.label[:34]:34s} {p.record.gpu:12s} "
                          f"{p.record.measured_step_s:8.3f} {p.predicted_step_s:8.3f} {100 * p.error:+6.1f}%  "
                          f"{p.plan.label}")
            s = error_summary(lp)
            worst = max(worst, s["median"])
            print(f"{u:34s} {s['n']:3d} {100 * s['median']:7.1f}% {100 * s['p90']:7.1f}% "
                  f"{100 * float(np.median([p.error for p in lp])):+13.1f}%", flush=True)
        print(f"leave-one-source-out floor (each held-out median <= 10%): {'MET' if worst <= FLOORS['loso_median'] else 'NOT MET'}"
              f" (worst {100 * worst:.1f}%)")
        summarize(held, "Leave-one-source-out, the held-out predictions per GPU type", lambda r: r.gpu)
    fsdp_report(preds, held if args.loso else None)
    eager_check(fits)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    if not args.no_memory:
        mem = Path(__file__).with_name("memory_fidelity.py")
        if mem.is_file():
            print("\n--- memory fidelity (bench/memory_fidelity.py) ---", flush=True)
            subprocess.run([sys.executable, str(mem)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
