"""Tasks whose ``retry_on`` names, by dotted path, exceptions of their own module: one
defined below them (so not yet there while ``@task`` runs), and one misspelt."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task


@task(retry_on=["tests.task_backend.retry_on_below.DefinedBelow"])
def retried_on_an_error_below() -> None:
    raise DefinedBelow


@task(retry_on=["tests.task_backend.retry_on_below.NoSuchError"])
def retried_on_a_misspelt_error() -> None:
    raise DefinedBelow


class DefinedBelow(Exception):
    pass
