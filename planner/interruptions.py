"""A cluster's run log of interruptions (issue 25), read for ``plan-calibrate --interruptions``.

CSV, one row per event, a header line naming the columns (any order; other columns ignored)::

    timestamp,event,gpus,lost_minutes
    2026-01-05T00:00:00,start,16384,
    2026-01-05T02:41:00,interruption,,14
    2026-01-05T07:02:30,interruption,,9.5
    2026-02-28T00:00:00,end,,

- ``timestamp``: ISO 8601 (``2026-01-05T02:41:00``, a date alone, or with a UTC offset); rows in time order.
- ``event``: ``start`` (a window of training opens), ``interruption`` (the job stopped unexpectedly),
  ``end`` (the window closes). Every interruption lies in a start..end window; windows do not overlap.
- ``gpus``: the job's GPU count, on each ``start`` row (the window's interruptions are against it).
- ``lost_minutes``: on an interruption, the minutes training stood still (detection, restart, checkpoint
  read; not the work recomputed since the last checkpoint); blank where unknown.

The fit (:func:`planner.costmodel.goodput.fit_interruptions`): failures per 1,000 GPU-days = interruptions
/ the GPU-days of the windows x 1,000 (the Poisson rate's maximum-likelihood estimate), and the restart
minutes the mean of ``lost_minutes``. The planner adds the checkpoint read (size / storage read bandwidth)
to the restart, so the restart fitted from a log that includes the read counts it twice: small when the
read is short against the restart (Llama 3 405B from 200 GB/s: 28 s of a 10-minute restart).
"""

from __future__ import annotations

import csv
import datetime
import math
from pathlib import Path

from plan_search.models.io import InputError

COLUMNS = ("timestamp", "event", "gpus", "lost_minutes")
EVENTS = ("start", "interruption", "end")


def _when(text: str, where: str) -> datetime.datetime:
    try:
        t = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"{where}: timestamp {text.strip()[:40]!r} is not ISO 8601 (e.g. 2026-01-05T02:41:00)") from None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


def read_log(path: Path) -> list[dict]:
    """The rows of an interruption log, checked: one InputError naming the row and the column."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"interruptions: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in ("timestamp", "event") if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"interruptions: {Path(path).name} has no {missing[0]} column; the header needs "
                         f"{', '.join(COLUMNS)} (docs: planner/interruptions.py)")
    rows, last, gpus = [], None, None
    for i, raw in enumerate(reader, start=2):
        where = f"interruptions: {Path(path).name} line {i}"
        if not any((v or "").strip() for v in raw.values()):
            continue
        event = (raw.get("event") or "").strip().lower()
        if event not in EVENTS:
            raise InputError(f"{where}: event {event[:30]!r} is not one of {', '.join(EVENTS)}")
        t = _when(raw.get("timestamp") or "", where)
        if last is not None and t < last:
            raise InputError(f"{where}: timestamp {t.isoformat()} is before the previous row's; give rows in time order")
        last = t
        row = {"timestamp": t, "event": event, "gpus": None, "lost_minutes": None}
        g = (raw.get("gpus") or "").strip()
        if event == "start":
            try:
                gpus = int(g)
            except ValueError:
                gpus = None
            if gpus is None or not 0 < gpus <= 10_000_000:
                raise InputError(f"{where}: gpus {g[:20]!r} must be the job's GPU count on a start row (1 to 10,000,000)")
        row["gpus"] = gpus
        lost = (raw.get("lost_minutes") or "").strip()
        if event == "interruption" and lost:
            try:
                v = float(lost)
            except ValueError:
                v = math.nan
            if not (math.isfinite(v) and 0 <= v <= 1e6):
                raise InputError(f"{where}: lost_minutes {lost[:20]!r} must be minutes in [0, 1e6] (or blank)")
            row["lost_minutes"] = v
        rows.append(row)
    if not rows:
        raise InputError(f"interruptions: {Path(path).name} has no rows")
    return rows
