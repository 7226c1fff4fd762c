"""``create_app`` under real ASGI servers: uvicorn in this process and the documented
``uvicorn --factory`` command; study names with URL syntax over a real socket; read-only; the
analysis route before the API has it; a tokenless app reached off loopback; errors that do not
stop the server; ``serve`` on IPv6 loopback.

The same app in process, endpoint by endpoint: test_app_api.py and test_dashboard_exposure.py.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import optuna
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from hpsearch.dashboards import api
from hpsearch.dashboards.app import TOKEN_ENV, create_app
from hpsearch.store import open_storage

#: Names a URL gives a meaning to: a slash, a query, a fragment, a percent sign (alone and as an
#: escape), spaces, and text beyond ASCII.
NAMES = ("plain", "a/b c?d#e", "100%", "x%2Fy", "ünï cödé")
TOKEN = "serving-t0ken"


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('serving') / 'store.db'}"
    for name in NAMES:
        study = optuna.create_study(study_name=name, storage=open_storage(url), direction="maximize")
        study.set_metric_names(["val_accuracy"])
        study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"val_accuracy": 0.5}))
    return url


@contextmanager
def _uvicorn(app: Starlette) -> Iterator[tuple[str, int]]:
    """``app`` served by uvicorn on a free port of 127.0.0.1, in a thread; (host, port)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield "127.0.0.1", server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "uvicorn did not stop"


def _request(address: tuple[str, int], target: str, method: str = "GET",
             **headers: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request with ``target`` sent exactly as given (no client re-encodes it)."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    try:
        connection.request(method, target, headers=headers)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def test_create_app_on_a_real_uvicorn_answers_the_study_list(storage: str) -> None:
    with _uvicorn(create_app(storage)) as address:
        status, headers, body = _request(address, "/api/studies")
        assert status == 200 and headers["Content-Type"] == "application/json"
        assert sorted(s["name"] for s in json.loads(body)) == sorted(NAMES)
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_percent_encoded_names_route_to_their_study_over_a_real_socket(storage: str) -> None:
    with _uvicorn(create_app(storage)) as address:
        for name in NAMES:
            q = quote(name, safe="")  # what encodeURIComponent makes of it: one path segment
            status, _, body = _request(address, f"/api/studies/{q}")
            assert status == 200, (name, body)
            assert json.loads(body)["study"] == name
            status, _, body = _request(address, f"/api/studies/{q}/trials?sort=-number")
            assert status == 200 and json.loads(body)["total"] == 1, (name, body)
            status, headers, _ = _request(address, f"/api/studies/{q}/trials.csv")
            assert status == 200 and headers["Content-Disposition"].endswith(quote(f"{name}-trials.csv", safe=""))
            status, _, body = _request(address, f"/studies/{q}/trials/0/")  # a trailing slash: the same page
            assert status == 200 and b'data-page="trial"' in body, name
        # A name's escapes are decoded once: "x%2Fy" sent as "x%2Fy" is the study "x/y", which
        # does not exist, and neither does "100" + "%".
        assert _request(address, "/api/studies/x%2Fy")[0] == 404
        assert b"no study named 'x/y'" in _request(address, "/api/studies/x%2Fy")[2]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head_are_served_over_a_real_socket(storage: str, method: str) -> None:
    with _uvicorn(create_app(storage)) as address:
        for target in ("/", "/api/studies", "/api/studies/plain", "/static/app.js", "/nowhere"):
            status, headers, body = _request(address, target, method)
            assert status == 405 and headers["Allow"] == "GET, HEAD", (method, target)
            assert "read-only" in json.loads(body)["error"]
        status, headers, body = _request(address, "/api/studies", "HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 2


def test_the_analysis_route_is_404_until_the_api_has_it(storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = TestClient(create_app(storage, token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"})
    q = quote("a/b c?d#e", safe="")
    monkeypatch.delattr(api, "analysis_json", raising=False)
    missing = client.get(f"/api/studies/{q}/analysis")
    assert missing.status_code == 404 and missing.headers["Content-Type"] == "application/json"
    assert "analysis is not available" in missing.json()["error"]

    seen: list[tuple[str, dict[str, str]]] = []

    def analysis_json(cache: api.StudyCache, name: str, query: dict[str, str]) -> dict[str, Any]:
        seen.append((name, dict(query)))
        return {"study": name, "devices": int(query.get("devices", 1))}

    monkeypatch.setattr(api, "analysis_json", analysis_json, raising=False)
    found = client.get(f"/api/studies/{q}/analysis?devices=8&token={TOKEN}")
    assert found.status_code == 200 and found.json() == {"study": "a/b c?d#e", "devices": 8}
    assert seen == [("a/b c?d#e", {"devices": "8"})]  # the token never reaches the API


def test_a_tokenless_app_refuses_requests_that_reach_it_off_loopback(storage: str) -> None:
    app = create_app(storage)
    assert TestClient(app, base_url="http://127.0.0.1:8080").get("/api/studies").status_code == 200
    assert TestClient(app, base_url="http://[::1]:8080").get("/api/studies").status_code == 200
    for base in ("http://192.0.2.10:8080", "http://[2001:db8::1]:8080"):
        refused = TestClient(app, base_url=base).get("/api/studies")
        assert refused.status_code == 403, base
        assert "no token" in refused.json()["error"] and TOKEN_ENV in refused.json()["error"]
        assert "plain" not in refused.text
        page = TestClient(app, base_url=base).get("/studies/plain")
        assert page.status_code == 403 and page.headers["Content-Type"].startswith("text/html")
        assert "Content-Security-Policy" in page.headers
    # With a token, the address does not matter: the token does.
    locked = TestClient(create_app(storage, token=TOKEN), base_url="http://192.0.2.10:8080")
    assert locked.get("/api/studies").status_code == 401
    assert locked.get("/api/studies", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_an_unexpected_error_is_a_500_and_the_server_goes_on(storage: str, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    def broken(cache: api.StudyCache, name: str) -> Any:
        if name == "plain":
            raise RuntimeError("a bug")
        return {"study": name}

    monkeypatch.setattr(api, "study_detail", broken)
    with _uvicorn(create_app(storage)) as address:
        status, headers, body = _request(address, "/api/studies/plain")
        assert status == 500 and json.loads(body) == {"error": "internal error; see the dashboard's log"}
        status, headers, body = _request(address, "/studies/plain/trials/x")  # a page's 404 still works
        assert status == 404 and headers["Content-Type"].startswith("text/html")
        status, _, body = _request(address, f"/api/studies/{quote('100%', safe='')}")
        assert status == 200 and json.loads(body) == {"study": "100%"}
    assert "a bug" in caplog.text  # the traceback reached the log


def test_concurrent_identical_requests_share_a_read_that_began_after_they_arrived(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = {"value": 0}
    calls: list[int] = []
    reading = threading.Event()

    def slow_summary(cache: api.StudyCache, name: str) -> dict[str, Any]:
        value = store["value"]  # what the store holds when the read begins
        calls.append(value)
        reading.set()
        time.sleep(0.3)
        return {"study": name, "value": value}

    monkeypatch.setattr(api, "study_detail", slow_summary)
    # No read-ahead: it would be the first read, before the first request.
    with _uvicorn(create_app(storage, prefetch=False)) as address:
        def get(out: list[Any]) -> None:
            status, _, body = _request(address, "/api/studies/plain")
            out.append((status, json.loads(body)))

        first: list[Any] = []
        leader = threading.Thread(target=get, args=(first,))
        leader.start()
        assert reading.wait(10)
        store["value"] = 1  # a write while the first read runs: later requests must see it
        later: list[Any] = []
        followers = [threading.Thread(target=get, args=(later,)) for _ in range(20)]
        for thread in followers:
            thread.start()
        for thread in (leader, *followers):
            thread.join(timeout=30)

    assert first == [(200, {"study": "plain", "value": 0})]
    assert later == [(200, {"study": "plain", "value": 1})] * 20  # none got the read that began before it
    assert len(calls) < 6, calls  # 21 requests, a few reads


def _start(args: list[str], env: dict[str, str], log: Path, pattern: str) -> tuple[subprocess.Popen[bytes], str]:
    with log.open("w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while not (m := re.search(pattern, log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no address in 60 s (exit {proc.poll()}):\n{log.read_text()}")
        time.sleep(0.1)
    return proc, m[1]


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def test_the_documented_uvicorn_factory_command_serves_the_store_with_its_token(storage: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HPSEARCH_STORAGE": storage, TOKEN_ENV: TOKEN}
    log = tmp_path / "uvicorn.log"
    proc, origin = _start([sys.executable, "-m", "uvicorn", "--factory", "hpsearch.dashboards.app:create_app_from_environment",
                           "--port", "0", "--no-access-log"], env, log, r"Uvicorn running on (http://127\.0\.0\.1:\d+)")
    try:
        address = urlsplit(origin)
        target = (address.hostname or "", address.port or 0)
        assert _request(target, "/api/studies")[0] == 401
        status, _, body = _request(target, "/api/studies", Authorization=f"Bearer {TOKEN}")
        assert status == 200 and len(json.loads(body)) == len(NAMES)
    finally:
        _stop(proc, log)
    assert TOKEN not in log.read_text()


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_serve_on_ipv6_loopback_reports_its_real_port_once_it_listens(storage: str, tmp_path: Path) -> None:
    code = ("import sys; from hpsearch.dashboards.app import serve; "
            "serve(sys.argv[1], '::1', 0, on_ready=lambda url: print('ready at', url, flush=True))")
    log = tmp_path / "serve.log"
    proc, url = _start([sys.executable, "-c", code, storage], {**os.environ, "PYTHONUNBUFFERED": "1"}, log,
                       r"ready at (http://\[::1\]:\d+/)")
    try:
        port = urlsplit(url).port
        assert port not in (None, 0)
        status, _, body = _request(("::1", port or 0), "/api/studies")
        assert status == 200 and len(json.loads(body)) == len(NAMES)
    finally:
        _stop(proc, log)
    assert log.read_text().count("ready at") == 1
