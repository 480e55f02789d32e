"""django-tasks-db's no-op task."""

from django.tasks import task


@task()
def noop(payload: dict) -> None:
    """Does nothing; the worker records its result."""
