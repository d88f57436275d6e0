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
#: console script) and send SIGINT at the first lookup of module ``target`` (kind ``import``) or the first call
#: of a function named ``target`` (kind ``call``).
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
    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == target:
            sys.settrace(None)
            fire()
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
