"""Regenerate (or check) every command example shown in README.md and docs/*.md.

    python docs/examples.py            # rewrite the example blocks with real output
    python docs/examples.py --check    # exit 1 naming every block that is stale

An example is an HTML comment naming a command, followed by a fenced block::

    <!-- example: plan-search --model gpt3 --gpu a100 --gpus 1024 | lines=1-12 drop=^search: -->
    ```
    $ plan-search --model gpt3 --gpu a100 --gpus 1024
    ...the output...
    ```

The command is run as a user would run it (the installed console script, from the repository
root, ``COLUMNS=80``); the block becomes ``$ command`` and its output. Options after ``|``:
``lines=A-B`` keeps output lines A to B (1-based, then ``...``), ``drop=REGEX`` leaves out lines
matching REGEX (timings, which change from run to run), ``exit=N`` the expected exit code
(default 0), ``stderr`` shows standard error instead of standard output, ``file=NAME`` (any
number of them) an input file from ``docs/examples/``, shown before the command as a heredoc so
the block can be pasted as is; ``hide=NAME`` an input file the document already shows in a
block of its own (``tests/test_docs.py`` checks it is there verbatim). Commands run in a fresh temporary directory holding those files
(outputs they write land there). Nothing else in the files is touched. ``tests/test_docs.py``
runs ``--check``, so no example can go stale.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INPUTS = ROOT / "docs" / "examples"
DIRECTIVE = re.compile(r"<!-- example: (?P<cmd>.+?)(?: \| (?P<opts>.*?))? -->\n```[a-z]*\n(?P<body>.*?)```",
                       re.S)


def _options(text: str | None) -> dict:
    opts: dict = {"exit": 0, "file": [], "hide": []}
    for tok in shlex.split(text or ""):
        key, _, value = tok.partition("=")
        if key in ("file", "hide"):
            opts[key].append(value)
        else:
            opts[key] = value if value else True
    return opts


def render(command: str, opts: dict) -> str:
    """``$ command`` and the command's (selected) output, as the block shows it."""
    argv = shlex.split(command)
    exe = BIN / argv[0]
    if not exe.exists():
        raise SystemExit(f"examples: {argv[0]}: not an installed command ({exe})")
    env = dict(os.environ, COLUMNS="80", LC_ALL="C.UTF-8")
    shown = ""
    with tempfile.TemporaryDirectory(prefix="plan-search-example-") as work:
        for name in opts["file"]:
            src = INPUTS / name
            shutil.copyfile(src, Path(work) / name)
            shown += f"$ cat > {name} <<'EOF'\n{src.read_text(encoding='utf-8').rstrip()}\nEOF\n"
        for name in opts["hide"]:
            shutil.copyfile(INPUTS / name, Path(work) / name)
        p = subprocess.run([str(exe), *argv[1:]], cwd=work, capture_output=True, text=True, env=env, timeout=600)
    want = int(opts["exit"])
    if p.returncode != want:
        raise SystemExit(f"examples: {command!r} exited {p.returncode}, not {want}: {p.stderr.strip()[-300:]}")
    out = (p.stderr if opts.get("stderr") else p.stdout).rstrip("\n").split("\n")
    if "drop" in opts:
        pat = re.compile(opts["drop"])
        out = [line for line in out if not pat.search(line)]
    if "lines" in opts:
        a, _, b = str(opts["lines"]).partition("-")
        lo, hi = int(a), int(b or a)
        cut = hi < len(out)
        out = out[lo - 1:hi] + (["..."] if cut else [])
    return shown + f"$ {command}\n" + "\n".join(out) + "\n"


def process(path: Path, check: bool) -> list[str]:
    text = path.read_text(encoding="utf-8")
    stale: list[str] = []

    def replace(m: re.Match) -> str:
        body = render(m.group("cmd"), _options(m.group("opts")))
        if body != m.group("body"):
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            stale.append(f"{where}: {m.group('cmd')}")
        head = m.group(0)[: m.start("body") - m.start(0)]
        return head + body + "```"

    new = DIRECTIVE.sub(replace, text)
    if not check and new != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, path)
    return stale


def hidden_inputs(paths=FILES) -> list[tuple[Path, str]]:
    """Every (document, input file) an example runs on without showing it (``hide=``)."""
    return [(p, name) for p in paths for m in DIRECTIVE.finditer(p.read_text(encoding="utf-8"))
            for name in _options(m.group("opts"))["hide"]]


def examples(paths=FILES) -> list[tuple[Path, str]]:
    """Every (file, command) example."""
    return [(p, m.group("cmd")) for p in paths for m in DIRECTIVE.finditer(p.read_text(encoding="utf-8"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if any block is stale")
    args = ap.parse_args()
    stale = [s for f in FILES for s in process(f, args.check)]
    if args.check and stale:
        print("stale examples (run python docs/examples.py):\n  " + "\n  ".join(stale))
        raise SystemExit(1)
    print(f"{len(examples())} examples {'checked' if args.check else 'written'}"
          + (f"; {len(stale)} changed" if stale and not args.check else ""))


if __name__ == "__main__":
    main()
