"""Every endpoint of the HTTP API through a real uvicorn process, every error status,
and every grant; each response checked against the OpenAPI schema."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient
from django.utils import timezone

import djqueue
from djqueue.http import access
from djqueue.models import ApiClient, ApiToken, History, Message, State
from djqueue.monitoring import rollups
from djqueue.storage.expiry import expires_at
from tests.conftest import wait_until, write_unreadable_time
from tests.http.conftest import conforms

pytestmark = pytest.mark.django_db(transaction=True)
Q = "/queues/{queue}"
MESSAGES = "/queues/{queue}/messages"
RECEIVE = "/queues/{queue}/receive"


def test_send_receive_ack_nack_extend_peek_and_attributes(api_server, make_token):
    djqueue.create_queue("h.orders", visibility_timeout=30, backoff=[0.1])
    token = make_token({"h.*": "full_control"})
    with api_server.client(token) as http:
        one = http.post("queues/h.orders/messages", json={
            "payload": {"order": 1}, "priority": 5, "headers": {"trace": "t1"},
            "group_key": "customer-7"})
        assert one.status_code == 201, one.text
        sent = conforms(one, MESSAGES, "POST")
        assert sent["duplicate"] is False
        batch = http.post("queues/h.orders/messages", json={"messages": [
            {"payload": i, "group_key": f"k{i % 2}"} for i in range(3)] + [
            {"payload": "later", "delay": 60},
            {"payload": "once", "dedup_key": "d-1"}, {"payload": "once", "dedup_key": "d-1"}]})
        assert batch.status_code == 201, batch.text
        ids = conforms(batch, MESSAGES, "POST")
        assert len(ids["ids"]) == 6 and ids["duplicates"] == [ids["ids"][4]]
        assert ids["ids"][5] == ids["ids"][4]
        assert Message.objects.get(pk=ids["ids"][3]).state == State.SCHEDULED

        got = http.post("queues/h.orders/receive", json={"max_messages": 10,
                                                          "visibility_timeout": 5})
        body = conforms(got, RECEIVE, "POST")
        received = {m["payload"] if not isinstance(m["payload"], dict) else "order": m
                    for m in body["messages"]}
        assert set(received) == {"order", 0, 1, 2, "once"}
        assert received["order"]["priority"] == 5 and received["order"]["headers"]["trace"] == "t1"
        assert received["order"]["group_key"] == "customer-7"

        extended = http.post("queues/h.orders/extend", json={
            "receipts": [received["order"]["receipt"]], "seconds": 600})
        assert conforms(extended, "/queues/{queue}/extend", "POST") == {
            "done": [received["order"]["id"]]}
        row = Message.objects.get(pk=received["order"]["id"])
        assert row.visible_at > timezone.now() + timedelta(seconds=500)

        acked = http.post("queues/h.orders/ack", json={"receipts": [
            received[k]["receipt"] for k in ("order", 0, 1)]})
        assert conforms(acked, "/queues/{queue}/ack", "POST")["done"] == sorted(
            received[k]["id"] for k in ("order", 0, 1))
        assert History.objects.filter(pk=received["order"]["id"]).exists()

        failed = http.post("queues/h.orders/nack", json={
            "receipts": [received[2]["receipt"]], "error": "could not ship", "delay": 0})
        assert conforms(failed, "/queues/{queue}/nack", "POST")["done"] == [received[2]["id"]]
        row = Message.objects.get(pk=received[2]["id"])
        assert row.state == State.READY and row.errors[-1]["error"] == "could not ship"
        released = http.post("queues/h.orders/nack", json={
            "receipts": [received["once"]["receipt"]], "delay": 30})
        assert conforms(released, "/queues/{queue}/nack", "POST")["done"]
        row = Message.objects.get(pk=received["once"]["id"])
        assert row.state == State.SCHEDULED and row.attempts == 0

        peeked = http.get("queues/h.orders/messages", params={"state": "scheduled", "limit": 5})
        body = conforms(peeked, MESSAGES, "GET")
        assert {m["payload"] for m in body["messages"]} == {"later", "once"}
        assert all("receipt" not in m for m in body["messages"])

        attributes = conforms(http.get("queues/h.orders"), Q, "GET")
        assert attributes["name"] == "h.orders" and attributes["visibility_timeout"] == 30
        assert attributes["statistics"]["messages"]["scheduled"] == 2
        assert attributes["statistics"]["messages"]["ready"] == 1
        oldest = Message.objects.filter(queue__name="h.orders").order_by("sent_at").first()
        age = (timezone.now() - oldest.sent_at).total_seconds()
        assert 0 <= age - attributes["statistics"]["oldest_age"] < 5
        # finished: as the reaper's roll-ups have counted the acks (not yet, here)
        assert attributes["statistics"]["finished"] == 0
        rollups.roll_up(timezone.now() + rollups.SETTLE)
        attributes = conforms(http.get("queues/h.orders"), Q, "GET")
        assert attributes["statistics"]["finished"] == 3


def test_messages_sent_with_an_expiry_are_set_aside_once_it_passes(api_server, make_token):
    djqueue.create_queue("h.expiring", message_ttl=600)
    token = make_token({"h.expiring": "full_control"})
    with api_server.client(token) as http:
        shown = conforms(http.get("queues/h.expiring"), Q, "GET")
        assert (shown["message_ttl"], shown["retry_jitter"]) == (600, 0.1)
        one = http.post("queues/h.expiring/messages", json={"payload": "soon", "expires": 0.2})
        sent = conforms(one, MESSAGES, "POST")
        batch = http.post("queues/h.expiring/messages", json={"messages": [
            {"payload": "late", "expires": 3600}, {"payload": "plain"}]})
        conforms(batch, MESSAGES, "POST")
        for bad in (0, -1, "soon", True, 1e12):
            refused = http.post("queues/h.expiring/messages",
                                json={"payload": "x", "expires": bad})
            assert refused.status_code == 400, refused.text
            assert "'expires' must be a number above 0" in refused.json()["detail"]
        stamp = expires_at(Message.objects.get(pk=sent["id"]))
        wait_until(lambda: time.time() > stamp, 30, "the expiry to pass", interval=0.01)
        got = http.post("queues/h.expiring/receive", json={"max_messages": 10}).json()
        assert sorted(m["payload"] for m in got["messages"]) == ["late", "plain"]
        assert Message.objects.get(pk=sent["id"]).state == State.DEAD
    assert Message.objects.count() == 3  # the refused ones stored nothing


def test_a_lost_lease_gets_409_and_the_others_are_done(api_server, make_token):
    djqueue.create_queue("h.lease")
    token = make_token({"h.lease": "receive", "h.*": "send"})
    with api_server.client(token) as http:
        http.post("queues/h.lease/messages", json={"messages": [{"payload": 1},
                                                                {"payload": 2}]})
        first, second = http.post("queues/h.lease/receive",
                                  json={"max_messages": 2}).json()["messages"]
        forged = f"{second['id']}.{'0' * 32}"
        response = http.post("queues/h.lease/ack", json={"receipts": [first["receipt"], forged]})
        assert response.status_code == 409
        problem = conforms(response, "/queues/{queue}/ack", "POST")
        assert problem["type"] == "urn:djqueue:error:NotOwner"
        assert problem["done"] == [first["id"]] and problem["lost"] == [second["id"]]
        assert Message.objects.get(pk=second["id"]).state == State.CLAIMED  # untouched


def test_full_control_redrives_purges_pauses_and_others_get_403(api_server, make_token):
    djqueue.create_queue("h.dead")
    djqueue.create_queue("h.main", max_attempts=1, dead_letter_queue="h.dead")
    owner = make_token({"h.*": "full_control"})
    sender = make_token({"h.*": "send"})
    with api_server.client(owner) as http:
        http.post("queues/h.main/messages", json={"payload": "x"})
        [m] = http.post("queues/h.main/receive", json={}).json()["messages"]
        http.post("queues/h.main/nack", json={"receipts": [m["receipt"]], "error": "boom"})
        assert Message.objects.get(pk=m["id"]).queue.name == "h.dead"
    with api_server.client(sender) as http:
        for path in ("queues/h.dead/redrive", "queues/h.main/purge", "queues/h.main/pause",
                     "queues/h.main/resume"):
            denied = http.post(path, json={})
            assert denied.status_code == 403, denied.text
            assert denied.json()["type"] == "urn:djqueue:error:Forbidden"
    with api_server.client(owner) as http:
        moved = http.post("queues/h.dead/redrive", json={})
        assert conforms(moved, "/queues/{queue}/redrive", "POST") == {"moved": 1}
        purged = http.post("queues/h.main/purge", json={})
        assert conforms(purged, "/queues/{queue}/purge", "POST") == {"purged": 1}
        paused = http.post("queues/h.main/pause", json={})
        assert conforms(paused, "/queues/{queue}/pause", "POST") == {"paused": True}
        http.post("queues/h.main/messages", json={"payload": "held"})
        assert http.post("queues/h.main/receive", json={}).json()["messages"] == []
        resumed = http.post("queues/h.main/resume", json={})
        assert conforms(resumed, "/queues/{queue}/resume", "POST") == {"paused": False}
        got = http.post("queues/h.main/receive", json={}).json()["messages"]
        assert [m["payload"] for m in got] == ["held"]
        assert http.post("queues/h.nothing/pause", json={}).status_code == 404
        assert http.post("queues/h.main/pause", json={"x": 1}).status_code == 400
    assert Message.objects.get().payload == "held"


def test_a_dead_letter_a_hand_edit_left_unreadable_is_peeked_and_its_queue_described(
        api_server, make_token):
    """A dead letter whose times no driver reads back and another whose body is not JSON
    (hand edits; no claim reads a dead letter to set it aside) answered every peek of
    their queue and every read of its attributes with a 500: they are listed now, one
    with its times null, the other with its body as text, as ``djqueue_queues peek``
    shows them; the queue's oldest age, the unreadable one's, is unknown."""
    djqueue.create_queue("h.dead")
    djqueue.create_queue("h.main", max_attempts=1, dead_letter_queue="h.dead")
    sent = djqueue.send_batch("h.main", [{"n": i} for i in range(3)])
    for message in djqueue.receive("h.main", max_messages=3):
        message.nack(error="boom")
    for column in ("sent_at", "visible_at"):
        write_unreadable_time("djqueue_message", column, sent[0].pk)
    Message.objects.filter(pk=sent[2].pk).update(body="{not json")
    with api_server.client(make_token({"h.*": "full_control"})) as http:
        body = conforms(http.get("queues/h.dead/messages"), MESSAGES, "GET")
        assert [(m["id"], m["sent_at"] is None, m["visible_at"] is None, m["payload"])
                for m in body["messages"]] == [
            (sent[0].pk, True, True, {"n": 0}), (sent[1].pk, False, False, {"n": 1}),
            (sent[2].pk, False, False, {"unreadable_body": "{not json"})]
        attributes = conforms(http.get("queues/h.dead"), Q, "GET")
        assert attributes["statistics"]["messages"]["dead"] == 3
        assert attributes["statistics"]["oldest_age"] is None


def test_the_queue_list_pages_through_the_granted_queues_with_their_sampled_depths(
        api_server, make_token):
    for name in ("h.a1", "h.a2", "h.b1", "other.x"):
        djqueue.create_queue(name)
    djqueue.send_batch("h.a1", [1, 2, 3])
    djqueue.send("h.a2", "later", delay=60)
    rollups.sample_depth()  # as the reaper does every STATS_INTERVAL
    djqueue.send("h.a1", 4)  # after the sample: the list reads samples, not messages
    djqueue.create_queue("h.a3")  # never sampled
    reader = make_token({"h.a*": "receive", "h.b1": "send"})
    with api_server.client(reader) as http:
        page = conforms(http.get("queues", params={"limit": 2}), "/queues", "GET")
        assert [q["name"] for q in page["queues"]] == ["h.a1", "h.a2"]
        assert page["next"] == "h.a2"
        a1, a2 = page["queues"]
        assert (a1["ready"], a1["scheduled"], a1["in_flight"], a1["waiting"], a1["dead"]) == (
            3, 0, 0, 0, 0)
        assert (a2["ready"], a2["scheduled"], a2["paused"]) == (0, 1, False)
        assert 0 <= a1["sample_age"] < 60 and 0 <= a1["oldest_ready_age"] < 60
        rest = conforms(http.get("queues", params={"limit": 2, "after": "h.a2"}),
                        "/queues", "GET")
        assert [q["name"] for q in rest["queues"]] == ["h.a3", "h.b1"]  # never other.x
        assert rest["next"] is None
        a3 = rest["queues"][0]
        assert a3["ready"] is None and a3["sample_age"] is None  # no sample yet
        only_b = conforms(http.get("queues", params={"prefix": "h.b"}), "/queues", "GET")
        assert [q["name"] for q in only_b["queues"]] == ["h.b1"]
        assert http.get("queues", params={"prefix": "H.B"}).json()["queues"] == []
        for params, field in (({"limit": 0}, "limit"), ({"limit": 1001}, "limit"),
                              ({"limit": "x"}, "limit"), ({"prefix": "h b"}, "prefix"),
                              ({"after": "a" * 101}, "after")):
            refused = http.get("queues", params=params)
            assert refused.status_code == 400, (params, refused.text)
            assert field in refused.json()["detail"]
    with api_server.client() as http:
        assert http.get("queues").status_code == 401


def test_topics_publish_and_a_group_receives_and_acks(api_server, make_token):
    djqueue.create_topic("h.events")
    djqueue.subscribe("h.events", "billing")
    token = make_token({"h.events": "full_control"})
    with api_server.client(token) as http:
        published = http.post("topics/h.events/messages", json={"messages": [
            {"payload": {"n": 1}}, {"payload": {"n": 2}, "group_key": "a"}]})
        assert len(conforms(published, "/topics/{topic}/messages", "POST")["ids"]) == 2
        got = http.post("topics/h.events/groups/billing/receive", json={"max_messages": 5})
        messages = conforms(got, "/topics/{topic}/groups/{group}/receive", "POST")["messages"]
        assert sorted(m["payload"]["n"] for m in messages) == [1, 2]
        acked = http.post("topics/h.events/groups/billing/ack",
                          json={"receipts": [m["receipt"] for m in messages]})
        assert conforms(acked, "/topics/{topic}/groups/{group}/ack", "POST")["done"]
        assert http.post("topics/h.events/groups/nobody/receive", json={}).status_code == 404


def test_a_publication_with_an_expiry_is_set_aside_in_each_group(api_server, make_token):
    djqueue.create_topic("h.news")
    djqueue.subscribe("h.news", "mail")
    djqueue.subscribe("h.news", "push")
    token = make_token({"h.news": "full_control"})
    with api_server.client(token) as http:
        published = http.post("topics/h.news/messages", json={"messages": [
            {"payload": "soon", "expires": 0.2}, {"payload": "late"}]})
        assert len(conforms(published, "/topics/{topic}/messages", "POST")["ids"]) == 2
        for bad in (0, -1, "soon", True, 1e12):
            refused = http.post("topics/h.news/messages", json={"payload": "x", "expires": bad})
            assert refused.status_code == 400, refused.text
            assert "'expires' must be a number above 0" in refused.json()["detail"]
        stamps = [s for s in map(expires_at, Message.objects.all()) if s is not None]
        assert len(stamps) == 2  # one delivery a group
        wait_until(lambda: time.time() > max(stamps), 30, "the expiry to pass", interval=0.01)
        for group in ("mail", "push"):
            got = http.post(f"topics/h.news/groups/{group}/receive", json={"max_messages": 5})
            assert [m["payload"] for m in got.json()["messages"]] == ["late"]
    assert Message.objects.filter(state=State.DEAD).count() == 2
    assert Message.objects.count() == 4  # the refused ones stored nothing


def test_every_error_status(api_server, make_token):
    djqueue.create_queue("h.small", max_payload_bytes=100, max_depth=2)
    token = make_token({"h.*": "full_control"})
    with api_server.client(token) as http:
        cases = {
            400: http.post("queues/h.small/messages", json={"payload": 1, "priority": "high"}),
            404: http.post("queues/h.nothing/messages", json={"payload": 1}),
            413: http.post("queues/h.small/messages", json={"payload": "x" * 200}),
            415: http.post("queues/h.small/messages", content=b"payload=1",
                           headers={"Content-Type": "application/x-www-form-urlencoded"}),
        }
        http.post("queues/h.small/messages", json={"messages": [{"payload": 1},
                                                                 {"payload": 2}]})
        cases[429] = http.post("queues/h.small/messages", json={"payload": 3})
        for status, response in cases.items():
            assert response.status_code == status, (status, response.text)
            problem = conforms(response, MESSAGES, "POST")
            assert problem["status"] == status and problem["type"].startswith("urn:djqueue:")
            assert response.headers["content-type"] == "application/problem+json"
        assert cases[413].json()["type"] == "urn:djqueue:error:PayloadTooLarge"
        assert cases[429].json()["type"] == "urn:djqueue:error:QueueFull"
        assert "priority" in cases[400].json()["detail"]
        huge = http.post("queues/h.small/messages", content=b"[" + b"1," * 2_500_000 + b"1]",
                         headers={"Content-Type": "application/json"})
        assert huge.status_code == 413 and huge.json()["type"].endswith("RequestTooLarge")
        wrong = http.delete("queues/h.small/messages")
        assert wrong.status_code == 405 and "POST" in wrong.headers["allow"]
        assert http.post("queues/bad name!/receive", json={}).status_code in (400, 404)
    assert Message.objects.count() == 2


def test_401_for_missing_bad_revoked_expired_and_inactive(api_server, make_token):
    djqueue.create_queue("h.auth")
    djqueue.send("h.auth", "stays")
    with api_server.client() as http:
        assert http.post("queues/h.auth/receive", json={}).status_code == 401
    good = make_token({"h.auth": "receive"})
    revoked, expired, inactive = (make_token({"h.auth": "receive"}) for _ in range(3))
    assert access.revoke_token(revoked)
    ApiToken.objects.filter(key=expired[4:16]).update(
        expires_at=timezone.now() - timedelta(seconds=1))
    ApiClient.objects.filter(tokens__key=inactive[4:16]).update(is_active=False)
    tampered = good[:-1] + ("B" if good.endswith("A") else "A")
    for token in (revoked, expired, inactive, tampered, "djq_" + "x" * 60, "Basic abc"):
        with api_server.client(token) as http:
            response = http.post("queues/h.auth/receive", json={})
            assert response.status_code == 401, (token, response.text)
            assert response.headers["www-authenticate"].startswith("Bearer")
            conforms(response, RECEIVE, "POST")
    with api_server.client(good) as http:
        assert http.post("queues/h.auth/receive", json={}).json()["messages"][0]["payload"] == (
            "stays")
        # Revoked while in use: refused on the next request.
        access.revoke_token(good)
        assert http.post("queues/h.auth/receive", json={}).status_code == 401


def test_grants_by_name_and_pattern(api_server, make_token):
    for name in ("h.g.a", "h.g.b", "other"):
        djqueue.create_queue(name)
    sender = make_token({"h.g.*": "send"})
    with api_server.client(sender) as http:
        assert http.post("queues/h.g.a/messages", json={"payload": 1}).status_code == 201
        assert http.post("queues/other/messages", json={"payload": 1}).status_code == 403
        denied = http.post("queues/h.g.a/receive", json={})
        assert denied.status_code == 403 and denied.json()["type"].endswith("Forbidden")
        assert http.get("queues/h.g.a/messages").status_code == 403
    assert Message.objects.get(queue__name="h.g.a").state == State.READY  # still there
    receiver = make_token({"h.g.a": "receive"})
    with api_server.client(receiver) as http:
        assert http.post("queues/h.g.a/messages", json={"payload": 2}).status_code == 403
        assert len(http.post("queues/h.g.a/receive", json={}).json()["messages"]) == 1
        assert http.post("queues/h.g.b/receive", json={}).status_code == 403
        # No grant: 403 whether or not the queue exists (names are not disclosed).
        assert http.post("queues/h.nope/receive", json={}).status_code == 403


def test_a_client_over_its_quota_gets_429_with_retry_after(api_server, make_token):
    djqueue.create_queue("h.quota")
    token = make_token({"h.quota": "send"}, requests_per_second=0.01, request_burst=2)
    with api_server.client(token) as http:
        statuses = [http.post("queues/h.quota/messages", json={"payload": i}).status_code
                    for i in range(3)]
        assert statuses == [201, 201, 429]
        over = http.post("queues/h.quota/messages", json={"payload": 9})
        assert over.json()["type"] == "urn:djqueue:error:OverQuota"
        assert int(over.headers["retry-after"]) >= 1
    assert Message.objects.count() == 2


def test_a_signed_in_user_with_permission_reads_through_the_session(api_server):
    djqueue.create_queue("h.session")
    djqueue.send("h.session", {"seen": True})
    user = User.objects.create_user("ops", password="x" * 12, is_staff=True)
    browser = DjangoClient()
    browser.force_login(user)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    with api_server.client(cookies=cookies) as http:
        assert http.get("queues/h.session/messages").status_code == 401  # no permission yet
        user.user_permissions.add(Permission.objects.get(codename="api_receive"))
        peeked = http.get("queues/h.session/messages")
        assert peeked.status_code == 200 and peeked.json()["messages"][0]["payload"] == {
            "seen": True}
        # Unsafe methods take tokens only: a session cannot receive.
        assert http.post("queues/h.session/receive", json={}).status_code == 401
        assert "djqueue HTTP API" in http.get("docs/").text
