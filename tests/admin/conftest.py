"""What the admin's tests share: a logged-in superuser's client, on the demo's theme."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def superuser(admin_theme: None) -> Client:
    """A superuser's client, on the demo's admin theme."""
    User.objects.create_superuser("root", password="pw")
    client = Client()
    client.login(username="root", password="pw")
    return client
