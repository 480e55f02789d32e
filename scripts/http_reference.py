"""Write docs/reference/http.md from the HTTP API's OpenAPI schema (djqueue.http.schema).

    .venv/bin/python scripts/http_reference.py          # write it
    .venv/bin/python scripts/http_reference.py --check  # fail if it is out of date

``make test`` runs the check, so the page and the schema the server serves agree.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "http.md"


def render() -> str:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("DATABASE_URL", "")
    import django

    django.setup()
    from djqueue.http import schema

    document = schema.openapi()
    lines = ["# HTTP API reference", "",
             "<!-- Written by scripts/http_reference.py from djqueue.http.schema; "
             "do not edit. -->", "",
             document["info"]["description"], "",
             "Paths are relative to where the API is mounted (`/queue-api/` in the demo). "
             "The server serves this schema at `openapi.json` and a page of it at `docs/`. "
             "The permission each operation needs is in brackets.", ""]
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            lines += [f"## `{method.upper()} {path}`", "", operation["summary"] + ".", ""]
            params = [p for p in operation.get("parameters", []) if p["in"] == "query"]
            if params:
                lines += ["Query: " + ", ".join(f"`{p['name']}`" for p in params) + ".", ""]
            body = operation.get("requestBody")
            if body:
                lines += ["Request body:", "", "```json",
                          json.dumps(body["content"]["application/json"]["schema"], indent=2),
                          "```", ""]
            statuses = ", ".join(f"{status} ({response['description']})"
                                 for status, response in operation["responses"].items())
            lines += [f"Responses: {statuses}.", ""]
    lines += ["## Schemas", ""]
    for name, body in document["components"]["schemas"].items():
        lines += [f"### {name}", "", "```json", json.dumps(body, indent=2), "```", ""]
    return "\n".join(lines)


def main() -> None:
    text = render()
    if "--check" in sys.argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            sys.exit(f"{PAGE.relative_to(ROOT)} is out of date: run scripts/http_reference.py")
        return
    PAGE.write_text(text)


if __name__ == "__main__":
    main()
