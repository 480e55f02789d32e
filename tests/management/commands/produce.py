from typing import Any

from django.core.management.base import BaseCommand, CommandParser

import djqueue


class Command(BaseCommand):
    help = "Test producer: sends payloads {'n': start..start+count-1}, alternating single and batch."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue")
        parser.add_argument("--start", type=int, default=0)
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--batch", type=int, default=10)

    def handle(self, *args: Any, queue: str, start: int, count: int, batch: int,
               **options: Any) -> None:
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
