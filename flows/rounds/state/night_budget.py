"""A night's budget for one round attempt (``[schedule] max_wall_s`` / ``max_tokens``): checked at the round's stage
boundaries, it ends the attempt cleanly (status ``budget_spent``, finished stages kept by their markers) so the next
run resumes the round where it stopped."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from ratchet.loop.campaign.round_context import Ctx, now
from ratchet.store.db import connect
from ratchet.store.read.costs import tokens_since


class BudgetSpent(Exception):
    """The round attempt spent its night's budget; the message says which and how much."""


@dataclass
class NightBudget:
    """The attempt's start (wall clock and store time) and its limits (None: unlimited)."""

    ctx: Ctx
    max_wall_s: float | None
    max_tokens: int | None
    started: float = field(default_factory=time.monotonic)
    started_at: datetime = field(default_factory=now)

    @classmethod
    def of(cls, ctx: Ctx) -> NightBudget:
        s = ctx.cfg.schedule
        return cls(ctx, s.max_wall_s, s.max_tokens)

    def check(self, after: str) -> None:
        """Raise BudgetSpent when the attempt has used ``max_wall_s`` or generated ``max_tokens``; ``after``: the stage
        just finished (for the message)."""
        wall = time.monotonic() - self.started
        if self.max_wall_s is not None and wall >= self.max_wall_s:
            raise BudgetSpent(f"wall budget spent after {after}: {wall:.0f} s >= schedule.max_wall_s {self.max_wall_s:g}")
        if self.max_tokens is not None:
            with connect(self.ctx.db, read_only=True) as con:
                used = tokens_since(con, self.ctx.round_id, self.started_at)
            if used >= self.max_tokens:
                raise BudgetSpent(f"token budget spent after {after}: {used} >= schedule.max_tokens {self.max_tokens}")
