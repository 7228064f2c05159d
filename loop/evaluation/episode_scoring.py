"""Judging multi-turn episodes with their environment's own ``score(messages, record)``, and its identity.

A source whose ``environment`` class has a ``score`` method has its episodes judged by it (else its verifier judges
each episode's final assistant message). Its identity (``plugin:<ref>`` and declared version + the sha256 of its
module's file, as ``verifiers.plugins.loading`` computes them) is part of the campaign's verifier version
(``scoring.reward_version``), so an edited environment re-verifies what it judged before the gate compares.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ratchet.verifiers.plugins.loading import ENVIRONMENT_GROUP, Plugin, load_plugin
from ratchet.verifiers.plugins.runner import PluginVerifier, to_verdict
from ratchet.verifiers.plugins.worker import encode
from ratchet.verifiers.reward import RewardSpec
from ratchet.verifiers.verdict import Verdict

ENVIRONMENT_ERROR = "environment_error"  # an episode's finish_reason when its environment's step raised


def environment_judges(spec: RewardSpec) -> dict[str, Plugin]:
    """The environments that judge their source's episodes (classes with ``score``), by task source name.

    Raises:
        PluginError: a source's environment cannot be imported.
    """
    out = {}
    for source, ref, folder in spec.source_environments:
        plugin = load_plugin(ref, ENVIRONMENT_GROUP, base_dir=folder)
        if callable(getattr(plugin.obj, "score", None)):
            out[source] = plugin
    return out


def episode_verdicts(
    make: Callable[[], Any], name: str, items: Sequence[tuple[list[dict[str, str]], dict[str, Any]]], version: str
) -> list[Verdict]:
    """``make().score(messages, record)`` of each episode (a fresh instance each) as a verdict named ``name`` carrying
    ``version`` (the campaign's verifier version, which the round's queries select).

    A result is read like a user's verifier's (``ratchet.verifiers.plugins``): ``bool``, a finite number (correct when
    >= 1) or a ``Verdict``; anything else, or an exception, is a ``verifier_error`` verdict (reward 0, nothing read).
    ``score`` runs in this process (the environment is trusted code, like its ``step``).
    """
    pv = PluginVerifier(name, None, False, name, version)
    out = []
    for messages, record in items:
        t0 = time.perf_counter()
        try:
            reply = encode(make().score(messages, record))
        except Exception as e:  # the user's code: any failure is that episode's verifier_error, counted by reason
            reply = {"error": f"{type(e).__name__}: {e}"}
        vd = to_verdict(reply, pv, 0.0, time.perf_counter() - t0)
        final = len(messages[-1].get("content") or "") if messages else 0  # read_chars measures the final message
        out.append(replace(vd, read_chars=final) if vd.read_chars is not None and vd.read_chars > final else vd)
    return out


def failed_episode_verdicts(rows: Sequence[Mapping[str, Any]], verdicts: Sequence[Verdict]) -> list[Verdict]:
    """``verdicts`` (one per trajectory row), where a row's episode ended because its environment's step raised
    (``finish_reason = 'environment_error'``) a ``verifier_error`` verdict instead: reward 0, nothing read (so no token
    of it is trained on), under the same verifier name and version: an episode cut short by a bug is never judged as
    if it had ended normally."""
    return [
        replace(vd, correct=False, reward=0.0, reason="verifier_error", parsed=None, read_chars=0,
                details={"error": "the environment's step raised; the episode ended there"})
        if r.get("finish_reason") == ENVIRONMENT_ERROR else vd
        for r, vd in zip(rows, verdicts, strict=True)
    ]  # fmt: skip


def stored_episode(row: Mapping[str, Any]) -> list[dict[str, str]] | None:
    """A trajectory row's whole episode (``prompt_messages`` then ``messages``), or None for a single-turn row."""
    if not row.get("messages"):
        return None
    return [*json.loads(row.get("prompt_messages") or "[]"), *json.loads(row["messages"])]


def prompt_record(prompt: Any) -> dict[str, Any]:
    """What an environment's ``reset`` and ``score`` get for a prompt (a ``Prompt`` or its store row): a ``records``
    source's record as written in its file, else a dict of the prompt's fields (``prompt_id``, ``source``, ``task``,
    ``question``, ``answer``, ``task_format``, ``tests`` (parsed ``tests_json``), ``entry_point``)."""
    get = prompt.get if isinstance(prompt, dict) else lambda k: getattr(prompt, k, None)
    if get("record_json"):
        return json.loads(get("record_json"))
    keys = ("prompt_id", "source", "task", "question", "answer", "task_format", "entry_point")
    tests = get("tests_json")
    return {**{k: get(k) for k in keys}, "tests": json.loads(tests) if tests else None}
