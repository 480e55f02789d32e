"""The HTTP API's tests run against a real ASGI server process (``manage.py
djqueue_http``, uvicorn) on a loopback port, on the test database."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest

from djqueue.http import access, schema
from djqueue.models import ApiClient, ApiPermission
from tests.conftest import wait_until
from tests.servers import free_port

MOUNT = "/queue-api/"


@dataclass
class Server:
    base: str
    pid: int
    #: What the server process has printed so far.
    output: Callable[[], str]

    def client(self, token: str | None = None, **options: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30, **options)


@pytest.fixture
def api_server(spawn) -> Server:
    return start_api_server(spawn)


def start_api_server(spawn: Callable[..., Any], env: dict[str, str] | None = None) -> Server:
    """``manage.py djqueue_http`` on a free port (``env``: added to its environment),
    once it answers; stopped at the test's teardown, as every spawned process."""
    port = free_port()
    process = spawn("djqueue_http", "--port", str(port), env=env)
    base = f"http://127.0.0.1:{port}{MOUNT}"

    def answers() -> bool:
        if process.popen.poll() is not None:
            pytest.fail(f"the API server exited:\n{process.output()}")
        try:
            return httpx.get(base + "openapi.json", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(answers, 30, "the API server to answer", interval=0.05)
    return Server(base, process.pid, process.output)


@pytest.fixture
def make_token() -> Callable[..., str]:
    """A client with ``grants`` ({pattern: permission name}) and a token of it."""
    count = [0]

    def make(grants: dict[str, str], **client_options: Any) -> str:
        count[0] += 1
        client = ApiClient.objects.create(name=f"svc-{count[0]}", **client_options)
        for pattern, permission in grants.items():
            access.grant(client, pattern, ApiPermission[permission.upper()])
        return access.issue_token(client)

    return make


_DOCUMENT = schema.openapi()


def conforms(response: httpx.Response, path: str, method: str) -> Any:
    """The response's JSON, checked against the schema's response for its status."""
    operation = _DOCUMENT["paths"][path][method.lower()]
    described = operation["responses"].get(str(response.status_code))
    assert described is not None, f"{method} {path}: status {response.status_code} is not " \
                                  f"in the schema ({response.text[:300]})"
    content_type = response.headers["content-type"].split(";")[0]
    body = response.json()
    assert content_type in described["content"], (content_type, response.text[:300])
    spec = {**described["content"][content_type]["schema"],
            "components": _DOCUMENT["components"]}
    jsonschema.validate(body, spec, cls=jsonschema.Draft202012Validator)
    return body
