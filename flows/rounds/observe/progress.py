"""Progress reporting from stage tasks to whoever is watching: the CLI (rich bars, or plain timestamped lines when
its output is not a terminal), the Prefect UI, and ``ratchet status``.

``bar(key, description)`` gives a stage a ``(done, total)`` callback. It always drives the process's
reporter (the CLI's, or nobody), and inside a Prefect flow or task run it also keeps a progress artifact of
that run up to date, so the UI shows how far generation and training are. ``stage_started`` /
``stage_ended`` (called by ``frame.stage_frame``) tell the reporter one line each, and keep the running
stage's ``_PROGRESS.json`` in its directory (``PROGRESS_FILE``: the stage, its bar and how far it is), which
``ratchet status`` reads; the file is removed when the stage ends.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from uuid import UUID

from prefect.context import get_run_context
from prefect.exceptions import MissingContextError

from ratchet.common.files import atomic_write_text

logger = logging.getLogger(__name__)

# Measured on the 2-core dev machine under load (local API): an update costs 16 ms median, 30 ms p90;
# the first artifact a process creates ~1 s (client set-up), later ones 20-60 ms. These bounds keep a
# stage to one update per few seconds (<= ~0.5 % of its time), however often it calls back.
MIN_INTERVAL_S = 3.0  # seconds between two updates of one artifact
MIN_STEP_PCT = 2.0  # percentage points an update must move (the final 100 % is always sent)


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


class RunProgress:
    """One Prefect progress artifact (0-100 %) of the run that was current when it was made, updated sparingly.

    The artifact is created on the first call, in the run context captured at construction, so a
    callback invoked from another thread still lands on the right run. An API failure is logged once
    and turns further updates off; a stage's work never fails because the UI could not be told.
    """

    def __init__(self, description: str, *, min_interval_s: float = MIN_INTERVAL_S, min_step_pct: float = MIN_STEP_PCT) -> None:
        self.description = description
        self.min_interval_s, self.min_step_pct = min_interval_s, min_step_pct
        self.artifact_id: UUID | None = None
        self.sent_pct: float | None = None
        self.sent_at = 0.0
        self.calls = 0  # API calls made (creation included)
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()
        self._broken = False

    def __call__(self, done: float, total: float) -> None:
        """Record ``done`` of ``total`` units (any unit; ``total`` <= 0 counts as nothing to do yet)."""
        pct = min(100.0, max(0.0, 100.0 * done / total)) if total > 0 else 0.0
        now = time.monotonic()
        with self._lock:
            if self._broken or not self._due(pct, now):
                return
            try:
                if self.artifact_id is None:
                    from prefect.artifacts import create_progress_artifact

                    self.artifact_id = self._context.run(create_progress_artifact, progress=pct, description=self.description)
                else:
                    from prefect.artifacts import update_progress_artifact

                    # in the captured context too: the API's URL may be a context setting (a run's own locked server),
                    # and the callback may come from another thread (an engine rank's output reader)
                    self._context.run(update_progress_artifact, self.artifact_id, pct)
            except Exception as e:  # noqa: BLE001 - httpx/PrefectHTTPStatusError, or no API: the UI is never worth the stage
                self._broken = True
                logger.warning(
                    "progress artifact %r: the Prefect API refused an update (%s: %s); not updating it again",
                    self.description,
                    type(e).__name__,
                    e,
                )
                return
            self.calls += 1
            self.sent_pct, self.sent_at = pct, now

    def _due(self, pct: float, now: float) -> bool:
        if self.sent_pct is None:
            return True
        if pct == self.sent_pct:
            return False
        if pct >= 100.0:
            return True
        return now - self.sent_at >= self.min_interval_s and abs(pct - self.sent_pct) >= self.min_step_pct


def in_run_context() -> bool:
    """True inside a Prefect flow or task run (False when a task's ``.fn`` is called directly)."""
    try:
        get_run_context()
    except MissingContextError:
        return False
    return True


PROGRESS_FILE = "_PROGRESS.json"  # in the running stage's directory: {stage, bar, done, total, started_at, updated_at}
FILE_INTERVAL_S = 2.0  # seconds between two rewrites of a stage's progress file (its last state is always written)
_stage: contextvars.ContextVar[tuple[Path, str] | None] = contextvars.ContextVar("ratchet_stage", default=None)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def stage_started(stage_dir: Path, label: str) -> contextvars.Token:
    """A stage begins its work: one line to the reporter, its progress file written; returns the token for
    ``stage_ended``."""
    _reporter.message(f"{label}: started")
    stage_dir.mkdir(parents=True, exist_ok=True)
    info = {"stage": label, "bar": None, "done": None, "total": None, "started_at": _now(), "updated_at": _now()}
    atomic_write_text(stage_dir / PROGRESS_FILE, json.dumps(info))
    return _stage.set((stage_dir, info["started_at"]))


def stage_ended(token: contextvars.Token, label: str, outcome: str) -> None:
    """The stage's work ended (``outcome``: e.g. 'done in 12.3 s', 'failed'): one line, its progress file removed."""
    current = _stage.get()
    _stage.reset(token)
    if current is not None:
        (current[0] / PROGRESS_FILE).unlink(missing_ok=True)
    _reporter.message(f"{label}: {outcome}")


def read_progress(stage_dir: Path) -> dict | None:
    """A running stage's progress file (``stage_started``), or None (not running, or unreadable mid-replace)."""
    try:
        return json.loads((stage_dir / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return None


def _file_writer(description: str) -> Callable[[float, float], None] | None:
    """Updates of the current stage's progress file with this bar's counts, at most every ``FILE_INTERVAL_S``."""
    current = _stage.get()
    if current is None:
        return None
    stage_dir, started = current
    path, last, lock = stage_dir / PROGRESS_FILE, [float("-inf")], threading.Lock()
    label = (read_progress(stage_dir) or {}).get("stage")

    def write(done: float, total: float) -> None:
        now = time.monotonic()
        with lock:
            if (done < total and now - last[0] < FILE_INTERVAL_S) or not path.exists():
                return
            last[0] = now
            info = {"stage": label, "bar": description, "done": int(done), "total": int(total), "started_at": started}
            try:
                atomic_write_text(path, json.dumps({**info, "updated_at": _now()}))
            except OSError as e:  # status reads it; the stage's work never fails over it
                logger.warning("could not write %s (%s)", path, e)

    return write


def bar(key: str, description: str) -> Callable[[float, float], None]:
    """A ``(done, total)`` callback bound to one progress bar (and, in a Prefect run, to a progress artifact; in a
    stage, to its progress file)."""
    artifact = RunProgress(description) if in_run_context() else None
    to_file = _file_writer(description)

    def update(done: float, total: float) -> None:
        _reporter.update(key, description, done, total)
        if artifact is not None:
            artifact(done, total)
        if to_file is not None:
            to_file(done, total)

    return update


def running_stage(round_dir: Path) -> dict | None:
    """The progress file of the round's running stage (the newest one under ``round_dir``), or None."""
    files = sorted(round_dir.glob(f"**/{PROGRESS_FILE}"), key=lambda f: f.stat().st_mtime if f.exists() else 0.0)
    return read_progress(files[-1].parent) if files else None


def describe_stage(info: dict) -> str:
    """``'generate: rollouts 48/96'``: a running stage and its bar in a few words (the round is said elsewhere)."""
    strip = lambda t: re.sub(r"^round \d+: ", "", t or "")  # noqa: E731
    text = strip(info.get("stage"))
    if info.get("bar") and info.get("total"):
        text += f": {strip(info['bar'])} {info['done']}/{info['total']}"
    return text
