"""Length rules: the 'auto' completion cap and the check that training never truncates a sequence.

Common RLVR practice sets the completion cap to 1.2 x the P90 of recent completion lengths, so few
rollouts are cut while the cap follows the policy as its answers grow or shrink. Training sequences
(prompt + completion) must then fit ``sft.max_seq_len``: the SFT and GRPO passes would otherwise cut
prompts (left) or completions silently; they count what they cut (``train/truncated_prompts``,
``train/truncated_completions``) and preflight refuses a config whose limits would cut.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from ratchet.loop.config import ConfigError, RatchetConfig
from ratchet.loop.generation.sampling import render_prompt

AUTO_FACTOR = 1.2  # cap = 1.2 x P90 of the last round's rollout completion lengths


def auto_max_new_tokens(last_p90: float | None, lo: int, hi: int) -> int:
    """The next round's completion cap, tokens: ``ceil(1.2 * last_p90)`` clipped to ``[lo, hi]``; ``lo`` without history.

    Args:
        last_p90: P90 of the last round's rollout completion lengths, tokens; None for the first round.
        lo, hi: bounds, tokens (``generation.max_new_tokens_min`` / ``_max``).
    """
    if last_p90 is None:
        return lo
    return max(lo, min(hi, math.ceil(AUTO_FACTOR * last_p90)))


def round_max_new_tokens(cfg: RatchetConfig, last_p90: float | None) -> int:
    """The rollout cap of a round, tokens: ``generation.max_new_tokens``, or the 'auto' rule on ``last_p90``."""
    g = cfg.generation
    if isinstance(g.max_new_tokens, int):
        return g.max_new_tokens
    return auto_max_new_tokens(last_p90, g.max_new_tokens_min, g.max_new_tokens_max)


def truncation_error(cfg: RatchetConfig, longest_prompt_tokens: int) -> str | None:
    """One line naming the limit that would cut training sequences, or None when they all fit.

    A rollout completion has at most ``generation.max_new_tokens_cap`` tokens (the EOS included when it
    stopped). RFT/SFT trains on prompt + completion + EOS within ``sft.max_seq_len``; GRPO on prompt + the
    sampled completion within ``sft.max_seq_len`` (no fixed share for either).

    Args:
        longest_prompt_tokens: the longest training prompt as rendered by the chat template, tokens.
    """
    cap, seq = cfg.generation.max_new_tokens_cap, cfg.sft.max_seq_len
    need = longest_prompt_tokens + cap + (1 if cfg.algorithm != "grpo" else 0)
    if need > seq:
        return (
            f"sft.max_seq_len ({seq}) < longest prompt ({longest_prompt_tokens} tokens) + max_new_tokens ({cap})"
            f"{' + EOS' if cfg.algorithm != 'grpo' else ''}, so training would truncate; set sft.max_seq_len >= {need}"
        )
    return None


def longest_prompt_tokens(tokenizer, conversations: Iterable[list[dict[str, str]]]) -> int:
    """The longest of ``conversations`` rendered with the chat template (generation prompt added), tokens; 0 if none."""
    return max(
        (len(tokenizer(render_prompt(tokenizer, m), add_special_tokens=False)["input_ids"]) for m in conversations), default=0
    )


def check_no_truncation(cfg: RatchetConfig, model_dir: Path, conversations: Iterable[list[dict[str, str]]]) -> None:
    """Refuse a config whose sequence limits would cut a training prompt or completion (preflight).

    Args:
        model_dir: the checkpoint whose tokenizer renders the prompts.
        conversations: every training prompt's chat messages.

    Raises:
        ConfigError: one line naming the limit, the longest prompt and the value that fits.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    error = truncation_error(cfg, longest_prompt_tokens(tok, conversations))
    if error:
        raise ConfigError(error)
