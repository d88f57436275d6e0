"""Ctrl-C at any moment of a console script's start-up is the command's interrupted exit: one
``interrupted`` line on stderr and exit 130, never a KeyboardInterrupt traceback (issue 13's careless-user
pass). Deterministic: the console script runs under a small wrapper that sends the process SIGINT at a
chosen point (the first lookup of a module, or the first call of a function), not after a guessed delay.

Before the fix two points printed a traceback: the start-up handler (cli/__init__.py) imported ``signal``
before it was in place (that import builds the module's enums: the longest part of the window), and
``_OneLine.main`` handed the signals over to the command's handling outside its ``try``.

What no package code can close: Python's own start-up before the first line of ``plan_search`` runs
(interpreter init, ``site`` and, in an editable install, its import finder: ~15-25 ms here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix" or not hasattr(os, "kill"),
                                reason="needs POSIX signals sent to a process by itself")

#: The wrapper: run the console script as its own ``__main__`` (sys.argv[0] its path, so it is treated as the
#: console script) and send SIGINT at the first lookup of module ``target`` (kind ``import``), the first call
#: of a function named ``target`` (kind ``call``) or its first return (kind ``return``); ``f@g``: the
#: function ``f`` called from ``g``.
WRAPPER = r"""
import os, sys, _signal
script, target, kind = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = [script] + sys.argv[4:]

def fire():
    os.kill(os.getpid(), _signal.SIGINT)

if kind == "import":
    class Trigger:
        def find_spec(self, name, path=None, target_module=None):
            if name == target:
                sys.meta_path.remove(self)
                fire()
            return None
    sys.meta_path.insert(0, Trigger())
else:
    def on_return(frame, event, arg):
        if event == "return":
            sys.settrace(None)
            fire()
        return on_return

    name, _, caller = target.partition("@")  # "f@g": f called from g

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == name and (
                not caller or frame.f_back.f_code.co_name == caller):
            if kind == "call":
                sys.settrace(None)
                fire()
                return None
            return on_return
        return None
    sys.settrace(tracer)
with open(script) as f:
    code = compile(f.read(), script, "exec")
exec(code, {"__name__": "__main__", "__file__": script})
"""

ESTIMATE = ["--model", "llama3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "8"]


def _script(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed next to {sys.executable}")
    return found


def _interrupt_at(command: str, target: str, kind: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRAPPER, _script(command), target, kind, *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command, target, kind", [
    ("plan-estimate", "signal", "import"),  # the first import of signal.py: was inside the start-up window
    ("plan-estimate", "_term_as_interrupt", "call"),  # the hand-over to the command's handling
    ("plan-search", "_skip_exit_collection", "call"),
    ("plan-estimate", "numpy", "import"),  # mid-import of the command's dependencies
])
def test_an_interrupt_during_start_up_is_one_line_and_130(command, target, kind):
    r = _interrupt_at(command, target, kind, ESTIMATE if command == "plan-estimate" else ESTIMATE[:4])
    assert r.stderr == "interrupted\n", r.stderr[-2000:]
    assert r.returncode == 130 and r.stdout == ""


def test_an_interrupt_while_plan_sweep_starts_a_worker_leaves_no_worker_traceback(tmp_path):
    """The interrupt lands just after a spawned worker was started and before it got its preparation data
    (``multiprocessing.util.spawnv_passfds`` returned to ``popen_spawn_posix.Popen._launch``): the worker read
    an empty pipe and printed multiprocessing's EOFError traceback beside the command's line (planner/sweep.py
    starts its workers with the interrupts held: ``_interrupts_deferred``)."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text("base: {model: megatron-gpt-1.7b, gpu: a100-80gb, tokens: 10B}\nsweep: {gpus: [8, 16]}\n")
    out = tmp_path / "s.csv"
    r = _interrupt_at("plan-sweep", "spawnv_passfds@_launch", "return",
                      [str(sweep), "-o", str(out), "-q", "--workers", "2"])
    if r.returncode == 0:  # never interrupted: this Python starts its workers through other functions
        pytest.skip("multiprocessing here does not start a spawned worker through popen_spawn_posix._launch")
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: 0 of 2 scenarios kept in "), lines
