"""django.tasks on djqueue, through the public Tasks API and real worker processes."""

import re
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from djqueue.exceptions import TaskCancelled, TaskTimeout
from djqueue.models import History, Message, ProcessKind, TaskRecord, TaskStatus, Worker
from djqueue.tasks.backend import cancel
from djqueue.tasks.compat import TaskResultDoesNotExist, TaskResultStatus, task_backends
from tests import tasks
from tests.conftest import in_threads, kill, run_async, wait_until
from tests.models import Effect, SignalLog

pytestmark = pytest.mark.django_db(transaction=True)


def finished(*results) -> bool:
    for result in results:
        result.refresh()
    return all(r.is_finished for r in results)


def test_public_tasks_api_end_to_end(spawn):
    run_after = timezone.now() + timedelta(seconds=1)
    added = tasks.add.enqueue(2, 3)
    later = tasks.add.using(run_after=run_after).enqueue(10, 20)
    shouted = tasks.shout.enqueue("hello")
    squared = run_async(tasks.async_square.aenqueue(7))
    attempt = tasks.which_attempt.enqueue(marker="m")
    boom = tasks.explode.enqueue()
    every = [added, later, shouted, squared, attempt, boom]
    assert {r.status for r in every} == {TaskResultStatus.READY}
    assert SignalLog.objects.filter(signal="enqueued").count() == 6

    worker = spawn("djqueue_worker", "t.tasks", "default", "-c", "2")
    wait_until(lambda: finished(*every), 60, "every task to finish")

    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 5
    assert later.return_value == 30 and later.started_at >= run_after
    assert shouted.return_value == "HELLO"
    assert squared.return_value == 49
    assert attempt.return_value == {"attempt": 1, "id": attempt.id, "marker": "m"}
    assert boom.status == TaskResultStatus.FAILED
    [error] = boom.errors
    assert error.exception_class is KeyError and "missing thing" in error.traceback
    with pytest.raises(ValueError):
        boom.return_value  # noqa: B018
    for result in every:
        assert result.attempts == 1 and len(result.worker_ids) == 1
        assert result.enqueued_at <= result.started_at <= result.finished_at
    record = TaskRecord.objects.get(pk=shouted.id)
    assert History.objects.get(pk=record.message_id).priority == 10
    assert tasks.add.get_result(added.id).return_value == 5
    assert run_async(tasks.add.aget_result(added.id)).return_value == 5
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("00000000-0000-0000-0000-000000000000")
    for name in ("started", "finished"):
        assert set(SignalLog.objects.filter(signal=name).values_list("task_id", flat=True)) == {
            r.id for r in every}
    assert SignalLog.objects.get(signal="finished", task_id=boom.id).status == "FAILED"
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_task_killed_mid_run_runs_again_and_succeeds(spawn):
    result = tasks.slow_first_time.enqueue(41)
    spawn("djqueue_reaper")
    victim = spawn("djqueue_worker", "default")
    wait_until(lambda: Effect.objects.filter(key=41).exists(), 30, "the task to start")
    rescuer = spawn("djqueue_worker", "default")
    wait_until(lambda: Worker.objects.filter(kind=ProcessKind.WORKER).count() == 2, 30,
               "the second worker")
    kill(victim)
    wait_until(lambda: finished(result), 30, "the task to finish after the kill")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "done"
    assert result.attempts == 2
    assert len(set(result.worker_ids)) == 2
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0


def test_retries_follow_backend_options(spawn):
    result = tasks.fails_twice.enqueue(77)
    worker = spawn("djqueue_worker", "t.retrying")
    wait_until(lambda: finished(result), 60, "the retried task to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 77
    assert result.attempts == 3
    assert [e.exception_class for e in result.errors] == [ValueError, ValueError]
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    # The worker's log says why each run is retried: the task's own exception.
    retried = re.findall(r"failed on attempt (\d); retrying in [0-9.]+ s: \S*RetryTask: "
                         r"tests\.tasks\.fails_twice raised ValueError: not yet\n", worker.output())
    assert retried == ["1", "2"], worker.output()


def test_unique_key_with_eight_concurrent_enqueuers_leaves_one_pending_task():
    ids = in_threads(lambda _: tasks.refresh_cache.enqueue("prices").id, 8)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert Message.objects.count() == 1  # the only row until a worker starts it
    assert tasks.refresh_cache.enqueue("other").id != ids[0]


def test_unique_key_is_free_again_once_the_task_finished(spawn):
    first = tasks.refresh_cache.enqueue("prices")
    worker = spawn("djqueue_worker", "default")
    wait_until(lambda: finished(first), 30, "the first run")
    second = tasks.refresh_cache.enqueue("prices")
    assert second.id != first.id
    wait_until(lambda: finished(second), 30, "the second run")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_timeout_fails_the_task_and_frees_the_slot(spawn):
    slow = tasks.oversleeps.enqueue(30)
    quick = tasks.add.enqueue(1, 2)
    worker = spawn("djqueue_worker", "default", "-c", "1", "-b", "1")
    wait_until(lambda: finished(slow, quick), 15, "both tasks, long before the sleep ends")
    assert slow.status == TaskResultStatus.FAILED
    assert slow.errors[0].exception_class is TaskTimeout
    assert quick.return_value == 3
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_cancel_ready_task_never_runs(spawn):
    doomed = tasks.add.enqueue(5, 5)
    assert cancel(doomed.id) is True
    doomed.refresh()
    assert doomed.status == TaskResultStatus.FAILED
    assert doomed.errors[0].exception_class is TaskCancelled
    assert not Message.objects.exists()
    assert cancel(doomed.id) is False  # already finished
    survivor = tasks.add.enqueue(1, 1)
    worker = spawn("djqueue_worker", "default", "--burst")
    assert worker.wait(30) == 0
    assert finished(survivor) and survivor.return_value == 2
    assert not SignalLog.objects.filter(signal="started", task_id=doomed.id).exists()


def test_cancel_running_task_is_seen_through_its_context(spawn):
    running = tasks.cooperative.enqueue(n=88)
    worker = spawn("djqueue_worker", "default")
    wait_until(lambda: Effect.objects.filter(key=88).exists(), 30, "the task to start")
    assert cancel(running.id) is True
    wait_until(lambda: finished(running), 30, "the task to stop")
    assert running.status == TaskResultStatus.FAILED
    assert running.errors[-1].exception_class is TaskCancelled
    assert running.attempts == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_readme_example_runs_as_written(spawn):
    from django.contrib.auth import get_user_model

    from project.tasks import welcome_email

    user = get_user_model().objects.create(username="ada", email="ada@example.com")
    result = welcome_email.enqueue(user.pk)
    assert welcome_email.enqueue(user.pk).id == result.id  # unique_key: one pending run
    worker = spawn("djqueue_worker", "default", "--burst")
    assert worker.wait(60) == 0, worker.output()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "welcomed ada"


def test_enqueue_on_commit_waits_for_the_commit():
    from django.db import transaction

    from djqueue.tasks.backend import QueueBackend

    backend = QueueBackend("default", {"OPTIONS": {"ENQUEUE_ON_COMMIT": "default"}})
    with transaction.atomic():
        pending = backend.enqueue(tasks.add, [1, 2], {})
        assert not TaskRecord.objects.filter(pk=pending.id).exists()
    assert TaskRecord.objects.filter(pk=pending.id).exists()
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = backend.enqueue(tasks.add, [3, 4], {})
        raise RuntimeError("rolled back")
    assert not TaskRecord.objects.filter(pk=dropped.id).exists()


def test_finished_results_are_pruned_after_retention():
    from django.test import override_settings

    from djqueue.maintenance.pruning import prune_history

    for name, at in (("old", timezone.now() - timedelta(days=8)), ("fresh", timezone.now())):
        TaskRecord.objects.create(
            id=name, task_path="tests.tasks.add", backend="default", queue_name="default",
            enqueued_at=timezone.now(), status=TaskStatus.SUCCESSFUL, finished_at=at)
    pending = tasks.add.enqueue(3, 3)
    with override_settings(DJQUEUE={"RESULT_RETENTION": 7 * 24 * 3600}):
        assert prune_history() == 1
    assert set(TaskRecord.objects.values_list("pk", flat=True)) == {"fresh"}
    assert tasks.add.get_result(pending.id).status == TaskResultStatus.READY


def test_a_result_is_read_from_its_message_until_the_ack_writes_its_record():
    from djqueue.api.receiving import receive
    from djqueue.storage.claims import ack_and_claim
    from djqueue.tasks.task_handler import in_claim_transaction, run_task
    from djqueue.worker import registry

    first, second = tasks.add.enqueue(2, 2), tasks.add.enqueue(3, 3)
    assert first.id.isdigit() and not TaskRecord.objects.exists()  # enqueue is one insert
    assert tasks.add.get_result(first.id).status == TaskResultStatus.READY
    held = receive("default", max_messages=2, owner="w1")
    running = tasks.add.get_result(first.id)
    assert (running.status, running.worker_ids) == (TaskResultStatus.RUNNING, ["w1"])
    for message in held:
        with registry.hook_runs_after():
            run_task(message)  # as under a worker: the record waits for the ack
    assert not TaskRecord.objects.exists()
    assert tasks.add.get_result(second.id).status == TaskResultStatus.RUNNING
    Message.objects.filter(pk=held[1].pk).update(lease_token="lost")
    acked, _ = ack_and_claim(held, [], 0, owner="w1", hook=in_claim_transaction)
    assert [m.pk for m in acked] == [held[0].pk]
    done = tasks.add.get_result(first.id)
    assert (done.status, done.return_value, done.attempts) == (TaskResultStatus.SUCCESSFUL, 4, 1)
    # The run whose lease was lost is dropped with its ack: the task will run again.
    assert not TaskRecord.objects.filter(pk=second.id).exists()
    assert tasks.add.get_result(second.id).status == TaskResultStatus.RUNNING


def test_a_first_run_that_succeeds_looks_up_no_connection_in_its_thread():
    """Under a worker's hook, a task's first run that succeeds leaves its record to the
    ack: where no receiver of the task signals writes to the database (the test
    project's signal log is disconnected here), the handler's thread never looks its
    database connection up in the run (each lookup goes through asgiref's Local, which
    raises and catches an error to learn the thread is in no event loop). The record is
    the ack's, as ever."""
    from django.db import connections

    from djqueue.api.receiving import receive
    from djqueue.storage.claims import ack_and_claim
    from djqueue.tasks.compat import task_finished, task_started
    from djqueue.tasks.task_handler import in_claim_transaction, run_task
    from djqueue.worker import registry
    from tests import signal_log

    results = [tasks.add.enqueue(2, 3), tasks.add.enqueue(4, 5)]
    held = receive("default", max_messages=2, owner="w1")

    def run_in_a_handler_thread(slot: int) -> list[str]:
        with registry.hook_runs_after():
            run_task(held[slot])
        return [conn.alias for conn in connections.all(initialized_only=True)]

    task_started.disconnect(dispatch_uid="tests-started")
    task_finished.disconnect(dispatch_uid="tests-finished")
    try:
        in_threads(run_in_a_handler_thread, 1)  # a process's first run may look it up
        assert in_threads(lambda _: run_in_a_handler_thread(1), 1) == [[]]
    finally:
        signal_log.connect()
    acked, _ = ack_and_claim(held, [], 0, owner="w1", hook=in_claim_transaction)
    assert len(acked) == 2
    for result, value in zip(results, (5, 9), strict=True):
        done = tasks.add.get_result(result.id)
        assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, value)


def test_a_record_survives_an_ack_transaction_that_rolled_back():
    """The worker retries an ack whose transaction failed after the record hook ran (a
    deadlock, a lost connection at COMMIT): the retried ack still writes the record, so
    the result is neither lost nor left RUNNING; a later redelivery's record is kept."""
    from django.db import DatabaseError

    from djqueue.api.receiving import receive
    from djqueue.storage.claims import ack_and_claim
    from djqueue.tasks.task_handler import in_claim_transaction, run_task
    from djqueue.worker import registry

    result = tasks.add.enqueue(20, 22)
    [message] = receive("default", owner="w1")
    with registry.hook_runs_after():
        run_task(message)

    def then_fail(db, acks, acked):
        in_claim_transaction(db, acks, acked)
        raise DatabaseError("injected after the record hook, before COMMIT")

    with pytest.raises(DatabaseError, match="injected"):
        ack_and_claim([message], [], 0, owner="w1", hook=then_fail)
    assert Message.objects.filter(pk=message.pk).exists()  # rolled back: still claimed
    assert not TaskRecord.objects.exists()
    acked, _ = ack_and_claim([message], [], 0, owner="w1", hook=in_claim_transaction)
    assert [m.pk for m in acked] == [message.pk]
    done = tasks.add.get_result(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 42)

    # A record written by a committed ack is forgotten by the next ack transaction,
    # but not the record of a newer delivery of the same message.
    again = tasks.add.enqueue(1, 1)
    [first] = receive("default", owner="w1")
    with registry.hook_runs_after():
        run_task(first)
    Message.objects.filter(pk=first.pk).update(lease_token="lost")  # its lease expired
    assert ack_and_claim([first], [], 0, owner="w1", hook=in_claim_transaction)[0] == []
    Message.objects.filter(pk=first.pk).update(state=1, owner="", lease_token="")
    [second] = receive("default", owner="w2")  # redelivered, to the same process
    with registry.hook_runs_after():
        run_task(second)
    ack_and_claim([], [], 0, owner="w2", hook=in_claim_transaction)  # an ack of nothing
    acked, _ = ack_and_claim([second], [], 0, owner="w2", hook=in_claim_transaction)
    assert [m.pk for m in acked] == [second.pk]
    done = tasks.add.get_result(again.id)
    assert (done.status, done.return_value, done.worker_ids[-1]) == (
        TaskResultStatus.SUCCESSFUL, 2, "w2")


def test_records_copied_by_the_ack_equal_those_written_from_python():
    """On every database the worker's ack copies a first run's success from its message
    row (djqueue.storage.statements.task_record_copy); each such record equals, field by
    field, the record the run built, beside records written from Python in the same ack
    (a failure, a deferred task), and a flag that cancel() set while the task ran is
    kept."""
    from django.db import connection

    from djqueue.api.receiving import receive
    from djqueue.storage.claims import ack_and_claim
    from djqueue.tasks import task_handler
    from djqueue.tasks.records import finish, first_run_values, result_values, running_record
    from djqueue.worker import registry

    tricky = ["it's", 'say "hi"', "back\\slash", "100% %s %(x)s", "Ωμέγα ✓ 𝄞",
              "x'); DROP TABLE t; --"]
    # PostgreSQL's jsonb keeps numbers as numeric: 1.5e300 reads back as an int there.
    huge = 1.5 if connection.vendor == "postgresql" else 1.5e300
    copyable = [tasks.echo.enqueue(text, i, 2**70, 0.1, huge, {"z": 1, "a": [None, True]},
                                   key=text) for i, text in enumerate(tricky)]
    copyable.append(tasks.add.enqueue(1, 2))
    failed = tasks.explode.enqueue()
    deferred = tasks.add.using(run_after=timezone.now() - timedelta(seconds=5)).enqueue(3, 4)
    held = receive("default", max_messages=20, owner="w1")
    assert len(held) == len(copyable) + 2
    # A first run's results are made straight from its message; they must equal the
    # results of the record that run_task would otherwise build.
    copyable_ids = {int(r.id) for r in copyable}
    for message in held:
        if message.pk in copyable_ids:
            assert first_run_values(message) == result_values(running_record(message))
    assert cancel(copyable[0].id)  # running: a record with the flag is written now
    with registry.hook_runs_after():
        for message in held:
            task_handler.run_task(message)
    by_id = {m.pk: m for m in held}
    built = {(str(e.copied.message_id) if e.copied else e.record.pk): e
             for e in task_handler._finished.values()
             if (e.copied.message_id if e.copied else e.record.message_id) in by_id}
    assert set(built) == {r.id for r in [*copyable, failed, deferred]}
    assert {pk for pk, e in built.items() if e.copied} == {r.id for r in copyable}

    def fields(record: TaskRecord) -> dict:
        return {f.attname: getattr(record, f.attname) for f in TaskRecord._meta.concrete_fields}

    def as_written_from_python(e: task_handler.Finished) -> TaskRecord:
        """The record a copied run would have had, had it been written from Python."""
        if e.copied is None:
            return e.record
        record = running_record(by_id[e.copied.message_id])
        finish(record, TaskStatus.SUCCESSFUL, value=e.copied.return_value, save=False)
        record.finished_at = e.copied.finished_at
        return record

    expected = {pk: fields(as_written_from_python(e)) for pk, e in built.items()}
    expected[copyable[0].id]["cancel_requested"] = True
    acked, _ = ack_and_claim(held, [], 0, owner="w1", hook=task_handler.in_claim_transaction)
    assert len(acked) == len(held)
    stored = {r.pk: fields(r) for r in TaskRecord.objects.all()}
    assert stored.keys() == expected.keys()
    assert {(pk, name): (value, expected[pk][name]) for pk, row in stored.items()
            for name, value in row.items() if value != expected[pk][name]} == {}
    echoed = tasks.echo.get_result(copyable[1].id)
    assert (echoed.status, echoed.args[0], echoed.return_value["args"][2]) == (
        TaskResultStatus.SUCCESSFUL, 'say "hi"', 2**70)
    assert tasks.explode.get_result(failed.id).status == TaskResultStatus.FAILED


def test_queue_options_per_queue_and_a_group_key_kwarg_limit_tasks():
    results = [tasks.notify.enqueue(f"m{i}", tenant=t)
               for i, t in enumerate(["acme", "acme", "acme", "zeta", None])]
    queue = Message.objects.get(pk=results[0].id).queue
    assert (queue.concurrency_limit, queue.group_rate_limit, queue.backoff) == (2, "1/h", [0.1])
    assert [Message.objects.get(pk=r.id).group_key for r in results] == [
        "acme", "acme", "acme", "zeta", None]
    # Each tenant's bucket holds one start an hour; the queue, two at once.
    from djqueue.api.receiving import receive
    got = receive("t.limited", max_messages=5)
    assert sorted(m.group_key or "" for m in got) == ["acme", "zeta"]
    # Settings changed (a deploy): the new limit holds for the existing queue.
    backend = type(task_backends["limited"])("limited", {
        "QUEUES": ["t.limited"], "OPTIONS": {"QUEUE_OPTIONS": {"t.limited": {
            "concurrency_limit": 3, "group_rate_limit": "1/h"}}}})
    backend.ensure_queue("t.limited")
    assert [m.group_key for m in receive("t.limited", max_messages=5)] == [None]
    with pytest.raises(Exception, match="group key is 1 to 200"):
        tasks.notify.enqueue("x", tenant="t" * 201)


def test_a_worker_checks_a_tasks_backend_against_the_tasks_setting_in_force(settings):
    """The worker learns once which backend serves which queue (not once a task), and
    learns it again when TASKS changes: a backend that stopped serving a queue is refused."""
    from djqueue.api.receiving import receive
    from djqueue.exceptions import UntrustedTask
    from djqueue.tasks.task_handler import run_task
    from djqueue.worker import registry

    tasks.add.enqueue(1, 2)
    tasks.add.enqueue(3, 4)
    first, second = receive("default", max_messages=2, owner="w1")
    with registry.hook_runs_after():
        run_task(first)  # served: the pair is remembered
        settings.TASKS = {**settings.TASKS, "default": {
            **settings.TASKS["default"], "QUEUES": ["t.tasks"]}}
        with pytest.raises(UntrustedTask, match="not a djqueue backend serving queue 'default'"):
            run_task(second)


def test_a_result_whose_times_cannot_be_read_is_read_with_those_times_none():
    """get_result() read the task's record, or its pending message, whole, so one whose
    time a hand edit left unreadable raised the driver's error for that task (SQLite,
    PostgreSQL): it reads as it is now, those times None (as MariaDB's driver gives a
    zero date), so a caller polling it learns its status."""
    import djqueue
    from tests.conftest import write_unreadable_time

    done, pending = tasks.add.enqueue(2, 2), tasks.add.enqueue(3, 3)
    assert djqueue.drain("default", limit=1).acked == 1
    for column in ("started_at", "finished_at"):
        write_unreadable_time("djqueue_taskrecord", column, done.id)
    write_unreadable_time("djqueue_message", "sent_at", int(pending.id))
    finished_result = tasks.add.get_result(done.id)
    assert (finished_result.status, finished_result.return_value) == (
        TaskResultStatus.SUCCESSFUL, 4)
    assert (finished_result.started_at, finished_result.finished_at) == (None, None)
    waiting = tasks.add.get_result(pending.id)
    assert (waiting.status, waiting.enqueued_at) == (TaskResultStatus.READY, None)
