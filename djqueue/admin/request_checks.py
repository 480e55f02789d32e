"""What an admin request carries, checked before it reaches a query or a page: a list's
filter values, the rows an action names, a row's id in a page's address, and JSON typed
into a form.

Django's admin hands each on as it came. So, before these checks, a NUL in a filter or
a row's id was a server error on PostgreSQL (its text holds none), an id past 64 bits
in a filter one on SQLite (its driver's OverflowError), an action naming a row id that
is no number one on every database, and a JSON field holding a number of more than
4,300 digits (Python's ``int`` refuses to read it) or a lone surrogate's escape
(``"\\udcff"``, no UTF-8 writes it back into the page) one too. Each is now a message
that says which value was wrong and why, on the page the person was on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django import forms
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import models
from django.db.models.constants import LOOKUP_SEP

from djqueue.api.message_checks import json_unstorable
from djqueue.exceptions import shown_value

#: The whole numbers every database's BIGINT holds.
LOWEST, HIGHEST = -(2**63), 2**63 - 1
NUL_REFUSED = "holds a NUL character, which no database stores"


def refused_lookup(model: type[models.Model], lookup: str, value: str) -> str | None:
    """Why a list's filter ``lookup=value`` cannot be applied, or None: a NUL, or a
    whole number past 64 bits for a field holding whole numbers (also through a
    relation: ``queue=`` is the queue's id). Other values Django reads or refuses
    itself (it shows the list unfiltered)."""
    if "\x00" in value:
        return NUL_REFUSED
    field = _compared_field(model, lookup)
    if isinstance(field, models.DateField | models.DateTimeField):
        return _refused_date_part(lookup, value)
    if not isinstance(field, models.IntegerField):
        return None
    for part in value.split(",") if lookup.endswith(LOOKUP_SEP + "in") else [value]:
        if _past_64_bits(part):
            return (f"{shown_value(part)} is past the 64-bit whole numbers "
                    f"{field.model._meta.model_name}.{field.name} holds")
    return None


#: A date's parts a list's date links filter by, and the values each may take. Django
#: reads them with ``int()`` and makes the next year's, month's or day's date: a year
#: of 30 digits was its OverflowError, and 9999 its ValueError past the calendar.
DATE_PARTS = {"year": (1, 9998), "month": (1, 12), "day": (1, 31)}


def _refused_date_part(lookup: str, value: str) -> str | None:
    part = lookup.rsplit(LOOKUP_SEP, 1)[-1]
    if part not in DATE_PARTS:
        return None
    low, high = DATE_PARTS[part]
    if not (value.isascii() and value.isdigit() and len(value) <= 6
            and low <= int(value) <= high):
        return f"{shown_value(value)} is not a {part} from {low} to {high}"
    return None


def refused_ids(model: type[models.Model], ids: Iterable[str]) -> str | None:
    """Why the row ids an action names cannot all be rows of ``model``, or None."""
    pk = model._meta.pk
    assert pk is not None  # every model has one
    for text in ids:
        if "\x00" in text:
            return f"a selected id {NUL_REFUSED}"
        try:
            value = pk.to_python(text)
        except ValidationError:
            return f"{shown_value(text)} is not the id of a {model._meta.verbose_name}"
        if isinstance(value, int) and not LOWEST <= value <= HIGHEST:
            return f"{shown_value(text)} is past the 64-bit whole numbers an id holds"
    return None


def _compared_field(model: type[models.Model], lookup: str) -> models.Field | None:
    """The field whose values ``lookup`` compares with (a relation's: the related
    row's key), or None when the lookup names no field."""
    field: Any = None
    meta: Any = model._meta
    for part in lookup.split(LOOKUP_SEP):
        if meta is None:
            break
        try:
            field = meta.get_field(part)
        except FieldDoesNotExist:  # a lookup's name (exact, in, gte) or no field
            break
        meta = field.related_model._meta if field.is_relation and field.related_model else None
    if field is not None and field.is_relation and hasattr(field, "target_field"):
        field = field.target_field
    return field if isinstance(field, models.Field) else None


def _past_64_bits(text: str) -> bool:
    try:
        number = int(text)
    except ValueError:  # not a number, or past 4,300 digits: Django refuses it itself
        return len(text) > 4300 and text.strip().lstrip("+-").isdigit()
    return not LOWEST <= number <= HIGHEST


class TypedJSON(str):
    """The text typed into a JSON field, shown back as it was typed."""


class StorableJSONField(forms.JSONField):
    """A form's JSON field that refuses what no database stores or no page shows: a
    number of more than 4,300 digits (Django's field lets Python's ValueError through),
    a NUL or a lone surrogate in any text of it. An invalid entry is shown back as it
    was typed, never as the value read from it (which may not be writable as UTF-8)."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except ValueError as exc:  # past 4,300 digits; bad JSON is a ValidationError
            raise ValidationError(f"Enter valid JSON: {exc}.", code="invalid") from None
        if isinstance(converted, str | list | dict):  # a number or a bool holds no text
            why = json_unstorable(json.dumps(converted, ensure_ascii=False))
            if why:
                raise ValidationError(f"This JSON {why}.", code="invalid")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled or data is None:
            return initial
        return TypedJSON(data)

    def prepare_value(self, value: Any) -> Any:
        return value if isinstance(value, TypedJSON) else super().prepare_value(value)
