"""Helpers shared by the CLI tests (not a test module): the one stderr line of a refused command, and
signalling a real ``plan-sweep`` once its journal records a finished scenario."""

from __future__ import annotations

import subprocess
import time
from typing import Callable

import pytest

from plan_search.planner.sweep import journal_path


def one_stderr_line(result) -> str:
    """The single non-blank stderr line of a click ``CliRunner`` result, with no traceback anywhere."""
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def signal_mid_sweep(proc: subprocess.Popen, out, send: Callable[[subprocess.Popen], None]) -> tuple[str, str]:
    """Wait (at most 60 s) until the sweep writing ``out`` has journalled a finished scenario, ``send``
    it a signal and return its (stdout, stderr). Skips the calling test when the sweep finished before
    it could be signalled, or before the signal arrived; kills it if anything else goes wrong."""
    try:
        jpath = journal_path(out)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and proc.poll() is None:
            if jpath.exists() and jpath.read_text().count("\n") >= 1:  # mid-run: a scenario has finished
                break
            time.sleep(0.01)
        if proc.poll() is not None:
            pytest.skip("the sweep finished before it could be signalled")
        send(proc)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the signal arrived")
    return stdout, stderr
