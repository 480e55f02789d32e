"""Where Spark reads from: Django's own DATABASES entry turned into JDBC options.

Every vendor difference of the export lives here, each with its reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from djqueue.exceptions import ConfigurationError
from djqueue.storage.statements import vendor_sql

#: Debian's packages install the drivers here.
DEFAULT_JAR_DIR = "/usr/share/java"


@dataclass(frozen=True)
class JdbcDriver:
    jar: str
    driver_class: str
    debian_package: str


DRIVERS = {
    # Why the MariaDB driver behind a jdbc:mysql:// URL: Spark picks its SQL
    # dialect from the URL prefix; with jdbc:mariadb:// it falls back to the
    # generic dialect, which quotes identifiers with double quotes and breaks.
    # Connector/J 2.x accepts the mysql scheme only with permitMysqlScheme.
    "mysql": JdbcDriver("mariadb-java-client.jar", "org.mariadb.jdbc.Driver", "libmariadb-java"),
    "postgresql": JdbcDriver("postgresql.jar", "org.postgresql.Driver",
                             "libpostgresql-jdbc-java"),
    "sqlite": JdbcDriver("sqlite-jdbc.jar", "org.sqlite.JDBC", "libxerial-sqlite-jdbc-java"),
}


@dataclass(frozen=True)
class JdbcSource:
    url: str
    driver: JdbcDriver
    jar_path: str
    properties: dict[str, str] = field(default_factory=dict)

    def options(self, table: str, columns: Sequence[str] = (),
                times: Collection[str] = ()) -> dict[str, str]:
        """Spark's JDBC options to read ``table``. On PostgreSQL, given its ``columns``,
        the ``times`` among them read as null where they hold ``'infinity'``."""
        return {"url": self.url, "driver": self.driver.driver_class,
                "dbtable": self._table_read(table, columns, times), **self.properties}

    def _table_read(self, table: str, columns: Sequence[str], times: Collection[str]) -> str:
        # Why PostgreSQL only: its driver reads 'infinity' as a time Spark cannot hold
        # and writes out as garbage (Parquet readers then fail on the file), where
        # MariaDB's driver reads a zero date as null and SQLite's text is parsed in
        # Spark (job.read). The names are the model's columns, never user text.
        if self.driver is not DRIVERS["postgresql"] or not set(times) & set(columns):
            return table
        readable = vendor_sql.readable_time_sql("postgresql")  # as ReadableTime reads
        quoted = {c: f'"{c}"' for c in columns}
        read = ", ".join(f"{readable.format(a=quoted[c])} AS {quoted[c]}" if c in times
                         else quoted[c] for c in columns)
        return f'(SELECT {read} FROM "{table}") AS "{table}"'


def source_for(settings_dict: dict, vendor: str, jar_dir: str | None = None) -> JdbcSource:
    """JDBC options for a Django connection; ConfigurationError naming what to install."""
    if vendor not in DRIVERS:
        raise ConfigurationError(f"The export does not support the {vendor} database.")
    driver = DRIVERS[vendor]
    jar = Path(jar_dir or os.environ.get("DJQUEUE_JDBC_DIR") or DEFAULT_JAR_DIR) / driver.jar
    if not jar.exists():
        raise ConfigurationError(
            f"The JDBC driver {jar} is missing: install it with "
            f"'apt-get install {driver.debian_package}' (or set DJQUEUE_JDBC_DIR).")
    name = settings_dict["NAME"]
    host = settings_dict.get("HOST") or ("127.0.0.1" if vendor != "sqlite" else "")
    props = {"user": settings_dict.get("USER") or "", "password": settings_dict.get("PASSWORD") or ""}
    if vendor == "mysql":
        port = settings_dict.get("PORT") or "3306"
        url = f"jdbc:mysql://{host}:{port}/{name}?permitMysqlScheme&serverTimezone=UTC"
    elif vendor == "postgresql":
        port = settings_dict.get("PORT") or "5432"
        url = f"jdbc:postgresql://{host}:{port}/{name}"
    else:
        url = f"jdbc:sqlite:{Path(str(name)).resolve()}"
        props = {}
    return JdbcSource(url, driver, str(jar), props)


def require_java() -> str:
    """The java executable Spark will start; ConfigurationError naming the package if none."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ConfigurationError(
            "Java is needed for the Spark export and was not found (JAVA_HOME or java on "
            "PATH): install it with 'apt-get install openjdk-17-jre-headless'.")
    return java
