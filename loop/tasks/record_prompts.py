"""The ``records`` task format: a ``prompt`` (a string, or a list of chat messages) and any other fields, judged by the
source's own verifier (``verifier = "package.module:function"``, ``ratchet.verifiers.plugins``).

A record's prompt is its ``prompt`` field (or the source's ``question_field``): a non-empty string is the user turn; a
list of ``{"role", "content"}`` messages (roles ``system``, ``user``, ``assistant``, ``tool``; at least one ``user``)
is the chat itself, with the source's system prompt prepended only when the list has no system message. The prompt's
``question`` (what the split, decontamination and reports read) is the string, or the list's last user message. Its
gold (``Prompt.answer``, what ``ratchet tasks check`` runs the verifier on) is the ``reference`` field (or the
source's ``answer_field``), ``""`` without one. The whole record goes to the verifier as ``prompts.record_json``.
"""

from __future__ import annotations

import json
from typing import Any

from ratchet.loop.tasks.readers import TaskDataError

ROLES = ("system", "user", "assistant", "tool")
MAX_MESSAGES = 256  # messages of one chat prompt
MAX_RECORD_JSON_CHARS = 1 << 20  # one record as JSON (what every verdict call is sent), 1 MiB
REFERENCE_FIELD = "reference"


def record_prompt(rec: dict, where: str, field: str | None) -> tuple[str, list[dict[str, str]] | None]:
    """``(question, chat messages or None)`` of a records-format record.

    Raises:
        TaskDataError: the prompt is missing, empty, of the wrong type, or a chat list with a malformed message or no
            user message; the message names the record and the fix.
    """
    key = field or "prompt"
    value = rec.get(key)
    if isinstance(value, str):
        if not value.strip():
            raise TaskDataError(f'{where}: "{key}" is empty; give every record a prompt')
        return value, None
    if not isinstance(value, list) or not value:
        got = "missing" if value is None else "an empty list" if value == [] else f"of type {type(value).__name__}"
        raise TaskDataError(
            f'{where}: "{key}" is {got}; a records prompt is a string or a list of {{"role", "content"}} messages'
            + ("" if field else " (or set question_field to the field that holds it)")
        )
    if len(value) > MAX_MESSAGES:
        raise TaskDataError(f'{where}: "{key}" holds {len(value)} messages, more than {MAX_MESSAGES}; shorten the chat')
    msgs = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise TaskDataError(
                f'{where}: "{key}"[{i}] is not a {{"role", "content"}} message (role one of {", ".join(ROLES)}, content a '
                f"string); got {str(m)[:80]!r}"
            )
        msgs.append({"role": m["role"], "content": m["content"]})
    users = [m["content"] for m in msgs if m["role"] == "user"]
    if not users or not users[-1].strip():
        raise TaskDataError(f'{where}: "{key}" has no non-empty user message; end the chat with the user turn to answer')
    return users[-1], msgs


def record_reference(rec: dict, field: str | None) -> str:
    """A record's gold as text: its ``reference`` (or ``field``) value, JSON for a non-string; ``""`` without one."""
    value = rec.get(field or REFERENCE_FIELD)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def record_json(rec: dict, where: str) -> str:
    """The record as canonical JSON (sorted keys; values JSON cannot hold as text).

    Raises:
        TaskDataError: the record is larger than ``MAX_RECORD_JSON_CHARS``.
    """
    text = json.dumps(rec, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > MAX_RECORD_JSON_CHARS:
        raise TaskDataError(
            f"{where}: the record is {len(text)} characters as JSON, more than {MAX_RECORD_JSON_CHARS}; every verifier "
            "call is sent the whole record, so keep records small (move large data to a file the verifier reads)"
        )
    return text


def chat_of(record: str | None, field: str | None = None) -> list[dict[str, str]] | None:
    """The chat-message list of a stored record (``Prompt.record_json``; its prompt in ``field``, default ``prompt``),
    or None when its prompt is a string."""
    if not record:
        return None
    data: Any = json.loads(record)
    prompt = data.get(field or "prompt") if isinstance(data, dict) else None
    return [dict(m) for m in prompt] if isinstance(prompt, list) else None


def with_system(system_prompt: str, msgs: list[dict[str, str]]) -> list[dict[str, str]]:
    """A record's chat as the engine sees it: the source's system prompt first unless the chat has its own."""
    if not system_prompt or any(m["role"] == "system" for m in msgs):
        return list(msgs)
    return [{"role": "system", "content": system_prompt}, *msgs]
