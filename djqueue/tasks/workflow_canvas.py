"""Composing workflows: steps (tasks with bound arguments) in chains, groups, chords and
DAGs, flattened into numbered steps and ordered edges for djqueue.tasks.workflows.

Nothing here touches the database: a canvas is a description, enqueued whole by
``.enqueue()`` (one transaction). A step object stands for one step of one
workflow; using it twice in one canvas is an error, since a DAG names its
parents by the step objects themselves (``.after(a, b)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from djqueue.exceptions import InvalidWorkflow, shown_value


class Node:
    """Anything a workflow is made of: a step, a chain, a group or a chord."""

    #: djqueue.tasks.workflows.enqueue_workflow, set as that module loads (it builds on
    #: this one, not the reverse; djqueue's AppConfig imports it).
    enqueuer: ClassVar[Callable[..., Any]]

    def enqueue(self, *, name: str = "", policy: str = "stop") -> Any:
        """Enqueue the whole workflow in one transaction; returns its WorkflowHandle.

        ``policy``: "stop" (the first failure fails the workflow and nothing
        starts after it) or "continue" (dependants run anyway; steps receiving
        results get None for a failed parent, and the failures if they ask).
        """
        return self.enqueuer(self, name=name, policy=policy)


class Step(Node):
    """One task run with bound arguments: ``djqueue.step(resize, image_id, width=200)``."""

    def __init__(self, task: Any, *args: Any, **kwargs: Any) -> None:
        if not hasattr(task, "module_path") or not hasattr(task, "get_backend"):
            raise InvalidWorkflow(f"A step runs a django.tasks task, got {shown_value(task)}")
        self.task = task
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.name = task.name
        self.parents: list[Step] = []
        self.receives: str | None = None
        self.failures_as = ""
        self.gathers = False

    def __repr__(self) -> str:
        return f"<Step {self.name}>"

    def after(self, *parents: Step) -> Step:
        """Run after every one of ``parents`` (a DAG's edges), besides any the
        composition gives it; its received results follow that order."""
        for parent in parents:
            if not isinstance(parent, Step):
                raise InvalidWorkflow(f"after() takes steps, got {shown_value(parent)}")
        self.parents.extend(parents)
        return self

    def named(self, name: str) -> Step:
        """A name for the admin's picture and the handle's results (the task's name if not)."""
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise InvalidWorkflow("A step's name is 1 to 200 characters")
        self.name = name
        return self

    def receiving(self, as_keyword: str | None = None, *, failures: str | None = None) -> Step:
        """Pass the parents' results to the task: as its first positional argument, or
        as the keyword argument ``as_keyword``. One parent: its result; several (or a
        chord's callback): a list in the parents' order. ``failures`` names a keyword
        argument for a list of the failed parents (policy "continue")."""
        for value in (as_keyword, failures):
            if value is not None and not (isinstance(value, str) and value.isidentifier()):
                raise InvalidWorkflow(f"A keyword argument's name is an identifier, got {shown_value(value)}")
        self.receives = as_keyword or ""
        self.failures_as = failures or ""
        return self


class Chain(Node):
    """Each part runs after the previous one succeeded."""

    def __init__(self, *parts: Node) -> None:
        self.parts = _nodes(parts, "chain")


class Group(Node):
    """The parts run in parallel."""

    def __init__(self, *parts: Node) -> None:
        self.parts = _nodes(parts, "group")


class Chord(Node):
    """A group, then one callback receiving the list of the group's results in order."""

    def __init__(self, group: Group | Iterable[Node], callback: Step) -> None:
        self.group = group if isinstance(group, Group) else Group(*group)
        if not isinstance(callback, Step):
            raise InvalidWorkflow(f"A chord's callback is a step, got {shown_value(callback)}")
        self.callback = callback
        callback.gathers = True
        if callback.receives is None:
            callback.receives = ""


def _nodes(parts: Iterable[Any], what: str) -> list[Node]:
    parts = list(parts)
    if len(parts) == 1 and isinstance(parts[0], list | tuple):
        parts = list(parts[0])
    for part in parts:
        if not isinstance(part, Node):
            raise InvalidWorkflow(f"A {what} is made of steps, chains, groups and chords, "
                                  f"got {shown_value(part)}")
    if not parts:
        raise InvalidWorkflow(f"A {what} needs at least one step")
    return parts


@dataclass
class Flat:
    """A canvas as numbered steps and, for each step, its parents in order."""

    steps: list[Step] = field(default_factory=list)
    parents: dict[int, list[int]] = field(default_factory=dict)
    _index: dict[int, int] = field(default_factory=dict)
    _edges: set[tuple[int, int]] = field(default_factory=set)

    def add(self, step: Step) -> int:
        if id(step) in self._index:
            raise InvalidWorkflow(f"{step!r} appears twice in the workflow: make a step "
                                  "for each run")
        self._index[id(step)] = len(self.steps)
        self.steps.append(step)
        self.parents[len(self.steps) - 1] = []
        return len(self.steps) - 1

    def edge(self, parent: int, child: int) -> None:
        if (parent, child) not in self._edges:
            self._edges.add((parent, child))
            self.parents[child].append(parent)

    def index(self, step: Step) -> int | None:
        return self._index.get(id(step))


def flatten(node: Node) -> Flat:
    """Number the steps of ``node`` (in composition order) and list each one's parents."""
    flat = Flat()
    _place(node, flat)
    position = 0
    while position < len(flat.steps):  # grows as after() brings in parents
        for parent in flat.steps[position].parents:
            index = flat.index(parent)
            if index is None:  # a parent named only by after(): it is part of the workflow
                index = _place(parent, flat)[0][0]
            flat.edge(index, position)
        position += 1
    _check_acyclic(flat)
    return flat


def _place(node: Node, flat: Flat) -> tuple[list[int], list[int]]:
    """Add ``node``'s steps; returns its sources and sinks."""
    if isinstance(node, Step):
        index = flat.add(node)
        return [index], [index]
    if isinstance(node, Chain):
        sources: list[int] = []
        sinks: list[int] = []
        for part in node.parts:
            part_sources, part_sinks = _place(part, flat)
            for child in part_sources:
                for parent in sinks:
                    flat.edge(parent, child)
            sources = sources or part_sources
            sinks = part_sinks
        return sources, sinks
    if isinstance(node, Group):
        sources, sinks = [], []
        for part in node.parts:
            part_sources, part_sinks = _place(part, flat)
            sources += part_sources
            sinks += part_sinks
        return sources, sinks
    if isinstance(node, Chord):
        sources, sinks = _place(node.group, flat)
        callback = flat.add(node.callback)
        for parent in sinks:
            flat.edge(parent, callback)
        return sources, [callback]
    raise InvalidWorkflow(f"Not a workflow part: {node!r}")


def _check_acyclic(flat: Flat) -> None:
    """Refuse a cycle (after() can make one): its steps would wait for ever."""
    left = {i: len(parents) for i, parents in flat.parents.items()}
    children: dict[int, list[int]] = {i: [] for i in flat.parents}
    for child, parents in flat.parents.items():
        for parent in parents:
            children[parent].append(child)
    ready = [i for i, n in left.items() if n == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for child in children[i]:
            left[child] -= 1
            if left[child] == 0:
                ready.append(child)
    if seen != len(flat.steps):
        stuck = sorted(flat.steps[i].name for i, n in left.items() if n)
        raise InvalidWorkflow(f"The workflow has a cycle through {', '.join(stuck[:5])}")


def step(task: Any, *args: Any, **kwargs: Any) -> Step:
    return Step(task, *args, **kwargs)


def chain(*parts: Node) -> Chain:
    return Chain(*parts)


def group(*parts: Node) -> Group:
    return Group(*parts)


def chord(members: Group | Iterable[Node], callback: Step) -> Chord:
    return Chord(members, callback)


def workflow(*parts: Node) -> Group:
    """A DAG: the given steps (and any they name in ``after()``), run as their
    ``after()`` edges say; steps with no parents start at once."""
    return Group(*parts)
