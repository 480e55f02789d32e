"""Limits held by real worker processes, counted from what the handlers and the history
recorded (claim times, handler start and finish times)."""

from __future__ import annotations

import signal
import statistics
import time
from collections import defaultdict
from datetime import datetime

import pytest

import djqueue
from djqueue.models import History, Message, QueueLimiter, State
from tests.conftest import kill, wait_until
from tests.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def most_in_any_window(times: list[float], width: float) -> int:
    """The most of ``times`` in any half-open window [t, t + width) (windows start at one)."""
    times = sorted(times)
    most, end = 0, 0
    for start, t in enumerate(times):
        while end < len(times) and times[end] < t + width:
            end += 1
        most = max(most, end - start)
    return most


def most_at_once(runs: list[tuple[float, float]]) -> int:
    """The most runs (start, finish) in progress at one moment."""
    events = sorted([(s, 1) for s, _ in runs] + [(f, -1) for _, f in runs])
    running = most = 0
    for _, step in events:  # at a tie the finish (-1) comes first
        running += step
        most = max(most, running)
    return most


def epoch(value: datetime) -> float:
    return value.timestamp()


def workers(spawn, queue: str, processes: int, threads: int) -> list:
    started = [spawn("djqueue_worker", queue, "-c", str(threads)) for _ in range(processes)]
    return started


@pytest.mark.slow
def test_a_queue_rate_holds_in_every_window_across_processes(spawn) -> None:
    # How fully the rate is used is a speed: bench/limit_use.py reads it on every database.
    djqueue.create_queue("l.rate", rate_limit="50/s")
    djqueue.send_batch("l.rate", [{"n": i} for i in range(1000)])
    procs = workers(spawn, "l.rate", 3, 4)
    wait_until(lambda: History.objects.filter(queue__name="l.rate").count() == 1000, 60,
               "1,000 messages drained at 50/s")
    claims = [epoch(t) for t in History.objects.values_list("claimed_at", flat=True)]
    finishes = [epoch(t) for t in History.objects.values_list("finished_at", flat=True)]
    drain = max(finishes) - min(claims)
    most = most_in_any_window(claims, 1.0)
    print(f"50/s: most claims in a 1 s window {most}, drain {drain:.2f}s, "
          f"workers that claimed {len(set(Run.objects.values_list('pid', flat=True)))}")
    assert most <= 50 + 5  # the rate plus the burst (by default a tenth of a second's: 5)
    assert drain >= 19.0  # no faster than the rate allows: 995 after a burst of 5, 19.9 s
    assert len(set(Run.objects.values_list("pid", flat=True))) == 3
    for proc in procs:
        proc.signal(signal.SIGTERM)


def test_a_queue_concurrency_limit_holds_across_processes_and_fills(spawn) -> None:
    # How fully the places are used is a speed: bench/limit_use.py reads it.
    djqueue.create_queue("l.conc", concurrency_limit=3)
    total, work = 60, 0.2
    djqueue.send_batch("l.conc", [{"n": i, "sleep": work} for i in range(total)])
    workers(spawn, "l.conc", 3, 4)
    wait_until(lambda: Run.objects.count() == total, 60, "60 runs of 0.2 s, 3 at a time")
    runs = list(Run.objects.values_list("started", "finished"))
    elapsed = max(f for _, f in runs) - min(s for s, _ in runs)
    ideal = total * work / 3
    print(f"concurrency 3: most at once {most_at_once(runs)}, {elapsed:.2f}s "
          f"against an ideal {ideal:.2f}s ({elapsed / ideal:.3f})")
    assert most_at_once(runs) == 3  # never more, and every place was used
    assert elapsed >= ideal  # no faster than three at a time allow


def test_group_concurrency_holds_per_key_and_keys_progress_fairly(spawn) -> None:
    djqueue.create_queue("l.keys", group_concurrency=2)
    began = time.time()
    for key in range(20):  # key by key: the last key's messages are the newest
        djqueue.send_batch("l.keys", [{"n": i, "sleep": 0.01} for i in range(50)],
                           group_key=f"k{key}")
    workers(spawn, "l.keys", 2, 4)
    wait_until(lambda: Run.objects.count() == 1000, 120, "1,000 runs over 20 keys")
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for group, started, finished in Run.objects.values_list("group", "started", "finished"):
        by_key[group].append((started, finished))
    assert max(most_at_once(runs) for runs in by_key.values()) <= 2
    done = {key: max(f for _, f in runs) - began for key, runs in by_key.items()}
    median = statistics.median(done.values())
    print(f"group_concurrency 2: keys done after median {median:.2f}s, "
          f"last {max(done.values()):.2f}s")
    assert max(done.values()) <= 2 * median


@pytest.mark.slow
def test_a_flooding_key_keeps_its_rate_and_the_quiet_keys_pass_it(spawn) -> None:
    djqueue.create_queue("l.keyrate", group_rate_limit="5/s")
    djqueue.send_batch("l.keyrate", [{"n": i} for i in range(1000)], group_key="flood")
    for key in range(19):
        djqueue.send_batch("l.keyrate", [{"n": i} for i in range(20)], group_key=f"q{key}")
    workers(spawn, "l.keyrate", 2, 4)
    quiet = Run.objects.exclude(group="flood")
    wait_until(lambda: quiet.count() == 19 * 20, 30, "the quiet keys' 380 messages")
    # Counted from the first handler's start, not from the spawn: two processes starting
    # Django on a loaded 2-core machine took up to 3 s, which says nothing about the limit.
    began = min(Run.objects.values_list("started", flat=True))
    quiet_done = max(quiet.values_list("finished", flat=True)) - began
    # The limit governs claims: windows of claim times, not of handler starts, which a
    # loaded machine's thread scheduling bunches (7 starts of a key in one second were
    # seen in a two-lane CI on SQLite). The history first, then what is still claimed:
    # a message acked between the two reads is missed, never counted twice.
    wait_until(lambda: History.objects.exclude(group_key="flood").count() == 19 * 20, 30,
               "the quiet keys' 380 acks")
    flood = [epoch(t) for t in History.objects.filter(group_key="flood")
             .values_list("claimed_at", flat=True)]
    flood += [epoch(t) for t in Message.objects.filter(group_key="flood", state=State.CLAIMED)
              .values_list("claimed_at", flat=True)]
    per_key = {k: most_in_any_window([epoch(t) for t in History.objects.filter(group_key=k)
                                      .values_list("claimed_at", flat=True)], 1.0)
               for k in ("q0", "q9", "q18")}
    started, elapsed = Run.objects.filter(group="flood").count(), time.time() - began
    print(f"5/s a key: quiet keys done in {quiet_done:.2f}s; the flood started {started} "
          f"meanwhile, at most {most_in_any_window(flood, 1.0)} claimed in a second")
    # 20 a key at 5/s: 3.8 s alone (4.3 measured; 8.2 once in a loaded two-lane CI on
    # SQLite). Behind the flood they would wait for its 1,000 at 5/s: 200 s.
    assert quiet_done <= 20.0
    assert most_in_any_window(flood, 1.0) <= 5 + 1
    assert max(per_key.values()) <= 5 + 1
    assert started >= 5 * elapsed * 0.7  # the flood runs at its rate


def test_a_killed_workers_concurrency_places_come_back_with_the_reaper(spawn) -> None:
    djqueue.create_queue("l.kill", concurrency_limit=2)
    # The first two (claimed first) take ten minutes on their first delivery: the victim
    # sits on both places.
    djqueue.send_batch("l.kill", [{"n": i, "sleep": 600 if i < 2 else 0, "first_only": True}
                                  for i in range(4)])
    victim = spawn("djqueue_worker", "l.kill", "-c", "4")
    wait_until(lambda: Message.objects.filter(state=State.CLAIMED).count() == 2, 30,
               "the victim to fill both places")
    spawn("djqueue_reaper")
    rescuer = spawn("djqueue_worker", "l.kill", "-c", "4")
    limiter = QueueLimiter.objects.filter(queue__name="l.kill")
    wait_until(lambda: limiter.get().held_back >= 3, 30, "the rescuer to be held back")
    assert Message.objects.filter(state=State.CLAIMED).count() == 2
    killed_at = time.monotonic()
    kill(victim)
    wait_until(lambda: History.objects.count() == 4, 30, "all four run and acked by the rescuer")
    print(f"places back and all four done {time.monotonic() - killed_at:.2f}s after the kill")
    assert Run.objects.count() == 4
    assert sorted(History.objects.values_list("attempts", flat=True)) == [1, 1, 2, 2]
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0


def test_limits_changed_while_workers_run_hold_within_a_second(spawn) -> None:
    djqueue.create_queue("l.change", concurrency_limit=0, rate_limit="1/h")
    djqueue.send_batch("l.change", [{"n": i} for i in range(40)])
    spawn("djqueue_worker", "l.change", "-c", "4")
    limiter = QueueLimiter.objects.filter(queue__name="l.change")
    wait_until(lambda: limiter.get().held_back >= 3, 30, "the worker to be held back")
    assert not History.objects.exists()
    # A concurrency limit of 0 holds everything back; raising it starts work at once.
    changed = time.time()
    djqueue.set_limits("l.change", concurrency_limit=5)
    wait_until(lambda: History.objects.exists(), 5, "the first message after the raise")
    first = epoch(History.objects.order_by("claimed_at").first().claimed_at)
    # The bucket (one token an hour) is the limit now: one message, then nothing.
    wait_until(lambda: limiter.get().held_back >= 6, 30, "the worker held back by the rate")
    assert History.objects.count() == 1
    raised = time.time()
    djqueue.set_limits("l.change", rate_limit="100/s", rate_burst=10)
    wait_until(lambda: History.objects.count() == 40, 10, "the rest at the new rate")
    second = min(epoch(t) for t in History.objects.values_list("claimed_at", flat=True)
                 if epoch(t) > first)
    print(f"limits changed: first claim {first - changed:.3f}s after the raise of the "
          f"concurrency limit, {second - raised:.3f}s after the raise of the rate")
    assert first - changed <= 1.0
    assert second - raised <= 1.0
