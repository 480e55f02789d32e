"""The client examples in docs/clients run against a real server: Node.js (fetch) and
Java (the JDK's HttpClient) each send 1,000 messages and consume them with acks; the
curl script sends, receives and acks one. None lost, none twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import djqueue
from djqueue.models import History, Message

pytestmark = pytest.mark.django_db(transaction=True)
CLIENTS = Path(__file__).resolve().parents[2] / "docs" / "clients"
COUNT = 1000


def run(command: list[str], server, token: str, tmp_path: Path) -> str:
    env = {**os.environ, "DJQUEUE_URL": server.base, "DJQUEUE_TOKEN": token}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_all_once(queue: str, source: str) -> None:
    finished = History.objects.filter(queue__name=queue)
    assert finished.count() == COUNT
    assert not Message.objects.filter(queue__name=queue).exists()
    assert all(h.attempts == 1 for h in finished), "a message was delivered twice"


@pytest.mark.parametrize("language", ["node", "java"])
def test_a_client_sends_and_consumes_a_thousand(language, api_server, make_token, tmp_path):
    queue = f"h.client.{language}"
    djqueue.create_queue(queue)
    token = make_token({queue: "full_control"})
    if language == "node":
        command = [shutil.which("node") or "node", str(CLIENTS / "send_and_receive.mjs")]
    else:
        command = [shutil.which("java") or "java", str(CLIENTS / "SendAndReceive.java")]
    summary = json.loads(run([*command, queue, str(COUNT)], api_server, token, tmp_path))
    assert summary == {"sent": COUNT, "received": COUNT, "duplicates": 0}
    check_all_once(queue, language)


def test_the_curl_example(api_server, make_token, tmp_path):
    djqueue.create_queue("h.client.curl")
    token = make_token({"h.client.curl": "full_control"})
    out = run(["bash", str(CLIENTS / "curl.sh"), "h.client.curl"], api_server, token, tmp_path)
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert lines[0]["duplicate"] is False
    assert lines[1] == {"id": lines[0]["id"], "payload": {"order": 42}}
    assert lines[2] == {"done": [lines[0]["id"]]}
    assert History.objects.filter(pk=lines[0]["id"]).exists()
