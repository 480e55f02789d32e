"""Benchmark settings: the demo project with a no-op handler on queue `bench`."""

import os

from project.settings import *  # noqa: F403
from project.settings import DATABASES, DJQUEUE, TASKS

#: The partitioned-queue row: three databases beside the bench's, on the same server
#: (created by common.fresh_database), one partition each.
#: Not in ``--quick`` runs, which create no such databases (a queue's lookup visits every
#: database djqueue knows).
PARTITIONS = (["p1", "p2", "p3"] if DATABASES["default"]["ENGINE"].endswith("mysql")
              and not os.environ.get("DJQUEUE_BENCH_NO_PARTITIONS") else [])
for _alias in PARTITIONS:
    DATABASES[_alias] = {**DATABASES["default"],
                         "NAME": f"{DATABASES['default']['NAME']}_{_alias}"}
DJQUEUE = {**DJQUEUE, "HANDLERS": {"bench": "bench.handlers.noop",
                                   "bench.io": "bench.handlers.wait_10ms",
                                   "bench.once": "bench.handlers.noop",
                                   "bench.limited": "bench.handlers.noop",
                                   "bench.rated": "bench.handlers.noop",
                                   "bench.slots": "bench.handlers.work_200ms",
                                   "bench.parted": "bench.handlers.noop",
                                   "bench.batched": {"handler": "bench.handlers.noop_batch",
                                                     "batch": 100},
                                   "bench.async": "bench.handlers.noop_async"},
           "QUEUE_DATABASES": {"bench.parted": PARTITIONS} if PARTITIONS else {}}
if os.environ.get("DJQUEUE_BENCH_NO_WAKE"):  # the receive pickup row without wake-ups
    DJQUEUE["WAKE_HOST"] = None
LOGGING: dict = {"version": 1, "disable_existing_loggers": False}
if os.environ.get("DJQUEUE_BENCH_TASKS_LOG"):
    # The django.tasks row with the Tasks framework's logger at this level (a project's
    # choice: at INFO, Django's default, each run makes two records no handler writes).
    LOGGING["loggers"] = {"django.tasks": {"level": os.environ["DJQUEUE_BENCH_TASKS_LOG"]}}
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
# Measure as in production: DEBUG wraps every cursor to record its queries.
DEBUG = False
# The bench's tasks live in bench/tasks.py, outside the installed apps: a worker finds
# them through TASK_MODULES (a message's task path is never imported).
TASKS = {alias: {**params, "OPTIONS": {**params.get("OPTIONS", {}),
                                       "TASK_MODULES": ["bench.tasks"]}}
         for alias, params in TASKS.items()}

if os.environ.get("DJQUEUE_BENCH_TRACING"):
    # The traced worker row: an SDK tracer provider whose spans are discarded, so the
    # row costs what djqueue's spans and the SDK's batch processor cost, not an exporter.
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class _Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    _provider = TracerProvider()
    _provider.add_span_processor(BatchSpanProcessor(_Discard()))
    trace.set_tracer_provider(_provider)
