"""The chat example both trainers read: a prompt's messages, one completion and the ids it was sampled as."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatExample:
    """A chat prompt and one completion of it: its text, and the token ids it was sampled as (None for text that
    was never sampled, such as a reference solution, or a row of a store from before ids were stored).

    What SFT imitates (``ratchet.loop.train.sft``) and what a GRPO rollout carries (``grpo.batch.GRPOSample``).
    """

    messages: list[dict[str, str]]
    completion: str
    completion_ids: tuple[int, ...] | None = None


def completion_token_ids(tokenizer, ex: ChatExample) -> list[int]:
    """The completion's training token ids, ending in an end-of-turn token: the sampled ids when stored (an EOS
    is appended only when the completion did not stop on one), else the text tokenized with the tokenizer's EOS
    appended (a sampled completion stops on a special token: the tokenizer's EOS or the generation config's).
    Where decode -> encode round-trips and the completion stopped on the tokenizer's EOS, both are the
    same ids."""
    if ex.completion_ids is not None:
        ids = list(ex.completion_ids)
        stopped = bool(ids) and (ids[-1] == tokenizer.eos_token_id or ids[-1] in tokenizer.all_special_ids)
        return ids if stopped else ids + [tokenizer.eos_token_id]
    return tokenizer(ex.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
