"""Rationalization (STaR, Zelikman et al. 2022, s3.3): a hint of the gold answer for prompts the model never solved.

A prompt none of whose G rollouts was verified correct gets G more with the gold answer in its last user turn
(``hinted``); a verified-correct completion of the hinted chat is then trained on under the prompt *without* the
hint (the round's own rendering of it), so the model learns to reach the answer, not to read it from the prompt.
Only math prompts have a gold answer to hint (code prompts have tests; they are left out).
"""

from __future__ import annotations

from collections.abc import Iterable

from ratchet.loop.tasks.sources import Prompt
from ratchet.verifiers.math.golds import split_gold

HINT = "(Hint: the correct final answer is {answer}. Work it out step by step and end with that answer.)"


def hint_text(answer: str) -> str:
    """The hint appended to the question (the gold answer as text; a multiple-choice gold's answer, not its stored
    ``{"answer", "choices"}`` form)."""
    return HINT.format(answer=split_gold(answer)[0])


def hinted(messages: list[dict[str, str]], answer: str) -> list[dict[str, str]]:
    """``messages`` with the hint appended to the last user turn (the question); the other turns unchanged.

    Raises:
        ValueError: no user turn to append it to.
    """
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        raise ValueError("a rationalization hint goes into the question's user turn, and the chat has none")
    out = [dict(m) for m in messages]
    out[last]["content"] = f"{out[last]['content']}\n\n{hint_text(answer)}"
    return out


def unsolved(prompts: Iterable[Prompt], correct_prompt_ids: set[str]) -> list[Prompt]:
    """The math prompts with a gold answer none of whose rollouts was correct, in order."""
    return [p for p in prompts if p.task_format == "math" and p.answer.strip() and p.prompt_id not in correct_prompt_ids]
