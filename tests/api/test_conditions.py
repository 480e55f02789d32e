"""Conditional receive: the expression language, per operator, fuzzed, and in the worker."""

import math
import re

import pytest
from django.db.models import Q
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import djqueue
from djqueue.api.condition_parser import compile_condition
from djqueue.exceptions import InvalidCondition
from djqueue.models import Message, State
from djqueue.storage.transitions import release

pytestmark = pytest.mark.django_db(transaction=True)

PRIORITIES = list(range(-3, 7))


@pytest.fixture
def messages():
    djqueue.create_queue("cond")
    sent = {}
    for p in PRIORITIES:
        headers = {"n": p, "s": f"x{p}", "half": p / 2}
        if p % 3 == 0:
            headers["odd"] = "text"
        sent[p] = djqueue.send("cond", {"p": p}, priority=p, headers=headers,
                               group_key=f"k{p % 2}")
    return sent


def matching(expr):
    return sorted(Message.objects.filter(compile_condition(expr)).values_list("priority", flat=True))


def trunc_div(a, b):
    return None if b == 0 else int(a / b)


# (expression, the Python predicate over a message's priority p)
CASES = [
    ("priority + 2 = 5", lambda p: p + 2 == 5),
    ("priority - 2 < 0", lambda p: p - 2 < 0),
    ("priority * 3 >= 9", lambda p: p * 3 >= 9),
    ("priority / 2 > 1.2", lambda p: p / 2 > 1.2),
    ("priority / 0 > 0 or priority / 0 <= 0", lambda p: False),
    ("priority div 2 = 1", lambda p: trunc_div(p, 2) == 1),
    ("priority div 2 = -1", lambda p: trunc_div(p, 2) == -1),
    ("priority div 0 = 0", lambda p: False),
    ("priority % 3 = 1", lambda p: math.fmod(p, 3) == 1),
    ("priority mod 3 = 0", lambda p: math.fmod(p, 3) == 0),
    ("priority & 2 = 2", lambda p: p & 2 == 2),
    ("priority | 1 = 5", lambda p: p | 1 == 5),
    ("priority ^ 1 = 4", lambda p: p ^ 1 == 4),
    ("~priority = -3", lambda p: ~p == -3),
    ("priority << 2 = 12", lambda p: p << 2 == 12),
    ("priority >> 1 = 2", lambda p: p >= 0 and p >> 1 == 2),
    ("-priority = 2", lambda p: -p == 2),
    ("priority = 3", lambda p: p == 3),
    ("priority != 3", lambda p: p != 3),
    ("priority <> 3", lambda p: p != 3),
    ("priority < 0", lambda p: p < 0),
    ("priority <= 0", lambda p: p <= 0),
    ("priority > 4", lambda p: p > 4),
    ("priority >= 4", lambda p: p >= 4),
    ("not priority > 0", lambda p: not p > 0),
    ("!(priority > 0)", lambda p: not p > 0),
    ("priority > 0 and priority < 3", lambda p: 0 < p < 3),
    ("priority > 0 && priority < 3", lambda p: 0 < p < 3),
    ("priority < -2 or priority > 5", lambda p: p < -2 or p > 5),
    ("priority < -2 || priority > 5", lambda p: p < -2 or p > 5),
    ("priority > 0 xor priority > 3", lambda p: (p > 0) != (p > 3)),
    ("priority > 0 or priority < -1 and priority > -3", lambda p: p > 0 or -3 < p < -1),
    ("(priority > 0 or priority < -1) and priority < 4", lambda p: (p > 0 or p < -1) and p < 4),
    ("2 + 3 * priority = 11", lambda p: 2 + 3 * p == 11),
    ("(2 + 3) * priority = 10", lambda p: 5 * p == 10),
    ("priority", lambda p: p != 0),
    ("true and priority = 1", lambda p: p == 1),
    ("false or priority = 1", lambda p: p == 1),
    ("attempts = 0 and id > 0 and priority = 2", lambda p: p == 2),
    ("group_key = 'k1'", lambda p: p % 2 == 1),
    ("group_key != \"k1\"", lambda p: p % 2 == 0),
    ("headers.n >= 5", lambda p: p >= 5),
    ("h.n + 1 = 0", lambda p: p + 1 == 0),
    ("headers.half * 2 = priority and priority > 2", lambda p: p > 2),
    ("headers.s = 'x3'", lambda p: p == 3),
    ("headers.s = headers.s", lambda p: False),  # header vs header compares as numbers
    ("headers.odd = 'text'", lambda p: p % 3 == 0),
    ("headers.odd > 0", lambda p: False),  # text in a numeric context is NULL
    ("headers.missing = 1 or headers.missing = 'x'", lambda p: False),
    ("NOT priority = 1 AND PRIORITY >= 5", lambda p: p >= 5),
]


@pytest.mark.parametrize(("expr", "predicate"), CASES, ids=[c[0] for c in CASES])
def test_each_operator_selects_what_python_would(messages, expr, predicate):
    assert matching(expr) == [p for p in PRIORITIES if predicate(p)]


def test_receive_where_claims_only_matches_and_leaves_the_rest(messages):
    got = djqueue.receive("cond", max_messages=20, where="priority >= 5 and headers.n >= 5")
    assert sorted(m.priority for m in got) == [5, 6]
    got_q = djqueue.receive("cond", max_messages=20, where=Q(group_key="k0") & Q(priority__lt=0))
    assert sorted(m.priority for m in got_q) == [-2]
    assert Message.objects.filter(state=State.READY).count() == len(PRIORITIES) - 3


@pytest.mark.parametrize(("expr", "position", "text"), [
    ("", 1, "Empty condition"),
    ("priority >", 11, "Unexpected end of condition"),
    ("priority > > 1", 12, "Unexpected '>'"),
    ("nosuch = 1", 1, "Unknown name 'nosuch'"),
    ("headers.a.b = 1", 10, "at most one dot"),
    ("1 < 2 < 3", 7, "cannot be chained"),
    ("'open", 1, "Unterminated string"),
    ("priority = 'x'", 10, "Text cannot be compared with a number"),
    ("(priority > 1", 14, "Expected ')'"),
    ("priority > 1)", 13, "Unexpected ')'"),
    ("99999999999999999999 > 1", 1, "out of range"),
    ("1e999 > 1", 1, "out of range"),
    ("priority ; DROP TABLE x", 10, "Unexpected character ';'"),
    ("group_key", 1, "Text is not a condition"),
    ("(" * 60 + "1" + ")" * 60, 41, "nested more than"),
    ("-" * 60 + "1", 41, "nested more than"),
    ("not " * 60 + "1", 161, "nested more than"),
])
def test_invalid_expressions_name_the_position(expr, position, text):
    with pytest.raises(InvalidCondition) as info:
        compile_condition(expr)
    assert info.value.position == position
    assert text in str(info.value) and f"at position {position}" in str(info.value)


ATOMS = ["priority", "attempts", "id", "group_key", "headers.x", "h.y", "1", "0", "-1",
         "9223372036854775807", "1e308", "0.5", "'a'", '"b"', "'); DROP TABLE djqueue_message; --",
         "'\\'' OR 1=1 --'", "\"\"\"\"", "'é✓😀'", "true", "false", "NULL", "select", "`x`",
         "0x10", "1..2", "$", "#", "/*", "*/", "--", ";", "\\", "\x00", "ü"]
OPERATORS = ["+", "-", "*", "/", "div", "%", "mod", "&", "|", "^", "~", "<<", ">>", "=", "!=",
             "<>", "<", "<=", ">", ">=", "not", "!", "and", "&&", "or", "||", "xor", "(", ")"]
adversarial = st.lists(st.sampled_from(ATOMS + OPERATORS), min_size=1, max_size=40).map(" ".join)


def _evaluate(expr: str) -> None:
    """Parse, inspect the SQL, and claim with it; only InvalidCondition may escape."""
    try:
        condition = compile_condition(expr)
    except InvalidCondition:
        return
    sql, _params = Message.objects.filter(condition).query.sql_with_params()
    for literal in re.findall(r"'([^']*)'|\"([^\"]*)\"", expr):
        for text in literal:
            if len(text) >= 3 and text.strip() and not text.isdigit():
                assert text not in sql, f"input text {text!r} reached the SQL: {sql}"
    assert "DROP" not in sql.upper() and "--" not in sql
    try:
        got = djqueue.receive("cond", max_messages=20, where=expr)
    except InvalidCondition:
        return
    release(got)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(st.text(max_size=80), adversarial))
def test_fuzzed_expressions_never_escape_as_anything_but_invalid_condition(messages, expr):
    _evaluate(expr)


def test_overflowing_arithmetic_is_an_invalid_condition_or_false(messages):
    for expr in ["priority * 9223372036854775807 * 9223372036854775807 > 0",
                 "9223372036854775807 + 9223372036854775807 > 0",
                 "1e308 * 1e308 > 0"]:
        _evaluate(expr)


def test_worker_where_option_claims_only_matching_messages(spawn):
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.record", [{"n": i} for i in range(5)], priority=1)
    djqueue.send_batch("t.record", [{"n": i} for i in range(5, 8)], priority=9)
    worker = spawn("djqueue_worker", "t.record", "--burst", "--where", "priority >= 5")
    assert worker.wait(60) == 0, worker.output()
    from tests.models import Effect

    assert sorted(Effect.objects.values_list("key", flat=True)) == [5, 6, 7]
    assert Message.objects.filter(priority=1, state=State.READY).count() == 5


def test_worker_rejects_a_bad_where_with_a_command_error(spawn):
    djqueue.create_queue("t.record")
    worker = spawn("djqueue_worker", "t.record", "--burst", "--where", "priority >> ")
    assert worker.wait(60) != 0
    assert "Unexpected end of condition at position 13" in worker.output()
