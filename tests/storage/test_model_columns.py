"""The columns the hand-written statements name: a concrete field's, by its name or its
attname, and a clear refusal for a field that stores nothing."""

from __future__ import annotations

import pytest

from djqueue.models import Message, Queue, TaskRecord
from djqueue.storage.statements import model_columns


def test_a_foreign_key_is_found_by_its_name_and_its_attname():
    assert model_columns.column(Message, "queue") == "queue_id"
    assert model_columns.column(Message, "queue_id") == "queue_id"
    assert model_columns.column(Message, "visible_at") == "visible_at"
    found = model_columns.columns(Message)
    assert found["origin_queue"] == found["origin_queue_id"] == "origin_queue_id"
    assert set(found.values()) == {f.column for f in Message._meta.concrete_fields}


def test_a_field_without_a_column_is_refused_when_the_statement_is_built():
    # Queue.messages is the reverse side of Message.queue: nothing to write into SQL.
    with pytest.raises(LookupError, match=r"djqueue.Queue.messages has no column of its own"):
        model_columns.column(Queue, "messages")
    with pytest.raises(LookupError, match="has no column of its own"):
        model_columns.column_of(Queue._meta.get_field("messages"))


def test_the_primary_key_column():
    assert model_columns.column_of(TaskRecord._meta.pk) == "id"


def test_quoted_names_are_the_connections_own_quoting_after_the_alias():
    from django.db import connection

    quote = connection.ops.quote_name
    assert model_columns.quoted_table(connection, Message) == quote("djqueue_message")
    names = model_columns.quoted(connection, Message, prefix="m.")
    assert names["queue"] == names["queue_id"] == "m." + quote("queue_id")
    assert names["visible_at"] == "m." + quote("visible_at")
    assert model_columns.quoted(connection, Message)["id"] == quote("id")
