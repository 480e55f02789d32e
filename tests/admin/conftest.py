"""What the admin's tests share: a logged-in superuser's client, on the demo's theme."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client


@pytest.fixture
def superuser() -> Client:
    """A superuser's client, with the demo's admin theme loaded (the default theme asks
    for LocaleMiddleware, and warns)."""
    call_command("loaddata", "djqueue_admin_theme", verbosity=0)
    User.objects.create_superuser("root", password="pw")
    client = Client()
    client.login(username="root", password="pw")
    return client
