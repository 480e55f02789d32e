"""A worker or reaper whose host's clock is far from the database server's says so as it
starts (djqueue.storage.host_clock): lease ends, delays and retry times are written and
judged by the hosts' clocks. Real processes, their clocks set apart by libfaketime."""

import logging
import re
import shutil

import pytest
from django.db import connection

import djqueue
from djqueue.storage import host_clock
from tests.conftest import wait_until
from tests.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)

#: The processes' monotonic clocks stay true: only the time of day is set apart.
CLOCK_ENV = {"FAKETIME_DONT_FAKE_MONOTONIC": "1", "DJQUEUE_TEST_LOG_INFO": "1"}


@pytest.fixture(autouse=True)
def _server_database() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is a file on this host: its clock is the host's")
    if shutil.which("faketime") is None:
        pytest.fail("libfaketime is missing: `scripts/ensure_system.sh faketime` installs it")


def test_this_hosts_clock_reads_as_the_database_servers():
    offsets = host_clock.warn_if_far(logging.getLogger("tests"), "test")
    assert set(offsets) == {"default"} and abs(offsets["default"]) < host_clock.WARN_PAST


def test_a_worker_ahead_and_a_reaper_behind_warn_as_they_start(spawn):
    djqueue.create_queue("f.poison")
    ahead = spawn("djqueue_worker", "f.poison", env=CLOCK_ENV,
                  prefix=("faketime", "-f", "+90s"))
    behind = spawn("djqueue_reaper", "--once", env=CLOCK_ENV, prefix=("faketime", "-f", "-90s"))
    assert behind.wait(60) == 0, behind.output()
    assert re.search(r"Reaper: this host's clock is (89\.9|90\.0|90\.1) s behind database "
                     r"default's\. Leases, delays and retry times are written and judged by "
                     r"the hosts' clocks", behind.output()), behind.output()
    wait_until(lambda: "started on f.poison" in ahead.output(), 60, "the worker's start")
    assert re.search(r"Worker: this host's clock is (89\.9|90\.0|90\.1) s ahead of database "
                     r"default's", ahead.output()), ahead.output()
    # A process on the host's own clock says nothing of it.
    in_time = spawn("djqueue_reaper", "--once", env=CLOCK_ENV)
    assert in_time.wait(60) == 0 and "clock is" not in in_time.output(), in_time.output()


def test_an_http_api_server_ahead_warns_as_it_starts(spawn):
    """Its receives stamp lease ends on its host's clock, as a worker's claims do."""
    server = spawn("djqueue_http", "--port", str(free_port()), env=CLOCK_ENV,
                   prefix=("faketime", "-f", "+90s"))
    wait_until(lambda: "HTTP API server: this host's clock is" in server.output()
               or server.popen.poll() is not None, 60, "the server's start")
    assert re.search(r"HTTP API server: this host's clock is (89\.9|90\.0|90\.1) s ahead of "
                     r"database default's", server.output()), server.output()
