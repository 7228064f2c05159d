"""How ``ratchet run``, ``demo`` and ``sweep`` show a campaign's progress: live bars on a terminal, timestamped lines
otherwise (a cron job's log)."""

from __future__ import annotations

import time
from datetime import datetime

from rich.progress import Progress

from ratchet.flows.cli.common import PlainConsole, console


class RichReporter:
    """Progress bars for stage tasks (they run in this process)."""

    def __init__(self, progress: Progress) -> None:
        self.progress, self.tasks = progress, {}

    def update(self, key: str, description: str, done: float, total: float) -> None:
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(description, total=total)
        self.progress.update(self.tasks[key], completed=done, total=total, description=description)

    def message(self, text: str) -> None:
        self.progress.console.print(text)


class PlainReporter:
    """For output that is not a terminal (a cron job's log file): one timestamped line per stage start and end, and
    per progress bar its start, its end and at most one line a minute in between, printed as they happen."""

    EVERY_S = 60.0

    def __init__(self, out: PlainConsole) -> None:
        self.out, self.last = out, {}

    def update(self, key: str, description: str, done: float, total: float) -> None:
        now = time.monotonic()
        first, finished = key not in self.last, total > 0 and done >= total
        if first or (finished and self.last[key] is not None) or (self.last[key] and now - self.last[key] >= self.EVERY_S):
            self.message(f"{description}: {int(done)}/{int(total)}" + (" done" if finished else ""))
            self.last[key] = None if finished else now

    def message(self, text: str) -> None:
        self.out.print(f"{datetime.now().astimezone().isoformat(timespec='seconds')} {text}", highlight=False, soft_wrap=True)


def cli_reporter(progress: Progress) -> RichReporter | PlainReporter:
    """Live bars on a terminal; plain timestamped lines as things happen when the output is a file or a pipe (cron),
    instead of nothing for minutes and then every bar at once. Make ``progress`` with ``disable=not
    console.is_terminal``."""
    return RichReporter(progress) if console.is_terminal else PlainReporter(console)
