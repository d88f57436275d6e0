"""What every command shares: one-line errors and exit codes, ``--model``/``--gpu``/``--set`` options.

Exit codes (documented in the README): 0 result, 2 bad input, 3 nothing feasible.
"""

from __future__ import annotations

import functools
import sys

import click
from pydantic import ValidationError

from models.io import validation_message

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


class Infeasible(Exception):
    """Raised by commands when the request is valid but nothing satisfies it (exit code 3)."""


def one_line(exc: BaseException) -> str:
    """The user-facing one-line form of an error."""
    if isinstance(exc, ValidationError):
        return validation_message(exc)
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def guarded(func):
    """Run a click command body; turn bad input into ``error: ...`` and exit 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
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
