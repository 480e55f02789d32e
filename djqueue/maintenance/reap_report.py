"""What one pass of the reaper did, by the count of each thing
(djqueue.maintenance.reaper): its log line, its ``--once`` output and its tests read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReapReport:
    dead_workers: int = 0
    returned_from_dead: int = 0
    expired: int = 0
    #: Messages past their expiry set aside at the head of a queue with a message_ttl
    #: or whose head stood still.
    past_expiry: int = 0
    promoted: int = 0
    pruned: int = 0
    periodic: int = 0
    groups_repaired: int = 0
    counted: int = 0
    alarms: int = 0
    vacuums: int = 0
    analyzes: int = 0

    def __bool__(self) -> bool:
        return any(vars(self).values())

    def __str__(self) -> str:
        """What the pass did, by the counts that are not 0 ("dead workers 1, returned
        from dead 3"); "nothing" if none."""
        return ", ".join(f"{name.replace('_', ' ')} {value}"
                         for name, value in vars(self).items() if value) or "nothing"

    def add(self, other: ReapReport) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)
