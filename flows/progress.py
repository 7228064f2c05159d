"""Progress reporting from stage tasks to whoever is watching (the CLI's rich bars, or nobody)."""

from __future__ import annotations

from typing import Callable, Protocol


class Reporter(Protocol):
    def update(self, key: str, description: str, done: float, total: float) -> None: ...

    def message(self, text: str) -> None: ...


class _Silent:
    def update(self, key: str, description: str, done: float, total: float) -> None:
        pass

    def message(self, text: str) -> None:
        pass


_reporter: Reporter = _Silent()


def set_reporter(r: Reporter | None) -> None:
    global _reporter
    _reporter = r or _Silent()


def reporter() -> Reporter:
    return _reporter


def bar(key: str, description: str) -> Callable[[float, float], None]:
    """A ``(done, total)`` callback bound to one progress bar."""
    return lambda done, total: _reporter.update(key, description, done, total)
