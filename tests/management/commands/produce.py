import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

import djqueue
from djqueue.exceptions import PartitionUnavailable


class Command(BaseCommand):
    help = ("Test producer: sends payloads {'n': start..start+count-1}, alternating single and "
            "batch; with --keyed-every, one send in so many carries a group key, and every "
            "send its own dedup key (the partition tests).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue")
        parser.add_argument("--start", type=int, default=0)
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--batch", type=int, default=10)
        parser.add_argument("--keyed-every", type=int, default=0,
                            help="Single sends with dedup keys; every Nth with a group key.")
        parser.add_argument("--keys", type=int, default=50)

    def handle(self, *args: Any, queue: str, start: int, count: int, batch: int,
               keyed_every: int, keys: int, **options: Any) -> None:
        if keyed_every:
            self._keyed(queue, start, count, keyed_every, keys)
            return
        n, end, single = start, start + count, True
        while n < end:
            if single:
                djqueue.send(queue, {"n": n})
                n += 1
            else:
                size = min(batch, end - n)
                djqueue.send_batch(queue, [{"n": k} for k in range(n, n + size)])
                n += size
            single = not single

    def _keyed(self, queue: str, start: int, count: int, every: int, keys: int) -> None:
        """Every message once, whatever partition is down: a send its partition refuses
        is tried again later with the same dedup key (stored once, however it ended), and
        the rest go on meanwhile. A key's messages are sent in order: while one waits,
        the later ones of its key wait behind it."""
        waiting: list[int] = []
        for n in range(start, start + count):
            waiting.append(n)
            waiting = self._send_in_order(queue, waiting, every, keys, start)
        while waiting:
            time.sleep(0.2)
            waiting = self._send_in_order(queue, waiting, every, keys, start)

    def _send_in_order(self, queue: str, waiting: list[int], every: int, keys: int,
                       start: int) -> list[int]:
        left, blocked = [], set()
        for n in waiting:
            key = f"p{start}-{(n // every) % keys}" if n % every == 0 else None
            if key is not None and key in blocked:
                left.append(n)
                continue
            try:
                djqueue.send(queue, {"n": n}, group_key=key, dedup_key=f"m{n}")
            except PartitionUnavailable:
                left.append(n)
                if key is not None:
                    blocked.add(key)
        return left
