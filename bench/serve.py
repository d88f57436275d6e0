"""plan-serve under a scheduler's load (issue 28), against the import floor measured in the same run.

    python bench/serve.py                  # 15 timed requests, 200 under load from 8 clients
    python bench/serve.py --runs 25 --requests 400

1. **Warm search**: ``POST /v1/search`` of the default GPT-3 front (``{"model": "gpt3-175b", "gpu":
   "a100"}``, what ``plan-search --model gpt3-175b --gpu a100`` answers) on a kept-alive
   connection, after warm-up: the median, and its ratio to the bare import floor
   (``python -c "import numpy, pydantic, yaml, click; from ortools.sat.python import cp_model"``,
   bench/search_speed.py's, with the bytecode cache on) timed alternately with it. Target <= 0.5x.
   Beside it, ``plan_search.search()`` of the same question in this process, timed in the same
   turns: what the HTTP layer adds to the search.
2. **Load**: ``--requests`` requests from ``--clients`` concurrent clients (threads, each its own
   connection, loopback only, each request and the whole loop bounded in time), cycling through a
   mix: the default GPT-3 front, a GPT-3 front on three counts, Llama 3.1 8B on H100, an infeasible
   search (409), an estimate. Every answer is compared with the Python API's (``plan_search.search``
   / ``estimate``, in this process; the search's own timings aside): answered, correct, lost. The
   server's resident memory (its process and its workers', from /proc) after the warm-up and at the
   end. Target: all correct, none lost, memory flat after warm-up (growth printed).
3. **Refusals**: while the server is full (``workers + queue`` searches running, a time limit of a
   few seconds each), an over-limit body (413), GPU-count list (422) and time limit (422) and one
   more search (503): each latency. Target: at once (milliseconds), not after the running searches.

The server runs as ``plan-serve --port 0`` in a subprocess (2 workers, a queue of ``clients - 2`` so
that the clients are never refused) and is stopped at the end. Load average printed at start and
end: on a shared machine the ratio moves with it. Exit 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = [sys.executable, "-c", "import numpy, pydantic, yaml, click; from ortools.sat.python import cp_model"]
DEFAULT_FRONT = {"model": "gpt3-175b", "gpu": "a100"}
#: The load's questions. The searches ask for 60 s (the server's limit), not the default 10 s: on a loaded
#: machine a request waits for a worker, its wait counts against its limit, and a search the limit cuts
#: answers what it found, which is not the reference's answer (it says so: stats.cut).
LIMIT = {"time_limit_s": 60}
MIX = [
    ("search", dict(DEFAULT_FRONT, **LIMIT)),
    ("search", {"model": "gpt3-175b", "gpu": "a100", "gpus": [256, 512, 1024], "deadline_days": 40, **LIMIT}),
    ("search", {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": [8, 16, 32, 64], "tokens": "100B", **LIMIT}),
    ("search", {"model": "gpt3-175b", "gpu": "a100", "gpus": [8], **LIMIT}),
    ("estimate", {"model": "gpt3-175b", "gpu": "a100", "plan": {"num_gpus": 1024, "tp": 4, "pp": 8, "vpp": 12},
                  "tokens": "300B"}),
]


def untimed(doc):
    if isinstance(doc, dict) and isinstance(doc.get("stats"), dict):
        doc = dict(doc, stats={k: v for k, v in doc["stats"].items() if not k.endswith("_s")})
    return doc


def expected(kind: str, body: dict) -> tuple[int, object]:
    """(status, document) the API must answer: the Python API's own answer to the same question."""
    import plan_search
    from plan_search.planner.search.request import NoFeasiblePlan

    if kind == "estimate":
        e = plan_search.estimate(body["model"], body["gpu"], body["plan"], tokens=body.get("tokens"))
        return (200 if e.feasible else 409), json.loads(e.model_dump_json())
    try:
        return 200, untimed(json.loads(plan_search.search(body).model_dump_json()))
    except NoFeasiblePlan as exc:
        return 409, str(exc)


class Client:
    """A kept-alive connection; one that the server closed while idle (its keep-alive timeout) is
    opened again once, as an HTTP client library does (counted in ``reconnects``)."""

    reconnects = 0
    last_wait = None

    def __init__(self, host: str, port: int, timeout: float = 120.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)

    def _call(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                self.last_wait = r.getheader("X-Queue-Wait")
                return r.status, r.read()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                if attempt:
                    raise
                Client.reconnects += 1
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        raise AssertionError("unreachable")

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return self._call("POST", path, body)

    def get(self, path: str) -> tuple[int, bytes]:
        return self._call("GET", path, None)


def rss_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (/proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for t in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (t / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def start_server(env: dict, workers: int, queue_size: int, max_time_limit: float):
    exe = Path(sys.executable).parent / "plan-serve"
    proc = subprocess.Popen([str(exe), "--port", "0", "--workers", str(workers), "--queue", str(queue_size),
                             "--max-time-limit", str(max_time_limit)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir())
    line = proc.stderr.readline()
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"bench: plan-serve did not start: {line}{proc.stderr.read()[-2000:]}")
    host, port = line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    deadline = time.monotonic() + 180
    while True:
        try:
            if Client(host, int(port), timeout=5).get("/v1/health")[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("bench: plan-serve did not answer /v1/health")
        time.sleep(0.2)
    return proc, host, int(port)


def warm_search(host, port, env, runs: int) -> tuple[float, float, float, list[float], list[float]]:
    """Medians of the warm request, the floor and ``plan_search.search`` of the same question in this
    process (what the request costs beyond the search itself), timed in turn."""
    import plan_search

    c = Client(host, port)
    body = json.dumps(DEFAULT_FRONT).encode()
    for _ in range(3):  # warm-up: both workers, on this connection
        status, _ = c.post("/v1/search", body)
        assert status == 200, status
    plan_search.search(DEFAULT_FRONT)
    subprocess.run(FLOOR, check=True, env=env)  # fills the floor's bytecode cache
    req, floor, api = [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(FLOOR, check=True, env=env)
        floor.append(time.perf_counter() - t)
        t = time.perf_counter()
        status, text = c.post("/v1/search", body)
        req.append(time.perf_counter() - t)
        assert status == 200
        t = time.perf_counter()
        plan_search.search(DEFAULT_FRONT)
        api.append(time.perf_counter() - t)
    return statistics.median(req), statistics.median(floor), statistics.median(api), req, floor


def load(host, port, pid, n: int, clients: int, budget_s: float) -> dict:
    import plan_search  # noqa: F401  (the references, before the clock starts)

    refs = [expected(kind, body) for kind, body in MIX]
    todo: queue.Queue = queue.Queue()
    for i in range(n):
        todo.put(i)
    results: dict[int, tuple] = {}
    lock = threading.Lock()
    rss: list[tuple[int, int]] = []
    done_count = [0]
    t_end = time.monotonic() + budget_s

    def worker():
        c = Client(host, port)
        while time.monotonic() < t_end:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            kind, body = MIX[i % len(MIX)]
            t = time.perf_counter()
            try:
                status, text = c.post(f"/v1/{kind}", json.dumps(body).encode())
                err, wait = None, c.last_wait
            except Exception as exc:  # noqa: BLE001 - a lost request is counted, not raised
                status, text, err, wait = None, b"", f"{type(exc).__name__}: {exc}", None
                c = Client(host, port)
            dt = time.perf_counter() - t
            with lock:
                results[i] = (status, text, err, dt, wait)
                done_count[0] += 1
                if done_count[0] % 50 == 0:
                    rss.append((done_count[0], rss_bytes(pid)))

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(budget_s + 180)
    wall = time.perf_counter() - t0
    correct, wrong, lost, busy = 0, [], 0, 0
    for i in range(n):
        if i not in results or results[i][0] is None:
            lost += 1
            continue
        status, text = results[i][:2]
        if status == 503:
            busy += 1
            continue
        want_status, want = refs[i % len(MIX)]
        doc = json.loads(text)
        got = untimed(doc) if want_status == 200 and MIX[i % len(MIX)][0] == "search" else doc
        if status == 409 and isinstance(want, str):
            got = doc.get("message")
        if status == want_status and got == want:
            correct += 1
        else:
            wrong.append(i)
            if len(wrong) <= 3:
                keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k)) \
                    if isinstance(got, dict) and isinstance(want, dict) else []
                cut = got.get("stats", {}).get("cut") if isinstance(got, dict) else None
                print(f"  wrong answer {i} ({MIX[i % len(MIX)][0]}): status {status} (want {want_status}), keys differing "
                      f"{keys[:8]}, cut {cut}, queue wait {results[i][4]}")
    times = sorted(r[3] for r in results.values() if r[0] is not None)
    return {"n": n, "correct": correct, "wrong": wrong, "lost": lost, "busy": busy, "wall_s": wall,
            "median_s": statistics.median(times) if times else float("nan"),
            "p95_s": times[int(0.95 * (len(times) - 1))] if times else float("nan"), "rss": rss}


def refusals(host, port, admitted: int) -> dict:
    """Fill the server with ``admitted`` slow searches, then time what it refuses."""
    slow = json.dumps({"model": "deepseek-v3", "gpu": ["h100-sxm", "h200", "b200"], "time_limit_s": 6}).encode()
    threads = [threading.Thread(target=lambda: Client(host, port).post("/v1/search", slow)) for _ in range(admitted)]
    for t in threads:
        t.start()
    c = Client(host, port)
    deadline = time.monotonic() + 30
    while json.loads(c.get("/v1/health")[1])["active"] < admitted and time.monotonic() < deadline:
        time.sleep(0.02)
    cases = {
        "body over 256 kB (413)": json.dumps({"model": "gpt3", "pad": "x" * 300_000}).encode(),
        "2,000 GPU counts (422)": json.dumps({"model": "gpt3", "gpus": list(range(8, 16_008, 8))}).encode(),
        "time limit 1000 s (422)": json.dumps({"model": "gpt3", "time_limit_s": 1000}).encode(),
        "one search more (503)": json.dumps(DEFAULT_FRONT).encode(),
    }
    out = {}
    for name, body in cases.items():
        c = Client(host, port)
        t = time.perf_counter()
        status, _ = c.post("/v1/search", body)
        out[name] = (status, time.perf_counter() - t)
    for t in threads:
        t.join(120)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="timed warm requests and floor runs (medians)")
    ap.add_argument("--requests", type=int, default=200, help="requests of the load phase")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients of the load phase")
    ap.add_argument("--budget", type=float, default=900.0, help="seconds the load phase may take at most")
    args = ap.parse_args()
    cache = tempfile.TemporaryDirectory(prefix="plan-serve-pyc-")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=cache.name)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    load0 = os.getloadavg()
    print(f"bench/serve.py: load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at start; {os.cpu_count()} cores")
    workers = 2
    proc, host, port = start_server(env, workers, max(0, args.clients - workers), 60.0)
    ok = True
    try:
        med, floor, api, req, floors = warm_search(host, port, env, args.runs)
        ratio = med / floor
        ok &= ratio <= 0.5
        print(f"\nwarm POST /v1/search, default GPT-3 front: median {med:.3f} s over {args.runs} "
              f"(min {min(req):.3f}, max {max(req):.3f}); import floor median {floor:.3f} s (min {min(floors):.3f}); "
              f"ratio {ratio:.2f}x (target <= 0.5x: {'MET' if ratio <= 0.5 else 'NOT MET'})")
        print(f"  plan_search.search() of the same question in this process, timed in turn: median {api:.3f} s, "
              f"{api / floor:.2f}x the floor; the request takes {med / api:.2f}x the search")
        rss_warm = rss_bytes(proc.pid)
        res = load(host, port, proc.pid, args.requests, args.clients, args.budget)
        rss_end = rss_bytes(proc.pid)
        samples = ", ".join(f"{k}: {v / 2**20:.0f}" for k, v in res["rss"])
        warm_ref = dict(res["rss"]).get(50, rss_warm)
        growth = (rss_end - warm_ref) / warm_ref
        flat = growth <= 0.05
        good = res["correct"] == res["n"] and not res["lost"] and not res["busy"]
        ok &= good and flat
        print(f"\nload: {res['n']} requests from {args.clients} clients in {res['wall_s']:.1f} s; correct "
              f"{res['correct']}, wrong {len(res['wrong'])}{' ' + str(res['wrong'][:10]) if res['wrong'] else ''}, "
              f"refused busy {res['busy']}, lost {res['lost']} ({'MET' if good else 'NOT MET'}); latency median "
              f"{res['median_s']:.2f} s, p95 {res['p95_s']:.2f} s")
        print(f"server memory (process + workers), MiB: after warm-up {rss_warm / 2**20:.0f}; after N requests "
              f"{samples}; end {rss_end / 2**20:.0f}; growth after the first 50: {100 * growth:+.1f}% "
              f"(flat, <= 5%: {'MET' if flat else 'NOT MET'})")
        ref = refusals(host, port, workers + max(0, args.clients - workers))
        print("\nrefused while full (every worker and queue slot busy):")
        for name, (status, dt) in ref.items():
            fast = dt < 0.5
            ok &= fast and status in (413, 422, 503)
            print(f"  {name:28} status {status}  {1000 * dt:7.1f} ms  ({'at once' if fast else 'SLOW'})")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    load1 = os.getloadavg()
    print(f"(idle connections the server closed and the clients opened again: {Client.reconnects})")
    print(f"\nload average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at end; targets {'all MET' if ok else 'NOT all met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
