"""A producer process for the fault tests: sends ``--count`` messages at a fixed rate,
logging each outcome, and retries a failed send until it goes through.

Each line of the log: ``ok N ID T`` (message N stored as ID, sent at wall time
T) or ``err N T ERROR`` (the send raised: the producer knows, nothing is
silently lost). Run with DJANGO_SETTINGS_MODULE and DATABASE_URL set.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue", required=True)
    parser.add_argument("--first", type=int, default=0, help="First message number.")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="Messages per second.")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    import django

    django.setup()
    from django.db import DatabaseError, connections

    import djqueue
    from djqueue.exceptions import DjqueueError

    log = open(args.log, "a", buffering=1)  # noqa: SIM115 (the whole run)
    started = time.monotonic()
    n = args.first
    end = args.first + args.count
    while n < end:
        numbers = list(range(n, min(end, n + args.batch)))
        due = started + (n - args.first) / args.rate
        time.sleep(max(0.0, due - time.monotonic()))
        sent_at = time.time()
        try:
            messages = djqueue.send_batch(args.queue, [{"n": i, "t": sent_at} for i in numbers])
        except (DatabaseError, DjqueueError) as exc:
            error = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            for i in numbers:
                log.write(f"err {i} {sent_at:.6f} {error}\n")
            connections.close_all()  # a fresh connection for the retry
            time.sleep(0.2)
            continue
        for i, message in zip(numbers, messages, strict=True):
            log.write(f"ok {i} {message.pk} {sent_at:.6f}\n")
        n = numbers[-1] + 1
    log.close()


if __name__ == "__main__":
    main()
