"""The hot queries use their indexes: no full scan, no filesort, with 200,000 rows about."""

import pytest
from django.db import connection, transaction
from django.db.models import Min
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import djqueue
from djqueue.models import Message, MessageGroup, Outcome, State
from djqueue.storage import key_rate_claims
from djqueue.storage.statements import claim_statements

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 100_000


def capture_queries():
    return CaptureQueriesContext(connection)


def explain_sql(sql: str) -> str:
    """EXPLAIN a statement the test captured (its values already inlined)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        columns = [c[0] for c in cursor.description]
        return "\n".join(" | ".join(f"{k}={v}" for k, v in zip(columns, row, strict=True))
                         for row in cursor.fetchall())


def explain(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    prefix = {"sqlite": "EXPLAIN QUERY PLAN ", "postgresql": "EXPLAIN ",
              "mysql": "EXPLAIN "}[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(prefix + sql, params)
        columns = [c[0] for c in cursor.description]
        return "\n".join(" | ".join(f"{k}={v}" for k, v in zip(columns, row, strict=True))
                         for row in cursor.fetchall())


@pytest.fixture
def backlog():
    """100,000 ready and 100,000 finished messages, plus scheduled and claimed neighbours.

    Written by INSERT ... SELECT over a sequence of numbers in the database: 210,500 rows
    built as model instances took 36 s on MariaDB, this takes a few."""
    jobs, other = djqueue.create_queue("jobs"), djqueue.create_queue("other")
    with transaction.atomic():
        insert_numbered("djqueue_message", MESSAGE_COLUMNS,
                        "%s, %s, n %% 3, '{}', %s, 0, '', '', %s", ROWS, (jobs.pk, State.READY))
        insert_numbered("djqueue_history", HISTORY_COLUMNS,
                        "1000000000 + n, %s, %s, 0, 1, 2, '', %s, %s", ROWS,
                        (jobs.pk, Outcome.ACKED))
        for queue, state, count in ((jobs, State.SCHEDULED, 5000), (other, State.READY, 5000),
                                    (jobs, State.CLAIMED, 500)):
            insert_numbered("djqueue_message", MESSAGE_COLUMNS,
                            "%s, %s, 0, '{}', %s, 0, '', '', %s", count, (queue.pk, state))
    analyze("djqueue_message")
    return jobs


MESSAGE_COLUMNS = "queue_id, state, priority, body, visible_at, attempts, owner, lease_token, sent_at"
HISTORY_COLUMNS = "id, queue_id, outcome, priority, attempts, size, worker, sent_at, finished_at"


def insert_numbered(table: str, columns: str, values: str, count: int, params: tuple) -> None:
    """INSERT ``count`` rows of ``values`` into ``table``: ``n`` is the row's number
    (from 1), the placeholders take ``params`` and then the current time twice."""
    now = timezone.now()
    head, select = f"INSERT INTO {table} ({columns}) ", f"SELECT {values} FROM "
    recursive = (f"WITH RECURSIVE numbers(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM "
                 f"numbers WHERE n < {count}) ")
    if connection.vendor == "postgresql":
        sql = head + select + f"generate_series(1, {count}) AS numbers(n)"
    elif connection.vendor == "sqlite":
        sql = recursive + head + select + "numbers"
    elif connection.mysql_is_mariadb:  # its sequence engine
        sql = head + select + f"(SELECT seq AS n FROM seq_1_to_{count}) AS numbers"
    else:  # MySQL: the WITH follows the column list, and may recurse 1,000 times by default
        sql = head + recursive + select + "numbers"
    with connection.cursor() as cursor:
        if connection.vendor == "mysql" and not connection.mysql_is_mariadb:
            cursor.execute("SET SESSION cte_max_recursion_depth = %s", [count + 1])
        cursor.execute(sql, (*params, now, now))


def analyze(table: str) -> None:
    """Bring the planner's statistics of ``table`` up to date (SQLite: of every table)."""
    with connection.cursor() as cursor:
        cursor.execute({"postgresql": f"ANALYZE {table}",
                        "mysql": f"ANALYZE TABLE {table}"}.get(connection.vendor, "ANALYZE"))
        if connection.vendor == "mysql":
            cursor.fetchall()


def assert_uses_index(plan: str, index: str) -> None:
    assert index in plan, plan
    lowered = plan.lower()
    for bad in ("filesort", "temp b-tree", "seq scan", "type=all", "sort key", "scan djqueue"):
        assert bad not in lowered, plan


def test_hot_queries_use_their_indexes(backlog):
    ready = Message.objects.filter(queue=backlog, state=State.READY).claim_order()
    if connection.vendor == "mysql":
        with transaction.atomic(), capture_queries() as queries:
            claim_statements.lock_ready("default", backlog.pk, 100)
        plan = explain_sql(queries[-1]["sql"])
    elif connection.features.has_select_for_update_skip_locked:
        with transaction.atomic():
            plan = explain(ready.select_for_update(skip_locked=True)[:100])
    else:
        plan = explain(ready.values("pk")[:100])
    print(plan)
    assert_uses_index(plan, "djqueue_msg_claim")
    now = timezone.now()
    for query in (Message.objects.due(now), Message.objects.expired(now),
                  Message.objects.due(now).filter(queue_id__in=[backlog.pk])):
        plan = explain(query.order_by("visible_at").values("pk")[:500])
        print(plan)
        assert_uses_index(plan, "djqueue_msg_due")
    # Dead letters by age (the export) and the claimed messages' ages (the roll-ups).
    plan = explain(Message.objects.dead().filter(visible_at__lt=now).values("pk"))
    print(plan)
    assert_uses_index(plan, "djqueue_msg_due")
    plan = explain(Message.objects.claimed().values("queue_id").annotate(
        oldest=Min("claimed_at")).order_by())
    print(plan)
    assert "djqueue_msg_due" in plan, plan


def test_a_per_key_rate_claims_scan_uses_the_claim_index(backlog):
    """The ids and keys a claim under a per-key rate chooses from (key_rate_claims.key_scan),
    with its filter of keys waiting for a token: 5,000 keys, a tenth of them marked."""
    MessageGroup.objects.bulk_create(
        MessageGroup(queue=backlog, key=f"k{n}", throttled_until=4e9 if n % 10 == 0 else None)
        for n in range(5000))
    analyze("djqueue_messagegroup")
    scan = key_rate_claims.key_scan("default", backlog,
                                    key_rate_claims.unthrottled_keys("default", backlog))
    plan = explain(scan[:key_rate_claims.KEY_SCAN])
    print(plan)
    assert_uses_index(plan, "djqueue_msg_claim")


def message_indexes() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, Message._meta.db_table)
    return {name: info["columns"] for name, info in found.items()
            if info["index"] and not info["primary_key"]}


def index_definition(name: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = %s", [name])
        return cursor.fetchone()[0]


def test_a_message_is_in_no_index_it_does_not_need():
    """Each index costs an entry per message sent and acked: none repeats another's
    columns or leading columns, and on PostgreSQL and SQLite the indexes of a
    dead letter's origin, a delivery's stored body and the ordered groups hold only
    rows that have one, and the due index no ready message."""
    indexes = message_indexes()
    assert set(indexes) == {"djqueue_msg_claim", "djqueue_msg_due", "djqueue_msg_group",
                            "djqueue_msg_body", "djqueue_msg_origin"}, indexes
    for name, columns in indexes.items():
        for other, longer in indexes.items():
            assert other == name or longer[:len(columns)] != columns, (name, other)
    if connection.features.supports_partial_indexes:
        definition = index_definition("djqueue_msg_due")
        for mark in '"()':
            definition = definition.replace(mark, "")
        assert "WHERE state = 2 OR state = 3 OR state = 4" in definition, definition
        for name, column in (("djqueue_msg_body", "stored_body_id"),
                             ("djqueue_msg_origin", "origin_queue_id"),
                             ("djqueue_msg_group", "group_key")):
            definition = index_definition(name).replace('"', "").replace("(", "").replace(
                ")", "")
            assert f"WHERE {column} IS NOT NULL" in definition, definition


def test_no_table_has_an_index_another_index_begins_with():
    """A plain index whose columns another index (or unique constraint) of its table
    begins with serves no read the other does not, and costs an entry per row written.
    (PostgreSQL's ``_like`` indexes, for LIKE on text keys, are left aside.)"""
    from django.apps import apps

    found = []
    with connection.cursor() as cursor:
        for model in apps.get_app_config("djqueue").get_models():
            table = model._meta.db_table
            indexes = {name: info for name, info in connection.introspection.get_constraints(
                cursor, table).items() if info["index"] or info["unique"]}
            for name, info in indexes.items():
                if info["unique"] or info["primary_key"] or name.endswith("_like"):
                    continue
                columns = info["columns"]
                for other, longer in indexes.items():
                    if (other != name and not other.endswith("_like")
                            and longer["columns"][:len(columns)] == columns):
                        found.append(f"{table}.{name} {columns} (in {other})")
    assert not found, found


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's pattern indexes")
def test_task_records_have_no_pattern_indexes():
    """Django's ``varchar_pattern_ops`` indexes beside a text key serve only
    ``LIKE 'prefix%'``, which nothing runs on task records (migration 0019)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s",
                       ["djqueue_taskrecord"])
        names = {row[0] for row in cursor.fetchall()}
    assert not [name for name in names if name.endswith("_like")], names
    assert "djqueue_task_status" in names


def test_a_message_s_foreign_keys_are_read_by_their_indexes(backlog):
    """What deleting a queue or a stored body looks up, and a queue's dead letters,
    among 200,000 messages that have neither."""
    other = djqueue.create_queue("other", exist_ok=True)
    Message.objects.bulk_create(Message(queue=other, origin_queue=backlog, body="{}",
                                        state=State.DEAD) for _ in range(50))
    analyze("djqueue_message")
    plan = explain(Message.objects.filter(origin_queue=backlog).values("pk"))
    print(plan)
    assert_uses_index(plan, "djqueue_msg_origin")
    plan = explain(Message.objects.filter(origin_queue__in=[backlog.pk, other.pk]).values("pk"))
    print(plan)
    assert_uses_index(plan, "djqueue_msg_origin")
    plan = explain(Message.objects.filter(stored_body_id=12345).values("pk"))
    print(plan)
    assert_uses_index(plan, "djqueue_msg_body")


def test_a_group_s_messages_are_read_by_the_group_index(backlog):
    """What ordered groups read (a group's holders, its waiting head, its messages in
    a state) among 200,000 messages without a key and 3,000 with one of 300 keys."""
    from djqueue.storage.statements import group_statements

    Message.objects.bulk_create(
        Message(queue=backlog, body="{}", group_key=f"g{n % 300}",
                state=State.WAITING if n >= 300 else State.CLAIMED)
        for n in range(3000))
    analyze("djqueue_message")
    keys = ["g1", "g2", "g3"]
    marks = ", ".join(["%s"] * len(keys))
    prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    for build in (group_statements._holders_sql, group_statements._heads_sql):
        sql = build(connection).replace("{keys}", marks)
        with connection.cursor() as cursor:
            cursor.execute(prefix + sql, [backlog.pk, *keys])
            plan = "\n".join(" | ".join(map(str, row)) for row in cursor.fetchall())
        print(plan)
        assert "djqueue_msg_group" in plan, plan
        assert "seq scan" not in plan.lower() and "type=all" not in plan.lower(), plan
    plan = explain(Message.objects.filter(queue=backlog, group_key="g7", state=State.WAITING)
                   .order_by("id").values("id")[:2])
    print(plan)
    assert_uses_index(plan, "djqueue_msg_group")
