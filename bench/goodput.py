"""Goodput floors (issue 25): failures, restarts and checkpoint saves priced into days and dollars.

    python bench/goodput.py            # the floors, and the figures README's question 7 quotes

Every figure comes from ``plan_search.estimate`` (what plan-estimate prints) and, for the deadline
question, ``plan_search.search``; :func:`measure` returns them (docs/figures.py writes README's
``goodput.*`` figures from it). The floors:

- Llama 3 405B as Meta ran it (16,384 H100, tp8 pp16 cp1, 16M-token batches at 8,192), Llama 3's
  failure rate, asynchronous saves, a 10-minute restart: goodput in [0.88, 0.96] (Meta reports more
  than 90% effective training time);
- goodput falls with the GPU count at a fixed rate and is higher with asynchronous saves;
- 65,536 GPUs, Llama 3's rate, a 30-minute restart: goodput below 0.6 (the exact model; the
  first-order one is printed beside it);
- a deadline question (Llama-3.1-70B, 15T tokens on H100) priced with and without failures: at 25
  days the pick's days change; at a deadline between the goodput-blind pick's days without and with
  failures (chosen so from the 25-day answer: the cost model moves the figures, the question stays)
  the pick changes, and the answer says so.

Deterministic figures (no timings). Exit 1 when a floor is not met.
"""

from __future__ import annotations

import functools
import math
import sys

import plan_search
from plan_search.planner.costmodel import goodput

LLAMA3_RATE = goodput.FAILURE_RATE_PRESETS["llama3-h100"][0]
LLAMA3_PLAN = dict(tp=8, pp=16, cp=1, global_batch=2048, seq_len=8192)
TOKENS = 15.6e12  # Llama 3 405B's pre-training tokens
COUNTS = (2048, 4096, 8192, 16_384, 32_768, 65_536)


def llama3(num_gpus: int, restart_minutes: float, async_checkpoint: bool = True):
    return plan_search.estimate("llama3.1-405b", "h100", num_gpus=num_gpus, tokens=TOKENS,
                                failure_rate=LLAMA3_RATE, restart_minutes=restart_minutes,
                                async_checkpoint=async_checkpoint, **LLAMA3_PLAN)


def first_order(e) -> float:
    rc = e.recovery
    m = rc.mtbf_h * 3600
    return 1 - math.sqrt(2 * rc.checkpoint_save_blocking_s / m) - (rc.restart_s + rc.restore_s) / m


def _search(deadline: float, rate: float | None):
    return plan_search.search(model="llama3.1-70b", gpu="h100", tokens=15e12, deadline_days=deadline,
                              failure_rate=rate, time_limit_s=120, framework="none")  # the blind pick is compared framework-free


@functools.lru_cache(maxsize=None)
def measure() -> dict:
    """Every figure of the floors (estimates, searches): a dict of numbers, estimates and results."""
    out: dict = {"llama3": llama3(16_384, 10), "async": {}, "sync": {}}
    for n in COUNTS:
        out["async"][n] = llama3(n, 10)
        out["sync"][n] = llama3(n, 10, async_checkpoint=False)
    out["e65"] = llama3(65_536, 30)
    off25, on25 = _search(25, 0.0), _search(25, None)
    p = off25.recommended
    blind_priced = plan_search.estimate("llama3.1-70b", "h100", p.plan, tokens=15e12)
    d = round((p.run.days + blind_priced.run.days) / 2, 1)  # the blind pick meets it only without failures
    out.update(off25=off25, on25=on25, blind_priced=blind_priced, deadline=d, off_d=_search(d, 0.0),
               on_d=_search(d, None))
    return out


def main() -> int:
    ok = True
    f = measure()
    print("failure-rate presets, per 1,000 GPU-days")
    for name, (rate, src) in goodput.FAILURE_RATE_PRESETS.items():
        print(f"  {name:12s} {rate:.4f}  {src}")
    e = f["llama3"]
    b, rc = e.badput, e.recovery
    met = 0.88 <= e.goodput <= 0.96
    ok &= met
    print("\nLlama 3 405B on 16,384 H100 (tp8 pp16, 16M-token batches), Llama 3 rate, async saves, 10-min restart")
    print(f"  failure rate {rc.failure_rate_per_1000_gpu_days:.3f} per 1,000 GPU-days; MTBF {rc.mtbf_h:.2f} h")
    print(f"  save blocks {rc.checkpoint_save_blocking_s:.2f} s (write {e.run.checkpoint_write_s:.1f} s in the "
          f"background); restore {rc.restore_s:.1f} s")
    print(f"  interval {e.checkpoint_interval_steps} steps ({e.checkpoint_interval_s:.0f} s)")
    print(f"  goodput {e.goodput:.3f} [0.88, 0.96] {'MET' if met else 'NOT MET'}")
    print(f"  badput: checkpoint save {b.checkpoint_save:.4f}, lost progress {b.lost_progress:.4f}, "
          f"restart {b.restart:.4f}, restore {b.restore:.4f}")
    print(f"  days {e.run.days:.1f} (without failures {e.run.days_without_failures:.1f}); "
          f"~{e.run.expected_interruptions:.0f} interruptions")

    print("\ngoodput by GPU count (Llama 3 rate, 10-min restart): async, sync")
    prev, mono, grows = 1.0, True, True
    for n in COUNTS:
        a, s = f["async"][n], f["sync"][n]
        mono &= a.goodput < prev
        grows &= a.goodput > s.goodput
        prev = a.goodput
        print(f"  {n:6d} GPUs  {a.goodput:.3f}  {s.goodput:.3f}")
    print(f"  falls with the GPU count: {'MET' if mono else 'NOT MET'}; higher with async saves: "
          f"{'MET' if grows else 'NOT MET'}")
    ok &= mono and grows

    e65 = f["e65"]
    met = e65.goodput < 0.6
    ok &= met
    print("\n65,536 H100, Llama 3 rate, 30-min restart")
    print(f"  MTBF {e65.recovery.mtbf_h:.2f} h; goodput {e65.goodput:.3f} (< 0.6 {'MET' if met else 'NOT MET'}); "
          f"first-order {first_order(e65):.3f}")

    for deadline, off, on in ((25, f["off25"], f["on25"]), (f["deadline"], f["off_d"], f["on_d"])):
        print(f"\ndeadline: Llama-3.1-70B, 15T tokens, {deadline:g} days on H100")
        picks = {}
        for label, r in (("failures off", off), ("priced", on)):
            p = r.recommended
            picks[label] = (p.plan.num_gpus, p.run.days)
            print(f"  {label:13s} {p.plan.num_gpus:6d} GPUs  {p.run.days:6.2f} days  ${p.run.cost_usd:,.0f}")
        clause = on.reason[on.reason.index("failures priced"):] if "failures priced" in on.reason else ""
        print(f"    says: {clause}")
        (n0, d0), (n1, d1) = picks["failures off"], picks["priced"]
        changed = "pick" if n0 != n1 else ("days" if abs(d0 - d1) > 1e-9 else "nothing")
        met = changed != "nothing" and ("goodput changed the pick" in on.reason) == (changed == "pick")
        ok &= met
        print(f"  failures priced change the {changed}, and the answer says so: {'MET' if met else 'NOT MET'}")
    print(f"  (the goodput-blind pick priced with failures: {f['blind_priced'].run.days:.2f} days)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
