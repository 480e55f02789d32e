"""OpenTelemetry traces from the code that sends a message to the handler that runs it.

With an OpenTelemetry SDK installed and a tracer provider configured (by the
project: ``opentelemetry-instrument``, or its own set-up code), ``send``,
``send_batch`` and django.tasks' ``enqueue`` record a PRODUCER span and carry
its context in the message's headers (W3C ``traceparent``/``tracestate``); the
worker continues the trace with a CONSUMER span around each handler run, so
one trace goes from the web request that sent a message to every delivery of
it (a retry is a second consumer span of the same trace). A batch handler's run
is one CONSUMER span of its own trace, linked to each message's sending span. Names and
attributes follow OpenTelemetry's messaging conventions: spans ``send <queue>``
and ``process <queue>``; ``messaging.system`` (djqueue),
``messaging.destination.name``, ``messaging.operation.type``,
``messaging.message.id``, ``messaging.batch.message_count``, and djqueue's own
``djqueue.message.attempt`` and ``djqueue.message.group_key``.

djqueue never imports opentelemetry itself: a project that configured a
tracer provider has imported ``opentelemetry.trace`` to do it, so djqueue
looks for that module among the loaded ones, and without it a send or a
handler run costs a dictionary lookup. ``DJQUEUE["TRACING"] = False`` turns
spans off whatever is configured.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from djqueue.conf import get_settings

SYSTEM = "djqueue"
#: The headers the W3C trace context travels in (a message's own headers).
CONTEXT_HEADERS = ("traceparent", "tracestate")
#: What a send or a handler run enters when there is nothing to trace (reusable).
_UNTRACED = contextlib.nullcontext()


def _tracer() -> Any | None:
    """djqueue's tracer, if tracing is on and a real tracer provider is configured.

    Why so careful: it runs for every message sent and every handler run (see the
    module docstring for why a loaded module is the test)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None or not get_settings().TRACING:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
        return None
    return provider.get_tracer("djqueue")


class Produced:
    """What ``producing`` hands the sender: headers carrying the span's context. Untraced,
    it is its own (empty) context manager: no generator a send."""

    def __init__(self, headers: dict[str, Any] | None, span: Any = None) -> None:
        self.headers = headers
        self.span = span

    def sent(self, ids: list[int]) -> None:
        if self.span is not None and len(ids) == 1:
            self.span.set_attribute("messaging.message.id", str(ids[0]))

    def __enter__(self) -> Produced:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def producing(queue: str, count: int,
              headers: dict[str, Any] | None) -> contextlib.AbstractContextManager[Produced]:
    """A PRODUCER span around a send of ``count`` messages to ``queue``; its context is
    added to (a copy of) ``headers``."""
    tracer = _tracer()
    if tracer is None or count == 0 or (headers is not None and not isinstance(headers, dict)):
        return Produced(headers)  # (bad headers are the send's to refuse)
    return _producing(tracer, queue, count, headers)


@contextlib.contextmanager
def _producing(tracer: Any, queue: str, count: int,
               headers: dict[str, Any] | None) -> Iterator[Produced]:
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind, Status, StatusCode

    attributes: dict[str, str | int] = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                  "messaging.operation.type": "send", "messaging.operation.name": "send"}
    if count > 1:
        attributes["messaging.batch.message_count"] = count
    with tracer.start_as_current_span(f"send {queue}", kind=SpanKind.PRODUCER,
                                      attributes=attributes,
                                      record_exception=False,
                                      set_status_on_exception=False) as span:
        carrier = dict(headers or {})
        propagate.inject(carrier)
        try:
            yield Produced(carrier, span)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise


def processing(queue: str, message_id: int, attempt: int, group_key: str | None,
               headers: dict[str, Any] | None) -> contextlib.AbstractContextManager[None]:
    """A CONSUMER span around one handler run, continuing the trace in ``headers``."""
    tracer = _tracer()
    if tracer is None:
        return _UNTRACED
    return _processing(tracer, queue, message_id, attempt, group_key, headers)


def _processing(tracer: Any, queue: str, message_id: int, attempt: int,
                group_key: str | None, headers: dict[str, Any] | None
                ) -> contextlib.AbstractContextManager[None]:
    from opentelemetry import propagate

    attributes: dict[str, Any] = {"messaging.message.id": str(message_id),
                                  "djqueue.message.attempt": attempt}
    if group_key:
        attributes["djqueue.message.group_key"] = group_key
    return _consumer_span(tracer, queue, attributes,
                          context=propagate.extract(_carrier(headers)))


def processing_batch(queue: str,
                     messages: Sequence[Any]) -> contextlib.AbstractContextManager[None]:
    """A CONSUMER span around one batch handler run: a trace of its own, linked to the
    trace each message's headers carry (OpenTelemetry's rule for batch processing)."""
    tracer = _tracer()
    if tracer is None:
        return _UNTRACED
    return _processing_batch(tracer, queue, messages)


def _processing_batch(tracer: Any, queue: str, messages: Sequence[Any]
                      ) -> contextlib.AbstractContextManager[None]:
    from opentelemetry import propagate
    from opentelemetry.trace import Link, get_current_span

    links = []
    for message in messages:
        sender = get_current_span(propagate.extract(_carrier(message.headers)))
        context = sender.get_span_context()
        if context.is_valid:
            links.append(Link(context, {"messaging.message.id": str(message.pk)}))
    return _consumer_span(tracer, queue, {"messaging.batch.message_count": len(messages)},
                          links=links)


def _carrier(headers: dict[str, Any] | None) -> dict[str, str]:
    """The W3C trace context a message's headers carry."""
    return {k: v for k, v in (headers or {}).items()
            if k in CONTEXT_HEADERS and isinstance(v, str)}


@contextlib.contextmanager
def _consumer_span(tracer: Any, queue: str, attributes: dict[str, Any],
                   **options: Any) -> Iterator[None]:
    """A CONSUMER span ``process <queue>`` around a handler run, its exception recorded."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    attributes = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                  "messaging.operation.type": "process", "messaging.operation.name": "process",
                  **attributes}
    with tracer.start_as_current_span(f"process {queue}", kind=SpanKind.CONSUMER,
                                      attributes=attributes, record_exception=False,
                                      set_status_on_exception=False, **options) as span:
        try:
            yield
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
