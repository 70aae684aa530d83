"""Issue 15, REST: nobody without the bearer token steers (or reads) the
pipeline. Every route of the app but ``/health`` -- the API, the status page
and its files, /metrics, the OpenAPI document and its pages, even a path that
does not exist -- answers 401 without the token or with a wrong one; only
trusted ``Host`` names are answered; the token is ``SP_API_TOKEN_FILE``'s and
the controller does not start without one unless ``SP_API_AUTH=none``."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from controller.rest.access import Access
from controller.rest.app import create_app
from controller.settings import ControllerSettings
from sparkpoint.messages import Restart
from sparkpoint.settings import SettingsError
from tests.unit.rest_support import ACCESS, AUTH, TOKEN, app_for, client_for
from tests.unit.savepoint_support import take
from tests.unit.test_settings import NO_AUTH, run_module

# A value for each kind of path parameter.
SAMPLES = {"worker_id": "w0", "savepoint_id": "sp-000001", "name": "page.js"}


def every_route(app) -> list[tuple[str, str]]:
    """(method, path) of every operation the OpenAPI document lists,
    parameters filled in, and FastAPI's own pages (/openapi.json, /docs, ...)."""
    with TestClient(app, headers=AUTH) as client:
        document = client.get("/openapi.json").json()
    routes = [(method.upper(), re.sub(r"{(\w+)}", lambda m: SAMPLES[m.group(1)], path))
              for path, operations in document["paths"].items() for method in operations]
    return routes + [("GET", page) for page in (app.openapi_url, app.docs_url, app.swagger_ui_oauth2_redirect_url,
                                                 app.redoc_url)]


@pytest.fixture
def anonymous(service):
    """A client of the app with the token configured that sends none itself."""
    with TestClient(app_for(service), raise_server_exceptions=False) as client:
        yield client


PAGE_SHELL = {"/", "/static/page.js"}     # the status page's HTML, CSS and script: no data


def routes_but_health(service) -> list[tuple[str, str]]:
    found = [r for r in every_route(app_for(service)) if r[1] != "/health" and r[1] not in PAGE_SHELL]
    assert len(found) >= 18 and ("GET", "/openapi.json") in found and ("GET", "/metrics") in found
    return found + [("GET", "/no-such-route")]


@pytest.mark.parametrize("headers", [
    {},                                                   # no token
    {"Authorization": "Bearer wrong-token"},              # a wrong one
    {"Authorization": f"Bearer {TOKEN}x"},                # the token and more
    {"Authorization": f"Bearer {TOKEN[:-1]}"},            # a prefix of it
    {"Authorization": f"Basic {TOKEN}"},                  # another scheme
    {"Authorization": TOKEN},                             # no scheme
])
def test_every_route_but_health_is_401_without_the_right_token(service, pipeline, anonymous, headers):
    savepoint = take(pipeline)
    for method, path in routes_but_health(service):
        response = anonymous.request(method, path, headers={**headers, "Content-Type": "application/json"},
                                     json={} if method == "POST" else None)
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert set(response.json()) == {"error"} and TOKEN not in response.text
    # Nothing was done: no restore, no dispose, no second savepoint.
    assert [(s.id, s.state.value) for s in service.savepoints()] == [(savepoint, "complete")]
    assert Restart() not in pipeline.report(0).commands


def test_health_is_open(anonymous):
    assert anonymous.get("/health").json() == {"status": "ok", "problems": []}


def test_the_status_pages_shell_is_open_and_its_data_is_not(anonymous):
    """The page loads without the token; every request its script makes for
    data needs it (the script sends what its token form was given)."""
    for path in ("/", "/static/page.js", "/static/page.css", "/static/favicon.svg"):
        assert anonymous.get(path).status_code == 200, path
    script = anonymous.get("/static/page.js").text
    for data in ("/status", "/pipeline", "/savepoints", "/history"):
        assert f'"{data}' in script or f"`{data}" in script, data
        assert anonymous.get(data).status_code == 401, data
    assert "Authorization: `Bearer ${token}`" in script
    assert anonymous.get("/static/../status").status_code in (401, 404)


def test_with_the_token_every_route_answers_something_else_than_401(service, pipeline):
    take(pipeline)
    with client_for(service, raise_server_exceptions=False) as client:
        for method, path in routes_but_health(service):
            response = client.request(method, path, json={} if method == "POST" else None)
            assert response.status_code != 401, (method, path, response.text)


def test_a_cross_site_form_post_is_refused_with_or_without_the_token(service, pipeline, anonymous):
    """A cross-site <form> cannot add an Authorization header (401); even a
    caller who has the token cannot restore with a form body (415;
    test_rest_hardening tries every other body a page can send without a
    preflight)."""
    savepoint = take(pipeline)
    form = {"allow_republish": "true"}
    assert anonymous.post(f"/savepoints/{savepoint}/restore", data=form).status_code == 401
    assert anonymous.post(f"/savepoints/{savepoint}/restore", data=form, headers=AUTH).status_code == 415
    assert anonymous.post("/savepoints", data={"label": "x"}, headers=AUTH).status_code == 415
    assert [s.id for s in service.savepoints()] == [savepoint]
    assert Restart() not in pipeline.report(0).commands


@pytest.mark.parametrize("host, status", [
    ("evil.example", 400), ("controller.evil.example", 400), ("testserver", 200), ("localhost:8080", 200),
])
def test_only_trusted_host_names_are_answered(anonymous, host, status):
    assert anonymous.get("/status", headers={**AUTH, "Host": host}).status_code == status
    assert anonymous.get("/health", headers={"Host": host}).status_code == status


def test_openapi_documents_the_bearer_scheme_and_each_401(service):
    with client_for(service) as client:
        document = client.get("/openapi.json").json()
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "description": "SP_API_TOKEN_FILE's token"}
    assert document["security"] == [{"bearerAuth": []}]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in ("/health", "/", "/static/{name}"):
                assert operation["security"] == [] and "401" not in operation["responses"]
            else:
                assert "401" in operation["responses"], (method, path)


def test_without_a_token_nothing_asks_for_one(service):
    """SP_API_AUTH=none: every route answers, and the document lists no scheme."""
    with TestClient(create_app(service, access=Access(None, ("testserver",)))) as client:
        assert client.get("/status").status_code == 200
        assert "securitySchemes" not in client.get("/openapi.json").json().get("components", {})


# --- settings and start-up ------------------------------------------------------------------------

def test_the_token_is_read_from_its_file(tmp_path):
    (tmp_path / "token").write_text(f"  {TOKEN}  \n")
    settings = ControllerSettings.from_env({"SP_API_TOKEN_FILE": str(tmp_path / "token"), "SP_GRPC_AUTH": "none"})
    assert settings.api_token.value == TOKEN and settings.api_token.matches(TOKEN)
    assert TOKEN not in repr(settings)
    assert settings.allowed_hosts == ("localhost", "127.0.0.1", "controller")
    assert settings.bind == "127.0.0.1"


@pytest.mark.parametrize("env, variable, needle", [
    ({}, "SP_API_TOKEN_FILE", "is required"),
    ({"SP_API_TOKEN_FILE": "/nonexistent/token"}, "SP_API_TOKEN_FILE", "cannot read the secret file"),
    ({"SP_API_TOKEN_FILE": "EMPTY"}, "SP_API_TOKEN_FILE", "is empty"),
    ({"SP_API_AUTH": "off"}, "SP_API_AUTH", "'off'"),
    ({"SP_API_AUTH": "none", "SP_API_TOKEN_FILE": "TOKEN"}, "SP_API_AUTH", "unset one of them"),
    ({"SP_API_AUTH": "none", "SP_API_ALLOWED_HOSTS": "a,,b"}, "SP_API_ALLOWED_HOSTS", "comma-separated"),
    ({"SP_API_AUTH": "none", "SP_API_ALLOWED_HOSTS": "a.*.com"}, "SP_API_ALLOWED_HOSTS", "*.example.com"),
])
def test_bad_authentication_settings_name_the_variable(tmp_path, env, variable, needle):
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "token").write_text(TOKEN)
    files = {"EMPTY": str(tmp_path / "empty"), "TOKEN": str(tmp_path / "token")}
    with pytest.raises(SettingsError) as raised:
        ControllerSettings.from_env({k: files.get(v, v) for k, v in env.items()})
    assert raised.value.variable == variable and needle in str(raised.value)


def test_the_controller_does_not_start_without_a_token():
    result = run_module("controller")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("sparkpoint-controller: error: SP_API_TOKEN_FILE: is required")
    assert "SP_API_AUTH=none" in result.stderr


def test_no_authentication_only_when_asked_for():
    assert ControllerSettings.from_env(NO_AUTH).api_token is None
    assert ACCESS.token is not None


# --- the CLI ----------------------------------------------------------------------------------------

def test_the_cli_sends_the_token_of_its_file(url, pipeline, capsys):
    """``url`` sets SP_API_TOKEN_FILE; without it the CLI is refused and says what to set."""
    from tests.unit.test_cli_operator import run
    assert run(url, "status") == 0
    capsys.readouterr()


def test_the_cli_without_the_token_is_refused_and_names_the_variable(url, pipeline, capsys, monkeypatch):
    from tests.unit.test_cli_operator import run
    monkeypatch.delenv("SP_API_TOKEN_FILE")
    assert run(url, "status") == 1
    assert "SP_API_TOKEN_FILE" in capsys.readouterr().err
