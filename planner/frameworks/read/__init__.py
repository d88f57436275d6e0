"""Launch files read back into a plan: ``plan-estimate --from FILE``.

:func:`read_launch` tells the kind of file by its name and contents and hands it to its reader:

=====================  ==========================================================  ===========================
file                   what it is                                                   reader
=====================  ==========================================================  ===========================
``*.sh``, other text   Megatron-LM launch script or argument list (pretrain_gpt.py)  :mod:`.megatron`
``*.yaml`` with         ModelZoo-style Megatron flags                                :mod:`.megatron`
``MODEL_ARGS``
``*.yaml`` / text of    NeMo 2.0 / Megatron-Bridge recipe overrides                  :mod:`.nemo`
``key=value``
``*.toml``             torchtitan job config                                        :mod:`.torchtitan`
``*.json``             DeepSpeed config (with a Megatron-DeepSpeed launch beside)   :mod:`.deepspeed`
=====================  ==========================================================  ===========================

Every reader returns a :class:`~.report.LaunchRead`. The file is read once, at most
:data:`MAX_LAUNCH_BYTES` bytes, as UTF-8 text; a binary file, a directory or a missing file is one line.
"""

from __future__ import annotations

from pathlib import Path

from plan_search.models.io import InputError, expand_path
from plan_search.planner.frameworks.read.report import Entry, LaunchRead

__all__ = ["Entry", "LaunchRead", "read_launch", "read_text", "MAX_LAUNCH_BYTES"]

MAX_LAUNCH_BYTES = 1_000_000


def read_text(path: str | Path) -> str:
    """The launch file's text (bounded, UTF-8, not binary), or one line saying why not."""
    p = expand_path(path)
    try:
        regular = p.is_file()
    except (OSError, ValueError):
        regular = False
    if not regular:
        kind = "is a directory" if p.is_dir() else "not found (or not a regular file)"
        raise InputError(f"from: file {str(p)!r} {kind}")
    try:
        size = p.stat().st_size
        if size > MAX_LAUNCH_BYTES:
            raise InputError(f"from: {p.name} is {size} bytes; a launch file is at most {MAX_LAUNCH_BYTES}")
        with p.open("rb") as f:
            raw = f.read(MAX_LAUNCH_BYTES + 1)
    except OSError as exc:
        raise InputError(f"from: cannot read {str(p)!r} ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_LAUNCH_BYTES:
        raise InputError(f"from: {p.name} is larger than {MAX_LAUNCH_BYTES} bytes")
    if b"\0" in raw:
        raise InputError(f"from: {p.name} is a binary file, not a launch script or config")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"from: {p.name} is not UTF-8 text") from None


def kind_of(name: str, text: str) -> str:
    """megatron | nemo | torchtitan | deepspeed, from the file's suffix and contents."""
    suffix = Path(name).suffix.lower()
    head = text.lstrip()
    if suffix == ".toml":
        return "torchtitan"
    if suffix == ".json" or head.startswith("{"):
        return "deepspeed"
    if suffix in (".yaml", ".yml"):
        return "megatron" if "MODEL_ARGS" in text else "nemo"
    import re

    if re.search(r"(?m)(^|\s)(trainer|data|model|optim|recipe|strategy)\.[A-Za-z_.]+=", text) and not re.search(
            r"pretrain_[A-Za-z0-9_]+\.py", text):
        return "nemo"
    return "megatron"


def read_launch(path: str | Path, *, model=None, num_gpus: int | None = None, launch: int | None = None,
                seq_len: int | None = None, framework: str | None = None, text: str | None = None) -> LaunchRead:
    """Read a launch file (see the module docstring). ``model``: a ModelSpec for what the file does not define
    (``--model``); ``num_gpus``: the GPU count when the file does not give it, or to override it; ``launch``:
    which launch command of a script with several (1-based)."""
    text = read_text(path) if text is None else text
    name = str(path)
    kind = framework or kind_of(name, text)
    if kind == "megatron":
        from plan_search.planner.frameworks.read import megatron

        if Path(name).suffix.lower() in (".yaml", ".yml"):
            return megatron.read_yaml(text, name, model=model, num_gpus=num_gpus)
        return megatron.read(text, name, model=model, num_gpus=num_gpus, launch=launch)
    if kind == "torchtitan":
        from plan_search.planner.frameworks.read import torchtitan

        return torchtitan.read(text, name, model=model, num_gpus=num_gpus)
    if kind == "nemo":
        from plan_search.planner.frameworks.read import nemo

        return nemo.read(text, name, model=model, num_gpus=num_gpus)
    if kind == "deepspeed":
        from plan_search.planner.frameworks.read import deepspeed

        return deepspeed.read(text, name, model=model, num_gpus=num_gpus, seq_len=seq_len)
    raise InputError(f"from: framework {kind!r} is not one of megatron, nemo, torchtitan, deepspeed")
