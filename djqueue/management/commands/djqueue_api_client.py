"""Manage the HTTP API's clients, tokens and grants (the admin does the same).

    manage.py djqueue_api_client create billing --grant 'orders.*:send' --rate 50
    manage.py djqueue_api_client token billing --expires-in 86400
    manage.py djqueue_api_client rotate billing --overlap 3600
    manage.py djqueue_api_client grant billing invoices receive
    manage.py djqueue_api_client revoke djq_abcdefghijkl
    manage.py djqueue_api_client list

A token is printed once, when it is made; only its hash is stored.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.utils import timezone

from djqueue import durations
from djqueue.http import access
from djqueue.management.arguments import seconds
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.models import ApiClient, ApiPermission, ApiToken
from djqueue.storage import dialects
from djqueue.storage.payloads import unstorable
from djqueue.storage.unreadable_rows import ReadableTime

PERMISSIONS = {"send": ApiPermission.SEND, "receive": ApiPermission.RECEIVE,
               "full_control": ApiPermission.FULL_CONTROL,
               "full-control": ApiPermission.FULL_CONTROL}


class Command(DatabaseReadyCommand):
    help = "Create HTTP API clients, issue, rotate and revoke their tokens, grant queues."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="A new client, and its first token.")
        create.add_argument("name")
        create.add_argument("--grant", action="append", default=[], metavar="PATTERN:PERM",
                            help="e.g. 'orders.*:send' (send, receive or full_control)")
        create.add_argument("--rate", type=float, default=None,
                            help="Its quota, requests a second (default: none).")
        create.add_argument("--expires-in", type=seconds(durations.MAX_RETENTION), default=None)
        token = actions.add_parser("token", help="Another token for a client.")
        token.add_argument("name")
        token.add_argument("--expires-in", type=seconds(durations.MAX_RETENTION), default=None)
        rotate = actions.add_parser("rotate", help="A new token; the others expire after "
                                                   "--overlap seconds.")
        rotate.add_argument("name")
        rotate.add_argument("--overlap", type=seconds(durations.MAX_RETENTION, positive=False),
                            default=3600.0)
        grant = actions.add_parser("grant", help="Let a client SEND, RECEIVE or have "
                                                 "FULL_CONTROL on a queue or pattern.")
        grant.add_argument("name")
        grant.add_argument("pattern")
        grant.add_argument("permission", choices=sorted(PERMISSIONS))
        revoke = actions.add_parser("revoke", help="Revoke a token (its text or key).")
        revoke.add_argument("token")
        actions.add_parser("list", help="Clients, their grants and tokens.")

    def handle(self, *args: object, **options: Any) -> None:
        action = options["action"]
        for argument in ("name", "pattern", "token"):  # read from argv with surrogateescape
            value = options.get(argument)
            why = unstorable(value) if isinstance(value, str) else None
            if why is not None:
                raise CommandError(f"The {argument} {why}.")
        if action == "create":
            self._create(options)
        elif action == "token":
            client = self._client(options["name"])
            self.stdout.write(access.issue_token(client, expires_in=options["expires_in"]))
        elif action == "rotate":
            client = self._client(options["name"])
            self.stdout.write(access.rotate_tokens(client, overlap=options["overlap"]))
        elif action == "grant":
            self._grant(self._client(options["name"]), str(options["pattern"]),
                        str(options["permission"]))
        elif action == "revoke":
            if not access.revoke_token(str(options["token"])):
                raise CommandError("No usable token has that key.")
            self.stdout.write("Revoked.")
        else:
            self._list()

    def _create(self, options: dict) -> None:
        name = str(options["name"])
        if not 1 <= len(name) <= 100:
            raise CommandError("A client's name has 1 to 100 characters.")
        if access.clients().filter(name=name).exists():
            raise CommandError(f"Client {name!r} exists already.")
        rate = options["rate"]
        if rate is not None and not 0 <= rate <= 1e6:
            raise CommandError("--rate is a number of requests a second, 0 to 1,000,000.")
        grants = [self._parse_grant(text) for text in options["grant"]]
        client = access.clients().create(name=name, requests_per_second=rate)
        for pattern, permission in grants:
            self._grant(client, pattern, permission)
        self.stdout.write(access.issue_token(client, expires_in=options["expires_in"]))

    def _parse_grant(self, text: str) -> tuple[str, str]:
        pattern, _, permission = text.rpartition(":")
        if not pattern or permission not in PERMISSIONS:
            raise CommandError(f"--grant {text!r}: use PATTERN:PERMISSION, the permission one "
                               "of send, receive, full_control.")
        return pattern, permission

    def _grant(self, client: ApiClient, pattern: str, permission: str) -> None:
        try:
            access.grant(client, pattern, PERMISSIONS[permission])
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    def _client(self, name: object) -> ApiClient:
        try:
            return access.clients().get(name=name)
        except ApiClient.DoesNotExist:
            raise CommandError(f"No API client is named {name!r}.") from None

    def _list(self) -> None:
        clients = list(access.clients().prefetch_related("grants"))
        states = _token_states(clients)
        for client in clients:
            rate = f", {client.requests_per_second:g} requests/s" if (
                client.requests_per_second is not None) else ""
            state = "" if client.is_active else " (inactive)"
            self.stdout.write(f"{client.name}{state}{rate}")
            for grant in client.grants.all():
                self.stdout.write(f"  grant {grant.get_permission_display()} on "
                                  f"{grant.queue_pattern}")
            for key, state in states.get(client.pk, []):
                self.stdout.write(f"  token djq_{key}_… {state}")


def _token_states(clients: list[ApiClient]) -> dict[int, list[tuple[str, str]]]:
    """Each client's tokens, by key, with their states, in one statement: "revoked",
    "expired", or "expires <time>" / "no expiry" while usable, by the API's rule (a time
    that cannot be read is left out; 'infinity' on PostgreSQL reads as no expiry)."""
    tokens = (ApiToken.objects.using(dialects.alias())
              .filter(client__in=[client.pk for client in clients]).order_by("pk")
              .values_list("client_id", "key", ReadableTime("expires_at"),
                           ExpressionWrapper(Q(revoked_at__isnull=False),
                                             output_field=BooleanField()),
                           ExpressionWrapper(access.usable(timezone.now()),
                                             output_field=BooleanField())))
    states: dict[int, list[tuple[str, str]]] = {}
    for client_id, key, expires_at, revoked, usable in tokens:
        moment = "" if expires_at is None else f" {expires_at:%Y-%m-%d %H:%M}"
        if revoked:
            state = "revoked"
        elif not usable:
            state = "expired" + moment
        else:
            state = "expires" + moment if moment else "no expiry"
        states.setdefault(client_id, []).append((key, state))
    return states
