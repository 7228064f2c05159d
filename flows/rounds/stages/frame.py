"""The frame every stage task of a round runs in: context, stage directory, crash-resume marker, timing, ingest.

A stage task holds only its own work::

    with stage_frame(config_path, round_index, "verify", step=step) as s:
        s.ingest("verdicts", s.out / "part-0.parquet")
        if not s.done:  # no marker yet: do the work, write the Parquet, then the marker
            ...
            s.finish({"n": len(rows)})

``stage_frame`` loads the round's ``Ctx`` and logger, picks the stage directory, reads its marker (so a
resumed round skips finished work), times the stage (``s.timer.compute()`` marks model and verifier
time), and on a clean exit ingests the registered Parquet files idempotently and runs the registered
store callbacks, all in one transaction. An exception inside the frame ingests nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet.flows.rounds.observe.progress import stage_ended, stage_started
from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.loop.campaign.round_context import Ctx, Timer, load_ctx, read_marker, write_marker
from ratchet.store.db import transaction
from ratchet.store.ingest import ingest_parquet


@dataclass
class StageRun:
    """One run of a pipeline stage (generate, verify, filter, train, evaluate) inside ``stage_frame``."""

    ctx: Ctx
    out: Path  # the stage's directory under the run dir
    log: logging.Logger | logging.LoggerAdapter
    timer: Timer
    marker: dict | None  # the stage's success marker when it already ran (its work is skipped)
    counts: dict[str, int] = field(default_factory=dict)  # the work's own tallies, for its marker
    _ingests: list[tuple[str, list[Path]]] = field(default_factory=list)
    _on_commit: list[Callable[[Any], None]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """The stage finished before (its marker exists): skip the work, re-ingest its files."""
        return self.marker is not None

    def ingest(self, table: str, *files: Path) -> None:
        """Ingest ``files`` (Parquet) into ``table`` when the frame closes, done or not (idempotent: INSERT OR IGNORE)."""
        self._ingests.append((table, [Path(f) for f in files]))

    def on_commit(self, fn: Callable[[Any], None]) -> None:
        """Run ``fn(con)`` after the ingests, in the same transaction (e.g. rows derived from what was just ingested)."""
        self._on_commit.append(fn)

    def finish(self, summary: dict) -> dict:
        """Write the stage's marker: ``summary`` plus the timer's wall/compute seconds. Returns the marker."""
        self.marker = write_marker(self.out, {**summary, **self.timer.summary()})
        return self.marker


@contextmanager
def stage_frame(
    config_path: str, round_index: int, stage: str, *, step: int = 0, dir_name: str | None = None
) -> Iterator[StageRun]:
    """The frame of one pipeline stage task (see the module docstring).

    Args:
        stage: the pipeline stage's name; its directory is ``ctx.stage_dir(dir_name or stage)``.
        step: the on-policy step inside the round (``grpo.steps_per_round``).

    Raises:
        Whatever the stage's work raises; nothing is ingested then.
    """
    ctx = load_ctx(config_path, round_index, step)
    out = ctx.stage_dir(dir_name or stage)
    run = StageRun(ctx=ctx, out=out, log=run_logger(), timer=Timer(), marker=read_marker(out))
    label = f"round {round_index}: {stage}" + (f" (step {step + 1})" if step else "")
    token = None if run.done else stage_started(out, label)  # a finished stage (resumed round) does no work: no lines
    outcome = "failed"
    try:
        yield run
        if run._ingests or run._on_commit:
            with transaction(ctx.db) as con:
                for table, files in run._ingests:
                    ingest_parquet(con, table, files)
                for fn in run._on_commit:
                    fn(con)
        outcome = f"done in {time.perf_counter() - run.timer.t0:.1f} s"
    finally:
        if token is not None:
            stage_ended(token, label, outcome)
