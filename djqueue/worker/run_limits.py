"""When a worker's loop ends by itself: its ``--max-messages`` and ``--max-seconds``
(it stops), and stuck handler threads or ``--max-rss`` (it stops to be started afresh).

The loop asks once a round, after collecting finished handlers; each answer is a few
comparisons (the resident memory is read at most every 50 ms).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from djqueue.processes.memory_limit import ResidentMemoryWatch

if TYPE_CHECKING:
    from djqueue.processes.stop_signals import StopSignals
    from djqueue.worker.ack_batches import WorkerStats
    from djqueue.worker.handler_threads import HandlerThreads
    from djqueue.worker.options import WorkerOptions

logger = logging.getLogger("djqueue.worker")


class RunLimits:
    """One worker's limits on how long it runs and how much it takes in."""

    def __init__(self, options: WorkerOptions, worker_id: str, stats: WorkerStats,
                 stop_signals: StopSignals) -> None:
        self.max_messages, self.max_seconds = options.max_messages, options.max_seconds
        #: Handler threads past their time limit that make the worker start afresh.
        self.max_stuck = options.max_stuck or max(4, 2 * options.concurrency)
        self.worker_id, self.stats = worker_id, stats
        self._memory = ResidentMemoryWatch(options.max_rss, worker_id)
        #: Told when stuck handler threads or --max-rss make it stop to be started afresh.
        self._stop_signals = stop_signals

    def left(self, batch_size: int, held: int) -> int:
        """How many more messages ``--max-messages`` lets the worker claim (``batch_size``
        when it has none), with ``held`` claimed and not yet finished."""
        if self.max_messages is None:
            return batch_size
        return self.max_messages - self.stats.processed - held

    def reached(self, threads: HandlerThreads) -> bool:
        """Whether the loop should end now; asks for a stop to run anew when the process
        should then be started afresh (what it holds is finished first, within the
        shutdown's grace; a SIGTERM meanwhile makes it exit instead)."""
        if self.max_messages is not None and self.stats.processed >= self.max_messages:
            return True
        if (self.max_seconds is not None
                and time.monotonic() - self.stats.started >= self.max_seconds):
            return True
        if threads.stuck >= self.max_stuck or threads.exhausted:
            logger.error("%d handler thread(s) stuck past the time limit; stopping so the "
                         "process starts afresh", threads.stuck,
                         extra={"worker": self.worker_id})
            self._stop_signals.stop_to_run_anew()
            return True
        if self._memory.outgrown():  # --max-rss
            self._stop_signals.stop_to_run_anew()
            return True
        return False
