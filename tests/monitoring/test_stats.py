"""Statistics roll-ups, depth snapshots and alarm policies, on the real database."""

from __future__ import annotations

import math
from datetime import timedelta

import django
import pytest
from django.core import mail
from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

import djqueue
from djqueue import histograms, signals
from djqueue.maintenance.pruning import prune_history
from djqueue.models import (
    Alarm,
    AlarmPolicy,
    Body,
    History,
    Message,
    Metric,
    Period,
    QueueDepth,
    QueueStat,
    State,
    TopicStat,
)
from djqueue.monitoring import alarms, rollups
from tests.conftest import in_threads, write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def roll_up_all() -> None:
    """Two passes: the first only notes the newest id (sends are counted one pass late)."""
    rollups.roll_up(timezone.now() + rollups.SETTLE)
    rollups.roll_up(timezone.now() + rollups.SETTLE)


def test_histogram_quantiles_are_within_ten_percent():
    values = [0.0005 * 1.01 ** i for i in range(1500)]
    hist = histograms.of(values)
    assert histograms.total(hist) == 1500
    for q in (0.5, 0.95, 0.99):
        exact = sorted(values)[math.ceil(q * len(values)) - 1]
        assert exact <= histograms.quantile(hist, q) <= exact * 1.1 + 0.001
    halves = histograms.merge(histograms.of(values[:700]), histograms.of(values[700:]))
    assert halves == hist
    assert histograms.quantile({}, 0.5) is None


def test_roll_up_counts_sends_acks_failures_and_times_per_minute():
    queue = djqueue.create_queue("stats.q", max_attempts=2, backoff=[0])
    now = timezone.now()
    djqueue.send_batch("stats.q", [{"n": i} for i in range(30)])
    got = djqueue.receive("stats.q", max_messages=30)
    djqueue.ack_many(got[:20])
    for message in got[20:25]:
        message.nack(error="boom")
    # Shape the history so waits and runs are known: wait = i/10 s, run = i/100 s.
    for i, row in enumerate(History.objects.order_by("pk")):
        History.objects.filter(pk=row.pk).update(
            sent_at=now - timedelta(seconds=30), claimed_at=now - timedelta(seconds=30 - i / 10),
            finished_at=now - timedelta(seconds=30 - i / 10 - i / 100))
    roll_up_all()

    minutes = QueueStat.objects.filter(queue=queue, period=Period.MINUTE)
    totals = {name: sum(getattr(m, name) for m in minutes)
              for name in ("sent", "acked", "deleted", "failed", "dead_lettered")}
    assert totals == {"sent": 30, "acked": 20, "deleted": 0, "failed": 5, "dead_lettered": 0}
    expected = dict(History.objects.annotate(m=TruncMinute("finished_at")).values("m")
                    .annotate(n=Count("pk")).values_list("m", "n"))
    assert {m.start: m.acked for m in minutes if m.acked} == expected
    waits = sorted(i / 10 for i in range(20))
    exact_p95 = waits[math.ceil(0.95 * 20) - 1]
    merged = histograms.merge(*(m.wait_hist for m in minutes))
    assert exact_p95 <= histograms.quantile(merged, 0.95) <= exact_p95 * 1.1
    assert sum(m.wait_total for m in minutes) == pytest.approx(sum(waits))
    assert sum(m.run_total for m in minutes) == pytest.approx(sum(i / 100 for i in range(20)))

    def whole(period: Period) -> tuple:
        """The period's counts and waits, summed over its rows: the last 30 s may span
        two hours (or days) when the test runs just after one begins."""
        rows = QueueStat.objects.filter(queue=queue, period=period)
        return (sum(r.sent for r in rows), sum(r.acked for r in rows),
                sum(r.failed for r in rows), histograms.merge(*(r.wait_hist for r in rows)))

    for period in (Period.HOUR, Period.DAY):
        assert whole(period) == (30, 20, 5, merged)
    # A third pass with nothing new changes nothing: nothing is counted twice.
    rollups.roll_up(timezone.now() + rollups.SETTLE)
    assert whole(Period.HOUR) == (30, 20, 5, merged)


def test_failures_counted_exactly_under_concurrency():
    queue = djqueue.create_queue("stats.fail", max_attempts=1)
    djqueue.send_batch("stats.fail", [{"n": i} for i in range(80)])
    got = djqueue.receive("stats.fail", max_messages=80)

    def fail_ten(slot: int) -> None:
        for message in got[slot * 10:(slot + 1) * 10]:
            message.nack(error="bad")

    in_threads(fail_ten, 8)
    minutes = QueueStat.objects.filter(queue=queue, period=Period.MINUTE)
    assert sum(m.failed for m in minutes) == 80
    assert sum(m.dead_lettered for m in minutes) == 80


def test_topic_volume_is_rolled_up():
    djqueue.create_topic("stats.news")
    djqueue.create_topic("stats.sport")
    djqueue.subscribe("stats.news", "all")
    djqueue.subscribe("stats.sport", "all")
    djqueue.publish_batch("stats.news", [{"n": i} for i in range(12)])
    djqueue.publish_batch("stats.sport", [{"n": i} for i in range(3)])
    roll_up_all()
    day = {s.topic.name: s.published for s in TopicStat.objects.filter(period=Period.DAY)
           .select_related("topic")}
    assert day == {"stats.news": 12, "stats.sport": 3}


def test_depth_snapshot_matches_the_messages():
    queue = djqueue.create_queue("stats.depth", max_attempts=1)
    djqueue.create_queue("stats.empty")
    djqueue.send_batch("stats.depth", [{"n": i} for i in range(10)])
    djqueue.send_batch("stats.depth", [{"n": i} for i in range(4)], delay=600)
    held = djqueue.receive("stats.depth", max_messages=3)
    held[0].nack(error="dead")
    assert rollups.sample_depth() >= 2
    depth = QueueDepth.objects.get(queue=queue)
    assert (depth.ready, depth.scheduled, depth.in_flight, depth.dead) == (7, 4, 2, 1)
    first_ready = Message.objects.filter(queue=queue, state=State.READY).order_by("pk").first()
    assert depth.oldest_ready_at == first_ready.sent_at
    assert depth.oldest_claimed_at == min(m.claimed_at for m in held[1:])
    empty = QueueDepth.objects.get(queue__name="stats.empty")
    assert (empty.pending, empty.dead, empty.oldest_ready_at) == (0, 0, None)


def test_alarm_fires_once_per_breach_and_again_only_after_cooldown(settings):
    settings.ADMINS = (["ops@example.com"] if django.VERSION >= (6, 0)
                       else [("Ops", "ops@example.com")])
    djqueue.create_queue("stats.alarm")
    policy = AlarmPolicy.objects.create(name="deep", metric=Metric.DEPTH, threshold=5,
                                        cooldown=600)
    heard: list[Alarm] = []

    def listener(sender, alarm, **kwargs):
        heard.append(alarm)

    signals.alarm_fired.connect(listener)
    try:
        start = timezone.now()

        def check(minutes: float) -> list[Alarm]:
            rollups.sample_depth()
            return alarms.evaluate(start + timedelta(minutes=minutes))

        assert check(0) == []                          # empty: no breach
        djqueue.send_batch("stats.alarm", [{"n": i} for i in range(6)])
        [first] = check(1)                             # breach: fires
        assert (first.subject, first.value, first.threshold) == ("stats.alarm", 6, 5)
        assert check(2) == []                          # same breach: no second alert
        djqueue.purge("stats.alarm")
        assert check(3) == []                          # recovered
        djqueue.send_batch("stats.alarm", [{"n": i} for i in range(6)])
        assert check(4) == []                          # new breach inside the cool-down
        [second] = check(11)                           # cool-down over, still breached: fires
        assert check(30) == []                         # that breach goes on: no repeat
        assert [a.pk for a in heard] == [first.pk, second.pk]
        assert len(mail.outbox) == 2 and "deep" in mail.outbox[0].subject
        assert list(Alarm.objects.filter(policy=policy).order_by("fired_at")) == [first, second]
    finally:
        signals.alarm_fired.disconnect(listener)


def test_a_policy_whose_last_firing_cannot_be_read_fires_and_the_others_are_checked():
    """A hand edit or another tool can leave a time no driver reads back. The policies
    were read in one statement, so one policy with such a last firing stopped every
    alarm, at every reaper pass (on SQLite and PostgreSQL: MariaDB's driver reads a zero
    date as None). It reads as never fired now: it fires, and the firing writes its time."""
    djqueue.create_queue("stats.unread")
    djqueue.send_batch("stats.unread", [{"n": i} for i in range(3)])
    rollups.sample_depth()
    for name in ("edited by hand", "fine"):
        AlarmPolicy.objects.create(name=name, metric=Metric.DEPTH, threshold=1, cooldown=0,
                                   last_fired_at=timezone.now() - timedelta(hours=1))
    edited = AlarmPolicy.objects.get(name="edited by hand")
    write_unreadable_time("djqueue_alarmpolicy", "last_fired_at", edited.pk)
    fired = alarms.evaluate()
    assert sorted(alarm.policy.name for alarm in fired) == ["edited by hand", "fine"]
    edited.refresh_from_db()
    assert edited.firing and edited.last_fired_at == fired[0].fired_at


def test_a_finished_message_whose_time_cannot_be_read_stops_no_roll_up():
    """A hand edit or another tool can leave a time no driver reads back in a finished
    message's history row. The roll-up read the window's finished messages in one
    statement, so one such row failed every pass on every database (MariaDB reads a zero
    date as None, which the wait's subtraction refused): the statistics stood still for
    good. Now the row's finish is counted without its wait, and the others as ever."""
    queue = djqueue.create_queue("stats.unread")
    djqueue.send_batch("stats.unread", [{"n": i} for i in range(3)])
    djqueue.ack_many(djqueue.receive("stats.unread", max_messages=3))
    edited = History.objects.order_by("pk").first()
    write_unreadable_time("djqueue_history", "sent_at", edited.pk)
    roll_up_all()
    minutes = QueueStat.objects.filter(queue=queue, period=Period.MINUTE)
    assert sum(m.acked for m in minutes) == 3
    assert histograms.total(histograms.merge(*(m.wait_hist for m in minutes))) == 2
    assert sum(m.sent for m in minutes) == 2  # its send time is not known


def test_a_publication_whose_time_cannot_be_read_stops_no_roll_up():
    """The same for a topic's publication: the bodies' count by minute failed every pass
    on SQLite and PostgreSQL. A publication stamped more than a day from the pass is
    left out now, as a send is."""
    djqueue.create_topic("stats.unread")
    djqueue.subscribe("stats.unread", "all")
    djqueue.publish_batch("stats.unread", [{"n": i} for i in range(3)])
    write_unreadable_time("djqueue_body", "published_at", Body.objects.order_by("pk")[0].pk)
    roll_up_all()
    assert TopicStat.objects.get(period=Period.DAY).published == 2


def test_a_queue_whose_oldest_ready_message_cannot_be_read_is_sampled_with_its_age_unknown():
    """The depth snapshot read each queue's oldest ready message in one statement, so one
    whose send time cannot be read failed every queue's snapshot at every pass (SQLite,
    PostgreSQL), for good on a paused queue, which no claim reads to set it aside."""
    djqueue.create_queue("stats.other")
    djqueue.send("stats.other", {"n": 0})
    paused = djqueue.create_queue("stats.paused")
    sent = djqueue.send_batch(paused, [{"n": i} for i in range(3)])
    djqueue.pause(paused)
    write_unreadable_time("djqueue_message", "sent_at", sent[0].pk)
    assert rollups.sample_depth() == 2
    depths = {d.queue.name: d for d in QueueDepth.objects.select_related("queue")}
    assert (depths["stats.paused"].ready, depths["stats.paused"].oldest_ready_at) == (3, None)
    assert depths["stats.other"].oldest_ready_at is not None


def test_a_queue_whose_only_claim_cannot_be_read_is_sampled_with_its_claim_age_unknown():
    """The snapshot's oldest claim (a ``Min`` in SQL) failed every queue's sample at
    each pass while an unreadable claim time was its queue's only claim (PostgreSQL's
    'infinity' and nothing else to compare it with)."""
    djqueue.create_queue("stats.other")
    djqueue.send("stats.other", {"n": 0})
    djqueue.receive("stats.other")
    djqueue.create_queue("stats.held")
    djqueue.send("stats.held", {"n": 1})
    [held] = djqueue.receive("stats.held", owner="leased")
    write_unreadable_time("djqueue_message", "claimed_at", held.pk)
    assert rollups.sample_depth() == 2
    depths = {d.queue.name: d for d in QueueDepth.objects.select_related("queue")}
    assert (depths["stats.held"].in_flight, depths["stats.held"].oldest_claimed_at) == (1, None)
    assert depths["stats.other"].oldest_claimed_at is not None


def test_a_queue_whose_creation_time_cannot_be_read_stops_no_alarm():
    """The alarms read the depth samples joined to their queues' rows, so one queue row
    whose ``created_at`` a hand edit left unreadable failed every policy at every pass
    (SQLite, PostgreSQL); no metric reads that time."""
    djqueue.create_queue("stats.other")
    djqueue.send("stats.other", {"n": 0})
    edited = djqueue.create_queue("stats.edited")
    djqueue.send(edited, {"n": 1})
    rollups.sample_depth()
    write_unreadable_time("djqueue_queue", "created_at", edited.pk)
    AlarmPolicy.objects.create(name="any", metric=Metric.OLDEST_AGE, threshold=60)
    AlarmPolicy.objects.create(name="edited", metric=Metric.OLDEST_AGE, threshold=60,
                               queue_id=edited.pk)
    fired = alarms.evaluate(timezone.now() + timedelta(seconds=120))
    assert [(a.policy.name, a.subject) for a in fired] == [
        ("any", "stats.other"), ("edited", "stats.edited")]  # the older one is the worst


def test_alarm_metrics_oldest_age_in_flight_dead_and_group_lag():
    djqueue.create_queue("stats.m", max_attempts=1)
    djqueue.create_topic("stats.t")
    djqueue.subscribe("stats.t", "slow")
    djqueue.send_batch("stats.m", [{"n": i} for i in range(3)])
    djqueue.receive("stats.m")  # one in flight
    [dead] = djqueue.receive("stats.m")
    dead.nack(error="x")
    djqueue.publish_batch("stats.t", [{"n": i} for i in range(4)])
    rollups.sample_depth()
    later = timezone.now() + timedelta(seconds=120)
    policies = {metric: AlarmPolicy.objects.create(name=metric, metric=metric, threshold=t)
                for metric, t in [(Metric.OLDEST_AGE, 60), (Metric.IN_FLIGHT_AGE, 60),
                                  (Metric.DEAD_LETTERS, 0), (Metric.GROUP_LAG, 3)]}
    fired = {a.policy.metric: a for a in alarms.evaluate(later)}
    assert set(fired) == set(policies)
    assert fired[Metric.DEAD_LETTERS].value == 1
    assert fired[Metric.GROUP_LAG].subject == "stats.t:slow" and fired[Metric.GROUP_LAG].value == 4
    assert 119 < fired[Metric.IN_FLIGHT_AGE].value < 130
    assert fired[Metric.OLDEST_AGE].subject == "stats.m"


def test_fired_alarms_are_pruned_after_their_retention_and_their_policy_stays(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "ALARM_RETENTION": 3600}
    policy = AlarmPolicy.objects.create(name="deep", metric=Metric.DEPTH, threshold=5)
    now = timezone.now()
    old, kept = (Alarm.objects.create(policy=policy, subject="q", value=6, threshold=5,
                                      fired_at=now - timedelta(seconds=age))
                 for age in (3601, 3599))
    assert prune_history(now) >= 1
    assert list(Alarm.objects.all()) == [kept] and not Alarm.objects.filter(pk=old.pk).exists()
    assert AlarmPolicy.objects.filter(pk=policy.pk).exists()
