"""The admin answers while two worker processes drain and a producer sends, with no
"database is locked" anywhere: the embedded default's question (SQLite has one
writer at a time), asked on every database. How fast it answers is a row of
``make bench-databases`` (bench/vendor_loops.py, admin_under_load), not a test.
"""

from __future__ import annotations

import urllib.request
from http.cookiejar import CookieJar

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

import djqueue
from djqueue.models import History, Message
from tests.conftest import wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)
PAGES = ["admin:djqueue_dashboard_changelist", "admin:djqueue_message_changelist",
         "admin:djqueue_queue_changelist", "admin:djqueue_history_changelist"]
TOTAL = 3000


def logged_in_opener(live_server) -> urllib.request.OpenerDirector:
    """An HTTP client holding an admin session cookie for ``live_server``."""
    User.objects.create_superuser("ops", password="s3cret-pw")
    client = Client()
    client.login(username="ops", password="s3cret-pw")
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.addheaders = [("Cookie", f"sessionid={client.cookies['sessionid'].value}")]
    return opener


@pytest.mark.slow
def test_the_admin_answers_while_workers_drain_and_a_producer_sends(spawn, live_server):
    djqueue.create_queue("t.record")
    opener = logged_in_opener(live_server)
    workers = [spawn("djqueue_worker", "t.record", "-c", "2") for _ in range(2)]
    producer = spawn("produce", "t.record", "--count", str(TOTAL), "--batch", "1")
    answered = 0
    while producer.popen.poll() is None or History.objects.count() < TOTAL:
        for name in PAGES:
            with opener.open(f"{live_server.url}{reverse(name)}", timeout=30) as response:
                page = response.read().decode()
                assert response.status == 200
                assert "database is locked" not in page
                answered += 1
        if answered > 2000:
            break
    assert producer.wait(120) == 0, producer.output()
    wait_until(lambda: History.objects.count() == TOTAL, 120, "every message acked")
    assert answered >= len(PAGES)
    assert not Message.objects.exists()
    keys = list(Effect.objects.values_list("key", flat=True))
    assert sorted(keys) == list(range(TOTAL)), "each message handled once"
    for process in (*workers, producer):
        assert "database is locked" not in process.output()
        assert "Traceback" not in process.output(), process.output()
