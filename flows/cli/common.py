"""What every ``ratchet`` command shares: the consoles, one-line failures, and the errors that become one."""

from __future__ import annotations

from typing import Literal

import typer
from rich.console import Console

console = Console()
err = Console(stderr=True)

DB_HELP = "DuckDB file of the trajectory store."
Fmt = Literal["table", "csv", "json"]


def fail(msg: str, code: int = 2) -> None:
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(str(msg))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def known_errors() -> tuple[type[BaseException], ...]:
    from ratchet.flows.compute.pool import StageTimeout, WorkerFailed
    from ratchet.flows.rounds.campaign import CampaignConflict
    from ratchet.loop.config import ConfigError
    from ratchet.loop.models import ModelError
    from ratchet.loop.tasks import TaskDataError
    from ratchet.store.db import StoreError

    return (ConfigError, TaskDataError, ModelError, StoreError, CampaignConflict, WorkerFailed, StageTimeout)
