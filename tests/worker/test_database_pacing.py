"""Each of a worker's databases keeps its own idle backoff, a wake-up naming one makes it
due, and one whose claim failed is left alone for a while (djqueue.worker.database_pacing)."""

from __future__ import annotations

import time

import pytest

from djqueue.worker.database_pacing import FIRST_PAUSE, LONGEST_PAUSE, DatabasePacing

DATABASES = ["default", "p2", "p3"]


@pytest.fixture
def pacing(settings):
    """A pacing whose delays (POLL_MIN a minute, POLL_MAX two) no test outlasts."""
    settings.DJQUEUE = {**settings.DJQUEUE, "POLL_MIN": 60, "POLL_MAX": 120}
    return DatabasePacing()


def test_every_database_is_due_until_a_claim_there_finds_nothing(pacing):
    assert list(pacing.due(DATABASES)) == DATABASES
    pacing.claimed("p2", several=True, asked=10, found=0, acked=False)
    assert list(pacing.due(DATABASES)) == ["default", "p3"]
    assert 59 < pacing.next_due() - time.monotonic() <= 60


def test_a_claim_that_finds_messages_or_settles_acks_keeps_the_database_due(pacing):
    for db in DATABASES:
        pacing.claimed(db, several=True, asked=10, found=0, acked=False)
    pacing.claimed("default", several=True, asked=10, found=3, acked=False)
    pacing.claimed("p3", several=True, asked=10, found=0, acked=True)
    assert list(pacing.due(DATABASES)) == ["default", "p3"]


def test_a_claim_that_asked_for_none_leaves_the_database_due(pacing):
    pacing.claimed("p3", several=True, asked=0, found=0, acked=False)  # the batch was full before it
    assert list(pacing.due(DATABASES)) == DATABASES


def test_the_delay_doubles_up_to_poll_max(pacing):
    pacing.claimed("p2", several=True, asked=10, found=0, acked=False)
    pacing.claimed("p2", several=True, asked=10, found=0, acked=False)
    assert 119 < pacing.next_due() - time.monotonic() <= 120
    pacing.claimed("p2", several=True, asked=10, found=0, acked=False)
    assert 119 < pacing.next_due() - time.monotonic() <= 120


def test_a_wake_up_naming_a_database_makes_it_due_once(pacing):
    for db in DATABASES:
        pacing.claimed(db, several=True, asked=10, found=0, acked=False)
    assert list(pacing.due(DATABASES)) == []
    pacing.woken("p3")
    assert list(pacing.due(DATABASES)) == ["p3"]
    assert list(pacing.due(DATABASES)) == [], "the wake-up was taken by the claim before"


@pytest.mark.parametrize("name", [None, "elsewhere"])
def test_a_wake_up_naming_no_database_of_the_worker_makes_all_due(pacing, name):
    for db in DATABASES:
        pacing.claimed(db, several=True, asked=10, found=0, acked=False)
    pacing.woken(name)
    assert list(pacing.due(DATABASES)) == DATABASES


def test_one_database_is_paced_by_the_loop_alone(pacing):
    pacing.claimed("p2", several=False, asked=10, found=0, acked=False)
    assert list(pacing.due(["p2"])) == ["p2"]
    assert pacing.next_due() is None, "a single database sets no deadline of its own"


def test_a_database_no_longer_served_is_forgotten(pacing):
    pacing.claimed("p3", several=True, asked=10, found=0, acked=False)
    assert list(pacing.due(["default", "p2"])) == ["default", "p2"]
    assert pacing.next_due() is None



def test_a_database_with_acks_to_settle_is_due_though_put_off(pacing):
    pacing.claimed("p2", several=True, asked=10, found=0, acked=False)
    assert list(pacing.due(DATABASES, acking=["p2"])) == DATABASES


def test_a_failed_claim_leaves_its_database_alone_for_a_doubling_pause(pacing):
    pauses = [pacing.failed("p2") for _ in range(6)]
    assert pauses == [FIRST_PAUSE, 1.0, 2.0, 4.0, LONGEST_PAUSE, LONGEST_PAUSE]
    assert list(pacing.due(DATABASES, acking=["p2"])) == ["default", "p3"], (
        "not even its acks are tried while it is left alone")
    pacing.woken("p2")
    assert list(pacing.due(DATABASES)) == ["default", "p3"], "nor when a wake-up names it"
    assert list(pacing.due(["p2"])) == [], "a worker on that one database waits too"
    assert pacing.left_alone() == {"p2"}, "its finished messages are not settled either"


def test_no_database_is_left_alone_until_one_fails(pacing):
    pacing.claimed("p2", several=True, asked=10, found=0, acked=False)
    assert pacing.left_alone() == frozenset()


def test_a_claim_that_answers_ends_the_pause(pacing):
    for _ in range(3):
        pacing.failed("p2")
    pacing.claimed("p2", several=False, asked=10, found=0, acked=False)
    assert list(pacing.due(["p2"])) == ["p2"]
    assert pacing.failed("p2") == FIRST_PAUSE, "the next failure starts from the first pause"


def test_a_settlement_that_answers_ends_the_series_too(pacing):
    for _ in range(3):
        pacing.failed("p2")
    pacing.answered("p2")
    assert pacing.left_alone() == frozenset()
    assert pacing.failed("p2") == FIRST_PAUSE, "the next failure starts from the first pause"
