"""Adversarial inputs to plan-serve's API, found by hand and kept: each is refused in one line naming
the field (issue 24's standard), never answered as something else. The app runs in-process without
its worker pool: every case here is refused before a worker would run it."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from plan_search.cli.serve import views  # noqa: E402
from plan_search.planner.serve.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(views(), start_pool=False)) as c:
        yield c


def _post(client, path: str, raw: bytes):
    return client.post(path, content=raw, headers={"content-type": "application/json"})


@pytest.mark.parametrize("path, raw, key", [
    # the first model was answered as the second (409: GPT-3 does not fit 16 H100s), exit 0's HTTP twin
    ("/v1/search", b'{"model": "llama3.1-8b", "model": "gpt3-175b", "gpu": ["h100"], "gpus": [8, 16]}', "model"),
    ("/v1/estimate", b'{"model": "llama3.1-8b", "gpu": "h100", "plan": {"num_gpus": 8, "tp": 1, "tp": 8}}', "tp"),
])
def test_a_key_given_twice_is_refused_as_plan_search_request_refuses_it(client, path, raw, key):
    r = _post(client, path, raw)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["field"] == "body"
    assert f"key '{key}' is given twice" in body["message"] and "\n" not in body["message"]


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_an_infinite_degree_is_named(value):
    """JSON's 1e400 reads as inf: POST /v1/estimate answered 'cannot convert float infinity to
    integer' with no field (Plan's dp fill converted it before pydantic saw it)."""
    from plan_search import estimate
    from plan_search.models.io import InputError

    with pytest.raises(InputError, match=r"^plan: tp: Input should be a valid integer \(got -?inf\)"):
        estimate("llama3.1-8b", "h100", {"num_gpus": 8, "tp": value})
