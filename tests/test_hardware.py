"""The hardware catalog, --set overrides and --gpu resolution (catalog names and cluster files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plan_search.hardware.catalog import canonical_name, catalog_names, closest_names, get_cluster, load_catalog
from plan_search.hardware.overrides import apply_overrides, describe_overrides, parse_set, valid_keys
from plan_search.hardware.resolve import load_cluster_file, resolve_cluster
from plan_search.hardware.spec import ClusterSpec, EfficiencySpec, GPUSpec, NodeSpec
from plan_search.models.io import InputError

DATA = Path(__file__).parent / "data" / "hw"
CATALOG = load_catalog()
NAMES = sorted(CATALOG)

REQUIRED = [
    "v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "h800", "b200", "b300",
    "gb200-nvl72", "gb300-nvl72", "l40s", "mi300x", "mi325x",
]
PRICE_GAPS = ["b200", "b300", "h800", "gb200-nvl72", "gb300-nvl72", "v100-32gb", "l40s", "mi325x"]
BLACKWELL = ["b200", "b300", "gb200-nvl72", "gb300-nvl72"]
STATUS_WORDS = ("re-checked", "not re-checked", "assumption", "estimate", "hardware.csv", "decision")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg.strip() == msg and msg
    return msg


# ------------------------------------------------------------------ catalog contents


def test_catalog_has_every_required_system():
    assert set(REQUIRED) <= set(CATALOG)
    assert catalog_names()[0] in CATALOG


@pytest.mark.parametrize("name", NAMES)
def test_entry_validates_and_roundtrips(name):
    spec = CATALOG[name]
    assert isinstance(spec, ClusterSpec) and spec.name == name
    assert ClusterSpec.model_validate(spec.model_dump()) == spec
    # Fitted terms where published runs exist (and a source saying so); defaults elsewhere.
    if name in ("a100-80gb", "a100-40gb", "h100-sxm", "h100-96gb-500w", "h200", "h800", "gb200-nvl72", "gb300-nvl72",
                "b200", "b300"):
        assert spec.efficiency != EfficiencySpec() and spec.efficiency.source.startswith("fitted")
    else:
        assert spec.efficiency == EfficiencySpec()


@pytest.mark.parametrize("name", NAMES)
def test_every_gpu_and_node_figure_has_a_source(name):
    spec = CATALOG[name]
    gpu, node = spec.gpu.model_dump(), spec.node.model_dump()
    missing = []
    for field, value in gpu.items():
        if field == "peak_tflops":
            for prec in value:
                if f"peak_tflops.{prec}" not in spec.gpu.sources and "peak_tflops" not in spec.gpu.sources:
                    missing.append(f"gpu.peak_tflops.{prec}")
        elif _is_number(value) and field not in spec.gpu.sources:
            missing.append(f"gpu.{field}")
    for field, value in node.items():
        if _is_number(value) and field not in spec.node.sources:
            missing.append(f"node.{field}")
    assert not missing, f"{name}: figures without a source: {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_source_keys_name_real_fields_and_say_whether_rechecked(name):
    spec = CATALOG[name]
    gpu_keys = set(GPUSpec.model_fields) | {f"peak_tflops.{p}" for p in spec.gpu.peak_tflops}
    assert set(spec.gpu.sources) <= gpu_keys, set(spec.gpu.sources) - gpu_keys
    assert set(spec.node.sources) <= set(NodeSpec.model_fields)
    assert set(spec.sources) <= set(ClusterSpec.model_fields) | {"summary"}
    for where, sources in (("gpu", spec.gpu.sources), ("node", spec.node.sources)):
        for key, text in sources.items():
            assert any(w in text.lower() for w in STATUS_WORDS), f"{name} {where}.{key}: no re-check status"


@pytest.mark.parametrize("name", NAMES)
def test_cluster_figures_have_sources(name):
    spec = CATALOG[name]
    assert spec.price_source and spec.price_date
    for field in ("pue", "energy_price_usd_per_kwh", "storage_read_gbps", "storage_write_gbps"):
        assert field in spec.sources, f"{name}: {field} has no source"
    assert spec.sources.get("summary")


@pytest.mark.parametrize("name", PRICE_GAPS)
def test_prices_missing_from_prices_md_are_marked_estimates(name):
    assert "estimate" in CATALOG[name].price_source.lower()


@pytest.mark.parametrize("name", NAMES)
def test_peaks_are_dense_and_ordered(name):
    g = CATALOG[name].gpu
    half = g.peak("bf16")
    if "fp8" in g.peak_tflops:
        assert g.peak_tflops["fp8"] == pytest.approx(2 * half, rel=0.05)
    if "fp4" in g.peak_tflops:
        assert g.peak_tflops["fp4"] >= g.peak_tflops["fp8"]
    if "tf32" in g.peak_tflops:
        assert g.peak_tflops["tf32"] == pytest.approx(half / 2, rel=0.06)
    assert g.peak_tflops.get("fp32", 0) < half


def test_dense_not_sparse_figures():
    assert CATALOG["h100-sxm"].gpu.peak("bf16") == pytest.approx(989.4)
    assert CATALOG["h100-sxm"].gpu.peak("fp8") == pytest.approx(1978.9)
    assert CATALOG["a100-80gb"].gpu.peak("bf16") == 312
    assert CATALOG["b200"].gpu.peak("fp4") == 9000
    assert CATALOG["gb300-nvl72"].gpu.peak("fp4") == 15000
    assert CATALOG["mi300x"].gpu.peak("bf16") == pytest.approx(1307.4)
    assert CATALOG["v100-32gb"].gpu.peak("bf16") == 125  # no bf16 on Volta: falls back to fp16
    for name in BLACKWELL:
        assert "fp4" in CATALOG[name].gpu.peak_tflops
    for name in ("v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "h800", "mi300x"):
        assert "fp4" not in CATALOG[name].gpu.peak_tflops


def test_blackwell_entries_have_their_own_datasheet_peaks():
    """B200 (HGX, 1000 W), B300 (HGX, 1100 W), GB200 and GB300 (NVL72, 1200/1400 W): dense peaks
    per precision as NVIDIA prints them (sparse / 2), FP4 distinct on each."""
    peaks = {n: CATALOG[n].gpu.peak_tflops for n in BLACKWELL}
    assert (peaks["b200"]["bf16"], peaks["b200"]["fp8"], peaks["b200"]["fp4"]) == (2250, 4500, 9000)
    assert (peaks["b300"]["bf16"], peaks["b300"]["fp8"], peaks["b300"]["fp4"]) == (2250, 4500, 13500)
    assert (peaks["gb200-nvl72"]["bf16"], peaks["gb200-nvl72"]["fp8"], peaks["gb200-nvl72"]["fp4"]) == (2500, 5000, 10000)
    assert (peaks["gb300-nvl72"]["bf16"], peaks["gb300-nvl72"]["fp8"], peaks["gb300-nvl72"]["fp4"]) == (2500, 5000, 15000)
    assert len({p["fp4"] for p in peaks.values()}) == 4
    assert [CATALOG[n].gpu.tdp_w for n in BLACKWELL] == [1000, 1100, 1200, 1400]
    assert CATALOG["b300"].gpu.memory_gib == pytest.approx(275040 / 1024, abs=0.01)
    for n in BLACKWELL:
        assert CATALOG[n].gpu.block_scaling and CATALOG[n].node.intra_node_gbps == 900  # NVLink 5
        assert "sparsity" in CATALOG[n].gpu.sources["peak_tflops"]
    for n in set(NAMES) - set(BLACKWELL) - set(CDNA4):
        assert not CATALOG[n].gpu.block_scaling


CDNA4 = ["mi350x", "mi355x"]


def test_cdna4_entries_are_their_own_parts():
    """MI350X (1000 W, air) and MI355X (1400 W, liquid): the same CDNA 4 die and 288 GB HBM3E at
    8 TB/s, dense peaks half of AMD's sparse figures (FP4 20.1 and 18.45 PF sparse), each format
    twice the rate of the one twice as wide, no TF32 matrix rate, and an Infinity Fabric of 7 links
    at 153.6 GB/s bidirectional."""
    mi350, mi355 = (CATALOG[n].gpu for n in CDNA4)
    assert (mi355.peak_tflops["fp4"], mi350.peak_tflops["fp4"]) == pytest.approx((20130 / 2, 18450 / 2), rel=2e-3)
    for g in (mi350, mi355):
        assert g.architecture == "cdna4" and g.block_scaling and g.hbm_bandwidth_gbps == 8000
        assert g.peak_tflops["fp8"] == pytest.approx(2 * g.peak_tflops["bf16"], rel=1e-3)
        assert g.peak_tflops["fp4"] == pytest.approx(2 * g.peak_tflops["fp8"], rel=1e-3)
        assert "tf32" not in g.peak_tflops
    assert mi350.peak_tflops["bf16"] / mi355.peak_tflops["bf16"] == pytest.approx(0.92, abs=0.01)  # 'about 8 percent'
    assert (mi350.tdp_w, mi355.tdp_w) == (1000, 1400)
    for n in CDNA4:
        assert CATALOG[n].node.intra_node_gbps == pytest.approx(7 * 153.6 / 2)


def test_h800_is_h100_compute_with_reduced_nvlink():
    h800, h100 = CATALOG["h800"], CATALOG["h100-sxm"]
    assert h800.gpu.peak_tflops == h100.gpu.peak_tflops
    assert h800.node.intra_node_gbps == 200 and h100.node.intra_node_gbps == 450  # 400 vs 900 bidirectional
    assert h800.node.inter_node_gbps == 50
    assert get_cluster("H800").name == "h800" and get_cluster("h200").name == "h200"


def test_usable_memory_gib():
    assert CATALOG["a100-80gb"].gpu.memory_gib == 80.0  # 81920 MiB
    assert CATALOG["h100-sxm"].gpu.memory_gib == pytest.approx(81559 / 1024, abs=0.01)
    assert CATALOG["h200"].gpu.memory_gib == pytest.approx(143771 / 1024, abs=0.01)
    assert CATALOG["mi300x"].gpu.memory_gib == pytest.approx(205822885888 / 2**30, abs=0.01)
    assert CATALOG["mi325x"].gpu.memory_gib < 256


def test_per_direction_bandwidth_convention():
    assert get_cluster("a100").node.intra_node_gbps == 300  # 600 GB/s NVLink3 bidirectional
    assert get_cluster("h100").node.intra_node_gbps == 450  # 900 bidirectional
    assert get_cluster("a100").node.inter_node_gbps == 25  # 200 Gb/s HDR per GPU
    assert get_cluster("h100").node.inter_node_gbps == 50  # 400 Gb/s NDR per GPU
    assert get_cluster("b200").node.intra_node_gbps == 900
    assert get_cluster("mi300x").node.intra_node_gbps == 448  # 7 links x 64
    assert get_cluster("l40s").node.intra_node_gbps == 32  # PCIe Gen4 x16
    assert get_cluster("h100-pcie").node.intra_node_gbps == 64  # PCIe Gen5 x16
    assert get_cluster("gb300").node.inter_node_gbps == 100  # 800 Gb/s CX-8


def test_nvl72_is_trays_in_one_rack_domain():
    """Issue 12: the host is a 4-GPU compute tray, the NVLink domain the 72-GPU rack."""
    for name in ("gb200-nvl72", "gb300-nvl72"):
        node = CATALOG[name].node
        assert node.gpus_per_node == 4 and node.intra_domain_size == 72
        assert "tray" in node.sources["gpus_per_node"].lower()
        assert "rack" in node.sources["intra_domain_size"].lower() or "domain" in node.sources["intra_domain_size"]


def test_link_kinds():
    assert CATALOG["l40s"].node.intra_link == "pcie"
    assert CATALOG["h100-pcie"].node.intra_link == "pcie"
    assert CATALOG["mi300x"].node.intra_link == "infinity_fabric"
    assert CATALOG["h100-sxm"].node.intra_link == "nvswitch"


# ------------------------------------------------------------------ names and aliases


@pytest.mark.parametrize(
    "ref, name",
    [("a100", "a100-80gb"), ("A100-SXM", "a100-80gb"), ("h100", "h100-sxm"), ("H100", "h100-sxm"),
     ("  h200 ", "h200"), ("GB200", "gb200-nvl72"), ("gb300", "gb300-nvl72"), ("v100", "v100-32gb")],
)
def test_aliases_case_insensitive(ref, name):
    assert get_cluster(ref).name == name
    assert canonical_name(ref) == name


def test_aliases_are_unique():
    seen = {}
    for name, spec in CATALOG.items():
        for key in (name, *spec.aliases):
            assert key.lower() not in seen, f"{key} used by {seen.get(key.lower())} and {name}"
            seen[key.lower()] = name


def test_unknown_gpu_one_line_with_suggestion():
    with pytest.raises(InputError) as exc:
        get_cluster("a1000")
    msg = _one_line(exc)
    assert msg.startswith("gpu: unknown 'a1000'; closest: a100-80gb")
    assert msg.endswith("see 'plan-catalog gpus'")
    assert "h100-sxm" in closest_names("h1OO")


def test_unknown_gpu_without_close_match_lists_known_names():
    with pytest.raises(InputError) as exc:
        get_cluster("tpu-v5p")
    assert "known: " in _one_line(exc) and "h100-sxm" in str(exc.value)


def test_catalog_is_cached_and_immutable():
    assert get_cluster("h100") is get_cluster("h100-sxm")
    copy = load_catalog()
    copy.pop("h100-sxm")
    assert "h100-sxm" in load_catalog()
    with pytest.raises(Exception):
        get_cluster("h100").gpu.memory_gib = 1  # frozen


def test_catalog_read_through_importlib_resources():
    from importlib import resources

    assert resources.files("plan_search.hardware").joinpath("catalog.yaml").is_file()


# ------------------------------------------------------------------ --set overrides


def _dump_without_provenance(spec: ClusterSpec) -> dict:
    d = spec.model_dump()
    d.pop("sources")
    d["gpu"].pop("sources")
    d["node"].pop("sources")
    d["efficiency"].pop("source")
    return d


def _diff(a: dict, b: dict, prefix: str = "") -> set[str]:
    out = set()
    for k in set(a) | set(b):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out |= _diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.add(f"{prefix}{k}")
    return out


@pytest.mark.parametrize(
    "item, key, value",
    [
        ("gpu.hbm_bandwidth_gbps=3000", "gpu.hbm_bandwidth_gbps", 3000),
        ("node.inter_node_gbps=50", "node.inter_node_gbps", 50),
        ("price_per_gpu_hour_usd=2.5", "price_per_gpu_hour_usd", 2.5),
        ("efficiency.gemm_eff_max=0.7", "efficiency.gemm_eff_max", 0.7),
        ("gpu.peak_tflops.bf16=400", "gpu.peak_tflops.bf16", 400),
        ("gpu.peak_tflops.fp8=600", "gpu.peak_tflops.fp8", 600),  # a precision the A100 lacks
        ("node.intra_link=nvlink", "node.intra_link", "nvlink"),
        ("pue = 1.4", "pue", 1.4),
    ],
)
def test_override_changes_exactly_that_field(item, key, value):
    base = get_cluster("a100")
    new = apply_overrides(base, [item])
    assert _diff(_dump_without_provenance(base), _dump_without_provenance(new)) == {key}
    node = new.model_dump()
    for part in key.split("."):
        node = node[part]
    assert node == value
    assert base.gpu.hbm_bandwidth_gbps == 2039  # the catalog spec is untouched


def test_override_records_provenance():
    new = apply_overrides(get_cluster("a100"), ["gpu.hbm_bandwidth_gbps=3000", "efficiency.gemm_eff_max=0.7"])
    assert "what-if override --set gpu.hbm_bandwidth_gbps=3000" in new.gpu.sources["hbm_bandwidth_gbps"]
    assert "2039" in new.gpu.sources["hbm_bandwidth_gbps"]
    assert "gemm_eff_max=0.7" in new.efficiency.source
    peak = apply_overrides(get_cluster("a100"), ["gpu.peak_tflops.bf16=400"])
    assert peak.gpu.sources["peak_tflops.bf16"].startswith("what-if override")


def test_overrides_apply_in_order_and_accept_empty():
    base = get_cluster("h100")
    assert apply_overrides(base, []) is base
    new = apply_overrides(base, ["node.inter_node_gbps=10", "node.inter_node_gbps=20"])
    assert new.node.inter_node_gbps == 20


def test_override_section_merge_with_mapping_value():
    new = apply_overrides(get_cluster("h100"), ["gpu.peak_tflops={fp4: 3000}"])
    assert new.gpu.peak_tflops["fp4"] == 3000 and new.gpu.peak_tflops["bf16"] == pytest.approx(989.4)


@pytest.mark.parametrize(
    "item, expected",
    [
        ("gpu.hbm_bw=3000", "--set gpu.hbm_bw: no such field; closest: gpu.hbm_bandwidth_gbps"),
        ("nod.inter_node_gbps=3", "--set nod.inter_node_gbps: no such field; closest: node.inter_node_gbps"),
        ("gpus_per_node=4", "--set gpus_per_node: no such field; closest: node.gpus_per_node"),
        ("gpu.peak_tflops.fp6=1", "--set gpu.peak_tflops.fp6: no such field; closest: gpu.peak_tflops.fp16"),
        ("efficiency.gemm_eff=0.7", "--set efficiency.gemm_eff: no such field; closest: efficiency.gemm_eff_max"),
    ],
)
def test_unknown_override_key_suggests(item, expected):
    with pytest.raises(InputError) as exc:
        apply_overrides(get_cluster("a100"), [item])
    assert _one_line(exc).startswith(expected)


@pytest.mark.parametrize(
    "item, fragment",
    [
        ("gpu.hbm_bandwidth_gbps", "--set 'gpu.hbm_bandwidth_gbps': expected KEY=VALUE"),
        ("=3000", "expected KEY=VALUE"),
        ("gpu.hbm_bandwidth_gbps=", "--set gpu.hbm_bandwidth_gbps: no value"),
        ("gpu.hbm_bandwidth_gbps=-1", "--set gpu.hbm_bandwidth_gbps=-1: Input should be greater than 0"),
        ("gpu.hbm_bandwidth_gbps=abc", "--set gpu.hbm_bandwidth_gbps=abc: Input should be a valid number"),
        ("gpu.hbm_bandwidth_gbps=true", "--set gpu.hbm_bandwidth_gbps: expected a number"),
        ("gpu.hbm_bandwidth_gbps=[1", "--set gpu.hbm_bandwidth_gbps: cannot parse value"),
        ("efficiency.gemm_eff_max=1.5", "--set efficiency.gemm_eff_max=1.5: Input should be less than or equal to 1"),
        ("node.intra_link=infiniband", "--set node.intra_link=infiniband: Input should be"),
        ("node.intra_domain_size=3", "intra_domain_size: 3 must divide"),
        ("gpu=3", "--set gpu: is a section"),
        ("gpu.peak_tflops.bf16=null", "--set gpu.peak_tflops.bf16: value 'null' is empty"),
    ],
)
def test_bad_override_one_line_naming_key(item, fragment):
    with pytest.raises(InputError) as exc:
        apply_overrides(get_cluster("a100"), [item])
    assert fragment in _one_line(exc)


def test_describe_overrides():
    assert describe_overrides(["gpu.hbm_bandwidth_gbps=3000"]) == ["gpu.hbm_bandwidth_gbps = 3000"]
    lines = describe_overrides(["gpu.hbm_bandwidth_gbps=3000", "price_per_gpu_hour_usd=2.5"], get_cluster("a100"))
    assert lines == ["gpu.hbm_bandwidth_gbps = 3000 (was 2039.0)", "price_per_gpu_hour_usd = 2.5 (was 1.75)"]
    with pytest.raises(InputError):
        describe_overrides(["oops"])


def test_parse_set_and_valid_keys():
    assert parse_set("node.intra_link = nvlink") == ("node.intra_link", "nvlink")
    keys = valid_keys(get_cluster("a100"))
    assert "gpu.hbm_bandwidth_gbps" in keys and "gpu.peak_tflops.fp8" in keys and "efficiency.gemm_eff_max" in keys


# ------------------------------------------------------------------ --gpu resolution


def test_resolve_catalog_name_and_sets():
    spec = resolve_cluster("H100", ["node.inter_node_gbps=25"])
    assert spec.name == "h100-sxm" and spec.node.inter_node_gbps == 25


def test_resolve_file_with_base_and_partial_overrides():
    spec = resolve_cluster(str(DATA / "my-cluster.yaml"))
    base = get_cluster("a100-80gb")
    assert spec.name == "my-a100-cluster" and spec.aliases == ()
    assert spec.node.inter_node_gbps == 12.5
    assert spec.gpu.peak_tflops["bf16"] == 290 and spec.gpu.peak_tflops["fp16"] == 312  # nested merge
    assert spec.price_per_gpu_hour_usd == 1.1 and spec.price_source == "internal chargeback rate"
    assert spec.efficiency.gemm_eff_max == 0.7 and spec.efficiency.hbm_eff == EfficiencySpec().hbm_eff
    assert spec.node.intra_node_gbps == base.node.intra_node_gbps  # untouched fields from the base
    assert spec.gpu.hbm_bandwidth_gbps == base.gpu.hbm_bandwidth_gbps
    # provenance: the file's figures are credited to the file, its own source kept
    assert spec.gpu.sources["peak_tflops.bf16"].startswith("my-cluster.yaml")
    assert spec.node.sources["inter_node_gbps"].startswith("our cluster")
    assert spec.gpu.sources["memory_gib"] == base.gpu.sources["memory_gib"]


def test_resolve_file_then_sets():
    spec = resolve_cluster(str(DATA / "my-cluster.yaml"), ["gpu.memory_gib=40"])
    assert spec.gpu.memory_gib == 40 and spec.node.inter_node_gbps == 12.5


def test_resolve_full_file_without_base():
    spec = load_cluster_file(DATA / "full-cluster.yaml")
    assert spec.name == "lab-l4" and spec.gpu.peak("fp16") == 121 and spec.node.intra_link == "pcie"


@pytest.mark.parametrize(
    "fname, fragment",
    [
        ("malformed.yaml", "cluster malformed.yaml: not valid YAML/JSON"),
        ("unknown-field.yaml", "cluster unknown-field.yaml: node.inter_gbps: no such field; closest: node.inter_node_gbps"),
        ("bad-value.yaml", "cluster bad-value.yaml: gpu.hbm_bandwidth_gbps: Input should be greater than 0"),
        ("bad-base.yaml", "cluster bad-base.yaml: base: unknown 'h1000'; closest: h100-sxm"),
        ("not-a-mapping.yaml", "cluster not-a-mapping.yaml: expected a mapping"),
        ("missing.yaml", "cluster: file"),
    ],
)
def test_bad_cluster_files_one_line_with_file_and_field(fname, fragment):
    with pytest.raises(InputError) as exc:
        resolve_cluster(str(DATA / fname))
    assert fragment in _one_line(exc)


def test_resolve_unknown_and_empty():
    with pytest.raises(InputError) as exc:
        resolve_cluster("a1000")
    assert _one_line(exc).startswith("gpu: unknown 'a1000'; closest: a100-80gb")
    with pytest.raises(InputError):
        resolve_cluster("   ")


def test_catalog_name_wins_over_same_named_file(tmp_path, monkeypatch):
    (tmp_path / "h100").write_text("base: a100\n")
    (tmp_path / "mybox").write_text("base: a100\nname: mybox\n")
    monkeypatch.chdir(tmp_path)
    assert resolve_cluster("h100").name == "h100-sxm"
    assert resolve_cluster("mybox").name == "mybox"  # not a catalog name: the file is used


def test_file_with_base_and_bad_override_names_the_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("base: h100\nnode:\n  gpus_per_node: 3\n")
    with pytest.raises(InputError) as exc:
        resolve_cluster(str(f))
    msg = _one_line(exc)
    assert msg.startswith("cluster c.yaml: node") and "gpus_per_node" in msg


def test_cdna4_parts_price_through_plan_estimate():
    """plan-estimate on the new AMD parts: the MI355X's step is faster than the MI300X's by less than
    its peak ratio (the same plan: comm and memory-bound work do not scale with the peak), fp8 is
    faster than bf16 on it, and its efficiency terms are said to be priors (no fitted rows)."""
    import json

    from click.testing import CliRunner

    from plan_search.cli.estimate import main as estimate

    def est(gpu, *extra):
        r = CliRunner().invoke(estimate, ["--model", "llama3.1-70b", "--gpu", gpu, "--gpus", "64", "--tp", "8",
                                          "--pp", "1", "--global-batch", "256", "--seq-len", "8192",
                                          "--format", "json", *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    mi300, mi355, mi355_fp8 = est("mi300x"), est("mi355x"), est("mi355x", "--precision", "fp8")
    ratio = mi300["step_time_s"] / mi355["step_time_s"]
    assert 1.2 < ratio < CATALOG["mi355x"].gpu.peak("bf16") / CATALOG["mi300x"].gpu.peak("bf16")
    assert mi355_fp8["step_time_s"] < mi355["step_time_s"]
    assert "not fitted" in json.dumps(mi355["efficiency"])
