"""Who is calling, and what they may do: bearer tokens, per-queue grants, quotas.

A token reads ``djq_<key>_<secret>``. The key (12 characters) finds the row; the
secret (43 characters, 256 random bits) is checked against the SHA-256 stored
there. Why SHA-256 and not a slow password hash: the secret is random and as long
as a key, so no dictionary or brute force applies, and every request checks it.
The token row is read on every request, so a revoked or expired token, or an
inactive client, is refused (401) at once; a client's grants are read at most
once a second (GRANTS_TTL), so a grant's change holds within a second.

Grants name a queue or a pattern (``orders.*``, ``*``); FULL_CONTROL includes SEND
and RECEIVE. A signed-in Django user (the session of the admin) may call the
read-only endpoints (GET) with the permissions ``djqueue.api_send``,
``djqueue.api_receive`` or ``djqueue.api_full_control``, on every queue: that is what
the browsable docs page uses. Unsafe methods take tokens only, so no CSRF token is
needed and none can be forged.

Quotas (``ApiClient.requests_per_second``) are token buckets in the serving
process: with N server processes a client may make N times its quota.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from importlib import import_module
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user
from django.db import transaction
from django.db.models import Q, QuerySet

from djqueue.models import ApiClient, ApiGrant, ApiPermission, ApiToken
from djqueue.models.api_access import PATTERN_RE
from djqueue.storage import dialects, host_clock
from djqueue.storage.statements import api_statements

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

PREFIX = "djq_"
KEY_CHARS = 12
SECRET_CHARS = 43
#: A token as sent: anything else is refused without a database read.
TOKEN_RE = re.compile(rf"^{PREFIX}([a-z0-9]{{{KEY_CHARS}}})_([A-Za-z0-9_-]{{{SECRET_CHARS}}})\Z")
#: Seconds between two writes of a token's last_used_at.
LAST_USED_EVERY = 60.0
#: Seconds a process trusts its copy of a client's grants.
GRANTS_TTL = 1.0
_KEY_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
#: Django permissions of a signed-in user, and what each gives on every queue.
USER_PERMISSIONS = {ApiPermission.SEND: "djqueue.api_send",
                    ApiPermission.RECEIVE: "djqueue.api_receive",
                    ApiPermission.FULL_CONTROL: "djqueue.api_full_control"}


class Unauthenticated(Exception):
    """No usable credentials: 401."""


class Forbidden(Exception):
    """The caller has no grant for this: 403."""


class OverQuota(Exception):
    """The client's requests a second are used up: 429, retry after ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"This client's quota is used up; retry in {seconds:.2f} s.")
        self.seconds = seconds


@dataclass
class Caller:
    """An authenticated caller: a client with its grants, or a signed-in user."""

    name: str
    grants: list[tuple[str, int]] = field(default_factory=list)
    #: A signed-in user's permissions, on every queue.
    everywhere: frozenset[int] = frozenset()

    def allows(self, name: str, needed: ApiPermission) -> bool:
        def covers(permission: int) -> bool:
            return permission == needed or permission == ApiPermission.FULL_CONTROL

        if any(covers(p) for p in self.everywhere):
            return True
        return any(covers(permission) and fnmatchcase(name, pattern)
                   for pattern, permission in self.grants)

    def require(self, name: str, needed: ApiPermission) -> None:
        if not self.allows(name, needed):
            raise Forbidden(f"{self.name} has no {needed.label} grant on {name!r}.")


# Clients, tokens and grants: on the home database, where a request's token is checked

def clients() -> QuerySet[ApiClient]:
    """Every client (``manage.py djqueue_api_client`` reads and creates them here)."""
    return ApiClient.objects.using(dialects.alias())


def usable(now: datetime, through: str = "") -> Q:
    """Tokens neither revoked nor expired at ``now``: the rule a request's token is
    checked by (api_statements.usable_token), as a filter of tokens, or of the rows
    ``through`` leads from (``"tokens__"`` for clients). In SQL, so that a time a hand
    edit left unreadable is judged as the API judges it, not read."""
    return Q(**{f"{through}revoked_at__isnull": True}) & (
        Q(**{f"{through}expires_at__isnull": True}) | Q(**{f"{through}expires_at__gt": now}))


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue_token(client: ApiClient, *, expires_in: float | timedelta | None = None) -> str:
    """A new token for ``client``: the only time its text exists outside the caller."""
    if isinstance(expires_in, bool):  # an int to Python, and a mistake here
        raise TypeError("expires_in is seconds or a timedelta, not True or False.")
    if isinstance(expires_in, int | float):
        expires_in = timedelta(seconds=expires_in)
    key = "".join(secrets.choice(_KEY_ALPHABET) for _ in range(KEY_CHARS))
    secret = secrets.token_urlsafe(32)
    assert len(secret) == SECRET_CHARS
    db = dialects.alias()
    now = host_clock.database_now(db)
    ApiToken.objects.using(db).create(
        client=client, key=key, digest=_digest(secret), created_at=now,
        expires_at=None if expires_in is None else now + expires_in)
    return f"{PREFIX}{key}_{secret}"


def rotate_tokens(client: ApiClient, *, overlap: float | timedelta = 3600,
                  expires_in: float | timedelta | None = None) -> str:
    """A new token; the client's other usable tokens expire ``overlap`` from now (so its
    services can move to the new one), or earlier if they already would."""
    if not isinstance(overlap, timedelta):
        overlap = timedelta(seconds=overlap)
    db = dialects.alias()
    with transaction.atomic(using=db):
        until = host_clock.database_now(db) + overlap
        old = ApiToken.objects.using(db).filter(client=client, revoked_at__isnull=True)
        old.filter(expires_at__isnull=True).update(expires_at=until)
        old.filter(expires_at__gt=until).update(expires_at=until)
        return issue_token(client, expires_in=expires_in)


def revoke_token(token_or_key: str) -> bool:
    """Revoke a token, given as its text, its key, or ``djq_<key>`` (as the admin and the
    list show it); False if there was none to revoke."""
    key = token_or_key.removeprefix(PREFIX)[:KEY_CHARS]
    db = dialects.alias()
    return bool(ApiToken.objects.using(db).filter(
        key=key, revoked_at__isnull=True).update(revoked_at=host_clock.database_now(db)))


def check_pattern(pattern: object) -> str:
    if not isinstance(pattern, str) or not PATTERN_RE.match(pattern):
        raise ValueError(f"{pattern!r} is not a queue name or pattern: 1-100 letters, digits, "
                         "'_', '.', ':', '-', and * for any run of them.")
    return pattern


def grant(client: ApiClient, pattern: str, permission: ApiPermission) -> ApiGrant:
    found, _ = ApiGrant.objects.using(dialects.alias()).get_or_create(
        client=client, queue_pattern=check_pattern(pattern), permission=permission)
    return found


# Checking

_last_used: dict[int, float] = {}


def authenticate(authorization: str,
                 user: AbstractBaseUser | AnonymousUser | None = None) -> Caller:
    """The caller of a request: from its ``Authorization: Bearer`` header, else from a
    signed-in ``user`` (who must hold one of USER_PERMISSIONS). Unauthenticated if
    neither is usable. Runs in a database thread."""
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthenticated("Use an 'Authorization: Bearer <token>' header.")
        return _from_token(token.strip())
    if user is not None and user.is_authenticated and user.is_active:
        # A user model that signs in to the admin has has_perm (PermissionsMixin's, or its
        # own, as Django's docs ask of a custom one); AbstractBaseUser does not declare it.
        has_perm = user.has_perm  # type: ignore[attr-defined]
        everywhere = frozenset(p for p, perm in USER_PERMISSIONS.items() if has_perm(perm))
        if everywhere:
            return Caller(name=f"user {user.get_username()}", everywhere=everywhere)
    raise Unauthenticated("This API needs an 'Authorization: Bearer <token>' header.")


def session_user(request: HttpRequest) -> AbstractBaseUser | AnonymousUser | None:
    """The user signed in with the request's session cookie, if any (what
    SessionMiddleware and AuthenticationMiddleware give a request that went through
    them)."""
    key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    if not key:
        return None
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    return get_user(request)


def _from_token(token: str) -> Caller:
    match = TOKEN_RE.match(token)
    if not match:
        raise Unauthenticated("That is not a djqueue API token.")
    key, secret = match.groups()
    db = dialects.alias()
    now = host_clock.database_now(db)
    row = api_statements.usable_token(db, key, now)
    if row is None or not hmac.compare_digest(row.digest, _digest(secret)):
        raise Unauthenticated("The token is unknown, revoked or expired, or its client is "
                              "inactive.")
    _take_quota(row.client_id, row.requests_per_second, row.request_burst)
    _note_use(db, row.token_id, now)
    return Caller(name=f"client {row.client_name!r}", grants=_grants.of(db, row.client_id))


class _Grants:
    """Each client's grants, read at most GRANTS_TTL seconds ago (a token's validity is
    read on every request; a grant's change holds within GRANTS_TTL)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[int, tuple[float, list[tuple[str, int]]]] = {}

    def of(self, db: str, client_id: int) -> list[tuple[str, int]]:
        moment = time.monotonic()
        with self._lock:
            found = self._read.get(client_id)
        if found is not None and moment - found[0] < GRANTS_TTL:
            return found[1]
        grants = list(ApiGrant.objects.using(db).filter(client_id=client_id).values_list(
            "queue_pattern", "permission"))
        with self._lock:
            self._read[client_id] = (moment, grants)
        return grants

    def forget(self) -> None:
        with self._lock:
            self._read.clear()


_grants = _Grants()


def _note_use(db: str, token_id: int, now: datetime) -> None:
    moment = time.monotonic()
    if moment - _last_used.get(token_id, -LAST_USED_EVERY) >= LAST_USED_EVERY:
        _last_used[token_id] = moment
        ApiToken.objects.using(db).filter(pk=token_id).update(last_used_at=now)


class _Buckets:
    """Each client's token bucket in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[int, tuple[float, float]] = {}  # client id -> (tokens, at)

    def take(self, client_id: int, rate: float, burst: float) -> float:
        """0 if a request may go now, else the seconds until it may."""
        with self._lock:
            now = time.monotonic()
            tokens, at = self._state.get(client_id, (burst, now))
            tokens = min(burst, tokens + (now - at) * rate)
            if tokens >= 1:
                self._state[client_id] = (tokens - 1, now)
                return 0.0
            self._state[client_id] = (tokens, now)
            return (1 - tokens) / rate


_buckets = _Buckets()


def _take_quota(client_id: int, rate: float | None, burst: int | None) -> None:
    if rate is None:
        return
    if rate <= 0:  # a quota of none: the client is held off without being disabled
        raise OverQuota(60.0)
    wait = _buckets.take(client_id, rate, float(burst or max(1.0, rate)))
    if wait:
        raise OverQuota(wait)
