"""Paging the admin's lists of rows djqueue writes, at any table size.

Django's paginator counts the whole filtered list (``COUNT(*)``) for every page, and
its change list counts the unfiltered table again unless told not to. On the tables a
busy queue fills (messages, history, task records, trace events) that count is a scan
of millions of rows: with 2,000,000 history rows on PostgreSQL it took 93-131 ms of a
page's 170-250 ms, and it grows with the table. Here the count stops at CAP rows (one
bounded index range), and the list says "more than CAP" past it
(``admin/djqueue/pagination.html``, and the search bar's count in
``admin/djqueue/search_form.html``); filters, not page numbers, reach further.
"""

from __future__ import annotations

from typing import Any, cast

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property


class CappedPaginator(Paginator):
    """Counts at most CAP + 1 rows (a LIMITed subquery), so a page of a list over
    millions of rows costs one bounded index range, not a full count."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        rows = cast(QuerySet[Any], self.object_list)  # this paginator pages querysets
        return rows.order_by().values("pk")[:self.CAP + 1].count()

    @property
    def capped(self) -> bool:
        """Whether the list holds more rows than were counted."""
        return self.count > self.CAP
