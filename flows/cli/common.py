"""What every ``ratchet`` command shares: the consoles, plain-text output, one-line failures, and the errors that become one.

Everything the CLI prints is plain text: the consoles never read rich markup (``[/INST]`` and
``a[i] + b[j]`` print as they are), and control characters (ANSI/OSC escapes, carriage returns,
bidi overrides) are shown escaped (``\\x1b``), so stored model text cannot drive the terminal.
JSON and CSV output bypass this and stay exact.
"""

from __future__ import annotations

from typing import Any, Literal

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

# C0 (but tab and newline), DEL, C1, and the bidi embedding/override/isolate marks: shown as \xNN / \uNNNN.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]}
_CONTROLS |= {c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def safe(text: Any) -> str:
    """``str(text)`` with terminal control characters escaped (``'\\x1b[31m'`` -> ``'\\\\x1b[31m'``); tab and newline kept."""
    return str(text).translate(_CONTROLS)


class PlainConsole(Console):
    """A rich console that never reads markup and escapes control characters in the strings it prints."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        kwargs["markup"] = False
        super().print(*(safe(o) if isinstance(o, str) else o for o in objects), **kwargs)


console = PlainConsole()
err = PlainConsole(stderr=True)

DB_HELP = "DuckDB file of the trajectory store."
Fmt = Literal["table", "csv", "json"]


def cell(value: Any, none: str = "NULL") -> Text:
    """A table cell showing ``value`` literally (no markup, control characters escaped)."""
    return Text(none if value is None else safe(value))


def plain_table(*columns: str, **kwargs: Any) -> Table:
    """A rich ``Table`` whose title and headers are plain text; add rows of :func:`cell` values."""
    if "title" in kwargs and kwargs["title"] is not None:
        kwargs["title"] = Text(safe(kwargs["title"]))
    table = Table(**kwargs)
    for c in columns:
        table.add_column(Text(safe(c)))
    return table


def fail(msg: str, code: int = 2) -> None:
    """Print ``error: <msg>`` on stderr in one plain line and exit with ``code`` (2: bad input)."""
    err.print(Text.assemble(("error:", "bold red"), " ", safe(msg)), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def known_errors() -> tuple[type[BaseException], ...]:
    from ratchet.flows.compute.protocol import StageTimeout, WorkerFailed
    from ratchet.flows.daemon.server import ServerError
    from ratchet.flows.rounds.state.identity import CampaignConflict
    from ratchet.loop.checkpoints import ModelError
    from ratchet.loop.config import ConfigError
    from ratchet.loop.tasks.sources import TaskDataError
    from ratchet.store.db import StoreError
    from ratchet.store.retention import DiskSpaceError
    from ratchet.verifiers.plugins import PluginError

    return (
        ConfigError,
        TaskDataError,
        ModelError,
        StoreError,
        CampaignConflict,
        WorkerFailed,
        StageTimeout,
        DiskSpaceError,
        ServerError,
        PluginError,  # a source's own verifier cannot be imported, or fails on most pilot samples
    )
