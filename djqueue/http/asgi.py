"""The HTTP API served without Django's middleware, so a waiting request holds no thread.

Django's ASGI handler runs each request's sync middleware (sessions, CSRF,
messages...) and its ``request_started`` receivers through ``sync_to_async`` in a
thread of the request's own, kept until the request ends: a thousand waiting
long polls held a thousand idle threads (measured: 13 threads grew past 150
while 1,000 requests came in). The API needs none of it: it authenticates by
token (and reads a session itself, for the browsable GETs), and its database
work runs on its own threads (djqueue.http.database_threads).

:func:`with_api` wraps the project's ASGI application: requests under the API's
mount go straight to its views, the rest to Django as before. The API's URLs stay
in the URLconf (``include("djqueue.http.urls")``), which is where the mount is
read from and what serves them under WSGI.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.http import HttpResponse
from django.urls import NoReverseMatch, Resolver404, resolve, reverse

from djqueue.http import problems

Scope = dict[str, Any]


class ApiFirst:
    """An ASGI application: the API's requests to its views, others to ``application``."""

    def __init__(self, application: Any) -> None:
        self.application = application
        self._handler = ASGIHandler()  # its body reading and response sending, no middleware
        self._prefix: str | None = None

    def _mount(self) -> str:
        if self._prefix is None:
            try:
                self._prefix = reverse("djqueue_http:openapi").removesuffix("openapi.json")
            except NoReverseMatch:  # not mounted: every request is the project's
                self._prefix = "\0"
        return self._prefix

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self._mount()):
            await self._serve(scope, receive, send)
        else:
            await self.application(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Any, send: Any) -> None:
        try:
            body = await self._handler.read_body(receive)
        except Exception:  # the client went away while sending
            return
        with contextlib.closing(body):
            request = ASGIRequest(scope, body)
            response = await self._respond(request, receive)
            if not response.streaming and not response.has_header("Content-Length"):
                # As CommonMiddleware would: keep-alive clients need not read chunks.
                response.headers["Content-Length"] = str(len(response.content))
            await self._handler.send_response(response, send)
            response.close()

    async def _respond(self, request: ASGIRequest, receive: Any) -> HttpResponse:
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return problems.problem(404, "NotFound", "Not found", "No such endpoint.")
        view = asyncio.ensure_future(_as_coroutine(match.func, request, match.kwargs))
        gone = asyncio.ensure_future(self._handler.listen_for_disconnect(receive))
        try:
            await asyncio.wait([view, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not view.done():  # the client disconnected: its wait ends here
            view.cancel()
            with contextlib.suppress(BaseException):
                await view
            return HttpResponse(status=499)
        try:
            return view.result()
        except RequestDataTooBig as exc:
            return problems.problem(413, "RequestTooLarge", "Request too large", str(exc))


async def _as_coroutine(view: Any, request: ASGIRequest, kwargs: dict[str, Any]) -> Any:
    result = view(request, **kwargs)
    if asyncio.iscoroutine(result):
        result = await result
    return result


def with_api(application: Any) -> ApiFirst:
    """``application`` with the HTTP API's requests served first (see the module)."""
    return application if isinstance(application, ApiFirst) else ApiFirst(application)
