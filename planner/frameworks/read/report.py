"""What a launch-file reader gives back: the model, the plan, and an account of every line it read.

Every setting of the file lands in exactly one list of :class:`LaunchRead`:

- ``used``: it set the plan, the model or the GPU count (``what`` names the field);
- ``unpriced``: understood, and it does not change the step time or memory the planner prices (``what``
  says why: data paths, optimizer hyper-parameters, logging, ...);
- ``not_understood``: the reader does not know what it does; the estimate is made without it. A setting
  that would change the model or the parallel layout is never here: the reader refuses the file instead
  (:class:`~models.io.InputError` naming it);
- ``defaulted`` lists the plan and model values the file does not set, with the framework version whose
  default they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel.plan import Plan


@dataclass(frozen=True)
class Entry:
    """One setting of the file (``text`` as written, e.g. ``--tensor-model-parallel-size 8``) or one
    default (``text`` the field and value); ``line`` 1-based when known; ``what`` the account."""

    text: str
    line: int | None
    what: str

    def as_json(self) -> dict:
        return {"text": self.text, "line": self.line, "what": self.what}


@dataclass
class LaunchRead:
    path: str
    framework: str  # megatron | nemo | torchtitan | deepspeed (the planner's framework rules)
    dialect: str  # what the file is: megatron-script, megatron-args, nemo-yaml, nemo-overrides, torchtitan-toml, ...
    version: str  # the framework version whose defaults fill what the file leaves out
    model: ModelSpec
    plan: Plan
    gpus_from: str  # where the GPU count came from
    gpu_ref: str | None = None  # the GPU type the file names, when it does
    used: list[Entry] = field(default_factory=list)
    unpriced: list[Entry] = field(default_factory=list)
    not_understood: list[Entry] = field(default_factory=list)
    defaulted: list[Entry] = field(default_factory=list)
    notes: list[Entry] = field(default_factory=list)
    text: str = ""  # the file as read
    settings: dict[str, Any] = field(default_factory=dict)  # reader-specific: what --improve edits
    compiled: bool = True  # torchtitan: the compiled kernel profile (hardware.profiles.for_framework)

    def as_json(self) -> dict:
        return {"path": self.path, "framework": self.framework, "dialect": self.dialect, "version": self.version,
                "model": self.model.name, "gpus_from": self.gpus_from,
                "used": [e.as_json() for e in self.used], "unpriced": [e.as_json() for e in self.unpriced],
                "not_understood": [e.as_json() for e in self.not_understood],
                "defaulted": [e.as_json() for e in self.defaulted], "notes": [e.as_json() for e in self.notes]}


def check_kinds(framework: str, items, lines: dict, where: str) -> None:
    """Every value of the file against its kind in the framework's kept list (int, float, bool, str, list): a
    wrong kind is one line naming the key and its line, before any reader converts it."""
    from plan_search.models.io import InputError
    from plan_search.planner.frameworks import rules as fw

    kept = fw.kept_args(framework)
    ok = {"int": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
          "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str),
          "list": lambda v: isinstance(v, list), "dict": lambda v: isinstance(v, dict)}
    for key, value in items:
        spec = kept.get(key)
        if spec is None or value is None or spec.kind not in ok:
            continue
        if spec.kind == "float" and isinstance(value, str):  # DeepSpeed and YAML write 5e7 as text too
            try:
                float(value)
                continue
            except ValueError:
                pass
        if not ok[spec.kind](value):
            at = f"line {lines[key]}: " if lines.get(key) else ""
            raise InputError(f"{where}: {at}{key} = {str(value)[:40]!r} is not {'an' if spec.kind == 'int' else 'a'} "
                             f"{spec.kind}")
        if spec.choices and str(value) not in spec.choices:
            at = f"line {lines[key]}: " if lines.get(key) else ""
            raise InputError(f"{where}: {at}{key} = {str(value)[:40]!r} is not one of {', '.join(spec.choices)}")
