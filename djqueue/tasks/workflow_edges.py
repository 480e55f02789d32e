"""A workflow's edges as the join reads them: each parent's children, kept per process.

Why a process may keep them: a workflow's edges never change once they are
visible. Its enqueue (or its batch's end) writes them all in the transaction that
creates it, and nothing rewrites them; a retry only resets steps. So the first
settle of a workflow in a process reads all its edges in one statement, and its
later settles read none. Before, every ack batch of a chord's members asked the
database for its children: one round trip in the ack transaction, a fifth of a
batch's join.

Only workflows of at most MOST_EDGES edges are kept, and at most KEPT of them;
the others are asked for their children each time (workflow_statements.children_of).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence

from djqueue.models import StepDependency
from djqueue.storage.statements import workflow_statements

#: The most edges a process keeps of one workflow (a chord of 50,000 members has as many).
MOST_EDGES = 50_000
#: How many workflows' edges a process keeps (the most recently settled).
KEPT = 16
#: Ids per IN (...) list when a workflow's edges are not kept.
CHUNK = 500

_lock = threading.Lock()
#: (database alias, workflow id, token) -> parent position -> child positions; None: too
#: many to keep.
_kept: OrderedDict[tuple[str, int, str], dict[int, list[int]] | None] = OrderedDict()


def children(db: str, workflow_id: int, token: str, parents: Sequence[int]) -> Counter[int]:
    """How many of ``parents`` each child of theirs has (a chord's callback: all). The
    workflow's secret ``token`` is part of the key, so an id used again (a test database
    emptied and refilled) never finds another workflow's edges."""
    edges = _edges(db, workflow_id, token)
    counts: Counter[int] = Counter()
    if edges is None:
        for start in range(0, len(parents), CHUNK):
            counts.update(workflow_statements.children_of(
                db, workflow_id, parents[start:start + CHUNK]))
        return counts
    for parent in parents:
        counts.update(edges.get(parent, ()))
    return counts


def _edges(db: str, workflow_id: int, token: str) -> dict[int, list[int]] | None:
    key = (db, workflow_id, token)
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
            return _kept[key]
    rows = list(StepDependency.objects.using(db).filter(workflow_id=workflow_id)
                .values_list("parent", "child")[:MOST_EDGES + 1])
    edges: dict[int, list[int]] | None = None
    if len(rows) <= MOST_EDGES:
        edges = {}
        for parent, child in rows:
            edges.setdefault(parent, []).append(child)
    with _lock:
        _kept[key] = edges
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return edges
