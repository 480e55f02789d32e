"""The admin on several databases: every djqueue page shows one database at a time.

djqueue keeps each queue, and all of its rows, on one database
(djqueue.storage.placement). Where there are several, each list has a
"database" filter (the home database when none is chosen), and the pages opened
from it (a row, an action, the dashboard's buttons) carry the choice along in
their address, as Django carries any list filter; with one database nothing
changes. Why not one list over all of them: ids are per database, and Django's
lists, counts and paginators read one.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest, QueryDict

from djqueue.admin.row_reading import RowReadingAdmin
from djqueue.storage import dialects, placement
from djqueue.storage.unreadable_rows import UNREADABLE, without_times

#: The query parameter naming the database a page shows.
PARAMETER = "database"


def request_database(request: HttpRequest) -> str:
    """The database a request's page is about: ``?database=``, or the one its list filters
    (kept by Django in ``_changelist_filters``) name, else the home one."""
    value = request.GET.get(PARAMETER)
    if value is None and "_changelist_filters" in request.GET:
        value = QueryDict(request.GET["_changelist_filters"]).get(PARAMETER)
    return value if value in placement.databases() else placement.home()


def database_query(request: HttpRequest, first: bool = False) -> str:
    """``database=...`` to append to a link, or "" on the home database."""
    db = request_database(request)
    if db == placement.home():
        return ""
    return f"{'?' if first else '&'}{PARAMETER}={db}"


class DatabaseFilter(admin.SimpleListFilter):
    """Which database the list shows (the choice is applied by PlacedAdmin.get_queryset)."""

    title = "database"
    parameter_name = PARAMETER

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list:
        return [(db, db) for db in placement.databases()]

    def queryset(self, request: HttpRequest, queryset: models.QuerySet) -> models.QuerySet:
        return queryset

    def choices(self, changelist: Any) -> Any:
        current = self.value() or placement.home()
        for db, label in self.lookup_choices:
            yield {"selected": db == current, "display": label,
                   "query_string": changelist.get_query_string({self.parameter_name: db})}


class PlacedRelatedFilter(admin.RelatedFieldListFilter):
    """A list filter by a related row (a message's queue) offering the rows of the
    database shown (Django's offers the default database's), read without their times:
    a choice is its row's name, and one time a hand edit left unreadable (a queue's
    creation time) failed the whole list with Django's filter, which reads the rows
    whole."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list:
        rows = without_times(field.related_model._default_manager.using(
            request_database(request)))
        ordering = self.field_admin_ordering(field, request, model_admin)
        return [(row.pk, str(row)) for row in (rows.order_by(*ordering) if ordering else rows)]


class PlacedAdmin(RowReadingAdmin):
    """The admin of a table every queue database holds: it reads and writes the
    database the request names (and reads its rows as RowReadingAdmin does)."""

    # Every view runs, and renders, on the request's database, so what it calls (an
    # action through the API, a field reading a message's progress) works there too.

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        return _on_database(request, super().changelist_view, request, extra_context)

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _on_database(request, super().changeform_view, request, *args, **kwargs)

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _on_database(request, super().delete_view, request, *args, **kwargs)

    def database(self, request: HttpRequest) -> str:
        return request_database(request)

    def get_list_filter(self, request: HttpRequest) -> list:
        filters = [(f, PlacedRelatedFilter) if isinstance(f, str) and isinstance(
            self.model._meta.get_field(f), models.ForeignKey) else f
            for f in super().get_list_filter(request)]
        return filters if len(placement.databases()) == 1 else [DatabaseFilter, *filters]


def _on_database(request: HttpRequest, view: Any, *args: Any, **kwargs: Any) -> Any:
    db = request_database(request)
    with dialects.using(db):
        response = view(*args, **kwargs)
        if hasattr(response, "render") and not getattr(response, "is_rendered", True):
            _render(request, response)
    return response


def _render(request: HttpRequest, response: Any) -> None:
    """Render; a list whose date bar cannot read its column's range (a row holding a
    time no driver reads back: Django's bar reads the first and last, then the years)
    is rendered again without the bar, and says why. The rows themselves are read
    as RowReadingChangeList reads them."""
    cl: Any = (response.context_data or {}).get("cl")
    if cl is None or not getattr(cl, "date_hierarchy", None):
        response.render()
        return
    # No savepoint is needed under ATOMIC_REQUESTS: what fails is the driver's or
    # Django's reading of a value the server sent, which aborts no transaction.
    try:
        response.render()
    except (*UNREADABLE, AttributeError) as exc:  # SQLite's months: None for such text
        messages.warning(request, f"The date bar is left out: a row's "
                                  f"{cl.date_hierarchy} cannot be read ({exc}).")
        cl.date_hierarchy = None
        response.render()
