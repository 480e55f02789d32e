"""A real Prometheus server (Debian's package) scrapes the demo's metrics view and a
``djqueue_metrics`` process while workers drain a queue."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

import djqueue
from tests.conftest import wait_until
from tests.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MESSAGES = 5000


def query(port: int, expression: str) -> dict[str, float]:
    """An instant query's result, by job."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
        {"query": expression})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return {r["metric"].get("job", ""): float(r["value"][1]) for r in answer["data"]["result"]}


def ready(port: int) -> bool:
    """Whether Prometheus answers its readiness endpoint with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as answer:
            return answer.status == 200
    except OSError:  # refused while starting, or 503 (HTTPError is an OSError)
        return False


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def prometheus(tmp_path: Path):
    """Start Prometheus on a free loopback port with the scrape config the test writes;
    stop it at teardown."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("Prometheus is missing: `scripts/ensure_system.sh prometheus` installs it")
    started: list[subprocess.Popen] = []

    def start(targets: dict[str, int]) -> int:
        port = free_port()
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{p}']\n"
            for job, p in targets.items())
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          f"scrape_configs:\n{jobs}")
        log = (tmp_path / "prometheus.log").open("wb")
        started.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        # Listening is not ready: the query API answers 503 until the TSDB has opened.
        wait_until(lambda: ready(port), 60, "Prometheus to be ready (/-/ready)")
        return port

    yield start
    for process in started:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.mark.slow
def test_prometheus_sees_the_queue_drained_through_the_view_and_the_command(spawn, prometheus):
    djqueue.create_queue("t.record", concurrency_limit=1000)  # its limit metrics too
    djqueue.send_batch("t.record", [{"n": i} for i in range(MESSAGES)])
    view_port, command_port = free_port(), free_port()
    spawn("runserver", f"127.0.0.1:{view_port}", "--noreload")
    spawn("djqueue_metrics", "--port", str(command_port))
    spawn("djqueue_reaper")
    wait_until(lambda: listening(view_port) and listening(command_port), 30,
               "the demo server and djqueue_metrics to listen")
    port = prometheus({"view": view_port, "command": command_port})
    ready = 'djqueue_queue_messages{queue="t.record",state="ready"}'
    wait_until(lambda: query(port, ready) == {"view": MESSAGES, "command": MESSAGES}, 60,
               "Prometheus to see the 5,000 ready messages through both")
    for _ in range(2):
        spawn("djqueue_worker", "t.record", "-c", "2", "-b", "50")
    finished = 'sum by (job) (djqueue_messages_finished_total{queue="t.record"})'
    wait_until(lambda: query(port, finished) == {"view": MESSAGES, "command": MESSAGES}, 120,
               "Prometheus to count 5,000 finished through both")
    wait_until(lambda: query(port, ready) == {"view": 0, "command": 0}, 30,
               "the ready gauge to fall to 0")
    peak = query(port, f"max_over_time({ready}[5m])")
    workers = query(port, 'count by (job) (djqueue_worker_up{kind="worker"})')
    print(f"Prometheus: finished {query(port, finished)}, ready peak {peak}, now 0; "
          f"workers seen {workers}")
    assert peak == {"view": MESSAGES, "command": MESSAGES}
    assert workers == {"view": 2, "command": 2}
    # Every query of the Grafana dashboard in docs/ runs on this server and finds data;
    # but the host clocks' on SQLite, which has no server clock to compare with.
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana"
                            / "djqueue.json").read_text())
    one_clock = connection.vendor == "sqlite"
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expression = (target["expr"].replace("$__rate_interval", "1m")
                          .replace('"$queue"', '".*"'))
            found = query(port, expression)
            if one_clock and "clock_offset" in expression:
                assert found == {}, f"clock offsets on SQLite: {found}"
            else:
                assert found, f"no data for {panel['title']!r}: {expression}"
