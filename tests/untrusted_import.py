"""A module with an import side effect, named by forged task messages in
tests/task_backend/test_task_trust.py: a worker must never import it."""

import os
from pathlib import Path

marker = os.environ.get("DJQUEUE_TEST_IMPORT_MARKER")
if marker:
    Path(marker).write_text("imported")


def not_a_task(*args, **kwargs) -> None:
    raise AssertionError("a forged task message ran a function")
