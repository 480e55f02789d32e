"""MySQL for `make test`: pytest run against a MySQL server started for the run.

    python -m tests.mysql_server [pytest's arguments]

Debian 12 ships MariaDB only, so `scripts/ensure_system.sh mysql` installs Debian's
MySQL server into a chroot of Debian's development suite (its C library is newer than
this system's). This starts that server on a free loopback port with a fresh data
directory of its own, runs pytest with ``DATABASE_URL`` naming it, and stops the server
and removes its data when pytest ends, or when this process is asked to stop (the
test script's SIGTERM): nothing is left running.

Why MySQL as well as MariaDB: they parted ways years ago. MySQL has no ``RETURNING``,
no sequence engine and no ``@@in_transaction``, reads JSON into a binary type, and
takes ids for a multi-row insert in a block (djqueue.storage.statements.vendor_sql).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import MySQLdb

from tests.servers import free_port, stop_process

#: Where ensure_system.sh builds the chroot (the same variable overrides both).
ROOT = Path(os.environ.get("DJQUEUE_MYSQL_ROOT", "/var/lib/djqueue/mysql-root"))


class ChrootMySQL:
    """One mysqld of the chroot at ``root``, with its data in ``/var/tmp`` there."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.data = Path("/var/tmp") / f"djqueue-mysql-{port}"  # inside the chroot
        self.host_data = root / self.data.relative_to("/")  # the same, seen from here
        self.process: subprocess.Popen | None = None

    def _mysqld(self, *args: str) -> list[str]:
        return ["chroot", str(self.root), "/usr/sbin/mysqld", "--no-defaults", "--user=root",
                f"--datadir={self.data / 'data'}", *args]

    def start(self, timeout: float = 120) -> None:
        shutil.rmtree(self.host_data, ignore_errors=True)
        self.host_data.mkdir(parents=True)
        subprocess.run(self._mysqld("--initialize-insecure"), check=True, capture_output=True)
        # As the shared MariaDB runs for the suite: READ COMMITTED, no binary log, the
        # buffer pool of a small server.
        with (self.host_data / "mysqld.log").open("ab") as log:
            self.process = subprocess.Popen(
                self._mysqld(f"--port={self.port}", "--bind-address=127.0.0.1",
                             f"--socket={self.data / 'mysqld.sock'}",
                             f"--pid-file={self.data / 'mysqld.pid'}", "--mysqlx=OFF",
                             "--secure-file-priv=", "--disable-log-bin",
                             "--transaction-isolation=READ-COMMITTED",
                             "--innodb-buffer-pool-size=256M", "--max-connections=400"),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = MySQLdb.connect(host="127.0.0.1", port=self.port, user="root",
                                       passwd="", connect_timeout=5)
                break
            except MySQLdb.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("MySQL did not start:\n" + self.tail()) from None
                time.sleep(0.2)
        with conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            self.version = cursor.fetchone()[0]
            cursor.execute("CREATE DATABASE test CHARACTER SET utf8mb4")
        conn.close()

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 60)
            self.process = None
        shutil.rmtree(self.host_data, ignore_errors=True)

    def tail(self, chars: int = 3000) -> str:
        path = self.host_data / "mysqld.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def main(pytest_args: list[str]) -> int:
    if not (ROOT / "usr/sbin/mysqld").exists():
        print(f"No MySQL at {ROOT}: run scripts/ensure_system.sh mysql", file=sys.stderr)
        return 1
    server = ChrootMySQL(ROOT, free_port())
    pytest: subprocess.Popen | None = None

    def stop(signum: int, frame: object) -> None:
        """Ctrl-C or SIGTERM: pytest, in a session of its own so that it hears it once,
        tears its fixtures down and exits; before it runs, the start is given up."""
        if pytest is None:
            raise KeyboardInterrupt
        pytest.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.start()
        print(f"MySQL {server.version} on 127.0.0.1:{server.port}", flush=True)
        env = {**os.environ, "DATABASE_URL": f"mysql://root@127.0.0.1:{server.port}/test"}
        pytest = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], env=env,
                                  start_new_session=True)
        return pytest.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
