"""Pipeline schedules: 1F1B and interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2).

With ``m`` micro-batches, ``p`` stages and ``v`` model chunks per GPU, the step's pipeline part is
``m * t_slow + (p - 1)/v * t_mean``: the slowest stage sets the steady-state pace (uneven splits,
the embedding on the first stage, logits and loss on the last), and warm-up plus cool-down cost
``(p-1)/v`` micro-batch times of an average stage (the bubble; its fraction of the ideal time is
``(p-1)/(v m)`` for balanced stages, as in the paper). ``t_*`` are forward + backward seconds of
one micro-batch through all of a stage's chunks.

DualPipe (``pp_schedule`` dualpipe; DeepSeek-V3 report, arXiv 2412.19437 Sec. 3.2.1 and Table 2):
each GPU holds two stages, fed micro-batches from both ends of the pipeline; its bubble is
``(p/2 - 1)(F&B + B - 3W)`` against 1F1B's ``(p - 1)(F + B)``, with ``F``, ``B``, ``W`` a stage's
forward, full backward and weight-gradient backward of one micro-batch and ``F&B`` a forward and a
backward chunk run overlapped. Priced with ``B = 2F`` and ``W = F`` (the backward is an input- and a
weight-gradient pass, each about a forward: Qi et al. 2023, "Zero Bubble Pipeline Parallelism",
Sec. 2) and ``F&B = F + B`` (the overlap hides the paired chunk's communication, not its compute:
the GPU still does both), so the bubble is ``(p/2 - 1) * 2/3 * t_mean``.
"""

from __future__ import annotations

import numpy as np

from plan_search.planner.costmodel.arrays import PlanArrays


def stage_mix(x: PlanArrays, first, mid, last, num_layers=None):
    """Slowest and mean stage time from the first-, middle- and last-stage times.

    ``mid`` is the fullest middle stage's time; with ``num_layers`` given, a balanced uneven
    split (middle stages of ``l//pp`` and ``l//pp + 1`` layers, :meth:`Plan.split`) enters the
    mean with its middle stages' average layer count, ``(l - first - last) / (pp - 2)``."""
    p = x.pp.astype(float)
    single = x.pp == 1
    slow = np.where(single, first, np.maximum(np.maximum(first, last), np.where(x.pp > 2, mid, 0.0)))
    # DualPipe: the first GPU runs the first stage for half the micro-batches and the last for the other half
    slow = np.where(x.pp_sched == 1, np.maximum(0.5 * (first + last), np.where(x.pp > 2, mid, 0.0)), slow)
    if num_layers is not None:
        avg = np.maximum(num_layers - x.first - x.last, 0) / np.maximum(p - 2, 1)
        mid = np.where(x.pp > 2, mid * avg / np.maximum(x.mid, 1), mid)
    mean = np.where(single, first, (first + last + np.maximum(p - 2, 0) * mid) / np.maximum(p, 1))
    return slow, mean


def bubble_s(x: PlanArrays, mean):
    """Bubble seconds of one step (warm-up and cool-down; the steady state is ``m`` times the
    slowest stage): ``(p-1)/v`` mean stage times for 1F1B, ``(p/2-1) * 2/3`` for DualPipe."""
    return np.where(x.pp_sched == 1, (x.pp / 2.0 - 1.0) * (2.0 / 3.0), (x.pp - 1) / x.vpp) * mean


def bubble_fraction(bubble, steady):
    """The bubble as a fraction of the steady-state (ideal) time."""
    return bubble / np.maximum(steady, 1e-30)
