"""Multi-turn episodes, batched by turn: one engine call per turn for every live episode, then each environment steps.

An episode is one trajectory: its opening chat's prompt ids, then a token stream of every assistant turn's sampled ids
(mask 1, with the sampler's log-probs) and, between them, the environment's messages as the chat template renders
them after that turn (mask 0, log-prob 0.0): the stream is exactly what the model was fed on its next turn, which is
given to the engine as token ids (``TokenPrompt``), so the model's earlier turns stay the ids it sampled (never a
re-tokenization of their text) and training sees what the sampler saw.

How an environment message becomes tokens: with ``P`` the rendering before assistant turn t (generation prompt
included) and ``F`` the rendering of the conversation through the environment's reply (generation prompt included),
``F`` must extend ``P`` (templates that rewrite earlier turns, e.g. dropping their reasoning, are refused with an error
naming the rule); the rest of ``F`` begins with the turn's text as the template writes it, and what follows the
model's own decoded ids (its end-of-turn token included) is the environment segment. When the ids ran past the text
(a ``generation.stop`` string), the segment is what follows the text: the template's end of turn, then the reply.
The template's markers become their special ids; the message's content is tokenized as plain text (``segment_ids``),
so an environment's text (a tool's output: what the model's program printed) cannot forge a turn in the stream.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ratchet.loop.environments.protocol import Environment, Message, check_message, check_opening
from ratchet.loop.evaluation.episode_scoring import ENVIRONMENT_ERROR
from ratchet.loop.generation.sampling import Completion, PromptInput, SamplingParams, TokenPrompt, prompt_token_ids

logger = logging.getLogger(__name__)

GenerateFn = Callable[[list[PromptInput], SamplingParams], list[Completion]]


@dataclass(frozen=True)
class EpisodeSpec:
    """One prompt's episodes: ``make`` builds an environment per episode, ``reset`` gets ``record``; ``chat`` is the
    prompt as its source renders it (the opening when ``reset`` returns None); ``max_turns`` assistant turns at most."""

    make: Callable[[], Environment]
    record: dict[str, Any]
    chat: list[Message]
    max_turns: int
    name: str = "environment"


@dataclass
class _Episode:
    prompt_index: int
    sample_index: int
    env: Environment
    spec: EpisodeSpec
    opening: list[Message]
    prompt_ids: list[int]
    prompt_hash: str = ""
    messages: list[Message] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    has_logprobs: bool = False
    last: Completion | None = None
    turns: int = 0
    done: bool = False
    error: str | None = None  # what its environment's step raised (the episode ended there)


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of turn ``turn`` (0-based) of an episode batch: the call's own seed on the first turn."""
    return seed if turn == 0 else seed * 1_000_037 + 7_919 * turn


def run_episodes(
    generate: GenerateFn, tokenizer, specs: Sequence[EpisodeSpec], params: SamplingParams, max_tokens: int | None = None
) -> list[Completion]:
    """``params.n`` episodes of each spec, batched by turn (turn t: one ``generate`` call over every live episode, each
    one prompt with ``n = 1``, seeded ``turn_seed(params.seed, t)``), each at most its ``max_turns`` assistant turns.

    ``max_tokens``: an episode also ends when its next turn could run past this many tokens, prompt included
    (``params.max_new_tokens`` more; checked before the environment is asked, and again after its reply, which then
    stays the episode's last message): the engine's context and the trainer's sequence bound.

    Returns:
        one ``Completion`` per (spec index, sample index), in that order: ``text`` the final assistant message,
        ``token_ids`` the stream after the opening prompt, ``mask`` (1 = sampled), ``logprobs`` (0.0 on environment
        tokens; None when not requested), ``messages`` the episode after its opening, ``opening``, ``turns``,
        ``finish_reason`` of the last turn (``environment_error`` when the environment's ``step`` raised: that
        episode ends there, logged, and is judged ``verifier_error``, ``episode_scoring.failed_episode_verdicts``),
        ``prompt_tokens`` / ``prompt_hash`` of the opening prompt.

    Raises:
        EnvironmentMessageError: an environment returned a malformed message. ValueError: the chat template does not
            render a conversation as an extension of its prefix.
    """
    eps = [_open(pi, si, spec, tokenizer) for pi, spec in enumerate(specs) for si in range(params.n)]
    for turn in range(max((s.max_turns for s in specs), default=0)):
        if turn and max_tokens is not None:  # a next turn that could not fit: the episode ends with what it has
            for e in eps:
                e.done = e.done or _too_long(e, params, max_tokens)
        live = [e for e in eps if not e.done]
        if not live:
            break
        p = dataclasses.replace(params, n=1, seed=turn_seed(params.seed, turn))
        comps = generate([TokenPrompt(tuple(e.prompt_ids + e.ids)) for e in live], p)
        for e, c in zip(live, sorted(comps, key=lambda c: c.prompt_index), strict=True):
            _model_turn(e, c, turn)
            if e.turns >= e.spec.max_turns or (max_tokens is not None and _too_long(e, params, max_tokens)):
                e.done = True
                continue
            try:
                reply = e.env.step([*e.opening, *e.messages])
            except Exception as ex:  # the user's code fed the model's text: this episode ends, the round goes on
                e.done, e.error = True, f"{type(ex).__name__}: {ex}"[:500]
                logger.warning("environment %s: step raised on episode %d/%d (%s); that episode ends, judged "
                               "verifier_error", e.spec.name, e.prompt_index, e.sample_index, e.error)  # fmt: skip
                continue
            if reply is None:
                e.done = True
            else:
                _env_turn(e, check_message(reply, f"{e.spec.name}.step"), tokenizer)
    return [_completion(e) for e in eps]


def sample_mixed(
    generate: GenerateFn,
    tokenizer,
    chats: Sequence[list[Message]],
    specs: Sequence[EpisodeSpec | None],
    params: SamplingParams,
    max_tokens: int | None = None,
) -> list[Completion]:
    """``params.n`` completions per chat, a prompt with a spec as ``run_episodes`` episodes: the single-turn prompts in
    one ``generate`` call, the episodes' turns after it; in (prompt index, sample index) order over ``chats``.

    Raises:
        ValueError: ``chats`` and ``specs`` differ in length; as ``run_episodes``.
    """
    if len(chats) != len(specs):
        raise ValueError(f"{len(chats)} chats but {len(specs)} episode specs; pass one (or None) per chat")
    single = [i for i, s in enumerate(specs) if s is None]
    multi = [i for i, s in enumerate(specs) if s is not None]
    out: list[Completion] = []
    if single:
        got = generate([chats[i] for i in single], params)
        out += [dataclasses.replace(c, prompt_index=single[c.prompt_index]) for c in got]
    if multi:
        got = run_episodes(generate, tokenizer, [specs[i] for i in multi], params, max_tokens)
        out += [dataclasses.replace(c, prompt_index=multi[c.prompt_index]) for c in got]
    return sorted(out, key=lambda c: (c.prompt_index, c.sample_index))


def _too_long(e: _Episode, params: SamplingParams, max_tokens: int) -> bool:
    return len(e.prompt_ids) + len(e.ids) + params.max_new_tokens > max_tokens


def _open(pi: int, si: int, spec: EpisodeSpec, tokenizer) -> _Episode:
    env = spec.make()
    opening = check_opening(env.reset(dict(spec.record)), spec.name) or [dict(m) for m in spec.chat]
    ids = prompt_token_ids(tokenizer, [opening])[0]
    return _Episode(pi, si, env, spec, opening, ids)


def _model_turn(e: _Episode, c: Completion, turn: int) -> None:
    if turn == 0:
        e.prompt_hash = c.prompt_hash
    e.ids += c.token_ids
    e.mask += [1] * len(c.token_ids)
    e.has_logprobs = c.logprobs is not None
    e.logprobs += list(c.logprobs) if c.logprobs is not None else [0.0] * len(c.token_ids)
    e.messages.append({"role": "assistant", "content": c.text})
    e.turns += 1
    e.last = c


_SENTINEL = "\x00ratchet-env-content\x00"  # stands for a reply's content, to find where the template puts it


def _env_turn(e: _Episode, reply: Message, tokenizer) -> None:
    before, text = [*e.opening, *e.messages[:-1]], e.messages[-1]["content"]
    seg = env_segment(tokenizer, before, text, e.last.token_ids, reply)
    seg_ids = segment_ids(tokenizer, seg, reply["content"], env_segment(tokenizer, before, text, e.last.token_ids,
                                                                        {**reply, "content": _SENTINEL}))  # fmt: skip
    e.messages.append(reply)
    e.ids += seg_ids
    e.mask += [0] * len(seg_ids)
    e.logprobs += [0.0] * len(seg_ids)


def segment_ids(tokenizer, seg: str, content: str, template: str) -> list[int]:
    """An environment segment's token ids: the template's own text (its turn markers: special ids) tokenized as
    usual, the message's ``content`` as plain text (``split_special_tokens``), so a tool output that prints
    ``<|im_end|><|im_start|>assistant`` stays those characters and never opens a turn in the stream.

    ``template``: the segment rendered with a sentinel for the content; where that does not locate the content (a
    template that rewrites content), the segment is tokenized whole, markers and content alike."""
    pre, sep, post = template.partition(_SENTINEL)
    enc = lambda t, split: tokenizer(t, add_special_tokens=False, split_special_tokens=split)["input_ids"] if t else []
    if not sep or _SENTINEL in post or seg != pre + content + post:
        return enc(seg, False)
    return enc(pre, False) + enc(content, True) + enc(post, False)


def env_segment(tokenizer, before: list[Message], text: str, sampled: Sequence[int], reply: Message) -> str:
    """The text between an assistant turn's sampled ids and the model's next turn: the rest of the turn as the chat
    template closes it, ``reply`` rendered, and the generation prompt (module docstring).

    Args:
        before: the conversation before the assistant turn. text: the turn's text (its message content).
        sampled: (T,) the turn's sampled ids. reply: the environment's message.

    Raises:
        ValueError: the template's rendering of the longer conversation does not extend the shorter one's.
    """
    head = tokenizer.apply_chat_template(before, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(
        [*before, {"role": "assistant", "content": text}, reply], tokenize=False, add_generation_prompt=True
    )
    own = tokenizer.decode(list(sampled), skip_special_tokens=False)
    if full.startswith(head):
        rest = full[len(head) :]
        if rest.startswith(own):
            return rest[len(own) :]
        if rest.startswith(text):  # the ids ran past the text (a stop string): the template closes the turn after it
            return rest[len(text) :]
    raise ValueError(
        "the chat template does not render a conversation as an extension of its prefix (it rewrites earlier turns), "
        "so an episode's turns cannot be laid out as one token stream; multi-turn environments need a template that "
        "appends each message (ChatML, Llama 3 and SmolLM2's do)"
    )


def _completion(e: _Episode) -> Completion:
    c = e.last
    return Completion(
        e.prompt_index,
        e.sample_index,
        c.text,
        tuple(e.ids),
        len(e.prompt_ids),
        ENVIRONMENT_ERROR if e.error else c.finish_reason,
        tuple(e.logprobs) if e.has_logprobs else None,
        e.prompt_hash,
        mask=tuple(e.mask),
        messages=tuple(e.messages),
        opening=tuple(e.opening),
        turns=e.turns,
    )
