"""Which stage of a campaign a round belongs to, and the config it runs with (``[[stages]]``, see ``loop.config``).

Stages run in order; stage k covers the ``rounds`` rounds after the rounds of the stages before it. Rounds
past the last stage's end (``max_rounds`` larger than the stages' total) stay in the last stage. A campaign
without ``[[stages]]`` is one implicit stage whose config is the campaign's own.
"""

from __future__ import annotations

from itertools import accumulate

from ratchet.loop.config import RatchetConfig


def stage_of(cfg: RatchetConfig, round_index: int) -> tuple[int | None, RatchetConfig]:
    """``(stage index, effective config)`` of round ``round_index`` (1-based).

    The stage index is 0-based (None for a campaign without stages, whose config is returned as is).
    The effective config is ``cfg.for_stage(index)``: the stage's algorithm and its sections merged over
    the campaign's; it is a pure function of ``cfg`` and the round index, so a resumed round runs with
    the same settings.

    Raises:
        ValueError: ``round_index`` < 1 (round 0 is the campaign, not a round).
    """
    if round_index < 1:
        raise ValueError(f"round_index ({round_index}) must be >= 1: rounds are counted from 1")
    if not cfg.stages:
        return None, cfg
    ends = list(accumulate(s.rounds for s in cfg.stages))  # last round of each stage
    index = next((i for i, end in enumerate(ends) if round_index <= end), len(ends) - 1)
    return index, cfg.for_stage(index)


def stage_label(cfg: RatchetConfig, round_index: int) -> str | None:
    """The stage name stored with round ``round_index`` (``rounds.stage``); None for a campaign without stages."""
    index, _ = stage_of(cfg, round_index)
    return None if index is None else cfg.stage_name(index)


def stage_bounds(cfg: RatchetConfig) -> list[tuple[str, int, int]]:
    """``(name, first round, last round)`` per stage, 1-based and inclusive (empty without stages)."""
    out, first = [], 1
    for i, s in enumerate(cfg.stages):
        out.append((cfg.stage_name(i), first, first + s.rounds - 1))
        first += s.rounds
    return out
