"""A step's training prompts as the round's selection picked them (``tasks.selection``), refilled where groups drop.

The store's history (``ratchet.store.prompt_history.prompt_history``) goes into the pure choice
(``ratchet.loop.tasks.picking``); every prompt a step sampled is written to ``round_prompts`` with its estimate,
so ``SELECT * FROM round_prompts WHERE round_id = ...`` says why each prompt was picked.
"""

from __future__ import annotations

from collections.abc import Callable

from ratchet.loop.campaign.round_context import Ctx, now
from ratchet.loop.tasks.picking import Choice, History, Slot, refill
from ratchet.store.prompt_history import prompt_history


def history(con, ctx: Ctx, incumbent: str) -> History:
    """The incumbent lineage's recent verdicts the round's choice reads (``tasks.selection_window`` rounds)."""
    prompts, groups = prompt_history(
        con, ctx.campaign_id, ctx.round_index, incumbent, ctx.verifier_version, ctx.cfg.tasks.selection_window
    )
    return History(prompts, groups)


def round_slots(con, ctx: Ctx, incumbent: str) -> list[Slot]:
    """The round's slots (``Ctx.round_slots``) under the store's history for ``incumbent``."""
    return ctx.round_slots(history(con, ctx, incumbent))


def sample_step(ctx: Ctx, slots: list[Slot], sample: Callable[[list[Choice], int], list[bool]]) -> list[tuple[Choice, int]]:
    """Sample this step's picked prompts, and refill dropped groups from its reserve slots when it has some.

    ``sample(choices, refill_pass)`` generates (and, for a refill, verifies) the choices' groups and returns per
    choice whether its rewards vary. Returns every sampled choice with its refill pass.
    """
    mine = [x.choice for x in slots if x.step == ctx.step]
    first = [c for c in mine if c.pick != "reserve"]
    reserve = [c for c in mine if c.pick == "reserve"]
    if not reserve:
        sample(first, 0)
        return [(c, 0) for c in first]
    return refill(first, reserve, sample)


def round_prompt_rows(ctx: Ctx, slots: list[Slot], taken: list[tuple[Choice, int]]) -> list[dict]:
    """``round_prompts`` rows of a step's sampled choices (position: the choice's place among the round's slots)."""
    position = {x.choice.prompt.prompt_id: i for i, x in enumerate(slots)}
    ts = now()
    return [
        dict(
            round_id=ctx.round_id,
            prompt_id=c.prompt.prompt_id,
            step=ctx.step,
            position=position[c.prompt.prompt_id],
            selection=ctx.cfg.tasks.selection,
            pick=c.pick,
            refill_pass=k,
            estimate=c.estimate,
            alpha=c.alpha,
            beta=c.beta,
            seen_rollouts=c.seen[0],
            seen_correct=c.seen[1],
            informative=c.informative,
            created_at=ts,
        )
        for c, k in taken
    ]
