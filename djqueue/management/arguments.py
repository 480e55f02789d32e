"""Argument types the commands share: every number is checked where it enters."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from djqueue import durations
from djqueue.exceptions import shown_value


def seconds(high: float, *, positive: bool = True) -> Callable[[str], float]:
    """An argparse type: a number of seconds, finite, in (0 or [0, ``high``]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        try:
            return durations.check(value, "the value", high=high, positive=positive)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "seconds"
    return parse


def whole_number(low: int = 1, high: int = 1_000_000_000) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {shown_value(text)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low} to {high}, got {value}")
        return value

    parse.__name__ = "whole number"
    return parse


def alive_file(text: str) -> Path:
    """An argparse type: a file the process may write, in a folder that exists (it is
    written only once the process has started, so a probe reads its absence as "not
    started yet")."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {str(path.parent)!r}")
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"this process may not write {text!r}")
    return path
