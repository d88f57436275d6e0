"""The command-line interface: thin click commands over the planner.

A console script (``plan-search``, ``plan-estimate``, ...) imports this package before its
command module pulls in click, numpy, pydantic and the planner (most of its start-up time). A
Ctrl-C, SIGTERM or SIGHUP in that window would print Python's KeyboardInterrupt traceback (or
kill it mid-import), so until the command's own handling takes over (``cli.common._OneLine.main``
restores the defaults first) such a signal ends the process with the command's interrupted exit:
one ``interrupted`` line and 130. Only a console script gets this: importing the package from a
program changes no signal handler. The handler is set through ``_signal``, the interpreter's own
module (loaded before any code of ours runs), not ``signal``: importing that builds its enums, the
longest part of the window the handler is there to close.
"""

from __future__ import annotations

import os as _os
import _signal  # not signal: see the module docstring
import sys as _sys

_STARTUP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _interrupted_while_starting(signum, frame):  # pragma: no cover - exits the process
    _os.write(2, b"interrupted\n")
    _os._exit(130)  # cli.common.EXIT_INTERRUPTED (not imported: this runs before anything else)


def _is_console_script() -> bool:
    # a process multiprocessing spawns (plan-sweep's workers) runs the console script again, with
    # its parent's argv: it is no console script, and its parent ends it with a silent SIGTERM
    if "--multiprocessing-fork" in getattr(_sys, "orig_argv", ()):
        return False
    return _os.path.basename(_sys.argv[0] if _sys.argv else "").startswith("plan-")


def restore_startup_signals() -> None:
    """Give the signals back to their defaults if the start-up handler holds them."""
    for name in _STARTUP_SIGNALS:
        sig = getattr(_signal, name, None)
        if sig is not None and _signal.getsignal(sig) is _interrupted_while_starting:
            _signal.signal(sig, _signal.default_int_handler if name == "SIGINT" else _signal.SIG_DFL)


if _is_console_script():
    for _name in _STARTUP_SIGNALS:
        _sig = getattr(_signal, _name, None)
        if _sig is not None and _signal.getsignal(_sig) in (_signal.SIG_DFL, _signal.default_int_handler):
            try:
                _signal.signal(_sig, _interrupted_while_starting)
            except ValueError:  # not the main thread: leave the handlers alone
                break
