"""The demo project's django.tasks (the README's example)."""

from django.contrib.auth import get_user_model
from django.core.mail import send_mail

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task(priority=10, unique_key=True, max_attempts=3, retry_on=(ConnectionError,), timeout=30)
def welcome_email(user_id: int) -> str:
    user = get_user_model().objects.get(pk=user_id)
    send_mail("Welcome", f"Hello {user.username}!", "noreply@example.com",
              [user.email or f"{user.username}@example.com"])
    return f"welcomed {user.username}"


@task
def tidy_sessions() -> int:
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    deleted, _ = Session.objects.filter(expire_date__lt=timezone.now()).delete()
    return deleted
