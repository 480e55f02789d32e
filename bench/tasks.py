"""The django.tasks benchmark task: does nothing, so the framework's own cost is measured."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task()
def noop(payload: dict) -> None:
    """Does nothing."""


@task()
def add(a: int, b: int) -> int:
    """A chord member (the workflow row of make bench)."""
    return a + b


@task()
def total(results: list[int]) -> int:
    """A chord's callback."""
    return sum(results)
