"""What every command shares: one-line errors and exit codes, ``--model``/``--gpu``/``--set`` options.

Exit codes (documented in the README): 0 result, 2 bad input, 3 nothing feasible.
"""

from __future__ import annotations

import functools
import sys

import click
from pydantic import ValidationError

from plan_search.models.io import validation_message

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP (128 + SIGINT, as a shell reports Ctrl-C)
EXIT_BROKEN_PIPE = 141  # the reader of stdout closed it (128 + SIGPIPE), as a shell reports it


class Infeasible(Exception):
    """Raised by commands when the request is valid but nothing satisfies it (exit code 3)."""


def column_widths(head, rows) -> list[int]:
    """Each column's width: its widest cell, header included (short rows, e.g. an infeasible
    scenario's, count for the columns they have)."""
    return [max([len(h)] + [len(r[i]) for r in rows if r is not None and len(r) > i]) for i, h in enumerate(head)]


def align_row(cells, widths, left=(), gap: str = "  ", indent: str = "") -> str:
    """One terminal table row, the one alignment rule of every command's tables: columns in
    ``left`` left-aligned, the others (numbers) right-aligned, ``gap`` between them, trailing
    blanks dropped."""
    return (indent + gap.join(c.ljust(widths[i]) if i in left else c.rjust(widths[i])
                              for i, c in enumerate(cells))).rstrip()


def rule_row(widths, gap: str = "  ", indent: str = "") -> str:
    """The dashes under a header."""
    return indent + gap.join("-" * w for w in widths)


def short_money(x: float) -> str:
    """Dollars in a table cell: 8,860 / 26k / 1.62M / 3.10B."""
    if x >= 1e9:
        return f"{x / 1e9:.2f}B"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"


def short_days(x: float) -> str:
    """Days in a table cell, three significant figures or whole days."""
    return f"{x:,.0f}" if x >= 1000 else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")


#: Longest error line printed: a message that echoes a user's value whole (a 4 MB model name)
#: is cut in its middle, keeping the field named at its start and the fix at its end.
MAX_ERROR_CHARS = 1000


def moe_kernel_words(p) -> list[str]:
    """The MoE kernel knobs a plan's line shows when not at their defaults (plan-estimate's and
    plan-search's plan lines): ``fused-experts`` (moe_grouped_gemm fused), ``round-robin``
    (moe_routing round_robin); the defaults (loop, topk) say nothing."""
    return (["fused-experts"] if p.moe_grouped_gemm == "fused" else []) + (
        ["round-robin"] if p.moe_routing == "round_robin" else [])


def one_line(exc: BaseException) -> str:
    """The user-facing one-line form of an error (at most MAX_ERROR_CHARS)."""
    if isinstance(exc, ValidationError):
        return clip_middle(validation_message(exc))
    if isinstance(exc, UnicodeError):  # never "'utf-8' codec can't decode byte 0xff in position 3"
        return "a file or value is not UTF-8 text"
    if isinstance(exc, OSError) and exc.strerror:  # never a bare "[Errno 13] ..."
        from plan_search.models.io import short_repr
        from plan_search.models.output import reason

        where = f"{short_repr(str(exc.filename), 120)}: " if exc.filename is not None else ""
        return clip_middle(f"{where}{reason(exc)}")
    text = str(exc).strip() or type(exc).__name__
    return clip_middle(" ".join(text.split()))


def clip_middle(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` if short enough, else its start and end around `` ... ``."""
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    return text[:head] + " ... " + text[-(limit - head - 5):]


def click_error_line(exc: click.ClickException) -> str:
    """Click's own error (bad option value, unknown option, missing option) as one line."""
    return clip_middle(" ".join(exc.format_message().split()))


def _term_as_interrupt() -> None:
    """SIGTERM (what ``timeout``, ``kill`` and schedulers send) and SIGHUP end a command as Ctrl-C
    does: a KeyboardInterrupt, so ``finally`` blocks run (temporary files removed, a sweep's pool
    ended and its table written) instead of the process dying mid-write."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, handler)


_EXIT_FREEZE: list = []


def _skip_exit_collection() -> None:
    """At interpreter exit, move every object to the garbage collector's permanent generation
    (``gc.freeze``), once per process: the exit's collections then leave the command's cyclic
    structures (classes, modules, pydantic and OR-Tools objects) to the operating system instead of
    deallocating them one by one. After ``plan-search --model gpt3-175b --gpu a100`` that teardown
    took ~0.1-0.15 s; frozen, ~0.04 s (2 loaded cores, 2026-12-01). Output, exit code and the exit
    handlers are unchanged: stdout and stderr are flushed as before, every ``atexit`` handler still
    runs (those registered during the command, e.g. a process pool's, before this one), and objects
    freed by reference counting still are. Only at exit: a program that runs commands in-process
    (the tests' CliRunner) keeps collecting its garbage until it exits."""
    if not _EXIT_FREEZE:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _EXIT_FREEZE.append(True)


class _Interrupted(BaseException):
    """A KeyboardInterrupt carried past click's own handler, which prints an empty line to
    stderr before its Abort: the command's interrupted exit is the one ``interrupted`` line."""


class _OneLine:
    """Click's usage errors as ``error: <message>`` on one line (exit 2), like every other bad
    input, instead of click's usage banner, help hint and message over four lines."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted() from exc

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        from plan_search.cli import restore_startup_signals

        try:  # an interrupt while the handlers change hands is the command's too (one line, 130)
            restore_startup_signals()  # the start-up handler (cli/__init__.py) hands over to ours
            _skip_exit_collection()
            _term_as_interrupt()
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            click.echo(f"error: {click_error_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.Abort, KeyboardInterrupt, _Interrupted):  # Ctrl-C, SIGTERM, SIGHUP
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except (ValueError, OSError) as exc:  # raised while converting an option (the body is guarded):
            # click.Path stats a name with a NUL byte and gets ValueError("embedded null byte")
            click.echo(f"error: command line: {one_line(exc)}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


class OneLineCommand(_OneLine, click.Command):
    """A :class:`click.Command` whose usage errors are one ``error:`` line (``cls=`` of ``@click.command``)."""


class OneLineGroup(_OneLine, click.Group):
    """The same for a command group (``plan-catalog``)."""


def guarded(func):
    """Run a click command body; turn bad input into ``error: ...`` and exit 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            # the reader went away (``| head``): not bad input; stop quietly, as a tool killed by
            # SIGPIPE would (128 + 13), with stdout pointed at /dev/null so the exit flush is quiet
            import os

            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, AttributeError, ValueError):
                pass
            sys.exit(EXIT_BROKEN_PIPE)
        except Infeasible as exc:
            click.echo(f"infeasible: {one_line(exc)}", err=True)
            sys.exit(EXIT_INFEASIBLE)
        except (ValueError, ValidationError, OSError, OverflowError) as exc:
            click.echo(f"error: {one_line(exc)}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except RecursionError:
            click.echo("error: input nested too deeply", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper
