"""The search's clock: every phase of :func:`planner.search.front.search` reads the time here (its
time limit, its phases' shares, its timings), so the one clock can be moved in a test."""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on the performance counter (:func:`time.perf_counter`)."""
    return time.perf_counter()
