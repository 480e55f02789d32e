#!/usr/bin/env bash
# Installs the Debian packages djqueue needs and starts the database servers.
#   ensure_system.sh build     headers to compile mysqlclient
#   ensure_system.sh mariadb   MariaDB installed and running on 127.0.0.1:3306
#   ensure_system.sh postgres  PostgreSQL started if it is installed
#   ensure_system.sh spark     Java and the JDBC drivers the Spark export reads with
#   ensure_system.sh browser   Chromium, which the admin's browser tests drive
#   ensure_system.sh redis     Redis running on 127.0.0.1:6379 (the Celery peer of `make bench`)
#   ensure_system.sh prometheus  Prometheus's server binary (not started: the tests start their own)
#   ensure_system.sh pgbouncer   PgBouncer's binary (not started: the tests start their own)
#   ensure_system.sh faketime  libfaketime, which runs a test's process on a clock set apart
#   ensure_system.sh mysql     MySQL in a chroot of Debian's development suite (not started:
#                              tests/mysql_server.py starts its own)
set -euo pipefail
log() { echo "djqueue setup: $*" >&2; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_updated=0
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} with apt-get"
  if [ $apt_updated -eq 0 ]; then $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}" >/dev/null
}
# A server package whose service must not start: the tests start and stop their own
# (metrics: Prometheus; tests/maintenance/test_pgbouncer.py: PgBouncer). policy-rc.d
# forbids starting services while it installs.
apt_install_stopped() {
  dpkg -s "$1" >/dev/null 2>&1 && return 0
  local policy=/usr/sbin/policy-rc.d had_policy=0 status=0
  [ -e "$policy" ] && had_policy=1
  [ "$had_policy" = 1 ] || { printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null; $SUDO chmod +x "$policy"; }
  apt_install "$1" || status=$?
  [ "$had_policy" = 1 ] || $SUDO rm -f "$policy"
  return $status
}
mariadb_up() { mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot status >/dev/null 2>&1; }

for what in "$@"; do
  case "$what" in
    build) apt_install pkg-config libmariadb-dev gcc ;;
    mariadb)
      if ! mariadb_up; then
        command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
        log "starting MariaDB"
        $SUDO mkdir -p /run/mysqld && $SUDO chown mysql:mysql /run/mysqld 2>/dev/null || true
        $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
        for _ in $(seq 1 60); do mariadb_up && break; sleep 0.5; done
        mariadb_up || { log "MariaDB did not start"; exit 1; }
      fi ;;
    spark)
      command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
      apt_install libmariadb-java libpostgresql-jdbc-java libxerial-sqlite-jdbc-java ;;
    browser) apt_install chromium ;;
    prometheus) apt_install_stopped prometheus ;;  # it would serve on :9090
    pgbouncer) apt_install_stopped pgbouncer ;;  # it would pool on :6432
    faketime) apt_install faketime ;;
    mysql)  # Debian 12 has only MariaDB; its development suite has MySQL, built against a
            # newer C library, so it gets a minimal chroot of that suite of its own.
      root=${DJQUEUE_MYSQL_ROOT:-/var/lib/djqueue/mysql-root}
      if [ ! -x "$root/usr/sbin/mysqld" ]; then
        apt_install debootstrap
        log "installing MySQL into a Debian sid chroot at $root (about 2 minutes)"
        $SUDO rm -rf "$root.partial" && $SUDO mkdir -p "$(dirname "$root")"
        $SUDO debootstrap --variant=minbase sid "$root.partial" http://deb.debian.org/debian >/dev/null
        # Valid-Until: a mirror that serves a dated snapshot of sid has an expired Release.
        $SUDO chroot "$root.partial" apt-get -o Acquire::Check-Valid-Until=false update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO chroot "$root.partial" apt-get \
          -o Acquire::Check-Valid-Until=false install -y -qq --no-install-recommends \
          mysql-server-core >/dev/null
        $SUDO rm -rf "$root" && $SUDO mv "$root.partial" "$root"
      fi ;;
    redis)  # Celery's broker, for the peers in `make bench`
      if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
        command -v redis-server >/dev/null 2>&1 || apt_install redis-server
        log "starting Redis"
        redis-server --daemonize yes --bind 127.0.0.1 --save "" >/dev/null
        for _ in $(seq 1 40); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.25; done
      fi ;;
    postgres)
      if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && [ -d /etc/postgresql ]; then
        log "starting PostgreSQL"
        $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
      fi ;;
    *) log "unknown component $what"; exit 2 ;;
  esac
done
