"""Index kinds the queue's tables need beyond Django's own.

Kept in the models layer because migrations refer to them by path
(``djqueue.models.indexes``); they change only how an index is created.
"""

from __future__ import annotations

import copy
from typing import Any

from django.db import models


class NonNullIndex(models.Index):
    """An index that holds only the rows where one nullable column is set, where the
    database has partial indexes (PostgreSQL, SQLite); a plain index elsewhere.
    ``non_null`` names that column; by default the index's only field.

    Why: a message's ``stored_body`` and ``origin_queue`` are NULL on almost every
    row (only topic deliveries and dead letters have them), and so is its
    ``group_key`` outside ordered queues and per-key limits; yet a plain index gets
    an entry for each row sent and loses one for each row acked. They are read only
    by value (a foreign key's check when a body or queue is deleted, a queue's dead
    letters, a group's messages: ``column = value`` or ``column IN (...)``), which
    implies the column is set, so both PostgreSQL and SQLite use the partial index
    for those reads. On MySQL/MariaDB, which has no partial indexes, InnoDB needs an
    index on a foreign key's column anyway.

    It declares no ``condition``: that is Django's own attribute, which would make
    the model check warn on MySQL (models.W037) and leave the index out there.
    """

    def __init__(self, *args: Any, non_null: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if non_null is None and len(self.fields) != 1:
            raise ValueError("NonNullIndex of several fields needs non_null: the column "
                             "a row must have set to be in the index.")
        self.non_null = non_null

    def deconstruct(self) -> tuple[str, tuple, dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        if self.non_null is not None:
            kwargs["non_null"] = self.non_null
        return path, args, kwargs

    def create_sql(self, model: type[models.Model], schema_editor: Any, using: str = "",
                   **kwargs: Any) -> Any:
        if not schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        field = self.non_null or self.fields[0]
        partial = copy.copy(self)
        partial.condition = models.Q(**{f"{field}__isnull": False})
        return models.Index.create_sql(partial, model, schema_editor, using=using, **kwargs)
