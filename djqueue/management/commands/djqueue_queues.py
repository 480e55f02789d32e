"""Look at queues and operate on them from a shell (the admin and the HTTP API do the
same): what ``celery inspect``/``celery purge`` and ``aws sqs`` give their users.

    manage.py djqueue_queues                       # every queue's depth, as last sampled
    manage.py djqueue_queues list --now --json     # sampled now, as JSON
    manage.py djqueue_queues pause emails reports
    manage.py djqueue_queues resume emails
    manage.py djqueue_queues peek emails.dead --limit 20 [--state dead] [--json]
    manage.py djqueue_queues redrive emails.dead --limit 100 [--to emails]
    manage.py djqueue_queues purge emails --yes

The depths are the reaper's samples (djqueue.monitoring.queue_listing), so a listing
never counts the message table; ``--now`` takes a sample first (one grouped pass over
the claim index a database, as the reaper's). A partitioned queue has a line for each
database its rows are on.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from djqueue.api import peeked_messages, queue_operations, queues
from djqueue.exceptions import DjqueueError
from djqueue.management.arguments import whole_number
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.management.tables import seconds_text, write_table
from djqueue.models import Message, Queue, State
from djqueue.models.shown_times import shown_iso
from djqueue.monitoring import queue_listing
from djqueue.storage import placement


class Command(DatabaseReadyCommand):
    help = "List queues with their depths; peek at, pause, resume, redrive or purge them."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action")
        listing = actions.add_parser("list", help="Every queue's depth (the default).")
        listing.add_argument("--now", action="store_true",
                             help="Sample the depths now instead of reading the reaper's.")
        listing.add_argument("--json", action="store_true", help="One JSON list.")
        for name, text in (("pause", "Stop workers claiming from the queues."),
                           ("resume", "Let workers claim from the queues again.")):
            action = actions.add_parser(name, help=text)
            action.add_argument("queues", nargs="+", metavar="QUEUE")
        redrive = actions.add_parser("redrive", help="Move a queue's dead messages back to "
                                                     "where each failed, or --to a queue.")
        redrive.add_argument("queue")
        redrive.add_argument("--to", default=None, metavar="QUEUE")
        redrive.add_argument("--limit", type=whole_number(), default=None)
        peek = actions.add_parser("peek", help="A queue's messages, oldest first, without "
                                               "claiming them.")
        peek.add_argument("queue")
        peek.add_argument("--state", choices=[state.name.lower() for state in State],
                          default=None)
        peek.add_argument("--limit", type=whole_number(1, queue_operations.MAX_PEEK),
                          default=10)
        peek.add_argument("--json", action="store_true",
                          help="One JSON list, with whole payloads, headers and errors.")
        purge = actions.add_parser("purge", help="Delete a queue's ready, scheduled, waiting "
                                                 "and dead messages (in-flight ones finish).")
        purge.add_argument("queue")
        purge.add_argument("--yes", action="store_true", help="Do it (without: say how many).")

    def handle(self, *args: object, **options: Any) -> None:
        action = options["action"] or "list"
        try:
            if action == "list":
                self._list(now=options.get("now", False), as_json=options.get("json", False))
            elif action in ("pause", "resume"):
                for name in options["queues"]:
                    queue = (queues.pause if action == "pause" else queues.resume)(name)
                    self.stdout.write(f"{queue.name}: {'paused' if queue.paused else 'resumed'}")
            elif action == "peek":
                self._peek(options["queue"], options["state"], options["limit"],
                           as_json=options["json"])
            elif action == "redrive":
                moved = queue_operations.redrive(options["queue"], options["to"],
                                                 limit=options["limit"])
                self.stdout.write(f"{options['queue']}: {moved} message(s) redriven")
            else:
                self._purge(options["queue"], confirmed=options["yes"])
        except DjqueueError as exc:  # an unknown queue, a redrive across databases, ...
            raise CommandError(str(exc)) from None

    def _purge(self, name: str, *, confirmed: bool) -> None:
        if not confirmed:
            queue = queues.get_queue(name, fresh=True)
            doomed = _count_purgeable(queue)
            raise CommandError(f"Purging {name!r} deletes its {doomed} ready, scheduled, "
                               "waiting and dead message(s) for good; add --yes to do it.")
        self.stdout.write(f"{name}: {queue_operations.purge(name)} message(s) purged")

    def _list(self, *, now: bool, as_json: bool) -> None:
        if now:
            queue_listing.sample_now()
        rows, _ = queue_listing.queue_rows(fresh=now)
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        header = ("QUEUE", "DATABASE", "PAUSED", "READY", "SCHEDULED", "IN FLIGHT", "WAITING",
                  "DEAD", "OLDEST READY", "SAMPLED")
        write_table(self.stdout, header, [(
            r["name"], r["database"], "yes" if r["paused"] else "no",
            *("-" if r[c] is None else str(r[c]) for c in queue_listing.COLUMNS),
            seconds_text(r["oldest_ready_age"]),
            "never" if r["sample_age"] is None else f"{seconds_text(r['sample_age'])} ago")
            for r in rows])


    def _peek(self, name: str, state: str | None, limit: int, *, as_json: bool) -> None:
        found = queue_operations.peek(name, state=None if state is None else State[
            state.upper()], limit=limit)
        if as_json:
            self.stdout.write(json.dumps([peeked_messages.as_json(m) for m in found], indent=2))
            return
        write_table(self.stdout, ("ID", "STATE", "ATTEMPTS", "SENT", "GROUP", "PAYLOAD",
                                  "LAST ERROR"), [(
            str(m.pk), State(m.state).name.lower(), str(m.attempts),
            shown_iso(m.sent_at),
            m.group_key or "-",
            _excerpt(m.encoded_body), _excerpt(m.last_exception)) for m in found])


def _excerpt(text: object, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters ('-' for none)."""
    if text is None:
        return "-"
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def _count_purgeable(queue: Queue) -> int:
    """What a purge would delete, on each database the queue's rows are on."""
    total = 0
    for db in placement.databases():
        total += Message.objects.using(db).filter(
            queue__name=queue.name,
            state__in=[State.READY, State.SCHEDULED, State.WAITING, State.DEAD]).count()
    return total
