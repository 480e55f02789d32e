"""The one-message send path: what it stores equals what the ORM would store, on every
database; on MariaDB its statement is written out from a cached row template, on
PostgreSQL its values are bound by the server, and on all three it goes to the
driver directly, observed by execute wrappers and with Django's exceptions."""

import json
import math
import os
import re
import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, ProgrammingError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import djqueue
from djqueue.exceptions import InvalidMessage
from djqueue.models import Message, State
from djqueue.models.message import decode_payload
from djqueue.storage import dialects, fastpath
from djqueue.storage.payloads import encode
from djqueue.storage.statements import message_inserts, prepared_values
from tests.conftest import mysql_only
from tests.storage.test_hot_path import TRICKY, field_values

pytestmark = pytest.mark.django_db(transaction=True)


def varied_sends(queue) -> list[Message]:
    """Sends that take the template (plain options, a group key, a priority, a delay)
    and sends it hands on (headers)."""
    whole_second = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    sent = [djqueue.send(queue, {"n": 0}),
            djqueue.send(queue, TRICKY[0], priority=-5),
            djqueue.send(queue, [1.5, None, True], delay=30),
            djqueue.send(queue, {"at": "whole second"}, delay=whole_second),
            djqueue.send(queue, {"h": 1}, headers={TRICKY[1]: TRICKY[2]})]
    sent += [djqueue.send(queue, {"text": text}, group_key=text) for text in [*TRICKY, "{0} }{"]]
    return sent


def test_single_sends_store_what_they_return():
    queue = djqueue.create_queue("sp.varied")
    sent = varied_sends(queue)
    stored = {m.pk: field_values(m) for m in Message.objects.filter(queue=queue)}
    assert len(stored) == len(sent)
    assert all(field_values(m) == stored[m.pk] for m in sent)
    assert [m.state for m in sent[:5]] == [State.READY, State.READY, State.SCHEDULED,
                                           State.SCHEDULED, State.READY]
    assert sent[3].visible_at.microsecond == 0
    assert [m.group_key for m in sent[5:]] == [*TRICKY, "{0} }{"]


@mysql_only
def test_template_rows_equal_the_driver_escaping_every_value():
    """A template row is what escaping every value with the driver's literal() gives."""
    queue = djqueue.create_queue("sp.template")
    sent = varied_sends(queue)
    conn = connection
    prepare = prepared_values.preparers(conn, "message", message_inserts._FIELDS)
    literal = dialects.literal_client_side(conn)
    rendered = [message_inserts._one_row_templates.render(conn, m) for m in sent]
    assert rendered[4] is None  # headers (a dict) are not a template's constant
    for message, text in zip(sent, rendered, strict=True):
        if text is not None:
            assert text == prepared_values.render(
                conn, message, message_inserts._INSERT_ATTNAMES, prepare, literal)


def test_a_single_send_is_seen_by_wrappers_and_query_logging():
    """A single send skips the cursor layers only while nothing observes queries
    (fastpath.driver_statements._straight_to_driver), on every database."""
    queue = djqueue.create_queue("sp.observed")
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        djqueue.send(queue, {"n": 1})
    with CaptureQueriesContext(connection) as logged:
        djqueue.send(queue, {"n": 2})
    # The send may also refresh its cache of the workers' wake addresses (a read of
    # djqueue_worker, once every WAKE_REFRESH seconds); the insert must be seen once.
    inserts = [sql for sql in seen if sql.startswith("INSERT INTO")]
    others = [sql for sql in seen if not sql.startswith("INSERT INTO")]
    assert len(inserts) == 1 and '"djqueue_message"' in inserts[0].replace("`", '"')
    assert all("djqueue_worker" in sql for sql in others), others
    assert [q["sql"] for q in logged.captured_queries if q["sql"].startswith("INSERT")]
    assert Message.objects.filter(queue=queue).count() == 2


@mysql_only
def test_a_written_out_insert_raises_djangos_exceptions():
    head = message_inserts._insert_sql(connection, 0, False)
    queue = djqueue.create_queue("sp.errors")
    good = djqueue.send(queue, {"n": 1})
    row = message_inserts._one_row_templates.render(connection, good)
    missing_queue = row.replace(f"({queue.pk}, ", "(999999999, ", 1)
    null_state = row.replace(f"({queue.pk}, 1, ", f"({queue.pk}, NULL, ", 1)
    with pytest.raises(IntegrityError):
        fastpath.insert_written_out(connection, head + missing_queue)
    with pytest.raises(IntegrityError):  # code 1048, an OperationalError in the driver
        fastpath.insert_written_out(connection, head + null_state)
    with pytest.raises(ProgrammingError):
        fastpath.insert_written_out(connection, head + "(1, 2")
    assert Message.objects.filter(queue=queue).count() == 1


@pytest.mark.skipif(connection.vendor == "mysql", reason="MySQL's insert is written out")
def test_a_driver_insert_raises_djangos_exceptions_and_joins_the_transaction():
    """fastpath.insert_returning_id (PostgreSQL) and insert_lastrowid (SQLite): the
    driver's errors as Django's, the connection usable after them, and the row part of
    the caller's transaction."""
    from django.db import OperationalError, transaction

    if connection.vendor == "postgresql":
        sql, insert = message_inserts._insert_sql(connection, 1, True), fastpath.insert_returning_id
        bad_statement = ProgrammingError
    else:
        sql, insert = message_inserts._insert_sql(connection, 1, False), fastpath.insert_lastrowid
        bad_statement = OperationalError  # what sqlite3 raises for a syntax error
    queue = djqueue.create_queue("sp.bound")
    good = djqueue.send(queue, {"n": 1})
    params = message_inserts._params([good], connection)
    at = message_inserts._INSERT_ATTNAMES
    missing_queue = [999999999 if n == "queue_id" else v for n, v in zip(at, params, strict=True)]
    null_state = [None if n == "state" else v for n, v in zip(at, params, strict=True)]
    with pytest.raises(IntegrityError):
        insert(connection, sql, missing_queue)
    with pytest.raises(IntegrityError):
        insert(connection, sql, null_state)
    with pytest.raises(bad_statement):
        insert(connection, sql.replace("VALUES", "VALUE"), params)
    second = insert(connection, sql, params)
    with transaction.atomic():
        rolled_back = insert(connection, sql, params)
        assert Message.objects.filter(pk=rolled_back).exists()
        transaction.set_rollback(True)
    assert set(Message.objects.filter(queue=queue).values_list("pk", flat=True)) == {
        good.pk, second}
    assert field_values(Message.objects.get(pk=second)) == {
        **field_values(good), "id": second}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's kept cursor")
def test_the_kept_driver_cursor_follows_the_connection():
    """The driver cursor a send uses: one for each of Django's connections to the
    server, a new one once Django has connected again, and none kept while the
    connection is shared between threads."""
    kept_cursor = fastpath.driver_statements._driver_cursor
    queue = djqueue.create_queue("sp.cursor")
    first = djqueue.send(queue, {"n": 1})
    kept = kept_cursor(connection)
    assert kept_cursor(connection) is kept
    connection.close()
    second = djqueue.send(queue, {"n": 2})
    renewed = kept_cursor(connection)
    assert renewed is not kept and renewed.connection is connection.connection
    connection.inc_thread_sharing()
    try:
        assert kept_cursor(connection) is not kept_cursor(connection)
        third = djqueue.send(queue, {"n": 3})
    finally:
        connection.dec_thread_sharing()
    assert [m.payload for m in Message.objects.filter(
        pk__in=[first.pk, second.pk, third.pk]).order_by("pk")] == [{"n": 1}, {"n": 2}, {"n": 3}]


PAYLOADS = [{"to": "someone@example.com", "subject": "x" * 60}, "plain text", TRICKY,
            {"nested": [{"a": [1, 2, {"b": None}]}, (3, 4)], "ü": "Ωμέγα ✓ 𝄞"},
            [0.1, -0.0, 1e100, 2**70, -3, True, False, None], 7, 2.5, None, "", [], {}]


def test_payload_text_equals_compact_json_dumps():
    for payload in PAYLOADS:
        assert encode(payload) == json.dumps(payload, separators=(",", ":"),
                                             ensure_ascii=False, allow_nan=False)


def test_payload_decoding_equals_json_loads():
    """Message.payload's decoder (raw_decode where it reads the whole text) gives what
    json.loads gives, or raises what it raises, for any text a row may hold."""
    texts = [encode(p) for p in PAYLOADS] + [
        " {}", "{} ", "\n[1]\t", "\ufeff{}", "{} x", "{}{}", "", "   ", "nul", "{",
        '{"a": NaN, "b": -Infinity}', '"\\ud800"', "1e400", b'{"a": 1}', bytearray(b"[2]")]
    for text in texts:
        try:
            expected = json.loads(text)
        except ValueError as exc:
            with pytest.raises(type(exc), match=re.escape(str(exc))):
                decode_payload(text)
        else:
            got = decode_payload(text)
            assert repr(got) == repr(expected), text  # repr: NaN equals no NaN


def test_unencodable_payloads_are_refused_with_the_reason():
    queue = djqueue.create_queue("sp.refused")
    circular: list = []
    circular.append(circular)
    for payload, reason in ((math.nan, "Out of range float"), ({"when": timezone.now()},
                                                                 "datetime"),
                            ({1: object()}, "object"), (circular, "contains itself")):
        with pytest.raises(InvalidMessage, match=reason):
            djqueue.send(queue, payload)
    assert not Message.objects.filter(queue=queue).exists()


def test_threads_encoding_one_payload_see_no_false_cycle():
    shared = {"items": [{"n": n, "tags": ["a", "b"]} for n in range(50)]}
    expected = json.dumps(shared, separators=(",", ":"))
    results: list[bool] = []

    def encode_many() -> None:
        results.append(all(encode(shared) == expected for _ in range(2000)))

    threads = [threading.Thread(target=encode_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 4


def test_batches_sent_at_once_from_threads_return_their_own_rows():
    """send_batch's messages carry the ids of their own rows, with other batches
    inserted at the same time. On MySQL, which has no RETURNING, the ids are worked
    out from the first (vendor_sql.ids_of_multi_row_insert); elsewhere they are read."""
    from django.db import connections

    queue = djqueue.create_queue("batch.ids")
    sent: dict[tuple[int, int, int], int] = {}
    errors: list[BaseException] = []

    def send_batches(thread: int) -> None:
        try:
            for batch in range(15):
                messages = djqueue.send_batch(
                    queue, [{"t": thread, "b": batch, "n": n} for n in range(40)])
                for n, message in enumerate(messages):
                    sent[(thread, batch, n)] = message.pk
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send_batches, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(sent) == 4 * 15 * 40 and len(set(sent.values())) == len(sent)
    stored = {pk: (body["t"], body["b"], body["n"]) for pk, body in
              ((pk, json.loads(body)) for pk, body in
               Message.objects.filter(queue=queue).values_list("pk", "body"))}
    assert {pk: key for key, pk in sent.items()} == stored


def test_json_columns_get_the_text_django_writes():
    """The hot path's JSONField preparer gives what get_db_prep_save gives (MySQL, SQLite:
    json.dumps) from its own encoder, and leaves what it does not know to Django."""
    from djqueue.models import TaskRecord

    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL adapts JSON with its driver's Jsonb: Django's own path")
    fields = TaskRecord._meta.concrete_fields
    field = TaskRecord._meta.get_field("return_value")
    prepare = prepared_values.preparers(connection, TaskRecord._meta.label, fields)[fields.index(field)]
    for value in [*PAYLOADS, math.nan, -math.inf, (1, 2), {"k": (3,)}]:
        assert prepare(value) == field.get_db_prep_save(value, connection)
    circular: dict = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular"):
        prepare(circular)
    with pytest.raises(TypeError, match="set"):
        prepare({"s": {1, 2}})


def test_a_send_from_an_event_loop_is_refused_like_the_orm(monkeypatch):
    """The written-out insert keeps cursor()'s guard: no blocking query from async code."""
    import asyncio

    from django.core.exceptions import SynchronousOnlyOperation

    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    queue = djqueue.create_queue("sp.async")

    async def send_in_loop() -> None:
        djqueue.send(queue, {"n": 1})

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(send_in_loop())
    assert not Message.objects.filter(queue=queue).exists()


@pytest.mark.skipif(not os.environ.get("DJQUEUE_TEST_SERVER_SIDE_BINDING"),
                    reason="the run with Django's server-side binding (scripts/run_tests.sh)")
def test_the_server_side_binding_run_binds_parameters_on_the_server():
    """That run's settings took: the driver sends parameters apart from the SQL, and a
    send and a conditional receive (a shift, whose count PostgreSQL types) work."""
    assert connection.features.uses_server_side_binding
    djqueue.create_queue("t.bound")
    sent = djqueue.send("t.bound", {"n": 1}, priority=3)
    got = djqueue.receive("t.bound", max_messages=5, where="priority << 2 = 12")
    assert [m.pk for m in got] == [sent.pk]
