"""A workflow as a picture: its steps as an SVG graph, drawn on the server.

Steps are placed in columns by depth (the longest path from a step without
parents), in composition order down each column. A column of more than
``MOST_PER_COLUMN`` steps (a chord's thousand members) is drawn as one box that
counts its steps by state, so a workflow of any size draws in a bounded number
of shapes. No JavaScript: the page is plain HTML and SVG.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

MOST_PER_COLUMN = 12
WIDTH, HEIGHT, GAP_X, GAP_Y, MARGIN = 190, 56, 56, 14, 10
#: Fill colours by the state shown (a READY step whose message is claimed shows running).
FILLS = {"waiting": "#eceff1", "ready": "#d6e6ff", "running": "#ffe39a",
         "succeeded": "#c3e8bd", "failed": "#f5b3b3", "cancelled": "#d5d5d5",
         "skipped": "#f3f3f3", "mixed": "#ffffff"}


@dataclass
class StepView:
    """What the picture shows of a step."""

    position: int
    name: str
    state: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def duration(self) -> str:
        if self.started_at is None or self.finished_at is None:
            return ""
        return f"{(self.finished_at - self.started_at).total_seconds():.2f} s"


@dataclass
class Box:
    key: str
    column: int
    row: int
    steps: list[StepView] = field(default_factory=list)

    @property
    def x(self) -> int:
        return MARGIN + self.column * (WIDTH + GAP_X)

    @property
    def y(self) -> int:
        return MARGIN + self.row * (HEIGHT + GAP_Y)

    @property
    def state(self) -> str:
        states = {s.state for s in self.steps}
        return states.pop() if len(states) == 1 else "mixed"


def layout(steps: list[StepView],
           edges: list[tuple[int, int]]) -> tuple[list[Box], set[tuple[str, str]]]:
    """Boxes (one a step, or one a crowded column) and the links between them; ``edges``
    are (parent, child) positions."""
    parents: dict[int, list[int]] = defaultdict(list)
    children: dict[int, list[int]] = defaultdict(list)
    for parent, child in edges:
        parents[child].append(parent)
        children[parent].append(child)
    depth: dict[int, int] = {}
    left = {s.position: len(parents[s.position]) for s in steps}
    ready = [s.position for s in steps if not left[s.position]]
    for position in ready:
        depth[position] = 0
    while ready:
        position = ready.pop()
        for child in children[position]:
            depth[child] = max(depth.get(child, 0), depth[position] + 1)
            left[child] -= 1
            if not left[child]:
                ready.append(child)
    columns: dict[int, list[StepView]] = defaultdict(list)
    for step in sorted(steps, key=lambda s: s.position):
        columns[depth.get(step.position, 0)].append(step)
    boxes: list[Box] = []
    box_of: dict[int, str] = {}
    for column, members in sorted(columns.items()):
        if len(members) > MOST_PER_COLUMN:
            box = Box(f"c{column}", column, 0, members)
            boxes.append(box)
            box_of.update((s.position, box.key) for s in members)
            continue
        for row, step in enumerate(members):
            boxes.append(Box(f"s{step.position}", column, row, [step]))
            box_of[step.position] = f"s{step.position}"
    links = {(box_of[p], box_of[c]) for p, c in edges if box_of[p] != box_of[c]}
    return boxes, links


def draw(steps: list[StepView], edges: list[tuple[int, int]]) -> SafeString:
    boxes, links = layout(steps, edges)
    if not boxes:
        return format_html("{}", "-")
    by_key = {b.key: b for b in boxes}
    width = max(b.x for b in boxes) + WIDTH + MARGIN
    height = max(b.y for b in boxes) + HEIGHT + MARGIN
    paths = format_html_join("", "<path d='M{} {} C{} {} {} {} {} {}' class='djqueue-link'/>", (
        (a.x + WIDTH, a.y + HEIGHT // 2, a.x + WIDTH + GAP_X // 2, a.y + HEIGHT // 2,
         b.x - GAP_X // 2, b.y + HEIGHT // 2, b.x, b.y + HEIGHT // 2)
        for a, b in ((by_key[p], by_key[c]) for p, c in sorted(links))))
    nodes = format_html_join("", "{}", ((_node(box),) for box in boxes))
    return format_html(
        "<svg id='djqueue-workflow-graph' xmlns='http://www.w3.org/2000/svg' width='{}' "
        "height='{}' viewBox='0 0 {} {}' data-steps='{}' data-boxes='{}' role='img' "
        "aria-label='the workflow&apos;s steps and their states'>"
        "<style>.djqueue-link{{fill:none;stroke:#8a94a6;stroke-width:1.5}}"
        "text{{font:12px sans-serif;fill:#1d2533}} .djqueue-sub{{font-size:11px;fill:#4a5568}}"
        "</style>{}{}</svg>", width, height, width, height, len(steps), len(boxes),
        paths, nodes)


def _node(box: Box) -> SafeString:
    if len(box.steps) == 1:
        step = box.steps[0]
        title, detail = step.name, " · ".join(filter(None, (
            step.state, step.duration,
            f"{step.attempts} attempt{'s' if step.attempts != 1 else ''}" if step.attempts
            else "")))
        attributes = format_html("data-step='{}' data-position='{}'", step.name, step.position)
    else:
        counts = Counter(s.state for s in box.steps)
        title = f"{len(box.steps)} steps"
        detail = ", ".join(f"{n} {state}" for state, n in counts.most_common())
        attributes = format_html("data-counts='{}'", detail)
    return format_html(
        "<g class='djqueue-step' data-state='{}' {}><title>{}: {}</title>"
        "<rect x='{}' y='{}' width='{}' height='{}' rx='6' fill='{}' stroke='#5b6578'/>"
        "<text x='{}' y='{}'>{}</text><text class='djqueue-sub' x='{}' y='{}'>{}</text></g>",
        box.state, attributes, title, detail, box.x, box.y, WIDTH, HEIGHT,
        FILLS.get(box.state, "#ffffff"), box.x + 10, box.y + 22, _fit(title, 26),
        box.x + 10, box.y + 42, _fit(detail, 30))


def _fit(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"

