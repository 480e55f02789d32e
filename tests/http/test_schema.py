"""The OpenAPI schema: valid OpenAPI 3.1, and it describes every URL the API serves."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern
from openapi_spec_validator import validate

from djqueue.http import schema, urls

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_schema_is_valid_openapi():
    validate(schema.openapi())


def test_the_schema_covers_every_endpoint_and_only_them():
    document = schema.openapi()
    served = set()
    for pattern in urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        route = str(pattern.pattern)
        if route in ("openapi.json", "docs/"):
            continue
        served.add("/" + re.sub(r"<str:(\w+)>", r"{\1}", route))
    assert served == set(document["paths"])
    operations = [op for methods in document["paths"].values() for op in methods.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids)), "operationIds must be unique"
    for op in operations:
        # The list of queues answers with those the caller has a grant on: never 403.
        needed = {"400", "401"} | ({"403"} if op["operationId"] != "listQueues" else set())
        assert needed <= set(op["responses"]), op["operationId"]


def test_the_server_serves_the_schema_and_its_page(api_server):
    with api_server.client() as http:
        assert http.get("openapi.json").json() == schema.openapi()
        page = http.get("docs/").text
    for operation_id in ("send", "receive", "ack", "nack", "extend", "peek", "getQueue",
                         "listQueues",
                         "redrive", "purge", "pause", "resume", "publish", "receiveGroup"):
        assert f'id="{operation_id}"' in page
