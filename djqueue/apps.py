from django.apps import AppConfig


class DjqueueConfig(AppConfig):
    name = "djqueue"
    verbose_name = "djqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from djqueue import checks, queues  # noqa: F401  (register checks and cache signals)
