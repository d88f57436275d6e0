"""plan-sweep: scenarios from a sweep file, the tidy table, infeasible rows, determinism over
executors and workers, resumption after an interrupt and after a kill, Parquet, Ray, the CLI."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from cli_helpers import signal_mid_sweep
from plan_search.cli.sweep import main
from plan_search.models.io import InputError
from plan_search.planner.costmodel.memory import DEFAULT_MEMORY_HEADROOM
from plan_search.planner.search.front import search
from plan_search.planner.sweep import (
    RESULT_COLUMNS,
    Progress,
    build_sweep,
    journal_path,
    load_sweep,
    parse_tokens,
    read_journal,
    run_scenario,
    run_sweep,
)

ROOT = Path(__file__).resolve().parents[1]

# small and fast: a 1.7B and an 8B model on explicit counts (~0.05 s a search)
SMALL = {
    "base": {"model": "megatron-gpt-1.7b", "gpu": "a100-80gb", "tokens": "10B"},
    "sweep": {"gpus": [8, 16, 32], "node.inter_node_gbps": [12.5, 50]},
}
# one infeasible scenario among feasible ones: 2 days is too short on 8 GPUs
WITH_INFEASIBLE = {
    "base": {"model": "llama3.1-8b", "gpu": "h100-sxm", "tokens": "20B", "deadline_days": 2},
    "combine": "zip",
    "sweep": {"gpus": [8, 64, 128], "seq_len": [8192, 8192, 4096]},
}


def _drop_timing(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["search_s"]).reset_index(drop=True)


def _write(tmp_path, doc, name="sweep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


# ------------------------------------------------------------------ the sweep file
def test_product_is_cartesian_in_file_order():
    sw = build_sweep(SMALL)
    assert sw.axes == ["gpus", "node.inter_node_gbps"]
    assert [s.params for s in sw.scenarios] == [
        {"gpus": g, "node.inter_node_gbps": b} for g in (8, 16, 32) for b in (12.5, 50)]
    s = sw.scenarios[3]
    assert s.request.gpus == [16] and s.request.sets == ["node.inter_node_gbps=50"]
    assert s.request.tokens == 10e9
    assert len({s.key for s in sw.scenarios}) == 6


def test_zip_and_list_values():
    doc = {"base": {"model": "gpt3-175b", "sets": ["price_per_gpu_hour_usd=2"]}, "combine": "zip",
           "sweep": {"gpu": ["a100-80gb", ["a100-80gb", "h100-sxm"]], "tokens": ["300B", 1.4e12],
                     "knobs.zero": [1, [1, 3]], "gpu.hbm_bandwidth_gbps": [2000, 3000]}}
    sw = build_sweep(doc)
    assert len(sw.scenarios) == 2
    a, b = (s.request for s in sw.scenarios)
    assert a.gpu == ["a100-80gb"] and b.gpu == ["a100-80gb", "h100-sxm"]
    assert a.tokens == 300e9 and b.tokens == 1.4e12
    assert a.knobs.zero == [1] and b.knobs.zero == [1, 3]
    assert b.sets == ["price_per_gpu_hour_usd=2", "gpu.hbm_bandwidth_gbps=3000"]
    # an axis mixing lists and scalars is one text column
    assert [s.params["gpu"] for s in sw.scenarios] == ["a100-80gb", "a100-80gb,h100-sxm"]


@pytest.mark.parametrize("doc,needle", [
    ({"base": {"model": "gpt3-175b"}, "combine": "zip", "sweep": {"gpus": [8, 16], "seq_len": [2048]}},
     "one length"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"gpus": 8}}, "expected a list"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"gpus": []}}, "empty"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"gpu.hbm_bw": [1, 2]}}, "no such field"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"node.inter_node_gbps": [-1]}}, "scenario 0"),
    ({"base": {"model": "no-such-model"}, "sweep": {"gpus": [8]}}, "no-such-model"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"knobs.zerro": [1]}}, "no such knob"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"gpus": [8, 8]}}, "same request"),
    ({"base": {"model": "gpt3-175b"}, "sweep": {"tokens": ["lots"]}}, "token count"),
    ({"base": {"model": "gpt3-175b"}, "sweeps": {"gpus": [8]}}, "sweeps"),
    ({"base": {"model": "gpt3-175b", "gpus": [0]}, "sweep": {}}, "positive"),
])
def test_bad_sweeps_fail_before_running(doc, needle):
    with pytest.raises(InputError) as e:
        build_sweep(doc)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_parse_tokens():
    assert parse_tokens("300B") == 300e9
    assert parse_tokens("300e9") == 300e9  # YAML reads this as text
    assert parse_tokens("1.4T") == 1.4e12
    assert parse_tokens(5) == 5.0
    with pytest.raises(InputError):
        parse_tokens(True)


# ------------------------------------------------------------------ the table
def test_rows_match_plan_search(tmp_path):
    sw = build_sweep(SMALL)
    run = run_sweep(sw, tmp_path / "out.csv", workers=1, progress=False)
    df = run.frame
    assert list(df.columns[:4]) == ["scenario", "scenario_key", "gpus", "node.inter_node_gbps"]
    assert list(df.columns[4:]) == list(RESULT_COLUMNS)
    assert run.counts == {"ok": 6, "infeasible": 0, "error": 0} and run.ran == 6 and run.resumed == 0
    assert df["scenario"].is_monotonic_increasing
    # every scenario's rows are its front, in front order, the recommended one flagged
    for s in sw.scenarios:
        res = search(s.request)
        rows = df[df["scenario"] == s.index]
        assert len(rows) == len(res.front)
        assert rows["num_gpus"].tolist() == [fp.num_gpus for fp in res.front]
        assert rows["days"].tolist() == pytest.approx([fp.days for fp in res.front])
        assert rows["cost_usd"].tolist() == pytest.approx([fp.cost_usd for fp in res.front])
        assert rows["tp"].tolist() == [fp.plan.tp for fp in res.front]
        assert rows["recommended"].tolist() == [i == res.recommended_index for i in range(len(res.front))]
        assert (rows["gpus"] == s.params["gpus"]).all()
        assert (rows["status"] == "ok").all()
    # the file is the frame
    back = pd.read_csv(tmp_path / "out.csv", dtype={"scenario_key": str})
    assert back["scenario_key"].tolist() == df["scenario_key"].tolist()
    assert back["days"].tolist() == pytest.approx(df["days"].astype(float).tolist())
    assert not journal_path(tmp_path / "out.csv").exists()


def test_infeasible_scenario_is_a_row_that_says_why(tmp_path):
    run = run_sweep(build_sweep(WITH_INFEASIBLE), tmp_path / "o.csv", workers=1, progress=False)
    df = run.frame
    bad = df[df["status"] == "infeasible"]
    assert len(bad) == 1 and int(bad["scenario"].iloc[0]) == 0
    assert bad["reason"].iloc[0] == "deadline"
    assert "deadline" in bad["message"].iloc[0] and "days" in bad["message"].iloc[0]
    assert bad["num_gpus"].isna().all() and not bad["recommended"].iloc[0]
    assert run.counts["ok"] == 2 and run.counts["infeasible"] == 1
    ok = df[df["status"] == "ok"]
    assert (ok["days"] <= 2).all()


def test_recommended_off_the_front_is_its_own_row():
    res = run_scenario(0, {"model": "megatron-gpt-1.7b", "gpus": [8, 16, 32], "objective": "best-mfu",
                           "tokens": 1e10})
    rows = res["rows"]
    assert res["status"] == "ok"
    assert sum(1 for r in rows if r["recommended"]) == 1
    off = [r for r in rows if not r["on_front"]]
    for r in off:
        assert r["recommended"] and r["point"] is None


def test_an_error_is_a_row_and_is_retried(tmp_path):
    doc = {"base": {"model": "gpt3-175b", "gpus": [64]}, "sweep": {"max_candidates": [1, 5_000_000]}}
    out = tmp_path / "e.csv"
    run = run_sweep(build_sweep(doc), out, workers=1, progress=False)
    df = run.frame
    assert df[df["scenario"] == 0]["status"].tolist() == ["error"]
    assert "max_candidates" in df[df["scenario"] == 0]["message"].iloc[0]
    assert run.counts["error"] == 1 and run.counts["ok"] == 1
    again = run_sweep(build_sweep(doc), out, workers=1, progress=False)
    assert again.ran == 1 and again.resumed == 1  # the error is run again, the ok one is kept


# ------------------------------------------------------------------ parallel and deterministic
def test_parallel_output_equals_serial(tmp_path):
    sw = build_sweep(SMALL)
    a = run_sweep(sw, tmp_path / "serial.csv", workers=1, progress=False).frame
    b = run_sweep(sw, tmp_path / "pool.csv", workers=2, progress=False).frame
    pd.testing.assert_frame_equal(_drop_timing(a), _drop_timing(b))
    fa = pd.read_csv(tmp_path / "serial.csv").drop(columns=["search_s"])
    fb = pd.read_csv(tmp_path / "pool.csv").drop(columns=["search_s"])
    pd.testing.assert_frame_equal(fa, fb)


# ------------------------------------------------------------------ resumption
def test_interrupted_then_resumed_equals_one_run(tmp_path):
    sw = build_sweep(SMALL)
    out = tmp_path / "r.csv"
    seen = []

    def stop_after_two(res):
        seen.append(res["index"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    part = run_sweep(sw, out, workers=1, progress=False, on_result=stop_after_two)
    assert part.interrupted and part.counts["ok"] == 2
    on_disk = pd.read_csv(out, dtype={"scenario_key": str})
    assert sorted(on_disk["scenario"].unique()) == sorted(seen)
    rest = []
    full = run_sweep(sw, out, workers=1, progress=False, on_result=lambda r: rest.append(r["index"]))
    assert full.resumed == 2 and full.ran == 4 and not set(rest) & set(seen)
    fresh = run_sweep(sw, tmp_path / "fresh.csv", workers=1, progress=False).frame
    pd.testing.assert_frame_equal(_drop_timing(full.frame), _drop_timing(fresh), check_dtype=True)
    # the file written after resuming reads back the same as a fresh run's file
    pd.testing.assert_frame_equal(pd.read_csv(out).drop(columns=["search_s"]),
                                  pd.read_csv(tmp_path / "fresh.csv").drop(columns=["search_s"]))
    # a third run has nothing to do
    third = run_sweep(sw, out, workers=1, progress=False)
    assert third.ran == 0 and third.resumed == 6


def test_journal_survives_a_kill_and_a_torn_line(tmp_path):
    """Kill -9 a real plan-sweep process after its first scenario, rerun, compare."""
    doc = {"base": {"model": "gpt3-175b", "gpu": "a100-80gb"},  # default GPU ranges: ~1 s a scenario
           "sweep": {"tokens": ["100B", "200B", "300B", "400B"]}}
    sweep_file = _write(tmp_path, doc)
    out = tmp_path / "k.csv"
    jpath = journal_path(out)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "plan_search.cli.sweep", str(sweep_file), "-o", str(out), "--workers", "1",
                             "-q"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            if jpath.exists() and jpath.read_text().count("\n") >= 1:
                break
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    if not killed:
        pytest.skip("the sweep finished before it could be killed")
    assert not out.exists()  # only the journal holds what finished
    done = read_journal(jpath)
    assert 1 <= len(done) < 4
    with open(jpath, "a") as f:  # a write torn by the kill
        f.write('{"key": "0123abc", "rows": [{"sta')
    assert read_journal(jpath).keys() == done.keys()
    run = run_sweep(load_sweep(sweep_file), out, workers=1, progress=False)
    assert run.resumed == len(done) and run.ran == 4 - len(done)
    assert not jpath.exists()
    fresh = run_sweep(load_sweep(sweep_file), tmp_path / "fresh.csv", workers=1, progress=False)
    pd.testing.assert_frame_equal(_drop_timing(run.frame), _drop_timing(fresh.frame))


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_keeps_what_finished(tmp_path, workers):
    """SIGINT to the whole process group (what Ctrl-C does) of a real plan-sweep: exit 130, the
    finished scenarios in the table, no journal left, the rerun does the rest. (CP-SAT resets
    SIGINT to the C default after a solve; the sweep restores Python's handler and keeps its
    workers out of the terminal's process group.)"""
    doc = {"base": {"model": "gpt3-175b", "gpu": "a100-80gb"},
           "sweep": {"tokens": ["100B", "200B", "300B", "400B", "500B", "600B"]}}
    sweep_file = _write(tmp_path, doc)
    out = tmp_path / "i.csv"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "plan_search.cli.sweep", str(sweep_file), "-o", str(out), "--workers",
                             str(workers), "-q"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _, err = signal_mid_sweep(proc, out, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not journal_path(out).exists()
    kept = pd.read_csv(out)["scenario"].nunique()
    assert 1 <= kept < 6
    run = run_sweep(load_sweep(sweep_file), out, workers=1, progress=False)
    assert run.resumed == kept and run.ran == 6 - kept


def test_rows_of_another_sweep_are_refused(tmp_path):
    out = tmp_path / "x.csv"
    run_sweep(build_sweep(SMALL), out, workers=1, progress=False)
    other = dict(SMALL, base=dict(SMALL["base"], tokens="20B"))
    with pytest.raises(InputError, match="not in this sweep"):
        run_sweep(build_sweep(other), out, workers=1, progress=False)
    run = run_sweep(build_sweep(other), out, workers=1, progress=False, overwrite=True)
    assert run.ran == 6
    # adding a value keeps what was done
    wider = dict(other, sweep=dict(other["sweep"], gpus=[8, 16, 32, 64]))
    more = run_sweep(build_sweep(wider), out, workers=1, progress=False)
    assert more.resumed == 6 and more.ran == 2
    assert more.frame["scenario"].is_monotonic_increasing


def test_not_a_sweep_table(tmp_path):
    out = tmp_path / "foreign.csv"
    out.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not a plan-sweep table"):
        run_sweep(build_sweep(SMALL), out, workers=1, progress=False)


# ------------------------------------------------------------------ parquet
def test_parquet_round_trip_and_resume(tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "p.parquet"
    sw = build_sweep(WITH_INFEASIBLE)
    run = run_sweep(sw, out, workers=1, progress=False)
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(back, run.frame)
    again = run_sweep(sw, out, workers=1, progress=False)
    assert again.ran == 0 and again.resumed == 3


def test_parquet_without_pyarrow_is_one_line_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "fastparquet", None)
    sweep_file = _write(tmp_path, SMALL)
    r = CliRunner().invoke(main, [str(sweep_file), "-o", str(tmp_path / "o.parquet")])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "pip install 'plan-search[parquet]'" in r.output
    assert not (tmp_path / "o.parquet").exists() and not journal_path(tmp_path / "o.parquet").exists()


# ------------------------------------------------------------------ progress
def test_progress_bar_has_elapsed_and_time_left():
    buf = io.StringIO()
    bar = Progress(10, skipped=2, stream=buf, interval=0)
    bar.show(force=True)
    bar.t0 -= 8.0  # 8 s for the first four scenarios run: 2 s each, four left -> ~8 s
    for _ in range(4):
        bar.update("ok")
    lines = buf.getvalue().splitlines()
    assert "0:00" in lines[0] and "left ?" in lines[0] and "2/10" in lines[0]
    last = lines[-1]
    assert "6/10" in last and "60%" in last and "elapsed 0:08" in last and "left ~0:08" in last
    assert "2 resumed" in last
    bar.update("infeasible")
    assert "(1 infeasible)" in buf.getvalue().splitlines()[-1]


# ------------------------------------------------------------------ the CLI
def test_cli_writes_the_table_and_resumes(tmp_path):
    sweep_file = _write(tmp_path, SMALL)
    out = tmp_path / "c.csv"
    r = CliRunner().invoke(main, [str(sweep_file), "-o", str(out), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "6 of 6 scenarios (6 feasible, 0 infeasible, 0 errors); ran 6, resumed 0" in r.stdout
    assert "elapsed" in r.stderr and "done" in r.stderr
    r = CliRunner().invoke(main, [str(sweep_file), "-o", str(out), "-q"])
    assert r.exit_code == 0 and "ran 0, resumed 6" in r.stdout and r.stderr == ""
    # default output: beside the sweep file
    r = CliRunner().invoke(main, [str(sweep_file), "-q", "--workers", "1"])
    assert r.exit_code == 0 and (tmp_path / "sweep.csv").exists()


def test_cli_summary_one_line_per_scenario(tmp_path):
    sweep_file = _write(tmp_path, WITH_INFEASIBLE)
    r = CliRunner().invoke(main, [str(sweep_file), "-o", str(tmp_path / "s.csv"), "-q", "--workers", "1",
                                  "--summary"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80
    # axes under short headers; the GPU count is the axis' and the one system is named below the table
    assert lines[0].split()[:4] == ["#", "GPUs", "seq", "tp"]
    assert "infeasible: deadline" in lines[2]
    assert any("seq: seq_len, tokens" in x for x in lines) and any("system h100-sxm" in x for x in lines)
    df = pd.read_csv(tmp_path / "s.csv")
    rec = df[df["recommended"] == True]  # noqa: E712
    for line, (_, row) in zip(lines[3:5], rec.iterrows()):
        cells = line.split()
        assert cells[0] == str(row["scenario"]) and cells[1] == str(int(row["num_gpus"]))
        assert cells[3:6] == [str(int(row[k])) for k in ("tp", "pp", "dp")]


def test_keys_name_the_scenario_as_asked():
    a = build_sweep({"base": {"model": "gpt3-175b"}, "sweep": {"gpus": [64]}}).scenarios[0]
    b = build_sweep({"base": {"model": "gpt3-175b", "gpu": ["a100-80gb"], "memory_headroom": DEFAULT_MEMORY_HEADROOM,
                              "knobs": {"zero": [0, 1, 2, 3]}}, "sweep": {"gpus": [64]}}).scenarios[0]
    c = build_sweep({"base": {"model": "gpt3-175b", "memory_headroom": 0.2}, "sweep": {"gpus": [64]}}).scenarios[0]
    assert a.key == b.key != c.key  # defaults written out change nothing; a changed value does


def test_cli_list_and_exit_codes(tmp_path):
    sweep_file = _write(tmp_path, WITH_INFEASIBLE)
    r = CliRunner().invoke(main, [str(sweep_file), "--list"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 3 and "gpus=8, seq_len=8192" in r.stdout
    none = _write(tmp_path, dict(WITH_INFEASIBLE, base=dict(WITH_INFEASIBLE["base"], deadline_days=0.01)),
                  "none.yaml")
    r = CliRunner().invoke(main, [str(none), "-o", str(tmp_path / "n.csv"), "-q", "--workers", "1"])
    assert r.exit_code == 3 and "no scenario has a feasible plan" in r.stderr
    assert len(pd.read_csv(tmp_path / "n.csv")) == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: {model: gpt3-175b}\nsweep: {gpu.hbm_bw: [1]}\n")
    r = CliRunner().invoke(main, [str(bad)])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "no such field" in r.stderr
    r = CliRunner().invoke(main, [str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "not found" in r.stderr
    r = CliRunner().invoke(main, [str(sweep_file), "-o", str(tmp_path / "x.csv"), "--format", "parquet"])
    assert r.exit_code == 2 and "does not match" in r.stderr


# ------------------------------------------------------------------ ray
def test_ray_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    sweep_file = _write(tmp_path, SMALL)
    r = CliRunner().invoke(main, [str(sweep_file), "-o", str(tmp_path / "r.csv"), "--executor", "ray"])
    assert r.exit_code == 2 and "pip install 'plan-search[ray]'" in r.stderr


RAY_TIME_LIMIT_S = 240


def test_ray_executor_on_a_local_instance(tmp_path):
    """A local Ray instance (2 CPUs, no dashboard), bounded in time; same table as the local pool."""
    ray = pytest.importorskip("ray", reason="ray not installed (pip install 'plan-search[ray]')")

    def _timeout(signum, frame):
        raise TimeoutError(f"the Ray test took over {RAY_TIME_LIMIT_S} s")

    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(RAY_TIME_LIMIT_S)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        sw = build_sweep(WITH_INFEASIBLE)
        run = run_sweep(sw, tmp_path / "ray.csv", executor="ray", progress=False)
        assert ray.is_initialized()  # an instance the caller started is left to the caller
        local = run_sweep(sw, tmp_path / "local.csv", workers=1, progress=False)
        pd.testing.assert_frame_equal(_drop_timing(run.frame), _drop_timing(local.frame))
        assert run.counts == {"ok": 2, "infeasible": 1, "error": 0}
        ray.shutdown()
        # an instance run_sweep starts (2 CPUs) it also shuts down
        again = run_sweep(build_sweep(SMALL), tmp_path / "own.csv", executor="ray", workers=2, progress=False)
        assert again.ran == 6 and not ray.is_initialized()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        ray.shutdown()


def test_journal_lines_are_json(tmp_path):
    out = tmp_path / "j.csv"
    sw = build_sweep(SMALL)

    def stop(res):
        raise KeyboardInterrupt

    # interrupted runs write the table and drop the journal; journal lines are plain JSON objects
    run_sweep(sw, out, workers=1, progress=False, on_result=stop)
    assert not journal_path(out).exists()
    line = json.dumps({"key": sw.scenarios[1].key, "index": 1, "params": {}, "rows": [{"status": "ok"}]})
    journal_path(out).write_text(line + "\n")
    assert list(read_journal(journal_path(out))) == [sw.scenarios[1].key]


def test_bare_knob_axis_names_its_knobs_spelling(tmp_path):
    """Review (issue 13): a sweep axis named after a plan knob (ep: [2, 8]) was read as a --set key
    and failed at scenario 0 with '--set ep: no such field; closest: efficiency.ep_overlap'; it exits
    2 before running, naming knobs.ep, and knobs.ep sweeps the expert-parallel degree."""
    base = {"model": "mixtral-8x7b", "gpu": "h100", "time_limit_s": 5}
    bad = _write(tmp_path, {"base": base, "sweep": {"gpus": [64], "ep": [2, 8]}})
    r = CliRunner().invoke(main, [str(bad), "-o", str(tmp_path / "bad.csv"), "--workers", "1"])
    assert r.exit_code == 2 and r.output.strip() == "error: sweep.ep: a plan knob is swept as knobs.ep, e.g. knobs.ep: [1, 2]"
    good = _write(tmp_path, {"base": base, "sweep": {"gpus": [64], "knobs.ep": [2, 8]}})
    assert [s.request.knobs.ep for s in load_sweep(good).scenarios] == [[2], [8]]


def test_moe_rows_carry_the_plans_ep_and_etp(tmp_path):
    """Review (issue 13): a sweep's rows named tp/pp/dp/cp/vpp but not the expert-parallel degrees, so
    an MoE sweep's table did not say which ep each plan runs; ep and etp are columns, the front's."""
    base = {"model": "mixtral-8x7b", "gpu": "h100", "time_limit_s": 5}
    f = _write(tmp_path, {"base": base, "sweep": {"gpus": [64], "knobs.ep": [2, 8]}})
    out = tmp_path / "moe.csv"
    r = CliRunner().invoke(main, [str(f), "-o", str(out), "--workers", "1"])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out)
    assert list(df["ep"]) == list(df["knobs.ep"]) == [2, 8]
    for ep in (2, 8):  # each row's ep and etp are its plan's (the search's own pick of etp, 1 or tp)
        front = search(model="mixtral-8x7b", gpu="h100", gpus=[64], ep=[ep], time_limit_s=5).front
        row = df[df["knobs.ep"] == ep].iloc[0]
        assert (front[0].plan.ep, front[0].plan.etp, front[0].step_time_s) == (row["ep"], row["etp"],
                                                                               row["step_time_s"])
