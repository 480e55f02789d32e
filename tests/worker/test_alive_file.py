"""``--alive-file`` for a liveness probe: the worker's, the supervisor's and the reaper's
own loop refreshes the file's modification time each second, so it goes stale while the
process is frozen (as a hung loop would leave it), and it is removed as the process
stops. Real processes and real signals (SIGSTOP freezes one)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import djqueue
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def refreshed(path: Path, after: float) -> bool:
    return path.exists() and path.stat().st_mtime > after


def started_refreshing(process, path: Path) -> None:
    wait_until(lambda: path.exists() or process.popen.poll() is not None, 60, "the file")
    assert process.popen.poll() is None, process.output()
    first = path.stat().st_mtime
    wait_until(lambda: refreshed(path, first), 30, "a refresh")


def stale_while_frozen(process, path: Path, own_file: Path | None = None) -> None:
    """Freeze the process: its file is not refreshed for 3 s; thawed, it is again. With
    ``own_file`` (a supervised worker's), ``path`` comes to show its last time first."""
    process.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: Path(f"/proc/{process.pid}/stat").read_text()
                   .rpartition(")")[2].split()[0] == "T", 30, "the process to be stopped")
        if own_file is not None:
            wait_until(lambda: path.stat().st_mtime == own_file.stat().st_mtime, 30,
                       "the supervisor's file showing the frozen worker's time")
        stopped_at = path.stat().st_mtime
        wait_until(lambda: time.time() - stopped_at > 3, 30, "3 s to pass")
        assert path.stat().st_mtime == stopped_at
    finally:
        process.signal(signal.SIGCONT)
    wait_until(lambda: refreshed(path, stopped_at), 30, "a refresh after SIGCONT")


def removed_as_it_stops(process, path: Path) -> None:
    process.signal(signal.SIGTERM)
    assert process.wait(60) == 0, process.output()
    assert not path.exists()


def test_a_worker_refreshes_its_alive_file_while_its_loop_runs(spawn, tmp_path):
    djqueue.create_queue("t.record")
    path = tmp_path / "worker.alive"
    worker = spawn("djqueue_worker", "t.record", "--alive-file", str(path))
    started_refreshing(worker, path)
    stale_while_frozen(worker, path)
    removed_as_it_stops(worker, path)


@pytest.mark.slow
def test_a_supervisors_alive_file_shows_its_stalest_worker(spawn, tmp_path):
    """Frozen, the supervisor lets the file go stale while its two workers run on; so
    does one of its workers frozen while the supervisor runs on. Each worker keeps its
    own file in a folder the supervisor makes and removes."""
    djqueue.create_queue("t.record")
    path = tmp_path / "supervisor.alive"
    supervisor = spawn("djqueue_worker", "t.record", "-p", "2", "--alive-file", str(path))
    started_refreshing(supervisor, path)
    stale_while_frozen(supervisor, path)
    pids = supervised_pids(supervisor)
    environ = Path(f"/proc/{pids[0]}/environ").read_bytes().decode().split("\0")
    folder = Path(next(line.partition("=")[2] for line in environ
                       if line.startswith("DJQUEUE_SUPERVISED_ALIVE_FOLDER=")))
    wait_until(lambda: sorted(p.name for p in folder.iterdir()) == sorted(map(str, pids)), 60,
               "both workers' files, named by their pids")
    stale_while_frozen(FrozenWorker(pids[0]), path, own_file=folder / str(pids[0]))
    # A killed worker's file goes with it (a later worker given its pid is not judged by
    # it), and its replacement keeps one of its own.
    os.kill(pids[1], signal.SIGKILL)
    replaced = wait_until(lambda: (set(supervised_pids(supervisor)) - set(pids)) or None, 60,
                          "a replacement worker")
    wait_until(lambda: {p.name for p in folder.iterdir()} == {str(pids[0]), *map(str, replaced)},
               60, "the killed worker's file gone, its replacement's there")
    assert supervisor.popen.poll() is None, supervisor.output()
    removed_as_it_stops(supervisor, path)
    assert not folder.exists()


def supervised_pids(supervisor) -> list[int]:
    """The supervisor's worker processes, by /proc (children of its pid)."""
    found = wait_until(lambda: [int(pid) for pid in Path(
        f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read_text().split()], 60,
        "its workers")
    return sorted(found)


class FrozenWorker:
    """A supervised worker, as ``stale_while_frozen`` signals and inspects it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def signal(self, number: int) -> None:
        os.kill(self.pid, number)


def test_a_reaper_refreshes_its_alive_file_between_passes(spawn, tmp_path):
    """Its passes are a minute apart; the file is refreshed each second between them
    (twice within the 30 s each wait allows)."""
    path = tmp_path / "reaper.alive"
    reaper = spawn("djqueue_reaper", "--interval", "60", "--alive-file", str(path))
    started_refreshing(reaper, path)
    second = path.stat().st_mtime
    wait_until(lambda: refreshed(path, second), 30, "another refresh")
    removed_as_it_stops(reaper, path)


def test_an_alive_file_that_cannot_be_written_is_refused_at_the_start(spawn, tmp_path):
    missing = spawn("djqueue_reaper", "--alive-file", str(tmp_path / "no" / "such.alive"))
    once = spawn("djqueue_reaper", "--once", "--alive-file", str(tmp_path / "r.alive"))
    assert missing.wait(60) == 2, missing.output()
    assert f"argument --alive-file: no such folder: '{tmp_path / 'no'}'" in missing.output()
    assert once.wait(60) == 1, once.output()
    assert once.output().strip() == (
        "CommandError: --alive-file is for a reaper that keeps running, not --once.")
