"""A private MariaDB server for fault tests: its own data directory and port, so a
test can kill -9 it and start it again without touching the shared server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import MySQLdb

from tests.servers import stop_process

MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"


class PrivateMariaDB:
    def __init__(self, root: Path, port: int = 3307, flush_log_at_trx_commit: int = 1,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.root = root.resolve()
        self.port = port
        #: More server options (a replication test's server ids and binary log).
        self.extra_args = extra_args
        #: 1: every commit reaches the disk; 2: it reaches the OS, which is as durable
        #: against a kill -9 of the server alone, without an fsync per commit.
        self.flush_log_at_trx_commit = flush_log_at_trx_commit
        self.datadir = self.root / "data"
        self.socket = self.root / "mariadb.sock"
        self.log = self.root / "mariadb.log"
        self.process: subprocess.Popen | None = None
        self.crashes = 0

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/faults"

    def install(self) -> None:
        """A fresh data directory (what a test leaves behind is thrown away)."""
        if self.process is not None:
            raise RuntimeError("stop the server before reinstalling it")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        subprocess.run([INSTALL_DB, "--no-defaults", f"--datadir={self.datadir}",
                        "--auth-root-authentication-method=normal", "--skip-test-db",
                        "--user=root"], check=True, capture_output=True)

    def start(self, timeout: float = 60) -> None:
        self._log_file = self.log.open("ab")
        self.process = subprocess.Popen(
            [MARIADBD, "--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.socket}", "--user=root",
             f"--pid-file={self.root / 'mariadb.pid'}", "--skip-log-bin",
             "--innodb-buffer-pool-size=256M",
             f"--innodb-flush-log-at-trx-commit={self.flush_log_at_trx_commit}",
             "--innodb-log-file-size=256M", "--max-connections=400",
             "--transaction-isolation=READ-COMMITTED", *self.extra_args],
            stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect("mysql").close()
                return
            except MySQLdb.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"private MariaDB did not start:\n{self.tail()}") from None
                time.sleep(0.1)

    def crash(self) -> None:
        """kill -9: no shutdown, no flush; the next start runs crash recovery."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.process = None
        self.crashes += 1

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process, 60)
        self.process = None

    def connect(self, db: str = "faults") -> MySQLdb.Connection:
        return MySQLdb.connect(host="127.0.0.1", port=self.port, user="root", passwd="",
                               db=db, charset="utf8mb4", autocommit=True, connect_timeout=5)

    def recreate(self, db: str = "faults") -> None:
        conn = self.connect("mysql")
        cursor = conn.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cursor.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        conn.close()

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
