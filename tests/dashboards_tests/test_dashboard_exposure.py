"""What the dashboard exposes, and to whom, in process (the ASGI app called through Starlette's test client).

- Off loopback it needs a token; with a token, a request without it gets 401 and learns nothing.
- Text from the store (study names, params, attrs) is escaped in every page the server writes,
  and a study name travels percent-encoded, one path segment, whatever it holds.
- No method writes to the store, and reading every endpoint leaves its bytes as they were.
- A password in the storage URL never reaches a page, the API or the CLI's output.

The same names in a real browser: test_dashboard_browser_escaping.py.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial
from starlette.applications import Starlette
from starlette.testclient import TestClient

from hpsearch.cli import cli
from hpsearch.dashboards.api import FIGURES
from hpsearch.dashboards.app import TOKEN_ENV, create_app, is_loopback, login_url
from hpsearch.errors import StoreError
from hpsearch.record import ATTR_SPACE_TEXT
from hpsearch.store import open_storage

#: Text that runs script if a page ever writes it as HTML.
XSS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>')
#: A name with every character a URL gives a meaning to.
SLASHY = "a/b c?d#e"
#: Study names: plain, hostile, and full of URL syntax.
NAMES = ("demo", *XSS, SLASHY)
TOKEN = "tok-3xample_Token"
SECRET = "s3cret"
#: A store with a password that nothing answers (nothing listens on port 1), and the CLI's word for it.
UNREACHABLE = f"postgresql+psycopg://user:{SECRET}@127.0.0.1:1/db"
REFUSED = "error: cannot open storage postgresql+psycopg://user:***@127.0.0.1:1/db"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "dashboard.md"


def add_hostile_study(storage: str, name: str) -> None:
    """A study whose every shown string is hostile: a param name and values, user attr keys and
    values, a failure reason and detail, the space text. Trial 0 COMPLETE, trial 1 FAIL."""
    study = optuna.create_study(study_name=name, storage=open_storage(storage), direction="maximize")
    study.set_metric_names(["val_accuracy"])
    study.set_user_attr(ATTR_SPACE_TEXT, f"study: {XSS[0]}\n# {XSS[1]}\n")
    dists = {"lr_rule": CategoricalDistribution(XSS), XSS[1]: CategoricalDistribution(XSS),
             "base_lr": FloatDistribution(1e-3, 1.0, log=True)}
    params = {"lr_rule": XSS[0], XSS[1]: XSS[1], "base_lr": 0.1}
    study.add_trial(create_trial(params=params, distributions=dists, state=TrialState.COMPLETE, value=0.9,
                                 user_attrs={"val_accuracy": 0.9, "runtime_s": 10.0, "device_seconds": 10.0,
                                             XSS[0]: XSS[1]}))
    study.add_trial(create_trial(params=params, distributions=dists, state=TrialState.FAIL,
                                 user_attrs={"status_reason": XSS[1], "status_detail": XSS[0]}))


@dataclass(frozen=True)
class Store:
    url: str
    db: Path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """An SQLite store holding every study of NAMES, everything written out of the WAL into
    the database file (so its bytes are the whole store). Tests must not change it."""
    db = tmp_path_factory.mktemp("exposure") / "store.db"
    url = f"sqlite:///{db}"
    for name in NAMES:
        add_hostile_study(url, name)
    with sqlite3.connect(db) as con:
        busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    con.close()
    assert busy == 0
    return Store(url=url, db=db)


@pytest.fixture(scope="module")
def app(store: Store) -> Starlette:
    return create_app(store.url)


@pytest.fixture(scope="module")
def locked(store: Store) -> Starlette:
    """The same store behind a token."""
    return create_app(store.url, token=TOKEN)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def text(self) -> str:
        return self.body.decode()


def _call(app: Starlette, target: str, method: str = "GET", port: str = "8080", **headers: str) -> Reply:
    """One request, given as its raw target (``/studies/a%2Fb?x=1``), to a server on ``port``:
    a fresh client each time, so no cookie carries over from an earlier answer."""
    response = TestClient(app).request(method, f"http://testserver:{port}{target}", headers=headers)
    return Reply(response.status_code, list(response.headers.multi_items()), response.content)


def _documented_endpoints(name: str) -> list[str]:
    """Every endpoint of docs/dashboard.md's API table, for study ``name`` and trial 0: a new
    endpoint, once documented, is checked here too."""
    endpoints = re.findall(r"^\| `(/api/[^`]+)` \|", DOCS.read_text(), flags=re.M)
    assert len(endpoints) >= 6, endpoints
    out = []
    for endpoint in endpoints:
        endpoint = endpoint.replace("NAME", quote(name, safe="")).replace("/N", "/0")
        kinds = FIGURES if "KIND" in endpoint else ("KIND",)
        out.extend(endpoint.replace("KIND", kind) for kind in kinds)
    return out


def _routes(name: str = "demo") -> list[str]:
    """Every page, endpoint and file the dashboard serves, for one study."""
    q = quote(name, safe="")
    return ["/", f"/studies/{q}", f"/studies/{q}/trials/0", *_documented_endpoints(name),
            "/static/app.js", "/static/app.css", "/static/plotly.min.js", "/favicon.ico"]


class _Html(HTMLParser):
    """A page as a browser reads it: its elements, the text of its title, its attributes unescaped."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.title = ""
        self._in_title = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data

    def body_attr(self, name: str) -> str | None:
        return next(attrs.get(name) for tag, attrs in self.elements if tag == "body")


# ---- who may read it ----------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"])
def test_loopback_addresses_count_as_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.10", "2001:db8::1", "dashboard.example.org"])
def test_a_non_loopback_host_without_a_token_exits_2_saying_how_to_set_one(host: str) -> None:
    assert not is_loopback(host)
    # The store is unreachable: the refusal comes first and costs no connection.
    result = CliRunner().invoke(cli, ["dashboard", "--host", host, "--storage", UNREACHABLE],
                                env={"HPSEARCH_DASHBOARD_TOKEN": None})

    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "not a loopback address" in line
    assert "--token TOKEN" in line and "HPSEARCH_DASHBOARD_TOKEN" in line
    assert "Traceback" not in result.stderr


def test_the_cli_reads_the_token_variable_that_the_app_names() -> None:
    assert TOKEN_ENV == "HPSEARCH_DASHBOARD_TOKEN"
    assert "HPSEARCH_DASHBOARD_TOKEN" in CliRunner().invoke(cli, ["dashboard", "--help"]).stdout


def test_an_unusable_token_is_refused() -> None:
    result = CliRunner().invoke(cli, ["dashboard", "--token", "has spaces"])
    assert result.exit_code == 2 and result.stderr.startswith("error: a dashboard token may hold only visible ASCII")


def test_the_app_module_s_docstring_examples_pass() -> None:
    import doctest

    import hpsearch.dashboards.app

    results = doctest.testmod(hpsearch.dashboards.app)
    assert results.attempted > 0 and results.failed == 0


def test_the_login_url_carries_the_token_and_names_this_machine_when_bound_everywhere() -> None:
    assert login_url("127.0.0.1", 8080) == "http://127.0.0.1:8080/"
    assert login_url("127.0.0.1", 8080, "a&b#c") == "http://127.0.0.1:8080/?token=a%26b%23c"
    assert login_url("::1", 81) == "http://[::1]:81/"
    import socket

    assert login_url("0.0.0.0", 8080, "t") == f"http://{socket.gethostname()}:8080/?token=t"


def test_without_the_token_every_request_is_401_and_says_nothing(locked: Starlette) -> None:
    routes = [*_routes("demo"), *_routes("no-such-study"), "/nowhere", "/api/nowhere"]
    replies = {target: _call(locked, target) for target in routes}

    for target, reply in replies.items():
        assert reply.status == 401, target
        assert reply.header("WWW-Authenticate") == 'Bearer realm="hpsearch dashboard"'
        assert b"demo" not in reply.body and b"no-such" not in reply.body
        if target.startswith("/api/"):
            assert reply.header("Content-Type") == "application/json"
            assert "Authorization: Bearer TOKEN" in json.loads(reply.body)["error"]
        elif not target.startswith("/static/"):
            assert reply.header("Content-Type").startswith("text/html")  # type: ignore[union-attr]
            assert _Html(reply.text).title == "hpsearch: 401"
    # An existing study and a missing one answer alike, byte for byte.
    assert replies["/api/studies/demo"].body == replies["/api/studies/no-such-study"].body
    assert replies["/studies/demo"].body == replies["/studies/no-such-study"].body
    # Wrong tokens, whichever way they come.
    for headers in ({"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Cookie": f"hpsearch_dashboard_8080={TOKEN}"}):
        assert _call(locked, "/api/studies", **headers).status == 401, headers
    assert _call(locked, f"/api/studies?token={TOKEN[:-1]}").status == 401


def test_a_bearer_header_opens_every_endpoint(locked: Starlette) -> None:
    for target in _routes("demo"):
        reply = _call(locked, target, Authorization=f"Bearer {TOKEN}")
        assert reply.status in (200, 204), (target, reply.body[:200])
        assert reply.header("Set-Cookie") is None  # a script with the header needs no cookie


def test_a_token_in_the_url_becomes_an_httponly_strict_cookie(locked: Starlette) -> None:
    first = _call(locked, f"/?token={TOKEN}&refresh=0")
    assert first.status == 200
    cookie = first.header("Set-Cookie")
    assert cookie is not None
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attributes)
    assert TOKEN not in cookie  # it holds a digest of the token, never the token
    assert name_value.startswith("hpsearch_dashboard_8080=")

    # The page's scripts, styles and API calls carry the cookie, not the token.
    for target in _routes("demo"):
        assert _call(locked, target, Cookie=f"other=1; {name_value}").status in (200, 204), target
    # A dashboard on another port of the same host has its own cookie.
    assert _call(locked, "/api/studies", port="8081", Cookie=name_value).status == 401


# ---- what it shows --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_pages_write_store_text_escaped(app: Starlette, name: str) -> None:
    q = quote(name, safe="")
    for target, args in [(f"/studies/{q}", {"name": name}), (f"/studies/{q}/trials/1", {"name": name, "number": "1"})]:
        reply = _call(app, target)
        assert reply.status == 200, reply.text
        page = _Html(reply.text)
        # Only the shell's own elements: nothing from the name became markup.
        assert {tag for tag, _ in page.elements} == {"html", "head", "meta", "title", "link", "script", "body",
                                                     "header", "a", "span", "main", "p"}
        assert [attrs["src"] for tag, attrs in page.elements if tag == "script"] == ["/static/plotly.min.js",
                                                                                      "/static/app.js"]
        # The browser reads back exactly the name: in the title, and in the page's arguments.
        assert page.title == " / ".join(["hpsearch", *args.values()])
        assert json.loads(page.body_attr("data-args") or "") == args
        for hostile in XSS:
            assert hostile not in reply.text


def test_a_missing_hostile_study_is_an_escaped_404_page(app: Starlette) -> None:
    reply = _call(app, f"/studies/{quote(XSS[1] + 'x', safe='')}")
    assert reply.status == 404
    assert XSS[1] not in reply.text and html.escape(XSS[1]) in reply.text
    assert "img" not in {tag for tag, _ in _Html(reply.text).elements}


def test_the_api_returns_store_text_as_json_data_never_as_html(app: Starlette) -> None:
    q = quote(XSS[0], safe="")
    trial = _call(app, f"/api/studies/{q}/trials/1")
    assert trial.header("Content-Type") == "application/json" and trial.header("X-Content-Type-Options") == "nosniff"
    data = json.loads(trial.body)
    assert data["params"][XSS[1]] == XSS[1] and data["params"]["lr_rule"] == XSS[0]
    assert (data["status_reason"], data["status_detail"]) == (XSS[1], XSS[0])
    assert XSS[1] in {s["name"] for s in json.loads(_call(app, "/api/studies").body)}


@pytest.mark.parametrize("name", NAMES)
def test_a_study_name_with_url_syntax_reaches_its_study(app: Starlette, name: str) -> None:
    q = quote(name, safe="")  # what encodeURIComponent makes of it
    assert json.loads(_call(app, f"/api/studies/{q}").body)["study"] == name
    assert json.loads(_call(app, f"/api/studies/{q}/trials?sort=-number").body)["total"] == 2
    assert json.loads(_call(app, f"/api/studies/{q}/trials/0").body)["params"]["lr_rule"] == XSS[0]
    assert _call(app, f"/studies/{q}/trials/0/").status == 200  # a trailing slash is the same page

    csv = _call(app, f"/api/studies/{q}/trials.csv")
    assert csv.status == 200
    disposition = csv.header("Content-Disposition") or ""
    # The exact name, encoded, and an ASCII fallback: no quote or markup of the name ends the header.
    assert disposition.endswith(f"filename*=UTF-8''{quote(name + '-trials.csv', safe='')}")
    assert re.fullmatch(r'attachment; filename="[A-Za-z0-9._-]+"; filename\*=\S+', disposition), disposition


def test_a_percent_sign_in_a_name_is_decoded_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pct.db'}"
    for name in ("100%", "x%2Fy"):
        optuna.create_study(study_name=name, storage=open_storage(url))
    app = create_app(url)
    for name in ("100%", "x%2Fy"):
        assert json.loads(_call(app, f"/api/studies/{quote(name, safe='')}").body)["study"] == name


# ---- what it never does ---------------------------------------------------------------------------

def _store_bytes(db: Path) -> str:
    """The store's content: the database file and its write-ahead log (the -shm file is an
    index SQLite rewrites on reads)."""
    digest = hashlib.sha256(db.read_bytes())
    wal = db.with_name(db.name + "-wal")
    digest.update(wal.read_bytes() if wal.exists() else b"")
    return digest.hexdigest()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_no_method_but_get_is_served(app: Starlette, locked: Starlette, method: str) -> None:
    for target in _routes("demo"):
        refused = _call(app, target, method)
        assert refused.status == 405 and refused.header("Allow") == "GET, HEAD", target
        assert "read-only" in json.loads(refused.body)["error"]
        assert _call(locked, target, method, Authorization=f"Bearer {TOKEN}").status == 405, target
        assert _call(locked, target, method).status == 401, target


def test_reading_every_endpoint_leaves_the_store_bytes_unchanged(store: Store, tmp_path: Path) -> None:
    # A copy the dashboard opens afresh: opening the store is checked too, not only reading it.
    db = tmp_path / "copy.db"
    shutil.copy(store.db, db)
    before = _store_bytes(db)
    app = create_app(f"sqlite:///{db}")

    for name in NAMES:
        for target in _routes(name):
            assert _call(app, target).status in (200, 204), target
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                _call(app, target, method)
        for query in ("sort=-val_accuracy&state=COMPLETE&q=x", "columns=lr_rule&offset=1&limit=1"):
            assert _call(app, f"/api/studies/{quote(name, safe='')}/trials?{query}").status == 200
    assert _store_bytes(db) == before


# ---- passwords ------------------------------------------------------------------------------------

def test_the_dashboard_and_ls_never_print_a_storage_password(tmp_path: Path) -> None:
    # Whole processes: whatever any library logs to the terminal is checked too.
    env = {k: v for k, v in os.environ.items() if k not in ("HPSEARCH_STORAGE", "HPSEARCH_DASHBOARD_TOKEN")}
    commands = {"dashboard": (["dashboard", "--storage", UNREACHABLE], env),
                "ls": (["ls", "--storage", UNREACHABLE], env),
                "ls ($HPSEARCH_STORAGE)": (["ls"], {**env, "HPSEARCH_STORAGE": UNREACHABLE})}
    # All at once: each is a Python start-up and a refused connection.
    procs = {name: subprocess.Popen([sys.executable, "-m", "hpsearch", *args], cwd=tmp_path, env=command_env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (args, command_env) in commands.items()}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (name, out, err)
        assert SECRET not in out + err, (name, out, err)
        assert err.startswith(REFUSED) and len(err.splitlines()) == 1, (name, err)


@pytest.mark.parametrize("args", [["status", "s"], ["best", "s"], ["export", "s"], ["resume", "s"],
                                  ["start", "space.yaml", "--no-progress"]], ids=lambda args: args[0])
def test_other_commands_never_print_a_storage_password(args: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("space.yaml").write_text(
        "study: s\nworkload: {name: digits_mlp, epochs: 1}\nscaling: {base_batch_size: 8}\n"
        "parameters: {per_device_batch_size: 8, world_size: 1, lr_rule: constant, base_lr: 0.01}\n"
        "objectives: [{metric: val_accuracy, direction: maximize}]\nsearch: {n_trials: 1}\n"
        "resources: {device: cpu}\n")
    result = CliRunner().invoke(cli, [*args, "--storage", UNREACHABLE], env={"RAY_ADDRESS": None})
    assert result.exit_code == 2, result.output
    assert SECRET not in result.stdout + result.stderr
    assert result.stderr.startswith(REFUSED)


def test_an_unreachable_store_answers_503_without_its_password() -> None:
    app = create_app(UNREACHABLE)
    for target in ["/api/studies", "/api/studies/x", "/studies/x", "/studies/x/trials/0"]:
        reply = _call(app, target)
        assert reply.status == 503, target
        assert "cannot open storage" in reply.text and "user:***@" in reply.text
        assert SECRET not in reply.text and SECRET not in str(reply.headers)


@pytest.mark.postgres
def test_a_postgresql_store_s_password_never_reaches_a_page_or_the_api(
    postgres_url: str, unique_name: str, unavailable: Callable[[str], NoReturn]
) -> None:
    from sqlalchemy.engine import make_url

    parsed = make_url(postgres_url)
    secret = parsed.password or SECRET  # the test server trusts local connections: any password will do
    url = parsed.set(password=secret).render_as_string(hide_password=False)
    try:
        open_storage(url)
    except StoreError as exc:
        unavailable(f"PostgreSQL at {parsed.render_as_string()} refuses a password ({exc}); needs trust auth")
    add_hostile_study(url, unique_name)
    try:
        app = create_app(url)
        locked = create_app(url, token=TOKEN)
        targets = [*_routes(unique_name), "/studies/nope", "/api/studies/nope", "/nowhere",
                   f"/api/studies/{unique_name}/trials?sort=nope", f"/api/studies/{unique_name}/trials/9"]
        for target in targets:
            for reply in (_call(app, target), _call(locked, target), _call(locked, target, "POST")):
                text = reply.body.decode(errors="replace") + str(reply.headers)
                assert secret not in text and quote(secret, safe="") not in text, target
    finally:
        optuna.delete_study(study_name=unique_name, storage=open_storage(url))


# ---- the real server ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``hpsearch dashboard --port 0`` with its token from the environment; the login URL it printed."""
    log = tmp_path_factory.mktemp("served") / "dashboard.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HPSEARCH_DASHBOARD_TOKEN": TOKEN}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpsearch", "dashboard", "--storage", store.url, "--port", "0"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r" at (http://127\.0\.0\.1:\d+/\S*) ", log.read_text())):
            assert proc.poll() is None, f"the dashboard exited with {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the dashboard printed no URL in 60 s:\n{log.read_text()}"
            time.sleep(0.1)
        yield m[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def _fetch(url: str, **headers: str) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read()


def test_the_served_dashboard_prints_its_login_url_and_asks_every_request_for_the_token(served: str) -> None:
    assert served.endswith(f"/?token={TOKEN}")  # the token from the environment, as Jupyter prints it
    origin = served.split("/?")[0]
    slashy = f"{origin}/api/studies/{quote(SLASHY, safe='')}"

    assert _fetch(f"{origin}/api/studies")[0] == 401
    assert _fetch(slashy)[0] == 401
    status, headers, _ = _fetch(served)
    assert status == 200
    cookie = headers["Set-Cookie"].split(";")[0]
    status, _, body = _fetch(slashy, Cookie=cookie)
    assert status == 200 and json.loads(body)["study"] == SLASHY  # %2F decoded inside the name
    status, _, body = _fetch(f"{slashy}/trials/1", Authorization=f"Bearer {TOKEN}")
    assert status == 200 and json.loads(body)["status_detail"] == XSS[0]
