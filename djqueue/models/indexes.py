"""Index kinds the queue's tables need beyond Django's own, and the migration
operation that turns a plain index into one of them.

Kept in the models layer because migrations refer to them by path
(``djqueue.models.indexes``); they change only how an index is created.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from django.db import migrations, models

from djqueue.exceptions import shown_value


class PartialOrPlainIndex(models.Index):
    """An index of the rows ``rows`` matches, where the database has partial indexes
    (PostgreSQL, SQLite); a plain index of every row elsewhere (MySQL/MariaDB).

    Why: an index entry costs a write when a message is sent and another when it is
    acked, and on SQLite each index a send touches is one more page written to the
    WAL at commit. Where every read of an index names rows that ``rows`` matches,
    the other rows need no entry.

    ``rows`` must be written so that both databases see a query's filter implies it:
    SQLite proves only that a query term appears among ``rows``' OR-connected terms
    (``state = 3`` among ``state = 2 OR state = 3``), or that ``column = value``
    implies ``column IS NOT NULL``. tests/storage/test_explain.py checks each read.

    It declares no ``condition``: that is Django's own attribute, which would make
    the model check warn on MySQL (models.W037) and leave the index out there.
    """

    def __init__(self, *args: Any, rows: models.Q, **kwargs: Any) -> None:
        if not isinstance(rows, models.Q):
            raise TypeError(f"{type(self).__name__} needs rows=Q(...), the rows it indexes "
                            f"where the database has partial indexes; got {shown_value(rows)}.")
        super().__init__(*args, **kwargs)
        self.rows = rows

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        kwargs["rows"] = self.rows
        return path, args, kwargs

    def create_sql(self, model: type[models.Model], schema_editor: Any, using: str = "",
                   **kwargs: Any) -> Any:
        if not schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        partial = copy.copy(self)
        partial.condition = self.rows
        return models.Index.create_sql(partial, model, schema_editor, using=using, **kwargs)


class NonNullIndex(PartialOrPlainIndex):
    """A :class:`PartialOrPlainIndex` of the rows where one nullable column is set.
    ``non_null`` names that column; by default the index's only field. Its rows
    follow from that, so it takes no ``rows`` of its own.

    Why: a message's ``stored_body`` and ``origin_queue`` are NULL on almost every
    row (only topic deliveries and dead letters have them), and so is its
    ``group_key`` outside ordered queues and per-key limits. They are read only by
    value (a foreign key's check when a body or queue is deleted, a queue's dead
    letters, a group's messages: ``column = value`` or ``column IN (...)``), which
    implies the column is set. On MySQL/MariaDB InnoDB needs an index on a foreign
    key's column anyway.
    """

    def __init__(self, *args: Any, non_null: str | None = None, **kwargs: Any) -> None:
        if "rows" in kwargs:
            raise TypeError("NonNullIndex indexes the rows where non_null is set; "
                            "it takes no rows=.")
        fields = kwargs.get("fields", ())
        if non_null is None and len(fields) != 1:
            raise ValueError("NonNullIndex of several fields (or of expressions) needs "
                             "non_null: the column a row must have set to be in the index.")
        column = non_null if non_null is not None else fields[0].lstrip("-")
        super().__init__(*args, rows=models.Q(**{f"{column}__isnull": False}), **kwargs)
        self.non_null = non_null

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        del kwargs["rows"]  # derived from non_null (or the field) when rebuilt
        if self.non_null is not None:
            kwargs["non_null"] = self.non_null
        return path, args, kwargs


def rebuilt_where_partial(model_name: str, plain: models.Index,
                          partial: PartialOrPlainIndex) -> migrations.SeparateDatabaseAndState:
    """A migration operation that turns the index ``plain`` of ``model_name`` into
    ``partial`` (same name) and back: in the migration state always, in the database
    only where it has partial indexes. On MySQL/MariaDB the two are the same plain
    index, so the table is not touched."""

    def replace(apps: Any, schema_editor: Any, old: models.Index, new: models.Index) -> None:
        if not schema_editor.connection.features.supports_partial_indexes:
            return
        model = apps.get_model("djqueue", model_name)
        schema_editor.remove_index(model, old)
        schema_editor.add_index(model, new)

    return migrations.SeparateDatabaseAndState(
        database_operations=[migrations.RunPython(
            lambda apps, schema_editor: replace(apps, schema_editor, plain, partial),
            lambda apps, schema_editor: replace(apps, schema_editor, partial, plain))],
        state_operations=[migrations.RemoveIndex(model_name=model_name, name=plain.name),
                          migrations.AddIndex(model_name=model_name, index=partial)])
