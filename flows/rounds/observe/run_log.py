"""Prefect-side helpers of a round's tasks: the run logger, the flow run id, the process that owns a round."""

from __future__ import annotations

import logging
import os

from prefect import get_run_logger
from prefect.exceptions import MissingContextError


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger inside a flow or task run; a plain logger when a task's ``.fn`` is called directly."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("ratchet.flows")


def process_owner() -> str:
    """``'<host>:<pid>'`` of this process, recorded on the round it runs (``ratchet up`` marks it crashed once dead)."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def current_flow_run_id() -> str | None:
    """The enclosing Prefect flow run's id, or None outside a flow run."""
    from prefect.runtime import flow_run

    return flow_run.id
