"""A row's check before it is saved: Django's own (``full_clean``), with every refusal a
ConfigurationError that names the row and the field.

Why not ``full_clean`` alone: a field converts its value before it validates it, and
an absurd number fails that conversion with Python's error, not Django's. A
FloatField's ``float(10**5000)`` raises OverflowError; a JSONField writes a list
holding that int as text and gets a ValueError (Python writes no int of more than
4,300 digits). An IntegerField's ``int(inf)`` raises OverflowError too, and an empty
string passes full_clean on a field that may be blank, to fail its conversion as the
row is saved. Such a value is refused here first, by its field's name."""

from __future__ import annotations

import math
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from djqueue.exceptions import ConfigurationError

#: How deep a list or dict of a JSON field is looked into (deeper is JSON's own refusal).
_DEPTH = 8


def check_row(row: models.Model, what: str, **full_clean_options: Any) -> None:
    """``row.full_clean(**full_clean_options)``; ConfigurationError("Invalid ``what``: …")
    for a value no field of the row can hold."""
    for field in row._meta.concrete_fields:
        # From the row's __dict__: a deferred field is not read from the database.
        value = row.__dict__.get(field.attname)
        if _holds_huge_int(value, _DEPTH):
            raise ConfigurationError(f"Invalid {what}: {field.name!r} holds an integer of "
                                     "more than 64 bits.")
        refused = _unconvertible(field, value)
        if refused:
            raise ConfigurationError(f"Invalid {what}: {field.name!r} {refused}.")
    try:
        row.full_clean(**full_clean_options)
    except ValidationError as exc:
        raise ConfigurationError(f"Invalid {what}: {exc.message_dict}") from None


def _unconvertible(field: models.Field, value: object) -> str | None:
    """What is wrong with ``value`` for ``field`` where Django's check would not say:
    an infinite float for an integer field (its conversion's OverflowError), or an
    empty string for a field that holds no text (full_clean passes over an empty value
    of a field that may be blank, and the save failed converting it)."""
    if isinstance(value, float) and math.isinf(value) and isinstance(
            field, models.IntegerField):
        return f"takes a whole number, not {value!r}"
    if isinstance(value, str) and not value and not field.empty_strings_allowed and (
            not isinstance(field, models.JSONField)):  # "" is a JSON document
        return "takes a value, not an empty string (None leaves it unset)"
    return None


def _holds_huge_int(value: object, depth: int) -> bool:
    if isinstance(value, int):
        return value.bit_length() > 64
    if depth and isinstance(value, list | tuple | dict):
        items = value.values() if isinstance(value, dict) else value
        return any(_holds_huge_int(item, depth - 1) for item in items)
    return False
