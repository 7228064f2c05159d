"""Prefect-side helpers of a round's tasks: the run logger, the flow run id, the process that owns a round, and what a
signal that stops that process records (``record_interruption``)."""

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


def record_interruption(db: str, signal_name: str, timeout_s: float = 5.0) -> list[dict]:
    """Mark the rounds this process runs ``interrupted`` in the store ``db`` and their flow runs Cancelled, from a
    signal handler (SIGINT/SIGTERM) just before the process exits; returns the rounds marked.

    Bounded by ``timeout_s`` in all (a thread the exit abandons): a store the interrupted work holds locked, or a Prefect
    API that no longer answers, leaves the round ``running`` (``ratchet up`` and ``ratchet status`` then call it
    ``crashed``) and the flow run Running; the next run resumes the round either way. Never raises.
    """
    import threading

    marked: list[dict] = []

    def work() -> None:
        from ratchet.loop.campaign.round_context import now
        from ratchet.store.db import transaction
        from ratchet.store.queries import mark_rounds_interrupted

        try:
            with transaction(db, timeout_s=timeout_s / 2) as con:
                marked.extend(mark_rounds_interrupted(con, process_owner(), now()))
            ids = [r["flow_run_id"] for r in marked if r["flow_run_id"]]
            if ids:
                cancel_flow_runs(ids, f"{signal_name} received: the round was interrupted; run again to resume it")
        except Exception as e:  # noqa: BLE001 - the process is exiting; the round is marked crashed later instead
            logging.getLogger(__name__).debug("could not record the interruption: %s", e)

    t = threading.Thread(target=work, name="record-interruption", daemon=True)
    t.start()
    t.join(timeout_s)
    return list(marked)


def cancel_flow_runs(flow_run_ids: list[str], message: str) -> None:
    """Set these flow runs Cancelled (forced), on the Prefect API this process uses."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    with get_client(sync_client=True) as client:
        for i in flow_run_ids:
            client.set_flow_run_state(i, Cancelled(message=message), force=True)
