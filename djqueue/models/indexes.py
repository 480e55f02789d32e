"""Index kinds the queue's tables need beyond Django's own.

Kept in the models layer because migrations refer to them by path
(``djqueue.models.indexes``); they change only how an index is created.
"""

from __future__ import annotations

import copy
from typing import Any

from django.db import models


class NonNullIndex(models.Index):
    """An index of one nullable column that holds only the rows where it is set, where
    the database has partial indexes (PostgreSQL, SQLite); a plain index elsewhere.

    Why: a message's ``stored_body`` and ``origin_queue`` are NULL on almost every
    row (only topic deliveries and dead letters have them), yet a plain index gets
    an entry for each row sent and loses one for each row acked. They are read only
    by key (a foreign key's check when a body or queue is deleted, a queue's dead
    letters), and ``column = value`` implies the column is set, so both PostgreSQL
    and SQLite use the partial index for those reads. On MySQL/MariaDB, which has
    no partial indexes, InnoDB needs an index on a foreign key's column anyway.

    It declares no ``condition``: that is Django's own attribute, which would make
    the model check warn on MySQL (models.W037) and leave the index out there.
    """

    def create_sql(self, model: type[models.Model], schema_editor: Any, using: str = "",
                   **kwargs: Any) -> Any:
        if not schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        [field] = self.fields
        partial = copy.copy(self)
        partial.condition = models.Q(**{f"{field}__isnull": False})
        return models.Index.create_sql(partial, model, schema_editor, using=using, **kwargs)
