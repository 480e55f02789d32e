import socket
import sys
from types import ModuleType
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import connections

from djqueue import durations
from djqueue.api.condition_parser import checked_condition
from djqueue.api.consumer_groups import register_consumer
from djqueue.exceptions import DjqueueError, shown_value
from djqueue.management.arguments import alive_file, seconds, whole_number
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.processes.base import run_anew
from djqueue.processes.memory_limit import limit_memory, resident_megabytes
from djqueue.worker import registry
from djqueue.worker.message_worker import Worker
from djqueue.worker.options import WorkerOptions
from djqueue.worker.supervised import is_supervised, supervised_alive_file
from djqueue.worker.supervisor import Supervisor

task_run_logs: ModuleType | None
try:  # without a Tasks framework there are no task runs to log
    from djqueue.tasks import task_run_logs
except ImportError:
    task_run_logs = None


class Command(DatabaseReadyCommand):
    help = "Run handlers for messages of the given queues (in priority order)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*",
                            help="Queues to work, earlier ones first (default: every queue "
                                 "with a handler).")
        parser.add_argument("-c", "--concurrency", type=whole_number(1, 1000), default=1,
                            help="Handler threads (default 1).")
        parser.add_argument("-p", "--processes", type=whole_number(1, 256), default=1,
                            help="Worker processes, each with --concurrency threads "
                                 "(default 1). Above 1 this process supervises them: it "
                                 "replaces any that exits (one that reached --max-messages "
                                 "or --max-seconds too) and passes SIGTERM/SIGINT on; on "
                                 "SIGHUP it replaces them one by one with fresh ones (a "
                                 "reload: a single worker runs itself anew).")
        parser.add_argument("-b", "--batch-size", type=whole_number(1, 10_000), default=None,
                            help="Messages claimed per transaction; also the prefetch "
                                 "(default: adapted, from 1 to 500, to the backlog and "
                                 "the handlers' speed).")
        parser.add_argument("--max-messages", type=whole_number(), default=None,
                            help="Exit after processing this many messages.")
        parser.add_argument("--max-seconds", type=seconds(durations.MAX_RETENTION),
                            default=None,
                            help="Exit after this many seconds.")
        parser.add_argument("--burst", action="store_true",
                            help="Drain the queues, then exit.")
        parser.add_argument("--visibility-timeout", type=seconds(durations.MAX_LEASE),
                            default=None,
                            help="Lease length in seconds (default: each queue's).")
        parser.add_argument("--shutdown-grace", default=None,
                            type=seconds(durations.MAX_PROCESS_WAIT, positive=False),
                            help="Seconds in-flight handlers may finish after SIGTERM.")
        parser.add_argument("--subscribe", action="append", default=[], metavar="TOPIC:GROUP",
                            help="Consume a topic's consumer group (repeatable); in a "
                                 "broadcast group this worker registers as consumer "
                                 "--consumer-name.")
        parser.add_argument("--consumer-name", default=None,
                            help="Broadcast consumer name (default: this host's name).")
        parser.add_argument("--time-limit", type=seconds(durations.MAX_PROCESS_WAIT),
                            default=None,
                            help="Seconds a handler may run; past it the delivery fails "
                                 "(retried or dead-lettered) and the thread is replaced.")
        parser.add_argument("--max-stuck", type=whole_number(1, 10_000), default=None,
                            metavar="N",
                            help="Handler threads left running past --time-limit after which "
                                 "the worker restarts its process (default: twice the "
                                 "concurrency, at least 4).")
        parser.add_argument("--max-memory", type=whole_number(1, 1 << 30), default=None,
                            metavar="MB",
                            help="Cap this process's address space, so a handler allocating "
                                 "past it fails with MemoryError instead of the OOM killer "
                                 "ending the worker.")
        parser.add_argument("--max-rss", type=whole_number(1, 1 << 30), default=None,
                            metavar="MB",
                            help="Once this process's resident memory passes MB, stop "
                                 "claiming, finish the messages in hand and start the "
                                 "process afresh (same pid and arguments), so memory a "
                                 "handler keeps is given back.")
        parser.add_argument("--alive-file", type=alive_file, default=None, metavar="PATH",
                            help="Refresh this file's modification time every second while "
                                 "the process's loop runs, for a liveness probe; removed "
                                 "as it stops (under --processes, the supervisor "
                                 "keeps it, showing its stalest worker's time).")
        parser.add_argument("--where", default=None,
                            help="Only claim messages matching this condition, e.g. "
                                 "\"priority >= 5 and headers.region = 'eu'\".")

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """A long-running process: it waits for its database."""
        return True

    def handle(self, *args: Any, **options: Any) -> None:
        registry.discover()
        queues = list(options["queues"])
        for spec in options["subscribe"]:
            queues.append(self.subscription_queue(spec, options["consumer_name"]))
        queues = queues or registry.known_queues()
        if not queues:
            raise CommandError("No queues given and no handlers configured.")
        if options["max_memory"] is not None:
            try:
                limit_memory(options["max_memory"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        if options["processes"] > 1 and not is_supervised():
            self.supervise(queues, options)
            return
        try:
            worker = Worker(WorkerOptions(
                queues=queues, concurrency=options["concurrency"],
                batch_size=options["batch_size"], max_messages=options["max_messages"],
                max_seconds=options["max_seconds"], burst=options["burst"],
                visibility_timeout=options["visibility_timeout"],
                shutdown_grace=options["shutdown_grace"], where=options["where"],
                time_limit=options["time_limit"], max_stuck=options["max_stuck"],
                max_rss=options["max_rss"]))
        except DjqueueError as exc:
            raise CommandError(str(exc)) from None
        check_max_rss(options["max_rss"])
        # A supervised worker keeps its own file, where its supervisor reads it.
        worker.alive_file = supervised_alive_file() if is_supervised() else options["alive_file"]
        if task_run_logs is not None:  # records no handler writes are not made
            task_run_logs.follow()
        try:
            worker.run()
        finally:
            if task_run_logs is not None:
                task_run_logs.stop_following()
        if worker.runs_anew:  # SIGHUP, stuck handler threads or --max-rss
            run_anew()

    @staticmethod
    def supervise(queues: list[str], options: dict[str, Any]) -> None:
        """Check what every child would check at its start, then run the children."""
        try:
            registry.serving(queues)
            checked_condition(options["where"])
        except DjqueueError as exc:
            raise CommandError(str(exc)) from None
        check_max_rss(options["max_rss"])
        connections.close_all()
        supervisor = Supervisor([sys.executable, *sys.argv], options["processes"],
                                replace=not options["burst"])
        supervisor.alive_file = options["alive_file"]
        if supervisor.run() != 0:
            raise CommandError("A worker process ended with an error (see its output above).")

    @staticmethod
    def subscription_queue(spec: str, consumer: str | None) -> str:
        """The queue of the consumer group ``spec`` names (TOPIC:GROUP), where this
        worker is registered as consumer ``consumer`` (default: the host's name)."""
        topic, sep, group = spec.partition(":")
        if not sep or not topic or not group:
            raise CommandError(f"--subscribe takes TOPIC:GROUP, got {shown_value(spec)}.")
        name = consumer or socket.gethostname().split(".")[0][:36]
        try:
            return register_consumer(topic, group, name).name
        except DjqueueError as exc:
            raise CommandError(str(exc)) from None


def check_max_rss(limit: int | None) -> None:
    """Refuse a ``--max-rss`` the process is already past before its first message: it
    would start afresh again and again without running one."""
    if limit is not None and (resident := resident_megabytes()) >= limit:
        raise CommandError(f"--max-rss {limit} MB is below the {resident:.0f} MB this "
                           "process holds before its first message.")
