"""What kind of database each alias names (Django's ``connection.vendor``), looked up
once an alias: for the questions a task run asks in a worker's handler thread (is its
record copied by the server, is its time this host's).

Why kept apart from the connection: in a handler thread, looking the connection up
(asgiref's ``Local`` raises and catches an error to learn the thread is in no event
loop) costs more than the question. An alias names the same database while a process
runs; a test that changes DATABASES has the lookups made again."""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver

_vendors: dict[str, str] = {}


def vendor_of(db: str) -> str:
    """Database ``db``'s vendor: ``mysql`` (MariaDB too), ``postgresql`` or ``sqlite``."""
    vendor = _vendors.get(db)
    if vendor is None:
        vendor = _vendors[db] = connections[db].vendor
    return vendor


@receiver(setting_changed)
def _forget_vendors(*, setting: str, **kwargs: Any) -> None:
    if setting == "DATABASES":
        _vendors.clear()
