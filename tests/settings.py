"""Test settings: the demo project plus the `tests` app and its handlers.

Worker subprocesses started by the tests use these settings too, pointed at
the test database through DJQUEUE_TEST_DB_NAME.
"""

import os
import sys

from project.settings import *  # noqa: F403
from project.settings import DATABASES, DJQUEUE, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests"]

TASKS = {
    "default": {
        "BACKEND": "djqueue.backend.QueueBackend",
        "QUEUES": ["default", "t.tasks"],
        "OPTIONS": {"QUEUE_OPTIONS": {"visibility_timeout": 60, "backoff": [0.1]}},
    },
    "retrying": {
        "BACKEND": "djqueue.backend.QueueBackend",
        "QUEUES": ["t.retrying", "t.asks.tasks"],
        # t.asks.tasks: a backoff no test waits out, so a retry that came sooner was
        # the delay its task asked for (tests/worker/test_asked_delays.py)
        "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_ON": ["builtins.ValueError"],
                    "QUEUE_OPTIONS": {"backoff": [0.1], "t.asks.tasks": {"backoff": [600]}}},
    },
    "limited": {
        "BACKEND": "djqueue.backend.QueueBackend",
        "QUEUES": ["t.limited"],
        "OPTIONS": {"GROUP_KEY_KWARG": "tenant",
                    "QUEUE_OPTIONS": {"backoff": [0.1],
                                      "t.limited": {"concurrency_limit": 2,
                                                    "group_rate_limit": "1/h"}}},
    },
    # the workflow tests (tests/task_backend/test_workflows.py): members on t.wf, callbacks
    # on t.wf-final, whose runs commit with their ack (exactly-once)
    "workflows": {
        "BACKEND": "djqueue.backend.QueueBackend",
        "QUEUES": ["t.wf", "t.wf-final"],
        "OPTIONS": {"QUEUE_OPTIONS": {"backoff": [0.1], "max_attempts": 1000,
                                      "t.wf-final": {"exactly_once": True}}},
    },
}

if os.environ.get("DJQUEUE_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["DJQUEUE_TEST_DB_NAME"]
if (os.environ.get("DJQUEUE_TEST_SERVER_SIDE_BINDING")
        and DATABASES["default"]["ENGINE"].endswith("postgresql")):
    # Django's other way to talk to PostgreSQL (a project's choice, for prepared
    # statements): parameters travel apart from the SQL, typed by the driver, so SQL
    # that leaves a parameter's type to the server's guess fails here only.
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}),
                                       "server_side_binding": True, "prepare_threshold": 5}
if os.environ.get("DJQUEUE_TEST_DB_PORT"):
    # A process started behind a PgBouncer by the tests (tests/pgbouncer.py): through a
    # pooler in transaction mode, as Django's docs set such a project up (no
    # server-side cursors), and without named prepared statements, which PgBouncer
    # passes on only from 1.21.
    DATABASES["default"]["PORT"] = os.environ["DJQUEUE_TEST_DB_PORT"]
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"].get("OPTIONS", {}).pop("prepare_threshold", None)
if (os.environ.get("DJQUEUE_TEST_DJANGO_POOL")
        and DATABASES["default"]["ENGINE"].endswith("postgresql")):
    # Django's own connection pool (psycopg_pool, Django 5.1+): a closed connection goes
    # back to the pool with its session as it is, and the next thread gets it. Pooling
    # takes the place of persistent connections, which Django then refuses.
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}),
                                       "pool": {"min_size": 2, "max_size": 20}}
    DATABASES["default"]["CONN_MAX_AGE"] = 0


def _beside(name: object, suffix: str) -> str:
    """A second database's name beside ``name`` (a file path on SQLite)."""
    text = str(name)
    return (text[:-len(".sqlite3")] + suffix + ".sqlite3" if text.endswith(".sqlite3")
            else text + suffix)


# The placement tests (tests/placement): a second database on the same server, which
# queues are placed on. Its test database sits beside the default one's, so a worker
# started on the default test database (DJQUEUE_TEST_DB_NAME) finds it by the same rule.
# Only in the test run and in the processes the placement tests start: every manage.py
# command's system checks connect to each alias, and the second test database exists
# only while a placement test runs.
_default = DATABASES["default"]
if "pytest" in sys.modules or os.environ.get("DJQUEUE_TEST_PLACED"):
    for _alias in ("queues", "p2", "p3"):  # p2 and p3: two more partitions beside queues
        DATABASES[_alias] = {
            **_default, "NAME": _beside(_default["NAME"], f"_{_alias}"),
            "TEST": {"NAME": _beside(_default.get("TEST", {}).get("NAME")
                                     or f"test_{_default['NAME']}", f"_{_alias}")}}
#: The queues the placement tests keep on it (a worker they start has the same rules):
#: placed.* on queues; parted.* partitioned over queues, p2 and p3.
PLACED_QUEUES = {"placed.*": "queues", "parted.*": ["queues", "p2", "p3"]}

DJQUEUE = {
    **DJQUEUE,
    "PERIODIC": {},
    "HANDLERS": {
        **DJQUEUE["HANDLERS"],
        "t.record": "tests.handlers.record",
        "t.noop": "tests.handlers.noop",
        "t.slow": "tests.handlers.slow_record",
        "t.exactly": "tests.handlers.exactly_once_record",
        "t.flaky": "tests.handlers.fail_then_succeed",
        "t.report": "tests.handlers.reporting",
        "t.gc": "tests.handlers.garbage_collection",
        "t.leak": "tests.handlers.leaking",
        "t.asks": "tests.handlers.asks_later",
        "news:all": "tests.handlers.record",
        # the placement tests (tests/placement): queues on the second database
        "placed.work": "tests.handlers.record",
        "placed.slow": "tests.handlers.slow_record",
        "parted.work": "tests.handlers.record",
        # the limit tests (tests/limits)
        "l.rate": "tests.handlers.timed_run",
        "l.conc": "tests.handlers.timed_run",
        "l.keys": "tests.handlers.timed_run",
        "l.keyrate": "tests.handlers.timed_run",
        "l.change": "tests.handlers.timed_run",
        "l.kill": "tests.handlers.timed_run",
        # the fault tests (tests/faults), on their private MariaDB
        "f.work": "tests.handlers.record",
        "f.exactly": "tests.handlers.exactly_once_record",
        "f.poison": "tests.handlers.poison",
        "f.lease": "tests.handlers.lease_test",
    },
    "HEARTBEAT_INTERVAL": 0.5,
    "WORKER_TIMEOUT": 5.0,
    "POLL_MAX": 0.1,
    "PROMOTE_INTERVAL": 0.05,
    "QUEUE_CACHE_TTL": 0.1,
    "REAPER_INTERVAL": 0.2,
    "STATS_INTERVAL": 0.5,
    # Spans only where a test asks for them (tests/monitoring/test_tracing.py): once a
    # tracer provider is set in the test process, it stays set for the session.
    "TRACING": bool(os.environ.get("DJQUEUE_TEST_TRACE_FILE")),
}

if os.environ.get("DJQUEUE_TEST_TRACE_FILE"):
    # A worker process the tracing test starts: its spans, one JSON object a line.
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
        out=open(os.environ["DJQUEUE_TEST_TRACE_FILE"], "a"),  # noqa: SIM115 (the process's)
        formatter=lambda span: span.to_json(indent=None) + "\n")))
    trace.set_tracer_provider(_provider)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"djqueue": {"handlers": ["console"], "level": "WARNING"}},
    # INFO and up reach the root, where workers keep a handler's records (HANDLER_LOG_LEVEL).
    "root": {"level": "INFO"},
}
if os.environ.get("DJQUEUE_TEST_LOG_INFO"):  # a test that reads a process's INFO lines
    LOGGING["loggers"]["djqueue"]["level"] = "INFO"

if os.environ.get("DJQUEUE_TEST_CLOCK_CHECK"):  # the clock test's processes compare often
    DJQUEUE["CLOCK_CHECK_INTERVAL"] = float(os.environ["DJQUEUE_TEST_CLOCK_CHECK"])

if os.environ.get("DJQUEUE_TEST_TASK_RUN_LOG"):  # a test that reads the task runs' records
    LOGGING["handlers"]["task_runs"] = {"class": "logging.FileHandler", "level": "INFO",
                                        "filename": os.environ["DJQUEUE_TEST_TASK_RUN_LOG"]}
    for name in ("django.tasks", "django_tasks"):  # Django 6, the backport
        LOGGING["loggers"][name] = {"handlers": ["task_runs"]}

if os.environ.get("DJQUEUE_TEST_PLACED"):
    DJQUEUE["QUEUE_DATABASES"] = PLACED_QUEUES
if os.environ.get("DJQUEUE_TEST_REPLICA_URL"):
    # The replica test (tests/placement/test_read_replica.py): the default database is a
    # private primary (DATABASE_URL), read by pages and reports through its replica.
    import dj_database_url

    DATABASES["replica"] = {**dj_database_url.parse(os.environ["DJQUEUE_TEST_REPLICA_URL"]),
                            "OPTIONS": _default["OPTIONS"]}
    DJQUEUE["READ_DATABASE"] = "replica"
if os.environ.get("DJQUEUE_TEST_SPREAD_PORTS"):
    # The partition servers test (tests/placement/test_partition_servers.py): queues
    # spread.* partitioned over three private MariaDB servers on these ports.
    _servers = [f"s{i}" for i in range(1, 4)]
    for _alias, _port in zip(_servers, os.environ["DJQUEUE_TEST_SPREAD_PORTS"].split(","),
                             strict=True):
        DATABASES[_alias] = {**_default, "NAME": "parts", "HOST": "127.0.0.1", "PORT": _port,
                             "USER": "root", "PASSWORD": "", "TEST": {"NAME": "parts"},
                             "OPTIONS": {**_default["OPTIONS"], "connect_timeout": 2}}
    DJQUEUE["QUEUE_DATABASES"] = {**DJQUEUE.get("QUEUE_DATABASES", {}), "spread.*": _servers}
    DJQUEUE["HANDLERS"]["spread.work"] = "tests.handlers.partition_record"
    # Its four producers, four workers, reaper and three servers share two cores: they
    # run djqueue's own timings, not the quick ones above, with which every idle process
    # polls, reads its queue rows again and reaps several times a second on each server.
    for _name in ("POLL_MAX", "QUEUE_CACHE_TTL", "REAPER_INTERVAL", "STATS_INTERVAL",
                  "PROMOTE_INTERVAL"):
        del DJQUEUE[_name]
# A process that polls only this often: the wake-up tests, where a message may reach
# a worker or a long poll only by its send's wake-up.
if os.environ.get("DJQUEUE_TEST_POLL"):
    DJQUEUE["POLL_MIN"] = DJQUEUE["POLL_MAX"] = float(os.environ["DJQUEUE_TEST_POLL"])
if os.environ.get("DJQUEUE_TEST_WAKE_HOST"):  # an address this host may not have
    DJQUEUE["WAKE_HOST"] = os.environ["DJQUEUE_TEST_WAKE_HOST"]
if os.environ.get("DJQUEUE_TEST_TASK_QUEUES"):  # more queues of the default task backend
    TASKS["default"]["QUEUES"] += os.environ["DJQUEUE_TEST_TASK_QUEUES"].split(",")

if os.environ.get("DJQUEUE_TEST_PERIODIC"):
    DJQUEUE["PERIODIC"] = {
        "beat": {"task": "tests.tasks.add", "cron": "* * * * *", "args": [1, 1]}}

if os.environ.get("DJQUEUE_TEST_GC_THRESHOLD"):  # tests/worker/test_garbage_collection.py
    _threshold = os.environ["DJQUEUE_TEST_GC_THRESHOLD"]
    DJQUEUE["WORKER_GC_THRESHOLD"] = None if _threshold == "none" else int(_threshold)

if os.environ.get("DJQUEUE_TEST_UNLOADABLE_ALIAS"):  # tests/worker/test_handler_threads.py
    # A database djqueue does not use, whose backend this process cannot load (as one
    # whose driver a worker's host lacks): nothing of djqueue's may look it up.
    DATABASES["unused"] = {"ENGINE": "tests.no_such_backend"}

# A deploy that fails to start (tests/worker/test_reloads.py): processes started while
# the file this names exists fail as they load their settings.
if os.environ.get("DJQUEUE_TEST_BROKEN_DEPLOY") and os.path.exists(
        os.environ["DJQUEUE_TEST_BROKEN_DEPLOY"]):
    raise ImportError("the deploy is broken (DJQUEUE_TEST_BROKEN_DEPLOY exists)")
