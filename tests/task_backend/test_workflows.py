"""Workflows on django.tasks with real worker processes: chords through SIGKILLs, DAGs,
failure policies, cancel, retry, batches, and enqueue inside transactions."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import djqueue
from djqueue.exceptions import InvalidWorkflow, WorkflowBusy
from djqueue.models import Message, StepDependency, Workflow, WorkflowStep
from djqueue.storage.expiry import expires_at
from djqueue.storage.transitions import fail
from tests import tasks
from tests.conftest import kill, wait_until
from tests.models import Effect, Run

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ("t.wf", "t.wf-final")


def finished(handle: djqueue.tasks.workflow_handles.WorkflowHandle) -> bool:
    return handle.refresh().is_finished


def runs_by_key() -> dict[int, list[Run]]:
    found: dict[int, list[Run]] = {}
    for run in Run.objects.order_by("started"):
        found.setdefault(run.key, []).append(run)
    return found


def test_a_chord_of_1000_joins_exactly_once_through_sigkills(spawn):
    handle = djqueue.chord([djqueue.step(tasks.wf_add, i, i) for i in range(1000)],
                           djqueue.step(tasks.wf_total)).enqueue(name="sum of doubles")
    assert handle.status == "RUNNING" and len(handle.steps) == 1001
    spawn("djqueue_reaper")
    workers = [spawn("djqueue_worker", *QUEUES, "-c", "2", "-b", "10") for _ in range(4)]
    rng = random.Random(20261126)
    kills = 0
    deadline = time.monotonic() + 240
    while not finished(handle):
        assert time.monotonic() < deadline, f"{handle.refresh()._workflow.steps_left} left"
        time.sleep(1.0)  # the kill interval the acceptance asks for, not a synchronisation
        slot = rng.randrange(len(workers))
        kill(workers[slot])
        kills += 1
        workers[slot] = spawn("djqueue_worker", *QUEUES, "-c", "2", "-b", "10")
    assert handle.status == "SUCCEEDED", handle.error
    assert handle.result == sum(2 * i for i in range(1000))
    assert handle.results[:5] == [0, 2, 4, 6, 8]
    assert list(Effect.objects.values_list("key", flat=True)) == [1000]  # ran once
    assert kills >= 1
    print(f"chord of 1000 with {kills} SIGKILLs: callback once, sum {handle.result}")


def test_a_dag_of_50_with_diamonds_runs_each_step_after_all_its_parents(spawn):
    # layers of diamonds: each step after two steps of the layer before (and the first)
    steps = [djqueue.step(tasks.wf_node, 0, 0.02).named("n0")]
    for key in range(1, 50):
        parents = {steps[(key - 1) // 2], steps[max(0, key - 2)], steps[0]}
        steps.append(djqueue.step(tasks.wf_node, key, 0.02).named(f"n{key}").after(*parents))
    handle = djqueue.workflow(*steps).enqueue(name="diamonds")
    edges = list(StepDependency.objects.values_list("parent", "child"))
    assert len(edges) >= 90
    spawn("djqueue_reaper")
    workers = [spawn("djqueue_worker", "t.wf", "-c", "3", "-b", "4") for _ in range(2)]
    killed: set[int] = set()
    wait_until(lambda: Run.objects.count() >= 10, 60, "ten steps to run")
    killed.add(workers[0].pid)
    kill(workers[0])
    workers[0] = spawn("djqueue_worker", "t.wf", "-c", "3", "-b", "4")
    wait_until(lambda: finished(handle), 120, "the DAG to finish")
    assert handle.status == "SUCCEEDED", handle.error
    runs = runs_by_key()
    assert set(runs) == set(range(50))
    for key, found in runs.items():  # only a killed worker's run happens twice
        assert all(run.pid in killed for run in found[:-1]), (key, found)
    for parent, child in edges:
        started = runs[child][0].started
        assert started >= max(r.finished for r in runs[parent]), (parent, child)
    assert [s.attempts >= 1 for s in handle.steps] == [True] * 50


def test_a_failing_member_stops_its_dependants_by_default(spawn, tmp_path):
    marker = tmp_path / "fail"
    marker.touch()
    first = djqueue.step(tasks.wf_node, 1).named("first")
    bad = djqueue.step(tasks.wf_fail_while, 2, str(marker)).named("bad").after(first)
    after_bad = djqueue.step(tasks.wf_node, 3).named("after bad").after(bad)
    last = djqueue.step(tasks.wf_node, 4).named("last").after(after_bad)
    handle = djqueue.workflow(first, bad, after_bad, last).enqueue()
    spawn("djqueue_worker", *QUEUES)
    wait_until(lambda: finished(handle), 30, "the workflow to fail")
    assert handle.status == "FAILED"
    assert "ValueError: step 2 failed" in handle.error
    assert [s.get_state_display() for s in handle.steps] == [
        "succeeded", "failed", "cancelled", "cancelled"]
    assert "ValueError" in handle.errors["bad"]
    assert set(runs_by_key()) == {1, 2}  # the dependants never started

    # retry re-runs the failed step and then its dependants only
    marker.unlink()
    with pytest.raises(WorkflowBusy, match="only a failed or cancelled"):
        djqueue.chain(djqueue.step(tasks.wf_node, 9)).enqueue().retry()
    assert handle.retry() == 3
    wait_until(lambda: finished(handle), 30, "the retried workflow to finish")
    assert handle.status == "SUCCEEDED" and handle.error == ""
    assert Counter(r.key for r in Run.objects.all()) == {1: 1, 2: 2, 3: 1, 4: 1, 9: 1}
    assert handle.results == [1, 2, 3, 4]


def test_a_step_whose_message_is_dead_lettered_settles_failed_and_stops_its_dependants():
    """A worker killed on every delivery, say: the reaper dead-letters the step's message
    (here fail(dead_letter=True), the same transition), and no run of the task ends it."""
    handle = djqueue.chain(djqueue.step(tasks.wf_node, 1).named("doomed"),
                           djqueue.step(tasks.wf_node, 2).named("after")).enqueue()
    [message] = djqueue.receive("t.wf")
    fail(message, "lease expired (held by host-1)", dead_letter=True)
    assert handle.wait(timeout=5).status == "FAILED"
    assert [s.get_state_display() for s in handle.steps] == ["failed", "cancelled"]
    assert handle.steps[0].error_class == "djqueue.exceptions.TaskDeadLettered"
    assert "dead-lettered after 1 delivery; the last error: lease expired (held by host-1)" in (
        handle.errors["doomed"])
    assert handle.retry() == 2  # a retry runs it again, then its dependant
    drained = djqueue.drain("t.wf")
    assert drained.acked == 2 and handle.wait(timeout=5).status == "SUCCEEDED"


def test_a_step_whose_message_expires_settles_failed():
    djqueue.create_queue("t.wf", message_ttl=0.2)
    handle = djqueue.chain(djqueue.step(tasks.wf_node, 1).named("late"),
                           djqueue.step(tasks.wf_node, 2)).enqueue()
    stamp = expires_at(Message.objects.get(queue__name="t.wf"))
    wait_until(lambda: time.time() > stamp, 30, "the expiry to pass", interval=0.01)
    assert djqueue.drain("t.wf").runs == 0
    assert handle.wait(timeout=5).status == "FAILED"
    assert "Expired at" in handle.errors["late"]
    assert not Run.objects.exists()


def test_a_steps_task_expires_counts_from_when_the_step_is_sent():
    """A chain's second step is sent when the first ends, with its task's ``expires``
    from then on: not from the workflow's enqueue, and not on the first step."""
    handle = djqueue.chain(djqueue.step(tasks.wf_node, 1),
                           djqueue.step(tasks.wf_expiring, 2).named("late")).enqueue()
    assert expires_at(Message.objects.get(queue__name="t.wf")) is None
    assert djqueue.drain("t.wf").acked == 1
    message = Message.objects.get(queue__name="t.wf-final")
    stamp = expires_at(message)
    assert stamp is not None and abs(stamp - message.sent_at.timestamp() - 0.3) < 0.01
    wait_until(lambda: time.time() > stamp, 30, "the expiry to pass", interval=0.01)
    assert djqueue.drain("t.wf-final").runs == 0
    assert handle.wait(timeout=5).status == "FAILED"
    assert "Expired at" in handle.errors["late"]
    assert list(Run.objects.values_list("key", flat=True)) == [1]


def test_with_continue_the_callback_receives_the_failures(spawn, tmp_path):
    marker = tmp_path / "fail"
    marker.touch()
    members = [djqueue.step(tasks.wf_node, 1),
               djqueue.step(tasks.wf_fail_while, 2, str(marker)).named("broken"),
               djqueue.step(tasks.wf_node, 3)]
    callback = djqueue.step(tasks.wf_report).receiving("results", failures="failures")
    handle = djqueue.chord(members, callback).enqueue(policy="continue")
    spawn("djqueue_worker", *QUEUES)
    wait_until(lambda: finished(handle), 30, "the workflow to finish")
    report = handle.result
    assert report["results"] == [1, None, 3]
    [failure] = report["failures"]
    assert failure["position"] == 1 and failure["step"] == "broken"
    assert failure["exception_class"] == "builtins.ValueError"
    assert "step 2 failed" in failure["message"]
    assert handle.status == "FAILED" and handle.error == "1 step(s) failed"


def test_a_chain_passes_results_to_steps_that_ask(spawn):
    handle = djqueue.chain(
        djqueue.step(tasks.wf_add, 1, 2),
        djqueue.step(tasks.wf_add, 10).receiving(),  # 3 + 10: as the first argument
        djqueue.step(tasks.wf_add, a=1000).receiving("b"),  # 1000 + 13: as a keyword
        djqueue.step(tasks.wf_add, 5, 5),  # does not ask
    ).enqueue()
    spawn("djqueue_worker", *QUEUES)
    wait_until(lambda: finished(handle), 30, "the chain")
    assert handle.results == [3, 13, 1013, 10] and handle.result == 10
    assert handle.steps[2].kwargs == {"a": 1000}  # what it was given, not what it received


def test_cancel_while_running_starts_no_unstarted_step(spawn, tmp_path):
    hold = tmp_path / "hold"
    first = [djqueue.step(tasks.wf_node, i, 0, str(hold)) for i in range(2)]
    later = [djqueue.step(tasks.wf_node, 10 + i).after(*first) for i in range(5)]
    queued = [djqueue.step(tasks.wf_node, 20 + i) for i in range(20)]
    handle = djqueue.workflow(*first, *later, *queued).enqueue()
    worker = spawn("djqueue_worker", "t.wf", "-c", "2", "-b", "1")
    wait_until(lambda: Effect.objects.count() == 2, 30, "the two held steps to start")
    assert handle.cancel() is True
    cancelled_at = time.time()
    hold.touch()
    wait_until(lambda: finished(handle), 30, "the cancelled workflow to settle")
    assert handle.status == "CANCELLED"
    started_after = [r.key for r in Run.objects.all() if r.started > cancelled_at]
    assert started_after == []
    assert not Run.objects.filter(key__gte=10).exists()
    states = Counter(s.get_state_display() for s in handle.steps)
    assert states == {"succeeded": 2, "cancelled": 25}
    assert handle.cancel() is False
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_workflow_enqueued_in_a_rolled_back_transaction_leaves_no_row():
    with pytest.raises(RuntimeError), transaction.atomic():
        djqueue.chord([djqueue.step(tasks.wf_add, i, i) for i in range(5)],
                      djqueue.step(tasks.wf_total)).enqueue()
        with djqueue.batch(on_finish=djqueue.step(tasks.wf_node, 1)):
            tasks.wf_add.enqueue(1, 1)
        raise RuntimeError("the view failed")
    assert not Workflow.objects.exists() and not WorkflowStep.objects.exists()
    assert not StepDependency.objects.exists() and not Message.objects.exists()


def test_a_batch_runs_its_callbacks_once_when_the_last_member_settles(spawn, tmp_path):
    marker = tmp_path / "fail"
    with djqueue.batch(on_success=djqueue.step(tasks.wf_node, 100),
                       on_failure=djqueue.step(tasks.wf_node, 101),
                       on_finish=djqueue.step(tasks.wf_report).receiving("results"),
                       name="images") as handle:
        results = [tasks.wf_add.enqueue(i, 1) for i in range(5)]
    assert {r.status.name for r in results} == {"READY"}
    marker.touch()
    with djqueue.batch(on_failure=djqueue.step(tasks.wf_node, 201)) as failing:
        tasks.wf_fail_while.enqueue(200, str(marker))
    spawn("djqueue_worker", *QUEUES)
    wait_until(lambda: finished(handle) and finished(failing), 30, "both batches")
    assert handle.status == "SUCCEEDED" and handle.result == {
        "results": [1, 2, 3, 4, 5], "failures": None}
    assert sorted(r.key for r in Run.objects.all()) == [100, 200, 201]
    assert [s.get_state_display() for s in handle.steps][-3:] == [
        "succeeded", "skipped", "succeeded"]
    assert failing.status == "FAILED"
    assert tasks.wf_add.get_result(results[0].id).return_value == 1


def test_bad_workflows_get_specific_errors_and_leave_nothing():
    one = djqueue.step(tasks.wf_node, 1)
    cases = [
        (lambda: djqueue.chain(one, one).enqueue(), "appears twice"),
        (lambda: djqueue.step(print), "django.tasks task"),
        (lambda: djqueue.group().enqueue(), "at least one step"),
        (lambda: djqueue.chain("step").enqueue(), "made of steps"),
        (lambda: djqueue.step(tasks.wf_node, object()).enqueue(), "JSON"),
        # a step's row is a JSON column, which stores no NUL on PostgreSQL
        (lambda: djqueue.step(tasks.wf_node, "a\x00b").enqueue(), "NUL character"),
        (lambda: djqueue.step(tasks.wf_node, 1).enqueue(policy="maybe"), "policy"),
        (lambda: djqueue.step(tasks.wf_node, 1).receiving("not a name"), "identifier"),
        (lambda: djqueue.step(tasks.add, 1, 1).enqueue(), None),  # default backend: fine
    ]
    a = djqueue.step(tasks.wf_node, 1)
    b = djqueue.step(tasks.wf_node, 2).after(a)
    a.after(b)
    cases.append((lambda: djqueue.workflow(a, b).enqueue(), "cycle"))
    for make, wanted in cases:
        if wanted is None:
            make()
            continue
        # Refused before any round trip to the database: in the time of the checks alone.
        with CaptureQueriesContext(connection) as queries, pytest.raises(
                InvalidWorkflow, match=wanted):
            make()
        assert not queries.captured_queries, (wanted, queries.captured_queries)
    assert Workflow.objects.count() == 1


def test_a_message_naming_a_workflow_without_its_token_is_dead_lettered(spawn):
    handle = djqueue.step(tasks.wf_node, 1).enqueue()
    steps = handle.steps
    forged = djqueue.send("t.wf", {"task": "tests.tasks.wf_node", "backend": "workflows",
                                   "args": [5], "kwargs": {},
                                   "workflow": [handle.id, steps[0].position, "0" * 32, 0]})
    spawn("djqueue_worker", "t.wf")
    dead = wait_until(lambda: Message.objects.filter(pk=forged.pk, state=4).first(), 30,
                      "the forged message to be dead-lettered")
    assert "not its own" in dead.last_error
    assert not Run.objects.filter(key=5).exists()


def test_an_empty_batch_ends_at_once_and_one_with_only_callbacks_starts_them():
    with djqueue.batch(name="nothing") as empty:
        pass
    assert empty.refresh().status == "SUCCEEDED" and empty.result is None
    with djqueue.batch(on_success=djqueue.step(tasks.wf_node, 1),
                       on_failure=djqueue.step(tasks.wf_node, 2)) as only_callbacks:
        pass
    states = [s.get_state_display() for s in only_callbacks.steps]
    assert states == ["ready", "skipped"]  # no member failed: on_success is queued
    assert Message.objects.count() == 1


def test_a_step_settles_once_even_when_a_batch_names_one_that_is_no_longer_ready():
    """The join's rule, in one ack transaction: of three runs, the one whose step has
    already left READY writes nothing and counts nothing down; the other two settle and
    count the callback down by two. A later delivery's runs of the same steps write
    nothing."""
    from django.utils import timezone

    from djqueue.models import StepState
    from djqueue.storage import dialects
    from djqueue.tasks.workflow_joins import Settled, settle

    handle = djqueue.chord([djqueue.step(tasks.wf_add, i, i) for i in range(3)],
                           djqueue.step(tasks.wf_total)).enqueue()
    workflow = Workflow.objects.get(pk=handle.id)
    steps = list(WorkflowStep.objects.filter(workflow=workflow).order_by("position"))
    WorkflowStep.objects.filter(pk=steps[1].pk).update(state=StepState.CANCELLED)
    now = timezone.now()
    runs = [Settled(step.message_id, workflow.pk, step.position, workflow.token,
                    StepState.SUCCEEDED, 2 * step.position, "", "", 1, now, now)
            for step in steps[:3]]
    later = [Settled(run.message_id, workflow.pk, run.position, workflow.token,
                     StepState.FAILED, None, "late", "x.Late", 2, now, timezone.now())
             for run in runs]
    db = dialects.alias()
    for batch in (runs, later):
        with transaction.atomic(using=db):
            settle(db, batch)
    after = {s.position: s for s in WorkflowStep.objects.filter(workflow=workflow)}
    assert [after[p].state for p in range(3)] == [
        StepState.SUCCEEDED, StepState.CANCELLED, StepState.SUCCEEDED]
    assert after[1].result is None and after[2].result == 4
    assert after[3].parents_left == 1  # three parents, two settled
    workflow.refresh_from_db()
    assert workflow.steps_left == 2  # four steps, two settled
