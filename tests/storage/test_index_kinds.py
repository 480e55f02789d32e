"""The index kinds of djqueue.models.indexes refuse a definition they cannot build,
when it is written (in a model or a migration), not when a database creates it."""

import pytest
from django.db.models import Q

from djqueue.models.indexes import NonNullIndex, PartialOrPlainIndex


def test_a_partial_or_plain_index_needs_its_rows():
    with pytest.raises(TypeError, match="rows"):
        PartialOrPlainIndex(fields=["state"], name="djq_t_state")
    with pytest.raises(TypeError, match=r"needs rows=Q\(\.\.\.\).*'state = 2'"):
        PartialOrPlainIndex(fields=["state"], name="djq_t_state", rows="state = 2")


def test_a_non_null_index_derives_its_rows_and_takes_none():
    with pytest.raises(TypeError, match="takes no rows="):
        NonNullIndex(fields=["group_key"], name="djq_t_group", rows=Q(state=2))
    with pytest.raises(ValueError, match="needs non_null"):
        NonNullIndex(fields=["queue", "group_key"], name="djq_t_group")
    assert NonNullIndex(fields=["group_key"], name="djq_t_group").rows == Q(
        group_key__isnull=False)
    assert NonNullIndex(fields=["queue", "group_key"], name="djq_t_group",
                        non_null="group_key").rows == Q(group_key__isnull=False)


@pytest.mark.parametrize("index", [
    PartialOrPlainIndex(fields=["state", "visible_at"], name="djq_t_due",
                        rows=Q(state=2) | Q(state=3)),
    NonNullIndex(fields=["stored_body"], name="djq_t_body"),
    NonNullIndex(fields=["queue", "group_key"], name="djq_t_group", non_null="group_key"),
])
def test_a_migration_rebuilds_the_same_index(index):
    """What a migration file records (deconstruct) builds an equal index with the same
    rows; a NonNullIndex records its column, not rows, as migrations 0017 and 0020 do."""
    path, args, kwargs = index.deconstruct()
    assert path == f"djqueue.models.indexes.{type(index).__name__}"
    assert ("rows" in kwargs) is (type(index) is PartialOrPlainIndex)
    rebuilt = type(index)(*args, **kwargs)
    assert rebuilt == index
    assert rebuilt.rows == index.rows
