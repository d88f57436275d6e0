import json, subprocess, sys, time, urllib.error, urllib.request

# plan-serve on a free loopback port; its first line says where (plan-serve 0.2.0: http://127.0.0.1:PORT/ ...)
server = subprocess.Popen([sys.executable, "-m", "plan_search.cli.serve", "--port", "0"],
                          stderr=subprocess.PIPE, text=True)
url = server.stderr.readline().split()[2].rstrip("/")


def ask(path, body=None):
    """(HTTP status, JSON answer) of one request."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:        # 409 nothing feasible, 422 bad input, 503 busy: JSON too
        return e.code, json.load(e)


for _ in range(600):                           # the workers start (a few seconds)
    try:
        status, health = ask("/v1/health")
        break
    except OSError:
        time.sleep(0.1)
print("GET /v1/health:", status, health["status"], f"({health['workers']} workers)")

# the body is a plan-search request (plan-search --schema request); the answer its --format json
status, res = ask("/v1/search", {"model": "gpt3", "gpu": "a100", "gpus": [256, 512, 1024, 2048],
                                 "deadline_days": 30})
rec = res["recommended"]
print("POST /v1/search:", status, f"{rec['plan']['num_gpus']:,} x {rec['cluster']},",
      f"{rec['run']['days']:.1f} days, ${rec['run']['cost_usd']:,.0f}")
print("  ", res["recommended_command"][:72], "...")

status, err = ask("/v1/search", {"model": "gpt3", "gpu": "a100", "gpus": [8]})
print("POST /v1/search, 8 GPUs:", status, err["error"], "-", err["message"][:60], "...")
status, err = ask("/v1/search", {"model": "gpt3", "time_limt_s": 5})
print("POST /v1/search, a typo:", status, f"field {err['field']}:", err["message"])

server.terminate()
server.wait()
