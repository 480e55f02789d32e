"""The admin of a djqueue table: a row holding a time no driver reads back (a hand edit:
PostgreSQL's 'infinity', text on SQLite that is no date, MariaDB's zero date) is listed
and shown with that time empty, and saving it leaves that time as stored.

Every djqueue admin with a list or a page builds on :class:`RowReadingAdmin`;
djqueue.admin.databases.PlacedAdmin adds the choice of database for the tables every
queue database holds. Before, such a row failed every list holding it and its own page,
the very pages a person opens to find and mend it.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.models import BaseInlineFormSet, ModelChoiceField
from django.http import HttpRequest, HttpResponse

from djqueue.admin import request_checks
from djqueue.admin.paging import RowReadingChangeList
from djqueue.storage import placement
from djqueue.storage.unreadable_rows import UNREADABLE, first_row, read_rows, without_times


class RowReadingAdmin(admin.ModelAdmin):
    """Reads its rows from :meth:`database` through RowReadingChangeList (its list),
    get_object (its page) and without_times (a form's choices of a related row).

    It checks what a request carries first (djqueue.admin.request_checks): a filter's
    value, the rows an action names, a row's id, a JSON field's text."""

    formfield_overrides = {models.JSONField: {"form_class": request_checks.StorableJSONField}}

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """A filter whose value no query can take is not applied: the list is shown
        without filters, as Django shows it for a value of the wrong kind, with a
        message that says which filter and why."""
        why = request_checks.refused_lookup(self.model, lookup, value)
        if why:
            self.message_user(request, f"Filter {lookup!r} not applied: the value {why}.",
                              messages.ERROR)
            raise IncorrectLookupParameters(why)
        return super().lookup_allowed(lookup, value, request)

    def response_action(self, request: HttpRequest, queryset: models.QuerySet,
                        *args: Any, **kwargs: Any) -> HttpResponse | None:
        """Run an action on rows whose ids are ids of this table; else change nothing
        and say why (Django's own reading of them was a server error)."""
        why = request_checks.refused_ids(self.model, request.POST.getlist(ACTION_CHECKBOX_NAME))
        if why:
            self.message_user(request, f"No action taken: {why}.", messages.ERROR)
            return None
        return super().response_action(request, queryset, *args, **kwargs)

    def database(self, request: HttpRequest) -> str:
        """The database the rows are read from and written to: the home database."""
        return placement.home()

    def get_queryset(self, request: HttpRequest) -> models.QuerySet:
        return super().get_queryset(request).using(self.database(request))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[RowReadingChangeList]:
        return RowReadingChangeList

    def get_object(self, request: HttpRequest, object_id: str,
                   from_field: str | None = None) -> Any:
        """The row, as Django reads it; if that fails on a time no driver reads back (or
        finds nothing: Django takes SQLite's ValueError for a missing row), read again
        through first_row, with that time None. An id holding a NUL names no row
        (PostgreSQL refuses to compare with it)."""
        if "\x00" in object_id:
            return None
        try:
            found = super().get_object(request, object_id, from_field)
        except UNREADABLE:
            found = None
        if found is not None or from_field is not None:
            return found
        try:
            pk = self.model._meta.pk.to_python(object_id)
        except (ValidationError, ValueError):
            return None
        return first_row(self.get_queryset(request).filter(pk=pk))

    def save_model(self, request: HttpRequest, obj: models.Model, form: Any,
                   change: bool) -> None:
        """Save; a change writes every field but a time its form does not edit (a
        queue's creation time): one a hand edit left unreadable is shown as None, and
        writing that back would fail, or erase what was stored."""
        db = obj._state.db or self.database(request)
        if not change:
            obj.save(using=db)
            return
        obj.save(using=db, update_fields=[
            f.name for f in obj._meta.concrete_fields if not f.primary_key and (
                f.name in form.fields or not isinstance(f, models.DateTimeField)
                or getattr(f, "auto_now", False))])

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest,
                                 **kwargs: Any) -> Any:
        """A related row's choices (a queue's dead-letter queue), read without their
        times, as PlacedRelatedFilter reads them."""
        related = db_field.remote_field.model
        kwargs.setdefault("queryset", without_times(related._default_manager.using(
            self.database(request))))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class RowReadingInlineFormSet(BaseInlineFormSet):
    """An inline's rows (a client's tokens), read through read_rows as a list holds
    them: Django's formset takes its rows by len(), iteration and index, which a list
    answers as the queryset does. A time shown empty on an editable field is written
    only if the form changes it."""

    def get_queryset(self) -> Any:
        if not hasattr(self, "_rows_read"):
            self._rows_read = read_rows(super().get_queryset())
        return self._rows_read

    def add_fields(self, form: Any, index: int | None) -> None:
        """The rows' hidden ids, which a submitted form looks its row up by, read the
        row without its times: whole, one a hand edit left unreadable failed the save
        of the page, though the row's own form had not changed."""
        super().add_fields(form, index)
        ids = form.fields.get(form.instance._meta.pk.name)
        if isinstance(ids, ModelChoiceField) and ids.queryset is not None:
            ids.queryset = without_times(ids.queryset)


class RowReadingInline(admin.TabularInline):
    """An inline of a RowReadingAdmin's page (a client's tokens): its rows from the
    page's database, read as the page reads its row."""

    formset = RowReadingInlineFormSet

    def get_queryset(self, request: HttpRequest) -> models.QuerySet:
        page = cast(RowReadingAdmin, self.admin_site.get_model_admin(self.parent_model))
        return super().get_queryset(request).using(page.database(request))
