"""plan-serve's page, used as a person uses it (issue 28): headless Chromium (Debian's package, driven
over its DevTools protocol) opens the page, picks GPU types and a deadline with the mouse and the
keyboard, searches, and the recommended plan it shows is plan-search's for the command the page
prints; hovering a point shows its plan, clicking one shows its time and memory; the page's link
asks the same question again; nothing feasible shows plan-search's line; an uploaded or pasted
config.json is searched as plan-search --model DIR/config.json searches the file. The page fetches
nothing but its own server. The screenshot is written to $PLAN_SERVE_SCREENSHOT when set (to look
at), else to the test's temporary directory."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from serve_chromium import Browser, chromium_path  # noqa: E402

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="no chromium (.ci/run installs Debian's package)")

HF = Path(__file__).parent / "data" / "hf"


@pytest.fixture(scope="module")
def url():
    from plan_search.cli.serve import ServerThread

    with ServerThread() as u:
        yield u


def center(b: Browser, selector: str) -> tuple[float, float]:
    r = b.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
               " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    return r[0], r[1]


def type_into(b: Browser, selector: str, text: str) -> None:
    b.click(*center(b, selector))
    b.eval(f"document.querySelector({json.dumps(selector)}).select()")
    b.send("Input.insertText", text=text)


def wait_answer(b: Browser, timeout: float = 180) -> str:
    b.wait("['ok', 'error'].includes(document.getElementById('status').className) && "
           "!document.getElementById('go').disabled", timeout)
    return b.eval("document.getElementById('status').textContent")


def plan_search_json(command: str) -> dict:
    from plan_search.cli.search import main

    args = shlex.split(command)
    assert args[0] == "plan-search"
    r = CliRunner().invoke(main, args[1:] + ["--format", "json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_the_page_answers_as_plan_search(url, tmp_path):
    with Browser(width=1400, height=1000) as b:
        b.send("Network.enable")
        b.goto(url + "/")
        b.wait("document.body.dataset.ready === '1'")
        assert b.eval("document.getElementById('model').value") == "gpt3-175b"
        # a person: ticks H100 beside the A100 already ticked, types a deadline, a GPU cap, a time limit
        b.click(*center(b, "#gpus input[value='h100-sxm']"))
        type_into(b, "#deadline", "30")
        type_into(b, "#max-gpus", "1024")
        type_into(b, "#time-limit", "60")
        b.click(*center(b, "#go"))
        status = wait_answer(b)
        assert status.startswith("answered") and "proven optimal" in status and "NOT" not in status, status

        command = b.eval("document.getElementById('command').textContent")
        assert command == ("plan-search --model gpt3-175b --gpu a100-80gb,h100-sxm --tokens 300B --deadline-days 30 "
                           "--max-gpus 1024 --time-limit 60 --framework megatron --emit")
        want = plan_search_json(command)
        rec = b.eval("Object.assign({}, document.getElementById('recommended').dataset)")
        assert json.loads(rec["plan"]) == want["recommended"]["plan"]
        assert (rec["gpu"], int(rec["numGpus"])) == (want["recommended"]["cluster"], want["recommended"]["plan"]["num_gpus"])
        heading = b.eval("document.querySelector('#recommended h2').textContent")
        assert f"{want['recommended']['plan']['num_gpus']:,} × {want['recommended']['cluster']}" in heading
        assert b.eval("document.querySelector('#recommended .reason').textContent") == want["reason"]
        # the front: one circle per point on each of the two charts, one series (colour) per GPU type
        n_points = len(want["front"]) + len(want["other_fronts"])
        assert b.eval("document.querySelectorAll('svg.chart[data-key=days] circle.pt').length") == n_points
        assert b.eval("document.querySelectorAll('#legend .key').length") == 3  # two types + recommended
        launch = b.eval("document.getElementById('launch').textContent")
        assert want["launch"]["text"].strip() in launch

        # hover a point: its plan; click it: its time and memory, priced by /v1/estimate as the point
        i = 1 if want["recommended_index"] != 1 else 2
        fp = want["front"][i]
        x, y = center(b, f"svg.chart[data-key=days] circle.pt[data-i='{i}']")
        b.mouse(x, y)
        b.wait("!document.getElementById('tip').hidden")
        tip = b.eval("document.getElementById('tip').textContent")
        assert tip.startswith(f"{fp['num_gpus']:,} × {fp['gpu']}") and f"tp{fp['plan']['tp']} pp{fp['plan']['pp']}" in tip
        b.click(x, y)
        b.wait(f"document.getElementById('selected-title').textContent.includes('{fp['num_gpus']:,} × {fp['gpu']}')")
        d = fp["days"]
        shown_days = f"{d:,.0f}" if d >= 1000 else f"{d:.1f}" if d >= 10 else f"{d:.2f}"
        assert f", {shown_days} days," in b.eval("document.getElementById('selected-title').textContent")
        step = b.eval("document.querySelector('#time-bars tr.total td.num').textContent")
        assert step == f"{fp['step_time_s']:.3f} s"
        peak = b.eval("document.querySelector('#memory-bars tr.total td.num').textContent")
        assert peak == f"{fp['memory_gib']:.2f} GiB"
        b.wait("document.getElementById('launch').textContent.includes('--tensor-model-parallel-size " +
               f"{fp['plan']['tp']}')")

        shot = Path(os.environ.get("PLAN_SERVE_SCREENSHOT") or tmp_path / "page.png")
        b.mouse(x, y)  # the tooltip in the picture
        time.sleep(0.2)
        b.screenshot(shot)
        assert shot.stat().st_size > 50_000

        # nothing fetched from anywhere but this server (no CDN: the page works offline)
        urls = {e["params"]["request"]["url"] for e in b.events if e.get("method") == "Network.requestWillBeSent"}
        assert urls and all(u.startswith(url) for u in urls), sorted(urls)
        assert b.console_errors() == []

        link = b.eval("document.getElementById('share').href")
        # nothing feasible: plan-search's line, where the results were
        b.goto(url + "/?model=gpt3-175b&gpu=a100-80gb&max_gpus=16&framework=")
        assert wait_answer(b) == "infeasible (HTTP 409)"
        from plan_search.cli.search import main

        r = CliRunner().invoke(main, ["--model", "gpt3-175b", "--gpu", "a100-80gb", "--max-gpus", "16"])
        assert r.exit_code == 3
        assert r.stderr.strip() == "infeasible: " + b.eval("document.getElementById('message-text').textContent")
        assert b.eval("document.getElementById('message-title').textContent") == "Nothing feasible"
        assert b.eval("document.getElementById('results').hidden")

        # the link asks the same question again
        b.goto(link)
        wait_answer(b)
        assert b.eval("document.getElementById('message').hidden")
        assert json.loads(b.eval("document.getElementById('recommended').dataset.plan")) == want["recommended"]["plan"]


def test_a_pasted_config_json_is_the_model_file(url, tmp_path):
    text = (HF / "llama3.1-8b.json").read_text()
    with Browser(width=1200, height=900) as b:
        b.goto(url + "/")
        b.wait("document.body.dataset.ready === '1'")
        b.click(*center(b, "input[name=source][value=config]"))
        b.wait("!document.getElementById('config-model').hidden")
        # upload: the browser reads the file and puts its text in the box
        obj = b.send("Runtime.evaluate", expression="document.getElementById('config-file')")["result"]["objectId"]
        b.send("DOM.setFileInputFiles", files=[str(HF / "llama3.1-8b.json")], objectId=obj)
        b.wait("document.getElementById('config').value.length > 100")
        assert b.eval("document.getElementById('config').value") == text
        # paste: the same text typed over it
        b.click(*center(b, "#config"))
        b.eval("document.getElementById('config').select()")
        b.send("Input.insertText", text=text)
        assert b.eval("document.getElementById('config').value") == text
        type_into(b, "#config-name", "llama-8b")
        b.click(*center(b, "#gpus input[value='a100-80gb']"))  # untick the default
        b.click(*center(b, "#gpus input[value='h100-sxm']"))
        type_into(b, "#tokens", "100B")
        type_into(b, "#max-gpus", "64")
        b.click(*center(b, "#go"))
        status = wait_answer(b)
        assert status.startswith("answered"), status
        command = b.eval("document.getElementById('command').textContent").splitlines()[0]
        assert command.startswith("plan-search --model llama-8b/config.json --gpu h100-sxm --tokens 100B")
        (tmp_path / "llama-8b").mkdir()
        (tmp_path / "llama-8b" / "config.json").write_text(text)
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            want = plan_search_json(command)
        finally:
            os.chdir(cwd)
        assert json.loads(b.eval("document.getElementById('recommended').dataset.plan")) == want["recommended"]["plan"]
        assert want["inputs"]["model"] == "llama-8b"
        # a broken config: the one line, the field marked
        b.eval("document.getElementById('config').value = '{\"model_type\": \"llama\", \"num_hidden_layers\": 2}'")
        b.click(*center(b, "#go"))
        status = wait_answer(b)
        assert status == "error (HTTP 422)", status
        assert b.eval("document.getElementById('message-title').textContent") == "Bad input"
        assert "hidden" in b.eval("document.getElementById('message-text').textContent")
        assert b.eval("document.getElementById('config').classList.contains('bad')")
        assert b.eval("document.getElementById('results').hidden")
