import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from djqueue import handlers
from djqueue.exceptions import DjqueueError
from djqueue.worker import Worker, WorkerOptions


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = "Run handlers for messages of the given queues (in priority order)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*",
                            help="Queues to work, earlier ones first (default: every queue "
                                 "with a handler).")
        parser.add_argument("-c", "--concurrency", type=positive_int, default=1,
                            help="Handler threads (default 1).")
        parser.add_argument("-b", "--batch-size", type=positive_int, default=10,
                            help="Messages claimed per transaction; also the prefetch "
                                 "(default 10).")
        parser.add_argument("--max-messages", type=positive_int, default=None,
                            help="Exit after processing this many messages.")
        parser.add_argument("--max-seconds", type=positive_float, default=None,
                            help="Exit after this many seconds.")
        parser.add_argument("--burst", action="store_true",
                            help="Drain the queues, then exit.")
        parser.add_argument("--visibility-timeout", type=positive_float, default=None,
                            help="Lease length in seconds (default: each queue's).")
        parser.add_argument("--shutdown-grace", type=float, default=None,
                            help="Seconds in-flight handlers may finish after SIGTERM.")
        parser.add_argument("--subscribe", action="append", default=[], metavar="TOPIC:GROUP",
                            help="Consume a topic's consumer group (repeatable); in a "
                                 "broadcast group this worker registers as consumer "
                                 "--consumer-name.")
        parser.add_argument("--consumer-name", default=None,
                            help="Broadcast consumer name (default: this host's name).")
        parser.add_argument("--where", default=None,
                            help="Only claim messages matching this condition, e.g. "
                                 "\"priority >= 5 and headers.region = 'eu'\".")

    def handle(self, *args: Any, **options: Any) -> None:
        handlers.discover()
        queues = list(options["queues"])
        for spec in options["subscribe"]:
            queues.append(self.subscription_queue(spec, options["consumer_name"]))
        queues = queues or handlers.known_queues()
        if not queues:
            raise CommandError("No queues given and no handlers configured.")
        try:
            worker = Worker(WorkerOptions(
                queues=queues, concurrency=options["concurrency"],
                batch_size=options["batch_size"], max_messages=options["max_messages"],
                max_seconds=options["max_seconds"], burst=options["burst"],
                visibility_timeout=options["visibility_timeout"],
                shutdown_grace=options["shutdown_grace"], where=options["where"]))
        except DjqueueError as exc:
            raise CommandError(str(exc)) from None
        worker.run()

    @staticmethod
    def subscription_queue(spec: str, consumer: str | None) -> str:
        from djqueue.topics import register_consumer

        topic, sep, group = spec.partition(":")
        if not sep or not topic or not group:
            raise CommandError(f"--subscribe takes TOPIC:GROUP, got {spec!r}.")
        name = consumer or socket.gethostname().split(".")[0][:36]
        try:
            return register_consumer(topic, group, name).name
        except DjqueueError as exc:
            raise CommandError(str(exc)) from None
