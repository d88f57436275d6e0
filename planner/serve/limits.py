"""What ``plan-serve`` accepts and how much it runs at once: one small class, validated on construction.

Every figure is a bound a request cannot move (it is refused with 413, 422 or 503, never queued
past them). The defaults keep a laptop's server responsive: two worker processes (the search is
CPU-bound numpy and CP-SAT; one per core of a 2-core machine), two requests waiting behind them, a
time limit of a minute per request (the CLI's default is 10 s), 16 sweep scenarios.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    #: worker processes running searches (CPU-bound: at most one per core is useful)
    workers: int = 2
    #: requests admitted beyond the running ones; one more is answered 503 at once
    queue: int = 2
    #: largest request body, bytes (a HF config.json is 1-10 kB; a search request well under 1 kB)
    max_body_bytes: int = 256 * 1024
    #: seconds a client may take to send its body (a slow client is cut off, 408)
    body_timeout_s: float = 10.0
    #: largest ``time_limit_s`` of a request; a sweep's scenarios share it (their limits add up)
    max_time_limit_s: float = 60.0
    #: longest explicit ``gpus`` list, and most GPU counts of a ``min_gpus..max_gpus`` range
    max_gpu_counts: int = 1024
    #: most GPU types in one request
    max_gpu_types: int = 8
    #: most scenarios of one ``POST /v1/sweep``
    max_sweep_scenarios: int = 16
    #: most CP-SAT threads a request may ask for (each is a core)
    max_solver_threads: int = 2

    def __post_init__(self) -> None:
        for name in ("workers", "queue", "max_body_bytes", "max_gpu_counts", "max_gpu_types",
                     "max_sweep_scenarios", "max_solver_threads"):
            v = getattr(self, name)
            low = 0 if name == "queue" else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name}: {v!r} must be a whole number, at least {low}")
        if self.workers > 64:
            raise ValueError(f"workers: {self.workers} is more than 64 processes; each holds a search (~300 MB)")
        for name in ("body_timeout_s", "max_time_limit_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 86_400):
                raise ValueError(f"{name}: {v!r} must be a number of seconds in (0, 86400]")

    @property
    def admitted(self) -> int:
        """Requests running or waiting at once: the next one is answered 503."""
        return self.workers + self.queue
