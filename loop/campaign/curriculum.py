"""Which phase of a campaign a round belongs to, and the config it runs with (``[[phases]]``, see ``loop.config``).

Phases run in order; phase k covers the ``rounds`` rounds after the rounds of the phases before it. Rounds
past the last phase's end (``max_rounds`` larger than the phases' total) stay in the last phase. A campaign
without ``[[phases]]`` is one implicit phase whose config is the campaign's own. (A phase is the curriculum's unit;
a stage is a step of every round's pipeline: generate, verify, filter, train, evaluate, gate.)
"""

from __future__ import annotations

from itertools import accumulate

from ratchet.loop.config import RatchetConfig


def phase_of(cfg: RatchetConfig, round_index: int) -> tuple[int | None, RatchetConfig]:
    """``(phase index, effective config)`` of round ``round_index`` (1-based).

    The phase index is 0-based (None for a campaign without phases, whose config is returned as is).
    The effective config is ``cfg.for_phase(index)``: the phase's algorithm and its sections merged over
    the campaign's; it is a pure function of ``cfg`` and the round index, so a resumed round runs with
    the same settings.

    Raises:
        ValueError: ``round_index`` < 1 (round 0 is the campaign, not a round).
    """
    if round_index < 1:
        raise ValueError(f"round_index ({round_index}) must be >= 1: rounds are counted from 1")
    if not cfg.phases:
        return None, cfg
    ends = list(accumulate(s.rounds for s in cfg.phases))  # last round of each phase
    index = next((i for i, end in enumerate(ends) if round_index <= end), len(ends) - 1)
    return index, cfg.for_phase(index)


def phase_label(cfg: RatchetConfig, round_index: int) -> str | None:
    """The phase name stored with round ``round_index`` (``rounds.stage``); None for a campaign without phases."""
    index, _ = phase_of(cfg, round_index)
    return None if index is None else cfg.phase_name(index)


def phase_bounds(cfg: RatchetConfig) -> list[tuple[str, int, int]]:
    """``(name, first round, last round)`` per phase, 1-based and inclusive (empty without phases)."""
    out, first = [], 1
    for i, s in enumerate(cfg.phases):
        out.append((cfg.phase_name(i), first, first + s.rounds - 1))
        first += s.rounds
    return out
