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
    read_chars: int | None = None  # leading characters of ``completion`` the verifier read (None: all); see below
    completion_mask: tuple[int, ...] | None = None  # a multi-turn episode: 1 per id the model sampled; see below

    # A multi-turn episode (``ratchet.loop.environments``): ``completion_ids`` is its whole token stream after the
    # opening prompt (every assistant turn's sampled ids, the environment's messages between them) and
    # ``completion_mask`` says which ids the model produced; only those carry loss. ``read_chars`` then does not
    # apply (it measures the final message the verifier judged, not the stream): the stream is kept whole.


def read_token_count(tokenizer, ids, read_chars: int | None) -> int | None:
    """How many leading sampled ids cover what the verifier read, or None when they all do.

    ``read_chars``: the leading characters of the completion's text the verifier read (``verdicts.read_chars``; the
    verify stage sets it to the text's length for a completion a ``generation.stop`` string ended, whose ids run
    through the string); None means all of it. Ids past the span (an invented next exercise the verifier never
    graded, a stop string's own tokens) are never trained on. Returns the fewest ids whose decoded text reaches the
    span (binary search, ~log2(n) decodes), or None when the decoded ids do not run past it.
    """
    if read_chars is None or len(tokenizer.decode(list(ids), skip_special_tokens=True)) <= read_chars:
        return None
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(list(ids[:mid]), skip_special_tokens=True)) >= read_chars:
            hi = mid
        else:
            lo = mid + 1
    return hi


def loss_mask(tokenizer, ex: ChatExample) -> list[int]:
    """(len(completion_token_ids(tokenizer, ex)),) 1 where an id carries loss, 0 on an episode's environment tokens;
    all 1 for a single-turn example (an appended EOS included)."""
    ids = completion_token_ids(tokenizer, ex)
    if ex.completion_mask is None or ex.completion_ids is None:
        return [1] * len(ids)
    return list(ex.completion_mask[: len(ids)]) + [1] * (len(ids) - len(ex.completion_mask))


def completion_token_ids(tokenizer, ex: ChatExample) -> list[int]:
    """The completion's training token ids, ending in an end-of-turn token: the sampled ids when stored (an EOS
    is appended only when the completion did not stop on one), else the text tokenized with the tokenizer's EOS
    appended (a sampled completion stops on a special token: the tokenizer's EOS or the generation config's).
    Where decode -> encode round-trips and the completion stopped on the tokenizer's EOS, both are the
    same ids.

    Only what the verifier read trains (``read_token_count``): past it the ids are cut and the tokenizer's EOS
    appended, so the model learns to stop where the graded answer ended. A multi-turn episode's stream is kept whole
    (``loss_mask`` says which ids train)."""
    if ex.completion_ids is not None:
        ids = list(ex.completion_ids)
        k = None if ex.completion_mask is not None else read_token_count(tokenizer, ids, ex.read_chars)
        if k is not None:
            return ids[:k] + [tokenizer.eos_token_id]
        stopped = bool(ids) and (ids[-1] == tokenizer.eos_token_id or ids[-1] in tokenizer.all_special_ids)
        return ids if stopped else ids + [tokenizer.eos_token_id]
    text = ex.completion if ex.read_chars is None else ex.completion[: ex.read_chars]
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
