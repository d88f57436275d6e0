"""``plan-catalog``: list the built-in models and hardware systems, or show one in full.

Formatting only: the figures come from :mod:`models.catalog`, :mod:`models.counting` and
:mod:`hardware.catalog`.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import click

from plan_search import __version__
import yaml

from plan_search.cli.common import OneLineGroup, guarded, align_row, column_widths, rule_row
from plan_search.models.io import InputError

FORMATS = click.Choice(["table", "json"], case_sensitive=False)
SOURCE_WIDTH = 60


def _num(x: float | None, digits: int | None = None) -> str:
    if x is None:
        return "-"
    if digits is not None:
        return f"{x:.{digits}f}"
    return f"{x:g}"


def _billions(n: int) -> str:
    b = n / 1e9
    return f"{b:.2f}" if b < 10 else f"{b:.1f}"


def _clip(text: str, width: int = SOURCE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


#: Terminal width the tables fit in (columns two spaces apart, one when two do not fit).
WIDTH = 80


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    widths = column_widths(headers, rows)
    gap = "  " if sum(widths) + 2 * (len(widths) - 1) <= WIDTH else " "
    left = [i for i in range(len(headers)) if i not in right]
    return "\n".join([align_row(headers, widths, left, gap), rule_row(widths, gap),
                      *(align_row(r, widths, left, gap) for r in rows)])


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


# ------------------------------------------------------------------ rows


def _model_record(name: str, m) -> dict[str, Any]:
    from plan_search.models.counting import active_params, total_params

    total = total_params(m)
    active = active_params(m) if m.is_moe else total
    return {
        "name": name,
        "aliases": list(m.aliases),
        "params_b": round(total / 1e9, 3),
        "active_params_b": round(active / 1e9, 3),
        "total_params": total,
        "active_params": active,
        "moe": m.is_moe,
        "num_experts": m.num_experts,
        "experts_per_token": m.experts_per_token,
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "num_heads": m.num_heads,
        "num_kv_heads": m.num_kv_heads,
        "vocab_size": m.vocab_size,
        "seq_len": m.seq_len,
        "source": m.source,
    }


def _gpu_record(name: str, c) -> dict[str, Any]:
    g, n = c.gpu, c.node
    return {
        "name": name,
        "aliases": list(c.aliases),
        "gpu": g.name,
        "memory_gib": g.memory_gib,
        "hbm_bandwidth_gbps": g.hbm_bandwidth_gbps,
        "bf16_tflops": g.peak_tflops.get("bf16"),
        "fp16_tflops": g.peak_tflops.get("fp16"),
        "fp8_tflops": g.peak_tflops.get("fp8"),
        "fp4_tflops": g.peak_tflops.get("fp4"),
        "peak_tflops": dict(g.peak_tflops),
        "tdp_w": g.tdp_w,
        "gpus_per_node": n.gpus_per_node,
        "intra_link": n.intra_link,
        "intra_node_gbps": n.intra_node_gbps,
        "intra_domain_size": n.intra_domain_size,
        "inter_node_gbps": n.inter_node_gbps,
        "price_per_gpu_hour_usd": c.price_per_gpu_hour_usd,
        "price_date": c.price_date,
        "price_source": c.price_source,
        "source": c.sources.get("summary", ""),
    }


# ------------------------------------------------------------------ commands


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="plan-catalog", message="%(prog)s %(version)s")
def main() -> None:
    """Browse the built-in model and hardware catalogs.

    Bandwidths are GB/s per GPU per direction; compute is dense peak TFLOP/s; memory is usable GiB.
    """


@main.command("models")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help="output format")
@guarded
def models_cmd(fmt: str) -> None:
    """List the catalog models: parameters (B; active for MoE), shape, source."""
    from plan_search.models.catalog import load_catalog as load_models

    records = [_model_record(name, m) for name, m in load_models().items()]
    if fmt.lower() == "json":
        _echo_json(records)
        return
    headers = ["name", "params B", "active B", "layers", "hidden", "heads/kv", "vocab", "seq"]
    rows = [
        [
            r["name"],
            _billions(r["total_params"]),
            _billions(r["active_params"]) if r["moe"] else "-",
            str(r["num_layers"]),
            str(r["hidden_size"]),
            f"{r['num_heads']}/{r['num_kv_heads']}",
            str(r["vocab_size"]),
            str(r["seq_len"]),
        ]
        for r in records
    ]
    click.echo(_table(headers, rows, right=range(1, 8)))
    click.echo("params B: billions (active: per token, MoE); sources: plan-catalog show NAME.")


@main.command("gpus")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help="output format")
@guarded
def gpus_cmd(fmt: str) -> None:
    """List the catalog systems: memory, HBM, dense bf16/fp8 peaks, links, price, source."""
    from plan_search.hardware.catalog import load_catalog as load_systems

    records = [_gpu_record(name, c) for name, c in load_systems().items()]
    if fmt.lower() == "json":
        _echo_json(records)
        return
    headers = ["name", "GiB", "HBM", "bf16", "fp8", "link", "intra", "domain", "inter", "$/h"]
    rows = [
        [
            r["name"],
            _num(r["memory_gib"]),
            _num(r["hbm_bandwidth_gbps"]),
            _num(r["bf16_tflops"]) if r["bf16_tflops"] is not None else f"{_num(r['fp16_tflops'])}*",
            _num(r["fp8_tflops"]),
            {"infinity_fabric": "xgmi"}.get(r["intra_link"], r["intra_link"]),
            _num(r["intra_node_gbps"]),
            str(r["intra_domain_size"]),
            _num(r["inter_node_gbps"]),
            _num(r["price_per_gpu_hour_usd"], 2),
        ]
        for r in records
    ]
    click.echo(_table(headers, rows, right=(1, 2, 3, 4, 6, 7, 8, 9)))
    notes = ("GiB: memory; HBM, intra (link inside the node, shared by domain GPUs) and inter (NIC): GB/s per "
             "GPU per direction; bf16, fp8: dense peak TFLOP/s" +
             ("; * fp16 (no bf16)" if any(r["bf16_tflops"] is None for r in records) else "") +
             "; xgmi: AMD Infinity Fabric; $/h: per GPU-hour; sources: plan-catalog show NAME, or --format json.")
    import textwrap

    click.echo("\n".join(textwrap.wrap(notes, width=WIDTH)))


@main.command("show")
@click.argument("name")
@click.option("--kind", type=click.Choice(["auto", "gpu", "model"]), default="auto", show_default=True,
              help="which catalog to look NAME up in")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@guarded
def show_cmd(name: str, kind: str, fmt: str) -> None:
    """Print one catalog model or system in full (usable as an input file)."""
    from plan_search.hardware.catalog import canonical_name, closest_names, get_cluster
    from plan_search.models.catalog import get_model, lookup, suggestions

    if kind in ("auto", "model") and _model_file(name) is not None:
        _show_model_file(_model_file(name), fmt)
        return
    gpu_hit = canonical_name(name) if kind in ("auto", "gpu") else None
    model_hit = lookup(name) if kind in ("auto", "model") else None
    if gpu_hit and model_hit:
        raise InputError(f"show: {name!r} is both a system and a model; add --kind gpu or --kind model")
    if gpu_hit:
        spec = get_cluster(name)
        header = f"# system {spec.name}: {spec.gpu.name}, {spec.node.gpus_per_node} GPUs per node"
    elif model_hit:
        spec = model_hit
        rec = _model_record(spec.name, spec)
        moe = f", {_billions(rec['active_params'])} B active" if spec.is_moe else ""
        header = f"# model {spec.name}: {_billions(rec['total_params'])} B parameters{moe}"
    elif kind == "gpu":
        get_cluster(name, field="show")
        return
    elif kind == "model":
        get_model(name)
        return
    else:
        close = closest_names(name, 2) + suggestions(name, 2)
        raise InputError(
            f"show: unknown {name!r}; closest: {', '.join(close)}; see 'plan-catalog gpus' or 'plan-catalog models'"
        )
    data = spec.model_dump(mode="json")
    if fmt == "json":
        _echo_json(data)
    else:
        click.echo(header)
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100).rstrip())


def _model_file(name: str):
    """The path of a model file NAME names (a file, or a directory holding config.json), else None."""
    from plan_search.models.io import expand_path

    try:
        p = expand_path(name)
        if p.is_dir() and (p / "config.json").is_file():
            return p / "config.json"
        return p if p.is_file() else None
    except (OSError, ValueError):
        return None


def _show_model_file(path, fmt: str) -> None:
    """``plan-catalog show FILE``: the spec a model file gives, and for a HF config.json what was read from
    it: where the name comes from, which key each shape field was read from, the sequence length's rule."""
    from plan_search.models import hf
    from plan_search.models.io import load_document
    from plan_search.models.resolve import load_model_file, looks_like_hf_config

    spec = load_model_file(path)
    doc = load_document(path, what="model")
    rec = _model_record(spec.name, spec)
    moe = f", {_billions(rec['active_params'])} B active" if spec.is_moe else ""
    data = spec.model_dump(mode="json")
    read: dict[str, Any] = {"file": str(path)}
    if looks_like_hf_config(doc):
        given = doc.get("_name_or_path")
        family = doc.get("model_type") or (doc.get("text_config") or {}).get("model_type")
        read.update({
            "format": "HF config.json",
            "model_type": family,
            "name_from": "_name_or_path" if isinstance(given, str) and given.strip() else (
                "model_type" if spec.name == family else "the file's path"),
            "keys": hf.keys_read(doc, spec),
        })
    else:
        read["format"] = "plan-search model document"
    if fmt == "json":
        _echo_json({"read": read, "model": data})
        return
    click.echo(f"# model {spec.name}: {_billions(rec['total_params'])} B parameters{moe}, read from {path}")
    if "keys" in read:
        click.echo(f"# {read['format']}, model_type {read['model_type'] or '(none)'}; name from {read['name_from']}")
        pairs = ", ".join(f"{f} <- {k}" for f, k in read["keys"].items())
        import textwrap

        for line in textwrap.wrap(f"keys: {pairs}", width=WIDTH - 2):
            click.echo(f"# {line}")
        click.echo("# the other fields follow the family's transformers class (models/hf.py)")
    if spec.seq_len_source:
        for line in textwrap_wrap(f"seq_len {spec.seq_len:,}: {spec.seq_len_source}"):
            click.echo(f"# {line}")
    click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100).rstrip())


def textwrap_wrap(text: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=WIDTH - 2, break_on_hyphens=False)


if __name__ == "__main__":  # pragma: no cover
    main()
