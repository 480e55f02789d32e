"""The Prometheus metrics view, to mount in a project's ``urls.py``::

    from djqueue.monitoring.views import metrics
    urlpatterns = [..., path("metrics", metrics)]

It answers in Prometheus's text format (or OpenMetrics, if the scraper asks);
with ``DJQUEUE["METRICS_TOKEN"]`` set it answers only ``Authorization: Bearer
<token>``. See djqueue.monitoring.prometheus for what it reads.
"""

from __future__ import annotations

import hmac
from functools import cache
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from djqueue.conf import get_settings
from djqueue.monitoring.prometheus import DjqueueCollector


@cache
def registry() -> Any:
    """The process's registry of djqueue's collector (prometheus_client loads here)."""
    from prometheus_client import CollectorRegistry

    found = CollectorRegistry(auto_describe=False)
    found.register(DjqueueCollector())
    return found


def authorized(header: str | None) -> bool:
    """Whether an Authorization header carries the METRICS_TOKEN (or none is set)."""
    token = get_settings().METRICS_TOKEN
    if token is None:
        return True
    expected = f"Bearer {token}".encode()
    return header is not None and hmac.compare_digest(header.encode(), expected)


def exposition(accept: str | None) -> tuple[bytes, str]:
    """The metrics, and their content type, in the format ``accept`` asks for."""
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry()), content_type


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not authorized(request.headers.get("Authorization")):
        response = HttpResponse("A bearer token is needed.\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="djqueue metrics"'
        return response
    body, content_type = exposition(request.headers.get("Accept"))
    return HttpResponse(body, content_type=content_type)
