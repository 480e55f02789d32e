"""Which function handles which queue: ``DJQUEUE["HANDLERS"]``, the ``@handler``
decorator, or a handler source.

A handler source is a feature above the worker that owns some queues and their
handler: the django.tasks backend (djqueue.tasks) adds one when the app loads, so
the worker runs task queues without importing anything of the tasks feature.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from django.utils.module_loading import autodiscover_modules, import_string

from djqueue import durations
from djqueue.api.queues import create_queue
from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError, HandlerNotFound, shown_value
from djqueue.models import Queue
from djqueue.models.names import is_valid_name
from djqueue.storage.queue_lookup import get_queue
from djqueue.types import AckHook, HandlerFunc


@dataclass(frozen=True)
class Handler:
    func: HandlerFunc
    #: None: follow the queue's ``exactly_once`` option.
    exactly_once: bool | None = None
    #: Called by a worker inside each transaction that acks messages of the queue (its
    #: claim transaction), with (database alias, acks asked for, acked), once the leases
    #: are checked and before the acked rows are deleted: state the handler keeps beside
    #: the messages changes with them, and may be copied from their rows (see
    #: djqueue.tasks.task_handler).
    in_claim_transaction: AckHook | None = None
    #: A batch handler's most messages a call: ``func`` takes a list of messages of its
    #: queue (see :func:`handler`). None: one message a call.
    batch: int | None = None
    #: Seconds a batch handler's short list may wait to fill (djqueue.worker.batch_windows).
    batch_wait: float | None = None

    @cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    @property
    def path(self) -> str:
        return f"{self.func.__module__}.{self.func.__qualname__}"


class HandlerSource(Protocol):
    """Handlers of the queues a feature owns; the worker creates those queues on first use."""

    def queue_names(self) -> set[str]:
        """The queues this source handles now (it may follow settings)."""
        ...

    def handler(self, queue: str) -> Handler:
        """The handler of one of :meth:`queue_names`."""
        ...


#: What a handler may be given beside its function, in ``@handler`` or the settings.
HANDLER_OPTIONS = ("exactly_once", "batch", "batch_wait")
#: The most messages a batch handler takes a call (a claim's most is 10,000 with -b).
MAX_BATCH = 10_000
_registry: dict[str, Handler] = {}
_sources: list[HandlerSource] = []
_calling = threading.local()


class _HookRunsAfter:
    """Around a handler call whose ack will run the handler's ``in_claim_transaction``
    (a worker's), so the handler may leave its writes to that hook. A class, not a
    generator context manager: a worker enters it once a task run."""

    def __enter__(self) -> None:
        _calling.hooked = True

    def __exit__(self, *exc_info: object) -> None:
        _calling.hooked = False


_hook_runs_after = _HookRunsAfter()


def hook_runs_after() -> _HookRunsAfter:
    """A context for a handler call whose ack runs the handler's ``in_claim_transaction``."""
    return _hook_runs_after


def hook_will_run() -> bool:
    """Inside a handler: whether :func:`hook_runs_after` wraps this call."""
    return getattr(_calling, "hooked", False)


def handler(
    queue: str, *, exactly_once: bool | None = None, batch: int | None = None,
    batch_wait: float | None = None,
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Register the decorated ``func(message)`` as the handler of ``queue``.

    Modules named ``handlers`` in installed apps are imported when a worker
    starts, so decorators there register themselves.

    ``batch=N`` makes it a batch handler (Oban's chunks, an SQS consumer's batches):
    ``func(messages)`` takes a list of up to N messages of the queue, those one claim
    of the worker took, in their claim order. ``batch_wait=S`` holds a list that is not
    full up to S seconds (from its first message's claim) to fill from later claims;
    without it the worker does not wait. Returning acks them all; raising fails them
    all (retried on the queue's backoff, or as a ``RetryAfter`` or ``Postpone`` says);
    raising :class:`~djqueue.exceptions.BatchFailures` fails only the messages it names. A
    batch handler cannot be exactly-once: its messages are settled after it returns.
    ``DJQUEUE["HANDLERS"]`` takes the same options (:func:`configured_handler`).
    """
    if not is_valid_name(queue):  # a handler no worker could look its queue up for
        raise ConfigurationError(f"@handler takes a queue's name (1-100 letters, digits, "
                                 f"'_', '.', ':' or '-'), got {shown_value(queue)}.")
    options = _checked_options(queue, exactly_once=exactly_once, batch=batch,
                               batch_wait=batch_wait)

    def register(func: HandlerFunc) -> HandlerFunc:
        _registry[queue] = Handler(func, **options)
        return func

    return register


def _checked_options(queue: str, *, exactly_once: object = None, batch: object = None,
                     batch_wait: object = None) -> dict[str, Any]:
    """A handler's options, checked (ConfigurationError), as Handler's keywords."""
    if exactly_once is not None and not isinstance(exactly_once, bool):
        raise ConfigurationError(f"The handler of queue {queue!r}: exactly_once must be "
                                 f"True, False or None, got {shown_value(exactly_once)}.")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)
                              or not 1 <= batch <= MAX_BATCH):
        raise ConfigurationError(f"The handler of queue {queue!r}: batch must be a whole "
                                 f"number of messages from 1 to {MAX_BATCH}, got {shown_value(batch)}.")
    if batch_wait is not None:
        if batch is None:
            raise ConfigurationError(f"The handler of queue {queue!r} has a batch_wait "
                                     "but no batch: give it batch=N too.")
        try:
            batch_wait = durations.check(batch_wait, f"The batch_wait of queue {queue!r}",
                                         high=durations.MAX_LEASE)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
    if batch is not None and exactly_once:
        raise ConfigurationError(f"The batch handler of queue {queue!r} cannot be "
                                 "exactly-once: its messages are acked after it returns.")
    return {"exactly_once": exactly_once, "batch": batch, "batch_wait": batch_wait}


def configured_handler(queue: str, spec: object) -> tuple[str, dict[str, Any]]:
    """The dotted path and options of ``DJQUEUE["HANDLERS"][queue]``: a path, or a dict
    with the path as ``"handler"`` and the decorator's options beside it
    (``{"handler": "myapp.handlers.index", "batch": 100, "batch_wait": 2}``)."""
    if not is_valid_name(queue):
        raise ConfigurationError(f"DJQUEUE['HANDLERS'] has the key {shown_value(queue)}, "
                                 f"which is no queue's name.")
    if isinstance(spec, str):
        return spec, {}
    if not isinstance(spec, dict) or not isinstance(spec.get("handler"), str):
        raise ConfigurationError(
            f"DJQUEUE['HANDLERS'][{queue!r}] must be a dotted path, or a dict with the "
            f"path as 'handler' and options beside it, got {shown_value(spec)}.")
    unknown = sorted(set(spec) - {"handler", *HANDLER_OPTIONS})
    if unknown:
        raise ConfigurationError(
            f"DJQUEUE['HANDLERS'][{queue!r}] has unknown option(s) {unknown}; it takes "
            f"'handler' and {', '.join(map(repr, HANDLER_OPTIONS))}.")
    options = {name: spec[name] for name in HANDLER_OPTIONS if name in spec}
    return spec["handler"], _checked_options(queue, **options)


def discover() -> None:
    autodiscover_modules("handlers")


def configured_paths() -> dict[str, Any]:
    """``DJQUEUE["HANDLERS"]``: queue name → a dotted path, or a dict (see
    :func:`configured_handler`)."""
    return dict(get_settings().HANDLERS)


def resolve(queue: str) -> Handler:
    """The handler of ``queue``; settings win over decorators. HandlerNotFound if none.

    A broadcast consumer's queue ``topic:group:consumer`` falls back to the
    handler of its group, ``topic:group``.
    """
    try:
        return _resolve(queue)
    except HandlerNotFound:
        if queue.count(":") >= 2:
            try:
                return _resolve(queue.rsplit(":", 1)[0])
            except HandlerNotFound:
                pass
        raise


def _resolve(queue: str) -> Handler:
    spec = configured_paths().get(queue)
    if spec is not None:
        path, options = configured_handler(queue, spec)
        try:
            func = import_string(path)
        except ImportError as exc:
            raise HandlerNotFound(
                f"Handler {path!r} for queue {queue!r} does not import: {exc}") from None
        if not callable(func):
            raise HandlerNotFound(f"Handler {path!r} for queue {queue!r} is not callable.")
        return Handler(func, **options)
    if queue in _registry:
        return _registry[queue]
    for source in _sources:
        if queue in source.queue_names():
            return source.handler(queue)
    raise HandlerNotFound(
        f"No handler for queue {queue!r}: add it to DJQUEUE['HANDLERS'] or decorate a "
        "function with @djqueue.handler().")


def describe(queue: str) -> str:
    """One line on what a worker of this project runs for ``queue``, for the admin: the
    handler's path and its options, or why there is none (the error a worker would
    stop with). Read in the calling process: its settings and ``handlers`` modules."""
    discover()
    try:
        entry = resolve(queue)
    except (HandlerNotFound, ConfigurationError) as exc:
        return str(exc)
    said = [entry.path + (" (async)" if entry.is_async else "")]
    if entry.batch is not None:
        said.append(f"lists of up to {entry.batch} messages a run"
                    + (f", waiting up to {entry.batch_wait:g} s to fill"
                       if entry.batch_wait else ""))
    if entry.exactly_once is not None:
        said.append("exactly once" if entry.exactly_once else "not exactly once, whatever "
                    "the queue says")
    return "; ".join(said)


def add_source(source: HandlerSource) -> None:
    """Let ``source`` handle its queues (once per source; called as an app loads)."""
    if source not in _sources:
        _sources.append(source)


def sourced_queues() -> set[str]:
    """Queues the handler sources handle (the django.tasks backends' queues)."""
    return set().union(*(source.queue_names() for source in _sources))


def known_queues() -> list[str]:
    return sorted(set(configured_paths()) | set(_registry) | sourced_queues())


def serving(queue_names: Sequence[str]) -> tuple[dict[str, Handler], list[Queue]]:
    """The handler and the Queue of each name, as a worker starts: HandlerNotFound or
    QueueNotFound for a name it could not work; a sourced queue is created on first use."""
    discover()
    found = {name: resolve(name) for name in queue_names}
    sourced = sourced_queues()
    queues = [create_queue(name, exist_ok=True) if name in sourced
              else get_queue(name, fresh=True) for name in queue_names]
    for queue in queues:
        if found[queue.name].batch is not None and queue.exactly_once:
            raise ConfigurationError(
                f"Queue {queue.name!r} is exactly-once and its handler takes batches: a "
                "batch's messages are acked after its handler returns. Turn one off.")
    return found, queues
