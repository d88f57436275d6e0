"""``plan-estimate --from FILE --improve``: the best plans around the file's, shown as changes to the file.

The search space is the search's own (:func:`planner.search.candidates._enumerate` over the framework's knob
space, :func:`planner.search.pricing.evaluate_columns` for memory and days): same model, GPU type and count (or
the counts ``--improve-gpus`` gives), global batch, sequence length and precision as the file. The fastest rows
that fit are conformed and checked against the framework's rules (:func:`planner.frameworks.rules.runnable`), priced
exactly by :func:`planner.costmodel.estimate.estimate`, and the best few that beat the file are kept. Each is
shown as the settings that change, in the file's syntax: the framework's launch configuration of the file's plan
and of the alternative (:func:`planner.frameworks.emit.emit`) are compared, and each changed setting is named with
the line of the file that sets it.

``-o FILE`` writes the file with the first alternative applied, edited in place line by line (a value replaced,
a flag removed, a line inserted beside the file's own settings), read back to check it gives the alternative's
plan, and written atomically; never over the input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Alternative:
    plan: object
    estimate: object
    changes: list[tuple[str, str | None, str | None, int | None]] = field(default_factory=list)  # key, old, new, line

    def as_json(self) -> dict:
        e = self.estimate
        return {"plan": json.loads(self.plan.model_dump_json()), "step_time_s": e.step_time_s,
                "memory_peak_gib": e.memory.peak_gib, "feasible": e.feasible,
                "days": e.run.days if e.run else None, "cost_usd": e.run.cost_usd if e.run else None,
                "changes": [{"key": k, "old": o, "new": n, "line": ln} for k, o, n, ln in self.changes]}


# ------------------------------------------------------------------ settings of a plan, in the file's syntax


def _settings(framework: str, plan, model, cluster) -> dict[str, str]:
    """key -> value text of the framework's launch configuration of ``plan`` (the plan's own settings only)."""
    from plan_search.planner.frameworks import emit as E
    from plan_search.planner.frameworks import rules as F
    from plan_search.planner.frameworks.read.megatron import parse_args_list

    p = F.require(framework, plan, model, cluster)
    if framework == "megatron":
        args = E.megatron_parallel_args(p, model.num_layers) + E.megatron_memory_args(p)
        moe = E.megatron_moe_args(p, model)
        mods = E.selective_modules(p, model)
        if mods:
            i = args.index("--recompute-modules")
            args[i + 1:i + 2] = mods
        out = {f: " ".join(v) for f, v, _, _ in parse_args_list(args)}
        layout = {"--expert-model-parallel-size", "--expert-tensor-parallel-size", "--moe-token-dispatcher-type",
                  "--moe-enable-deepep", "--overlap-moe-expert-parallel-comm", "--moe-pad-expert-input-to-capacity",
                  "--use-transformer-engine-op-fuser", "--moe-mlp-glu-interleave-size"}
        out.update({f: " ".join(v) for f, v, _, _ in parse_args_list(moe) if f in layout})
        return out
    if framework == "torchtitan":
        secs = E.torchtitan_sections(p, model, cluster)
        return {f"{s}.{k}": E._toml_value(v) for s, kv in secs.items() for k, v in kv.items()}
    if framework == "nemo":
        o = E.to_nemo_overrides(p, model, cluster)
        return {k: E._cli_value(v) for k, v in o.items() if not k.startswith("model.config.") or k.startswith(
            ("model.config.recompute", "model.config.cross_entropy", "model.config.moe_token", "model.config.overlap_moe",
             "model.config.gradient_accumulation", "model.config.activation_func"))}
    cfg = E.to_deepspeed_config(p, model, cluster)
    pipe = E.to_deepspeed_pipeline(p, model, cluster=cluster) or {}
    out = {k: json.dumps(v) for k, v in _flat(cfg)}
    out.update({f"PipelineModule.{k}": json.dumps(v) for k, v in _flat(pipe)})
    return out


def _flat(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _file_lines(r) -> dict[str, int]:
    if r.framework == "megatron":
        return {f: line for f, _, line, _ in r.settings.get("flags", [])}
    if r.framework == "torchtitan":
        return dict(r.settings.get("lines", {}))
    out = {}
    for e in r.used + r.unpriced + r.not_understood:
        key = e.text.split("=", 1)[0].split(":", 1)[0].strip()
        if r.framework == "megatron":
            key = e.text.split()[0]
        out.setdefault(key, e.line)
    return out


def changes(r, old_plan, new_plan, cluster) -> list[tuple[str, str | None, str | None, int | None]]:
    a = _settings(r.framework, old_plan, r.model, cluster)
    b = _settings(r.framework, new_plan, r.model, cluster)
    lines = _file_lines(r)
    out = []
    if old_plan.num_gpus != new_plan.num_gpus and r.framework in ("megatron", "torchtitan"):
        out.append(("GPUs", str(old_plan.num_gpus), str(new_plan.num_gpus), None))
    for k in list(a) + [k for k in b if k not in a]:
        if a.get(k) != b.get(k):
            out.append((k, a.get(k), b.get(k), lines.get(k)))
        elif k in b and k not in lines and k in _DEFAULT_DEPENDS.get(r.framework, ()):
            out.append((k, None, b[k], None))  # the file leaves it to a default that depends on what changed
    return out


#: Settings whose default follows other settings (torchtitan reshards after the forward unless pp > 1): written
#: out whenever the file leaves them unset.
_DEFAULT_DEPENDS = {"torchtitan": ("parallelism.fsdp_reshard_after_forward",)}


# ------------------------------------------------------------------ the search around the file's plan


def alternatives(r, plan, cluster, est, *, memory_headroom: float, tokens, checkpoint_interval_h: float,
                 gpus_move: str | None, top: int, sets, time_limit_s: float = 10.0) -> list[Alternative]:
    from plan_search.models.io import InputError, parse_int_set
    from plan_search.planner.costmodel.estimate import estimate
    from plan_search.planner.frameworks import rules as F
    from plan_search.planner.search.candidates import _enumerate
    from plan_search.planner.search.pricing import evaluate_columns
    from plan_search.planner.search.request import DEFAULT_TOKENS, Knobs, SearchRequest

    if gpus_move:
        try:
            counts = parse_int_set(gpus_move, 1_000_000)
        except ValueError as exc:
            raise InputError(f"improve_gpus: {exc}") from None
    else:
        counts = [plan.num_gpus]
    tokens = tokens or DEFAULT_TOKENS
    caps = F.allowed(r.framework)
    knobs = caps.knobs(Knobs(precision=[plan.precision]))
    req = SearchRequest(model=r.model.name, gpu=[cluster.name], gpus=list(counts), global_batch=[plan.global_batch],
                        seq_len=plan.seq_len, tokens=tokens, memory_headroom=memory_headroom,
                        checkpoint_interval_h=checkpoint_interval_h, framework=r.framework, knobs=knobs,
                        time_limit_s=time_limit_s)
    sp = _enumerate(r.model, cluster, np.asarray(counts, dtype=np.int64), [plan.global_batch], plan.seq_len, req)
    cols = evaluate_columns(r.model, cluster, sp.x, req)
    ok = np.flatnonzero(cols["fits"] & np.isfinite(cols["days"]))
    order = ok[np.argsort(cols["days"][ok], kind="stable")]
    base = estimate(r.model, cluster, plan, memory_headroom=memory_headroom, tokens=tokens,
                    checkpoint_interval_h=checkpoint_interval_h)
    pool: list[tuple] = []
    seen = {plan}
    for i in order[:2000]:
        q = F.runnable(r.framework, sp.plan(int(i)), r.model, cluster)
        if q is None or q in seen:
            continue
        seen.add(q)
        # priced as plan-estimate prices it (conforming can move a candidate against the search's column)
        e = estimate(r.model, cluster, q, memory_headroom=memory_headroom, tokens=tokens,
                     checkpoint_interval_h=checkpoint_interval_h)
        if not e.feasible or (base.feasible and base.run and e.run and e.run.days >= base.run.days):
            continue
        pool.append((e.run.days if e.run else e.step_time_s, e.step_time_s, len(pool), q, e))
        if len(pool) >= 4 * top:
            break
    pool.sort(key=lambda t: t[:3])
    return [Alternative(q, e, changes(r, plan, q, cluster)) for *_, q, e in pool[:top]]


def _secs(x: float) -> str:
    return f"{x:.3f} s" if x < 100 else f"{x:,.1f} s"


def _row(e) -> str:
    run = f", {e.run.days:,.1f} days, ${e.run.cost_usd:,.0f}" if e.run else ""
    fit = "" if e.feasible else " (does not fit)"
    return f"{_secs(e.step_time_s)}/step, {e.memory.peak_gib:.1f} GiB{fit} on {e.plan.num_gpus} GPUs{run}"


def format_alternatives(r, est, alts: list[Alternative]) -> list[str]:
    from plan_search.planner.search.request import DEFAULT_TOKENS

    tok = est.run.tokens if est.run else DEFAULT_TOKENS
    import textwrap

    lines = textwrap.wrap(f"what to change ({r.framework} syntax; the same model, batch, sequence and precision; "
                          f"run of {tok / 1e9:,.0f}B tokens)", width=80, subsequent_indent="  ")
    lines.append(f"  the file: {_row(est)}")
    if not alts:
        lines.append("  no plan of the search space beats the file" + ("" if est.feasible else " and fits"))
        return lines
    for k, a in enumerate(alts, 1):
        e = a.estimate
        gain = (1 - e.step_time_s / est.step_time_s) if est.step_time_s else 0
        lines.append(f"  {k}. {_row(e)} (step {-gain:+.1%})")
        for key, old, new, line in a.changes:
            at = f"line {line}: " if line else ""
            if old is not None:
                lines.append(f"     - {at}{_show(r.framework, key, old)}")
            if new is not None:
                lines.append(f"     + {_show(r.framework, key, new)}")
    return lines


def _show(framework: str, key: str, value: str) -> str:
    if key == "GPUs":
        return f"launch on {value} GPUs"
    if framework == "megatron":
        return f"{key} {value}".rstrip()
    if framework == "torchtitan":
        s, k = key.rsplit(".", 1)
        return f"[{s}] {k} = {value}"
    if framework == "nemo":
        return f"{key}={value}"
    return f"{key}: {value}"


# ------------------------------------------------------------------ -o: the file with the first alternative applied


def write_improved(r, alts: list[Alternative], output, from_path) -> None:
    from plan_search.models.io import InputError
    from plan_search.models.output import check_output, write_text_atomic

    check_output(Path(output), "--output", [Path(from_path)])
    if not alts:
        raise InputError("output: no alternative beats the file; nothing written")
    a = alts[0]
    text = apply(r, a)
    full = None
    # read back: the written file must give the alternative's plan
    from plan_search.planner.frameworks import rules as F
    from plan_search.planner.frameworks.read import read_launch

    back = read_launch(Path(from_path), model=r.model, num_gpus=a.plan.num_gpus if r.framework != "deepspeed" else None,
                       text=text, seq_len=a.plan.seq_len if r.framework == "deepspeed" else None)
    want = F.normalize(r.framework, a.plan, r.model.num_layers)
    got = F.normalize(r.framework, back.plan, r.model.num_layers)
    if got != want and r.framework != "megatron":  # once more with every setting of the alternative written out
        lines = _file_lines(r)
        b = _settings(r.framework, a.plan, r.model, r.settings.get("cluster"))
        full = Alternative(a.plan, a.estimate, a.changes + [(k, None, v, None) for k, v in b.items()
                                                            if k not in lines and k not in {c[0] for c in a.changes}])
        text = apply(r, full)
        back = read_launch(Path(from_path), model=r.model, num_gpus=None, text=text,
                           seq_len=a.plan.seq_len if r.framework == "deepspeed" else None)
        got = F.normalize(r.framework, back.plan, r.model.num_layers)
    if got != want:
        bad = [k for k in type(want).model_fields if getattr(got, k) != getattr(want, k)]
        raise InputError(f"output: the changes could not be written into {Path(from_path).name} so that it reads back "
                         f"as the alternative ({', '.join(bad)} differ); the changes are printed: apply them by hand")
    write_text_atomic(Path(output), text, "--output")


def apply(r, a: Alternative) -> str:
    if r.framework == "megatron":
        return _apply_megatron(r, a)
    if r.framework == "torchtitan":
        return _apply_toml(r, a)
    if r.framework == "nemo":
        return _apply_nemo(r, a)
    return _apply_json(r, a)


def _apply_megatron(r, a: Alternative) -> str:
    lines = r.text.split("\n")
    flags = r.settings.get("flags", [])
    where = {f: line for f, _, line, _ in flags}
    inserts: list[str] = []
    for key, old, new, line in a.changes:
        if key == "GPUs":
            continue  # the launcher's count: --gpus says it (not edited)
        ln = where.get(key)
        if ln is None:
            if new is not None:
                inserts.append(f"{key} {new}".rstrip())
            continue
        text = lines[ln - 1]
        m = re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])((?:=|\s+)(?!--)(\"[^\"]*\"|'[^']*'|[^\s\\\\]+))?", text)
        if m is None:
            raise ValueError(key)
        if new is None:
            text = text[:m.start()] + text[m.end():]
        elif new == "":
            text = text[:m.start()] + key + text[m.end():]
        else:
            text = text[:m.start()] + f"{key} {new}" + text[m.end():]
        lines[ln - 1] = text
    if inserts:
        used = [e.line for e in r.used if e.line and e.text.startswith("--")]
        anchor = min(used) if used else len(lines)
        prev = lines[anchor - 2] if anchor >= 2 else ""
        indent = re.match(r"\s*", lines[anchor - 1]).group(0)
        cont = " \\" if prev.rstrip().endswith("\\") or r.dialect == "megatron-args" else ""
        new_lines = [f"{indent}{t}{cont}" for t in inserts]
        lines[anchor - 1:anchor - 1] = new_lines
    return "\n".join(lines)


def _apply_toml(r, a: Alternative) -> str:
    lines = r.text.split("\n")
    pos = dict(r.settings.get("lines", {}))
    appended: dict[str, list[str]] = {}
    edits: dict[int, str | None] = {}
    for key, old, new, _ in a.changes:
        if key == "GPUs":
            continue
        sec, k = key.rsplit(".", 1)
        ln = pos.get(key)
        if ln is not None:
            raw = lines[ln - 1]
            comment = ""
            if "#" in raw:
                comment = "  #" + raw.split("#", 1)[1]
            edits[ln] = None if new is None else f"{k} = {new}{comment}"
        elif new is not None:
            appended.setdefault(sec, []).append(f"{k} = {new}")
    for ln, t in edits.items():
        lines[ln - 1] = t if t is not None else "\0"
    out = [x for x in lines if x != "\0"]
    for sec, kv in appended.items():
        head = next((i for i, x in enumerate(out) if re.fullmatch(rf"\s*\[\s*{re.escape(sec)}\s*\]\s*(#.*)?", x)), None)
        if head is None:
            out += ["", f"[{sec}]"] + kv
        else:
            out[head + 1:head + 1] = kv
    return "\n".join(out)


def _apply_nemo(r, a: Alternative) -> str:
    if r.path.lower().endswith((".yaml", ".yml")):
        import yaml

        o = dict(r.settings.get("overrides", {}))
        for key, old, new, _ in a.changes:
            if new is None:
                o.pop(key, None)
            else:
                from plan_search.planner.frameworks import emit as E

                o[key] = E.parse_nemo_overrides(f"{key}={new}")[key]
        nested: dict = {}
        for k, v in o.items():
            node = nested
            parts = k.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = v
        return "# plan-estimate --improve: the file's overrides with the first alternative applied\n" + yaml.safe_dump(
            nested, sort_keys=False)
    text = r.text
    for key, old, new, _ in a.changes:
        m = re.search(rf"(?<![\w.]){re.escape(key)}=\S*", text)
        if m and new is not None:
            text = text[:m.start()] + f"{key}={new}" + text[m.end():]
        elif m:
            text = text[:m.start()] + text[m.end():]
        elif new is not None:
            text = text.rstrip("\n").rstrip("\\").rstrip() + f" \\\n{key}={new}\n"
    return text


def _apply_json(r, a: Alternative) -> str:
    cfg = json.loads(json.dumps(r.settings.get("config", {})))
    pipe = json.loads(json.dumps(r.settings.get("pipeline") or {}))
    for key, old, new, _ in a.changes:
        target, k = (pipe, key[len("PipelineModule."):]) if key.startswith("PipelineModule.") else (cfg, key)
        parts = k.split(".")
        node = target
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if new is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = json.loads(new)
    text = json.dumps(cfg, indent=2)
    if pipe:
        text += "\n# PipelineModule arguments (pp > 1):\n" + json.dumps(pipe, indent=2)
    if r.settings.get("moe"):
        text += "\n# deepspeed.moe.layer.MoE arguments (each MoE layer):\n" + json.dumps(r.settings["moe"], indent=2)
    return text + "\n"
