"""Rows of any model in multi-row INSERT statements, for the bulk writes that are not
messages: a workflow's steps and edges, and a topic's bodies on MySQL.

Why not ``bulk_create``: it compiles every value through the ORM's layers (and
wants an instance a row, where a workflow's edges are tuples), and on MySQL it
cannot give the rows' ids back; here values are prepared once per field as for
messages (djqueue.storage.statements.prepared_values) and, when asked, the ids are
worked out on MySQL (vendor_sql.ids_of_multi_row_insert).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections, models

from djqueue.storage import dialects, fastpath
from djqueue.storage.statements import model_columns, prepared_values, vendor_sql


def insert_rows(db: str, objs: Sequence[models.Model], ids: bool = False) -> None:
    """INSERT rows of one model (a workflow's steps; a topic's bodies on MySQL), a
    statement per chunk (see insert_values).

    ``ids``: set each row's primary key, as ``bulk_create`` does where the database
    returns them. For MySQL, which has no ``RETURNING``: the ids are worked out from
    the first row's (vendor_sql.ids_of_multi_row_insert)."""
    if not objs:
        return
    conn = connections[db]
    if ids and conn.vendor != "mysql":
        raise ValueError("insert_rows(ids=True) works out ids on MySQL/MariaDB only")
    meta = objs[0]._meta
    attnames = [f.attname for f in meta.concrete_fields if not f.primary_key]
    chunks = insert_values(db, type(objs[0]), attnames,
                           [[obj.__dict__[name] for name in attnames] for obj in objs])
    if ids:
        start = 0
        for first_id, count in chunks:
            assert first_id is not None  # MySQL/MariaDB, checked above
            found = vendor_sql.ids_of_multi_row_insert(conn, first_id, count)
            for obj, pk in zip(objs[start:start + count], found, strict=True):
                fastpath.mark_saved(obj, pk, db)
            start += count


def insert_values(db: str, model: type[models.Model], attnames: Sequence[str],
                  rows: Sequence[Sequence[object]]) -> list[tuple[int | None, int]]:
    """INSERT ``rows`` of ``model``, each the values of ``attnames`` in that order (a
    workflow's steps and edges, a topic's bodies), a statement per chunk, with values
    prepared as for messages: ten thousand rows in a fraction of bulk_create's time,
    which compiles every value through the ORM's layers (and a tuple a row, for
    edges, instead of an instance). On MySQL/MariaDB a value every row of a chunk
    shares is escaped into the statement once (the driver escapes each parameter in
    Python). Call inside a transaction. Returns, per statement, the first row's id on
    MySQL/MariaDB (the driver's ``lastrowid``; None elsewhere) and its row count."""
    if not rows:
        return []
    conn = connections[db]
    meta = model._meta
    by_attname = {f.attname: f for f in meta.concrete_fields}
    fields = [by_attname[name] for name in attnames]
    prepare = prepared_values.preparers(conn, f"{meta.label}:insert:{','.join(attnames)}",
                                        fields)
    chunk_rows = max(1, 30_000 // len(fields))  # SQLite: 32,766 parameters a statement
    quote = conn.ops.quote_name
    head = (f"INSERT INTO {quote(meta.db_table)} "
            f"({', '.join(quote(model_columns.column_of(f)) for f in fields)}) VALUES ")
    escape = dialects.escapes_client_side(conn)
    chunks: list[tuple[int | None, int]] = []
    mysql = conn.vendor == "mysql"
    with conn.cursor() as cursor:
        for start in range(0, len(rows), chunk_rows):
            chunk = rows[start:start + chunk_rows]
            # A value that is the very object the first row holds (a task path, a
            # queue name) is prepared once, as for a batch of messages
            # (message_inserts._params).
            shared = chunk[0]
            first = [function(value) for function, value in zip(prepare, shared, strict=True)]
            prepared = [first] + [[ready if value is raw else function(value)
                                   for function, value, raw, ready in zip(
                                       prepare, row, shared, first, strict=True)]
                                  for row in chunk[1:]]
            varying = list(range(len(fields))) if escape is None else [
                i for i, value in enumerate(first)
                if any(row[i] != value for row in prepared)]
            template = "(" + ", ".join(
                "%s" if i in varying else escape(value)  # type: ignore[misc]
                for i, value in enumerate(first)) + ")"
            cursor.execute(head + ", ".join([template] * len(prepared)),
                           [row[i] for row in prepared for i in varying])
            chunks.append((cursor.lastrowid if mysql else None, len(prepared)))
    return chunks
