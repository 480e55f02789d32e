"""The django.tasks backend: tasks run by djqueue's workers.

Owns: ``QueueBackend`` and ``QueueTask`` (``backend``), cancelling a task,
reading its progress and logs by result id and waiting for its result
(``task_operations``), the handler of task
queues and the records of their runs (``task_handler``; it is the handler
source djqueue's AppConfig adds to the worker's registry), the checks of a task's
options as it is defined and enqueued (``task_options``), the checks of a task
message before it runs (``task_messages``), calling a task's function
(``task_calls``), the framework's INFO records of each run left unmade in a worker
while no handler would write them (``task_run_logs``), the one place that tells
``django.tasks`` from the ``django_tasks`` backport (``compat``), and
workflows of tasks: composing them (``workflow_canvas``), enqueueing and batches
(``workflows``), the handle that reads, waits for, cancels and retries one
(``workflow_handles``), the join in the ack transaction
(``workflow_joins``), the checks before a step runs (``step_checks``), and
cancel and retry (``workflow_operations``).

May import: djqueue.worker, djqueue.maintenance and below. Nothing below
imports this package. Settings name the backend as
``djqueue.backend.QueueBackend``.
"""
