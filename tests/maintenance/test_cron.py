from datetime import datetime

import pytest

from djqueue.exceptions import ConfigurationError
from djqueue.maintenance.cron import Cron

# 2026-11-22 is a Sunday.
CASES = [
    ("* * * * *", datetime(2026, 11, 22, 10, 7), True),
    ("7 10 * * *", datetime(2026, 11, 22, 10, 7), True),
    ("8 10 * * *", datetime(2026, 11, 22, 10, 7), False),
    ("*/15 * * * *", datetime(2026, 11, 22, 10, 45), True),
    ("*/15 * * * *", datetime(2026, 11, 22, 10, 46), False),
    ("0-10/5 9-17 * * *", datetime(2026, 11, 22, 9, 10), True),
    ("0 0 1,15 * *", datetime(2026, 11, 15, 0, 0), True),
    ("0 0 * 11 *", datetime(2026, 12, 1, 0, 0), False),
    ("0 0 * * 0", datetime(2026, 11, 22, 0, 0), True),
    ("0 0 * * 7", datetime(2026, 11, 22, 0, 0), True),
    ("0 0 * * 1-5", datetime(2026, 11, 22, 0, 0), False),
    ("0 0 13 * 5", datetime(2026, 11, 13, 0, 0), True),   # either day field matches
    ("0 0 13 * 5", datetime(2026, 11, 20, 0, 0), True),
    ("0 0 13 * 5", datetime(2026, 11, 21, 0, 0), False),
]


@pytest.mark.parametrize(("expression", "moment", "expected"), CASES)
def test_matches(expression, moment, expected):
    assert Cron.parse(expression).matches(moment) is expected


@pytest.mark.parametrize("bad", ["* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *",
                                 "a * * * *", "5-1 * * * *", "* * 0 * *", "* * * 13 *"])
def test_bad_expressions_are_refused(bad):
    with pytest.raises(ConfigurationError):
        Cron.parse(bad)
