"""Writing output files safely: checked before any work, written atomically.

Every command that writes a file (``plan-sweep``'s table and plot, ``plan-calibrate``'s cluster
file, ``plan-search --plot``) goes through this module, so the same rules hold everywhere:

- :func:`check_output` runs before the command does any work. The output must be a regular
  file or not exist yet (a character device, a FIFO, a socket or a directory is refused: writing
  by rename would replace ``/dev/null`` or a pipe with a regular file, and reading a FIFO "to
  resume" blocks forever); it must not be one of the command's own inputs, compared by device
  and inode (``os.stat``), so a hard link or another spelling of the same path is caught; its
  directory must exist (or be creatable, when the command says so) and be writable.
- :func:`atomic_output` writes a temporary file in the same directory (same file system, so the
  rename is atomic), flushes and fsyncs it, renames it over the output and fsyncs the directory.
  A full disk, a file-size limit or a crash leaves the previous file whole, never cut mid-line;
  the temporary file is removed. A symbolic link is followed: its target is replaced, the link
  stays. Errors name the path the user gave and the reason in words, never the temporary file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from plan_search.models.io import InputError, expand_path, short_repr

_KIND = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _shown(path: str | Path) -> str:
    return short_repr(str(path), 120)


def reason(exc: OSError) -> str:
    """An OSError in words (``No space left on device``), never a bare errno or a temp name."""
    if exc.errno == errno.EFBIG:
        return "file too large: the disk quota or the file-size limit (ulimit -f) was reached"
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    return exc.strerror.lower() if exc.strerror else type(exc).__name__


def file_id(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of an existing file (symlinks followed), else None."""
    try:
        st = os.stat(expand_path(path))
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def check_output(path: str | Path, what: str = "output", inputs: Iterable[str | Path] = (),
                 make_parents: bool = False, overwrite_option: bool = False) -> Path:
    """The output ``path`` (``~`` expanded, a symlink resolved to its target) if it may be written:
    see the module docstring. Raises :class:`InputError` naming ``what`` and the path otherwise.

    ``inputs`` are the files the command reads (missing ones are skipped); ``make_parents``
    allows a missing directory (created on write); ``overwrite_option``: the command has an
    ``--overwrite`` (the message then says it does not apply)."""
    p = expand_path(path)
    shown = _shown(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENOTDIR:
            raise InputError(f"{what}: {shown}: a part of the path is a file, not a directory") from None
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            raise InputError(f"{what}: {shown}: too many levels of symbolic links") from None
        text = reason(exc) if isinstance(exc, OSError) else "not a valid path"
        raise InputError(f"{what}: {shown}: {text}") from None
    if st is not None:
        for test, kind in _KIND:
            if test(st.st_mode):
                raise InputError(f"{what}: {shown} is {kind}, not a regular file; write to a file "
                                 "(it is replaced whole, by rename)")
        for inp in inputs:
            if inp is None:
                continue
            if file_id(inp) == (st.st_dev, st.st_ino):
                same = "the same file as" if os.path.abspath(p) == os.path.abspath(expand_path(inp)) else \
                    "the same file (a hard or symbolic link) as"
                raise InputError(f"{what}: {shown} is {same} the input {_shown(inp)}; choose another output"
                                 + (" (--overwrite never replaces an input)" if overwrite_option else ""))
        if os.path.islink(p):
            p = Path(os.path.realpath(p))
    elif os.path.islink(p):  # a dangling link: writing would create its target somewhere else
        raise InputError(f"{what}: {shown} is a symbolic link to a missing file; write to a regular path")
    parent = p.parent if str(p.parent) else Path(".")
    existing = parent
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != parent and not make_parents:
        raise InputError(f"{what}: the directory of {shown} does not exist; create it first")
    if not existing.is_dir():
        raise InputError(f"{what}: {shown}: {_shown(existing)} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{what}: cannot write in the directory of {shown} (permission denied)")
    if st is not None and not (st.st_mode & 0o222 and os.access(p, os.W_OK)):
        # a rename could replace it, but a read-only file says "do not overwrite" (even to root)
        raise InputError(f"{what}: {shown} is read-only; make it writable or choose another output")
    return p


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str | Path, what: str = "output", shown: str | Path | None = None) -> Iterator[Path]:
    """``with atomic_output(p) as tmp: write(tmp)``: the caller writes ``tmp`` (same directory,
    same suffix, so writers that pick a format by suffix still do), which then replaces ``p``
    (fsynced, renamed, directory fsynced). On any error the temporary file is removed and ``p``
    is left as it was; an OSError becomes one line naming ``shown`` (default ``path``)."""
    p = expand_path(path)
    if os.path.islink(p):
        p = Path(os.path.realpath(p))
    name = _shown(shown if shown is not None else path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=p.parent, prefix=f".{p.stem[:80]}.", suffix=f".tmp{p.suffix}")
        os.close(fd)
    except OSError as exc:
        raise InputError(f"{what}: cannot write {name} ({reason(exc)})") from None
    tmp = Path(tmp_name)
    try:
        try:
            mode = stat.S_IMODE(os.stat(p).st_mode)
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
        _fsync_dir(p.parent)
    except OSError as exc:
        raise InputError(f"{what}: cannot write {name} ({reason(exc)}); the previous file, if any, "
                         "is unchanged") from None
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()


def write_text_atomic(path: str | Path, text: str, what: str = "output") -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_output`)."""
    with atomic_output(path, what) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
