"""The HTTP API's endpoints by name, for djqueue.http.urls: each checks its caller's
grant, then calls the queue's Python API (djqueue.api) on a database thread. Each
endpoint's request and response are in djqueue.http.schema.

Sending is in djqueue.http.sending_endpoints, receiving and finishing by receipt in
djqueue.http.receiving_endpoints, the list of queues, a queue's attributes, peek and
full control in djqueue.http.queue_endpoints; what they share in
djqueue.http.endpoint_base.
"""

from __future__ import annotations

from typing import Any

from djqueue.http.endpoint_base import endpoint
from djqueue.http.queue_endpoints import (
    list_queues,
    pausing,
    peek_messages,
    purge_queue,
    queue_attributes,
    redrive_messages,
)
from djqueue.http.receiving_endpoints import (
    ack_group_messages,
    ack_messages,
    extend_group_messages,
    extend_messages,
    nack_group_messages,
    nack_messages,
    receive_from_group,
    receive_messages,
)
from djqueue.http.sending_endpoints import publish_messages, send_messages


def views() -> dict[str, Any]:
    """The endpoint views by URL name (djqueue.http.urls)."""
    return {
        "queues": endpoint(GET=list_queues),
        "queue": endpoint(GET=queue_attributes),
        "messages": endpoint(POST=send_messages, GET=peek_messages),
        "receive": endpoint(POST=receive_messages),
        "ack": endpoint(POST=ack_messages),
        "nack": endpoint(POST=nack_messages),
        "extend": endpoint(POST=extend_messages),
        "redrive": endpoint(POST=redrive_messages),
        "purge": endpoint(POST=purge_queue),
        "pause": endpoint(POST=pausing(True)),
        "resume": endpoint(POST=pausing(False)),
        "publish": endpoint(POST=publish_messages),
        "group-receive": endpoint(POST=receive_from_group),
        "group-ack": endpoint(POST=ack_group_messages),
        "group-nack": endpoint(POST=nack_group_messages),
        "group-extend": endpoint(POST=extend_group_messages),
    }
