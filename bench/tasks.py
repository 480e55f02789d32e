"""The django.tasks benchmark task: does nothing, so the framework's own cost is measured."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task()
def noop(payload: dict) -> None:
    """Does nothing."""
