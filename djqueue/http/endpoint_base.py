"""What every HTTP API endpoint shares: the view that turns exceptions into problem
documents, the check of names in the path, the caller and its grant, JSON answers."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from djqueue.http import access, problems
from djqueue.http.problems import InvalidRequest
from djqueue.models import ApiPermission
from djqueue.models.names import is_valid_name

logger = logging.getLogger("djqueue.http")

Handler = Callable[..., Awaitable[HttpResponse]]


def endpoint(**methods: Handler) -> Callable[..., Awaitable[HttpResponse]]:
    """A view answering ``methods`` (GET=..., POST=...), each an async function of the
    request and the path's parameters; exceptions become problem documents."""

    async def view(request: HttpRequest, **params: str) -> HttpResponse:
        handler = methods.get(request.method or "")
        if handler is None:
            response = problems.problem(405, "MethodNotAllowed", "Method not allowed",
                                        f"This endpoint takes {', '.join(methods)}.")
            response["Allow"] = ", ".join(methods)
            return response
        try:
            for name, value in params.items():
                check_name(value, name)
            return await handler(request, **params)
        except Exception as exc:  # every known error is a problem document, the rest 500
            answer = problems.from_exception(exc, **getattr(exc, "extra", {}))
            if answer is None:
                logger.exception("HTTP API error on %s %s", request.method, request.path)
                return problems.problem(500, "InternalError", "Internal error",
                                        "The server failed; the error is in its log.")
            return answer

    # Unsafe methods take bearer tokens only (djqueue.http.access): no cookie, no CSRF.
    return csrf_exempt(view)


def check_name(value: str, what: str) -> None:
    if not is_valid_name(value):
        raise InvalidRequest(f"{value[:120]!r} is not a valid {what} name: 1-100 letters, "
                             "digits, '_', '.', ':' or '-'.")


def caller_of(request: HttpRequest) -> access.Caller:
    """Runs on a database thread (the token's row is read). A signed-in user counts for
    GET alone (djqueue.http.access); served by djqueue.http.asgi, a request has no
    middleware, so its session is read here."""
    authorization = request.META.get("HTTP_AUTHORIZATION", "")
    user = None
    if not authorization and request.method in ("GET", "HEAD"):
        user = getattr(request, "user", None) or access.session_user(request)
    return access.authenticate(authorization, user)


def granted(request: HttpRequest, name: str, needed: ApiPermission) -> access.Caller:
    """The request's caller, if it may do ``needed`` on ``name`` (else 401 or 403)."""
    caller = caller_of(request)
    caller.require(name, needed)
    return caller


def json_response(data: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(data, status=status, json_dumps_params={"separators": (",", ":")})
