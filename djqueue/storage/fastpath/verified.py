"""The switch every shortcut of the package reads: on for the Django feature releases
whose internals the shortcuts were checked against, off (with one warning) on any
other, where each shortcut takes its plain path.

One module attribute, read at call time by every submodule, so that tests (and
nothing else) can turn all the shortcuts off at once:
``monkeypatch.setattr(fastpath.verified, "enabled", False)``."""

from __future__ import annotations

import logging

import django

logger = logging.getLogger("djqueue")

#: The Django feature releases whose internals these shortcuts were checked against.
VERIFIED_DJANGO = ((5, 2), (6, 0), (6, 1))

enabled = django.VERSION[:2] in VERIFIED_DJANGO
if not enabled:
    logger.warning("djqueue's fast paths were not verified with Django %s; using the plain "
                   "ORM paths instead (correct, slower).", django.get_version())
