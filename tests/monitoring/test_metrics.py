"""The Prometheus metrics: what they say, what they cost, who may read them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

import djqueue
from djqueue.models import Message, State
from djqueue.monitoring import prometheus, rollups
from tests.monitoring.test_stats import roll_up_all

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_what_happened_in_each_queue(client, settings):
    djqueue.create_queue("m.jobs", max_attempts=1, concurrency_limit=50)
    djqueue.send_batch("m.jobs", [{"n": i} for i in range(10)])
    got = djqueue.receive("m.jobs", max_messages=4)
    djqueue.ack_many(got[:3])
    got[3].nack(error="boom")  # one attempt only: dead-lettered
    roll_up_all()
    rollups.sample_depth()
    samples = scrape(client)
    q = (("queue", "m.jobs"),)
    assert samples[("djqueue_queue_messages", (("queue", "m.jobs"), ("state", "ready")))] == 6
    assert samples[("djqueue_queue_messages", (("queue", "m.jobs"), ("state", "dead")))] == 1
    assert samples[("djqueue_messages_sent_total", q)] == 10
    assert samples[("djqueue_messages_finished_total",
                    (("outcome", "acked"), ("queue", "m.jobs")))] == 3
    assert samples[("djqueue_messages_failed_total", q)] == 1
    assert samples[("djqueue_messages_dead_lettered_total", q)] == 1
    assert samples[("djqueue_messages_retried_total", q)] == 0
    assert samples[("djqueue_message_run_seconds_count", q)] == 3
    assert samples[("djqueue_message_wait_seconds_bucket", (("le", "+Inf"),
                                                            ("queue", "m.jobs")))] == 3
    assert samples[("djqueue_queue_concurrency_limit", q)] == 50
    assert samples[("djqueue_queue_oldest_ready_age_seconds", q)] >= 0
    assert ("djqueue_depth_sampled_timestamp_seconds", ()) in samples


def test_a_scrape_costs_the_same_queries_whatever_the_backlog(client):
    djqueue.create_queue("m.small")
    djqueue.create_queue("m.big", rate_limit="5/s")
    djqueue.send_batch("m.small", [{"n": i} for i in range(5)])
    rollups.sample_depth()
    with CaptureQueriesContext(connection) as small:
        scrape(client)
    djqueue.send_batch("m.big", [{"n": i} for i in range(20_000)])
    djqueue.receive("m.big", max_messages=3)
    roll_up_all()
    rollups.sample_depth()
    with CaptureQueriesContext(connection) as big:
        samples = scrape(client)
    assert samples[("djqueue_queue_messages", (("queue", "m.big"), ("state", "ready")))] == (
        20_000 - Message.objects.filter(queue__name="m.big", state=State.CLAIMED).count())
    assert len(big.captured_queries) == len(small.captured_queries) <= prometheus.QUERIES
    assert not [q for q in big.captured_queries if "djqueue_message" in q["sql"].split(
        "FROM")[-1].split("WHERE")[0]]  # the message table is never read


def test_with_a_token_the_metrics_answer_only_its_bearer(client, settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "METRICS_TOKEN": "s3cret-metrics-token"}
    djqueue.create_queue("m.private")
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    samples = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert samples[("djqueue_queue_paused", (("queue", "m.private"),))] == 0
    assert client.post("/metrics").status_code == 405


def test_histograms_never_count_a_duration_under_too_low_a_bound():
    from djqueue import histograms

    for seconds in (0.0001, 0.004, 0.0051, 0.2, 0.26, 7.0, 4000.0):
        buckets = dict(prometheus._buckets(histograms.of([seconds])))
        first = min(float(le) for le, count in buckets.items() if count)
        assert first >= seconds
        assert buckets["+Inf"] == 1
