"""The placement tests' set-up: queues named ``placed.*`` live on the second database,
``queues`` (tests/settings.py), in this process and in the workers it starts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.apps import apps
from django.conf import settings
from django.test import override_settings

from djqueue.storage.queue_lookup import forget_cached

#: What every test here is marked with: the home database and the three others the
#: rules name (pytest-django creates and empties each; a lookup may read every one).
PLACEMENT_DATABASES = pytest.mark.django_db(
    transaction=True, databases=["default", "queues", "p2", "p3"])
#: The environment of the worker and reaper processes the tests start.
PLACED_ENV = {"DJQUEUE_TEST_PLACED": "1"}


@pytest.fixture(autouse=True)
def placed() -> Iterator[None]:
    with override_settings(DJQUEUE={**settings.DJQUEUE,
                                    "QUEUE_DATABASES": settings.PLACED_QUEUES}):
        forget_cached()
        yield
    forget_cached()


def djqueue_rows(db: str) -> dict[str, int]:
    """Rows in each of djqueue's tables on database ``db`` (the empty ones left out)."""
    counts = {}
    for model in apps.get_app_config("djqueue").get_models():
        count = model.objects.using(db).count()
        if count:
            counts[model._meta.db_table] = count
    return counts

