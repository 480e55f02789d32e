"""Paging the admin's lists of rows djqueue writes, at any table size.

Django's paginator counts the whole filtered list (``COUNT(*)``) for every page, and
its change list counts the unfiltered table again unless told not to. On the tables a
busy queue fills (messages, history, task records, trace events) that count is a scan
of millions of rows: with 2,000,000 history rows on PostgreSQL it took 93-131 ms of a
page's 170-250 ms, and it grows with the table. Here the count stops at CAP rows (one
bounded index range), and the list says "more than CAP" past it
(``admin/djqueue/pagination.html``, and the search bar's count in
``admin/djqueue/search_form.html``); filters, not page numbers, reach further. Every
list reads its page so that a row holding a time no driver reads back is shown with
the others (RowReadingChangeList).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from djqueue.storage.unreadable_rows import read_rows


class RowReadingChangeList(ChangeList):
    """A list whose page is read through djqueue.storage.unreadable_rows.read_rows: in
    one statement, as Django reads it, and only if that fails one row at a time, with
    each time no driver reads back shown empty. A row a hand edit left so (PostgreSQL's
    'infinity', text on SQLite that is no date) otherwise fails every page of the list
    that holds it, the very list a person opens to find and mend it.

    Django's ``get_results`` leaves the page unread (a queryset, sliced for a page of
    several); this reads the same rows, from ``queryset``, with the page's bounds from
    the paginator's public ``start_index`` and ``end_index``."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        if self.multi_page and not (self.show_all and self.can_show_all):
            page = self.paginator.page(self.page_num)
            self.result_list = read_rows(self.queryset, page.end_index() - page.start_index() + 1,
                                         offset=page.start_index() - 1)
        else:
            self.result_list = read_rows(self.queryset)


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
