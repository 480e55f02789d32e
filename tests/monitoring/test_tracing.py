"""OpenTelemetry: one trace from a span around send() in this process to every handler
run of the message in a worker process (the worker's SDK writes its spans to a file)."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import djqueue
from djqueue.models import History, Message
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """This process's spans (a tracer provider can be set once a process: it stays)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@pytest.fixture
def tracing_on(settings, spans):
    settings.DJQUEUE = {**settings.DJQUEUE, "TRACING": True}
    spans.clear()
    return spans


def test_a_trace_goes_from_the_sender_to_each_delivery_in_a_worker(spawn, tracing_on,
                                                                   tmp_path):
    djqueue.create_queue("t.flaky", max_attempts=3, backoff=[0.1])
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /orders") as request:
        sent = djqueue.send("t.flaky", {"n": 7, "failures": 1}, group_key="customer-3",
                            headers={"origin": "web"})
    headers = Message.objects.get(pk=sent.pk).headers
    assert headers["origin"] == "web" and headers["traceparent"].startswith("00-")
    [producer] = [s for s in tracing_on.get_finished_spans() if s.name == "send t.flaky"]
    assert producer.parent.span_id == request.get_span_context().span_id
    assert producer.kind == trace.SpanKind.PRODUCER
    assert producer.attributes["messaging.message.id"] == str(sent.pk)

    trace_file = tmp_path / "worker-spans.jsonl"
    spawn("djqueue_worker", "t.flaky", env={"DJQUEUE_TEST_TRACE_FILE": str(trace_file)})
    wait_until(lambda: History.objects.filter(pk=sent.pk).exists(), 30,
               "the message to fail once and then succeed")
    wait_until(lambda: trace_file.exists() and len(trace_file.read_text().splitlines()) >= 2,
               10, "the worker's two consumer spans")
    consumed = [json.loads(line) for line in trace_file.read_text().splitlines()]
    consumed = sorted((s for s in consumed if s["name"] == "process t.flaky"),
                      key=lambda s: s["attributes"]["djqueue.message.attempt"])
    trace_id = f"0x{request.get_span_context().trace_id:032x}"
    assert [s["context"]["trace_id"] for s in consumed] == [trace_id, trace_id]
    assert {s["parent_id"] for s in consumed} == {f"0x{producer.context.span_id:016x}"}
    assert [s["kind"] for s in consumed] == ["SpanKind.CONSUMER"] * 2
    assert [s["attributes"]["djqueue.message.attempt"] for s in consumed] == [1, 2]
    assert [s["status"]["status_code"] for s in consumed] == ["ERROR", "UNSET"]
    assert consumed[0]["events"][0]["name"] == "exception"
    assert consumed[1]["attributes"]["messaging.destination.name"] == "t.flaky"
    assert consumed[1]["attributes"]["djqueue.message.group_key"] == "customer-3"


def test_with_tracing_off_nothing_is_recorded_or_added(settings, spans):
    settings.DJQUEUE = {**settings.DJQUEUE, "TRACING": False}
    spans.clear()
    djqueue.create_queue("t.quiet")
    message = djqueue.send("t.quiet", {"n": 1})
    djqueue.send_batch("t.quiet", [{"n": 2}, {"n": 3}], headers={"a": 1})
    assert Message.objects.get(pk=message.pk).headers is None
    assert not spans.get_finished_spans()


def test_a_batch_is_one_producer_span_and_every_message_carries_it(tracing_on):
    djqueue.create_queue("t.batch")
    messages = djqueue.send_batch("t.batch", [{"n": i} for i in range(3)])
    [producer] = tracing_on.get_finished_spans()
    assert producer.attributes["messaging.batch.message_count"] == 3
    parents = {Message.objects.get(pk=m.pk).headers["traceparent"].split("-")[2]
               for m in messages}
    assert parents == {f"{producer.context.span_id:016x}"}


def test_a_batch_handler_run_is_one_consumer_span_linked_to_each_sending_span(tracing_on):
    djqueue.create_queue("t.batched")
    sent = [djqueue.send("t.batched", {"n": n}) for n in range(3)]
    producers = [s for s in tracing_on.get_finished_spans() if s.name == "send t.batched"]
    tracing_on.clear()
    assert djqueue.drain("t.batched").acked == 3
    [run] = [s for s in tracing_on.get_finished_spans() if s.name == "process t.batched"]
    assert run.kind == trace.SpanKind.CONSUMER and run.parent is None
    assert run.attributes["messaging.batch.message_count"] == 3
    assert [link.attributes["messaging.message.id"] for link in run.links] == [
        str(m.pk) for m in sent]
    assert [link.context.span_id for link in run.links] == [p.context.span_id
                                                           for p in producers]
