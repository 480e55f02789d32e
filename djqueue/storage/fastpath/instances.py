"""Model instances without ``Model.__init__``: built for a send, made from claimed
rows, marked saved, and the django.tasks result dataclass made from decoded JSON."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import models
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from djqueue.storage.fastpath import verified

M = TypeVar("M", bound=models.Model)


def builder(model: type[M], **shared: object) -> Callable[..., M]:
    """A maker of unsaved instances that all have the ``shared`` values, as ``model(**)``.

    Why: ``Model.__init__`` walks every field per instance; a send builds one
    message per payload, a thousand per ``send_batch``. The shortcut fills the
    instance's ``__dict__`` with the defaults merged once, and a new ``ModelState``.
    Plain path: ``model(**shared, **values)`` (also used while pre/post_init
    receivers exist, which ``__init__`` must call)."""
    if not verified.enabled or ((pre_init.receivers or post_init.receivers) and (
            pre_init.has_listeners(model) or post_init.has_listeners(model))):
        return functools.partial(model, **shared) if shared else model
    if not shared:
        return _maker(model)
    static, called = _defaults(model)
    return _make(model, {**static, **shared}, [(n, f) for n, f in called if n not in shared])


@functools.cache
def _maker(model: type[M]) -> Callable[..., M]:
    """A model's maker without shared values: made once (a task run builds its record
    with one)."""
    return _make(model, *_defaults(model))


def _make(model: type[M], base: dict[str, object],
          called: list[tuple[str, models.Field]]) -> Callable[..., M]:
    new = model.__new__

    def make(**values: object) -> M:
        instance = new(model)
        fields = instance.__dict__
        fields.update(base)
        for name, field in called:
            if name not in values:
                fields[name] = field.get_default()
        fields.update(values)
        instance._state = ModelState()
        return instance

    return make


@functools.cache
def _defaults(model: type[models.Model]) -> tuple[dict[str, object], list[tuple[str, models.Field]]]:
    """A model's constant defaults, and the fields whose default is called each time
    (callables, and mutable values such as a JSONField's ``default=list``)."""
    static, called = {}, []
    for field in model._meta.concrete_fields:
        if field.has_default() and (callable(field.default) or isinstance(
                field.default, list | dict | set)):
            called.append((field.attname, field))
        else:
            static[field.attname] = field.get_default()
    return static, called


def from_rows(model: type[M], db: str, attnames: Sequence[str],
              rows: Sequence[Sequence[object]]) -> list[M]:
    """Instances of rows already converted to Python values, as ``Model.from_db``.

    Why: ``from_db`` calls ``__init__``, which cost more than the claim's statements
    for a batch of 100. Plain path: ``from_db`` (also with pre/post_init receivers)."""
    if not verified.enabled or pre_init.has_listeners(model) or post_init.has_listeners(model):
        return [model.from_db(db, attnames, values) for values in rows]
    instances = []
    new = model.__new__
    for values in rows:
        instance = new(model)
        instance.__dict__.update(zip(attnames, values, strict=True))
        state = instance._state = ModelState()
        state.adding, state.db = False, db
        instances.append(instance)
    return instances


def mark_saved(instance: models.Model, pk: object, db: str) -> None:
    """Record that ``instance`` was inserted as ``pk`` on ``db``, as ``save()`` would
    (``_state`` is documented: Model._state.adding and .db)."""
    instance.__dict__[instance._meta.pk.attname] = pk
    state = instance._state
    state.adding, state.db = False, db


def mark_unsaved(instance: models.Model) -> None:
    """Undo :func:`mark_saved` for an insert whose transaction rolled back (a retry
    after a deadlock inserts it again)."""
    instance.pk = None
    instance._state.adding = True


def database_of(instance: models.Model) -> str | None:
    """The alias ``instance`` was read from or saved to (Model._state.db)."""
    return instance._state.db


def related_cacher(model: type[models.Model], field_name: str) -> Callable[[Any, Any], None]:
    """A setter of a foreign key's cached object, as reading the key would leave it.

    Why: assigning through the descriptor also checks the value's type and the
    database router, per message. Plain path: the assignment."""
    if not verified.enabled:
        return lambda instance, value: setattr(instance, field_name, value)
    field = model._meta.get_field(field_name)
    assert isinstance(field, models.ForeignKey), f"{field_name} is not a foreign key"
    return field.set_cached_value


def frozen_dataclass(cls: type, values: dict[str, object]) -> Any:
    """An instance of the frozen dataclass ``cls`` with ``values`` (every field, init or
    not), without ``__init__``; callers check :data:`verified.enabled` first.

    Why: TaskResult's ``__post_init__`` normalises args and kwargs, a tenth of a
    task's time in a worker for two results a run, and changes nothing for
    values decoded from JSON. Plain path (the caller's): the constructor."""
    instance: Any = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(instance, name, value)
    return instance


