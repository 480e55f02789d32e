"""``djqueue.backend.QueueBackend``: the path that ``TASKS`` settings name.

The backend itself lives in :mod:`djqueue.tasks.backend`; this module keeps the
path that settings written for djqueue 0.1 name, so they work unchanged.
"""

from djqueue.tasks.backend import QueueBackend, QueueTask

__all__ = ["QueueBackend", "QueueTask"]
