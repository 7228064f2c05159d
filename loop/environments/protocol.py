"""What a multi-turn environment is, how one is found by name, and what it is given.

An environment drives an episode around the model: ``reset(record)`` opens it (the chat the model answers first),
``step(messages)`` answers each assistant turn (the next ``user`` or ``tool`` message, or ``None`` to end it), and an
optional ``score(messages, record)`` judges the whole episode (else the source's verifier judges its final assistant
message). A source names one with ``environment = "package.module:Class"`` or an entry point of group
``ratchet.environments`` (``[[tasks.sources]]``, docs/own-task.md); each episode gets a new instance.

An environment is the user's trusted code, but what it returns carries text the model wrote (a tool's output): every
message it returns is checked here (a role of ``user`` or ``tool``, text content), bounded (``MAX_MESSAGE_CHARS``)
and made valid UTF-8 (``storable_text``) before it reaches the model, the store or a tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ratchet.verifiers.plugins.loading import ENVIRONMENT_GROUP, PluginError, load_plugin
from ratchet.verifiers.plugins.runner import storable_text

Message = dict[str, str]  # {"role": ..., "content": ...}

MAX_MESSAGE_CHARS = 16_384  # an environment's message past this is cut (a hostile tool output, a runaway env)
ENV_ROLES = ("user", "tool")


@runtime_checkable
class Environment(Protocol):
    """A multi-turn environment (one instance per episode).

    ``reset(record)``: the episode's opening chat (a list of ``{"role", "content"}``: system, few-shot, user), or
    ``None`` to open with the prompt as its source renders it (system prompt, few-shot turns, question).
    ``step(messages)``: given the episode so far (the opening chat, then every turn, ending with the model's latest
    assistant message), the next message (role ``user`` or ``tool``), or ``None`` to end the episode.
    Optional ``score(messages, record) -> float | bool``: the episode's reward (``messages``: the whole episode);
    without it the source's verifier judges the final assistant message.
    """

    def reset(self, record: dict[str, Any]) -> list[Message] | None: ...

    def step(self, messages: list[Message]) -> Message | None: ...


class EnvironmentMessageError(ValueError):
    """An environment returned something that is not a chat message (the message names the environment and the fix)."""


@dataclass(frozen=True)
class EnvironmentRef:
    """A loaded environment: ``make()`` builds one episode's instance; ``name`` / ``version`` identify it
    (``plugin:<ref>`` and declared version + source sha256, as ``verifiers.plugins.loading`` computes them)."""

    make: Callable[[], Environment]
    name: str
    version: str


def load_environment(ref: str, base_dir: str | Path | None = None) -> EnvironmentRef:
    """Resolve a source's ``environment`` (``package.module:Class`` or an entry point of ``ratchet.environments``).

    Raises:
        PluginError: unresolvable reference, or it names something that is not a class with ``reset`` and ``step``.
    """
    plugin = load_plugin(ref, ENVIRONMENT_GROUP, base_dir=base_dir)
    cls = plugin.obj
    if not isinstance(cls, type) or not all(callable(getattr(cls, m, None)) for m in ("reset", "step")):
        raise PluginError(
            f"environment {ref!r} ({plugin.target}) must be a class with reset(record) and step(messages) methods; "
            "see docs/own-task.md, 'Multi-turn environments'"
        )
    return EnvironmentRef(cls, plugin.name, plugin.version)


def check_message(msg: Any, who: str, roles: tuple[str, ...] = ENV_ROLES) -> Message:
    """``msg`` as a bounded chat message, ``{"role", "content"}`` with a role of ``roles`` and text content cut at
    ``MAX_MESSAGE_CHARS``.

    Raises:
        EnvironmentMessageError: ``msg`` is not a dict with such a role and a string content.
    """
    if not isinstance(msg, dict) or msg.get("role") not in roles or not isinstance(msg.get("content"), str):
        shown = repr(msg)[:120]
        raise EnvironmentMessageError(
            f"environment {who} returned {shown}; it must return a dict {{'role': one of {list(roles)}, 'content': str}} "
            "(or None to end the episode)"
        )
    return {"role": msg["role"], "content": storable_text(msg["content"][:MAX_MESSAGE_CHARS])}


def check_opening(chat: Any, who: str) -> list[Message] | None:
    """A ``reset`` result as a bounded chat (None: open with the source's rendering). Raises ``EnvironmentMessageError``."""
    if chat is None:
        return None
    if not isinstance(chat, list) or not chat:
        raise EnvironmentMessageError(
            f"environment {who}: reset() returned {repr(chat)[:120]}; return a non-empty list of messages or None"
        )
    return [check_message(m, f"{who}.reset", ("system", "user", "assistant", "tool")) for m in chat]


def has_score(env: EnvironmentRef) -> bool:
    """Whether the environment judges its episodes itself (a ``score(messages, record)`` method)."""
    return callable(getattr(env.make, "score", None))
