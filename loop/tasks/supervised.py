"""Supervised data that is not a verified rollout: prompts' reference solutions and general SFT records.

A cold-start phase (``algorithm = "sft"``) fine-tunes on the reference ``solution`` of each of the round's
train prompts; an rft (or sft) phase may mix in general chat data (``sft.general_data`` at
``sft.general_ratio``), as DeepSeek-R1's third phase does to keep non-reasoning skills. Each example row
says where it came from (``origin``: ``rollout`` | ``reference`` | ``general``), stored in
``training_examples.origin``.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from ratchet.loop.config import ConfigError
from ratchet.loop.generation.sampling import render_prompt
from ratchet.loop.tasks.sources import Prompt


@dataclass(frozen=True)
class GeneralRecord:
    """One general SFT record: the prompt's chat turns and the assistant's answer to learn.

    Attributes:
        example_id: 16 hex digits, sha256 of the file name and the record's text (stable across runs).
        messages: chat turns before the answer (``[{"role": ..., "content": ...}]``).
        completion: the assistant turn trained on.
    """

    example_id: str
    messages: tuple[tuple[str, str], ...]
    completion: str


def _turns(value: object, where: str) -> list[tuple[str, str]]:
    """A prompt as chat turns: a string (one user turn) or a list of ``{role, content}`` dicts."""
    if isinstance(value, str) and value.strip():
        return [("user", value)]
    ok = isinstance(value, list) and value
    ok = ok and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)
    if not ok:
        raise ConfigError(f'{where}: a prompt must be a non-empty string or a list of {{"role", "content"}} messages')
    return [(m["role"], m["content"]) for m in value]


def parse_general_record(rec: object, where: str) -> tuple[list[tuple[str, str]], str]:
    """``(prompt turns, completion)`` of one record: ``{"messages": [..., assistant]}`` or ``{"prompt", "completion"}``.

    Raises:
        ConfigError: ``where`` (file:line) and what the record lacks.
    """
    if not isinstance(rec, dict):
        raise ConfigError(f'{where}: a record must be a JSON object with "messages" or "prompt" and "completion"')
    if "messages" in rec:
        turns = _turns(rec["messages"], where)
        if len(turns) < 2 or turns[-1][0] != "assistant" or not turns[-1][1].strip():
            raise ConfigError(f'{where}: "messages" must end with a non-empty assistant turn after at least one prompt turn')
        return turns[:-1], turns[-1][1]
    if "prompt" in rec and "completion" in rec:
        completion = rec["completion"]
        if isinstance(completion, list) and len(completion) == 1 and isinstance(completion[0], dict):
            completion = completion[0].get("content")  # TRL's conversational prompt-completion form
        if not isinstance(completion, str) or not completion.strip():
            raise ConfigError(f'{where}: "completion" must be a non-empty string (or one assistant message)')
        return _turns(rec["prompt"], where), completion
    raise ConfigError(f'{where}: a record needs "messages" (chat) or "prompt" and "completion"; it has {sorted(rec)[:6]}')


def load_general_data(path: str | Path) -> list[GeneralRecord]:
    """Every record of a general SFT JSONL file (blank lines skipped).

    Raises:
        ConfigError: one line naming the file (and line) and the fix: missing, unreadable, not JSON, a bad record,
            or no record at all.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sft.general_data {p} does not exist; point it at a JSONL file of chat records or unset it")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"sft.general_data {p} cannot be read as UTF-8 text ({e})") from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{i}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: not JSON ({e.msg}); each line must be one JSON object") from None
        turns, completion = parse_general_record(rec, where)
        digest = hashlib.sha256(f"general\x1f{p.name}\x1f{line.strip()}".encode()).hexdigest()[:16]
        out.append(GeneralRecord(digest, tuple(turns), completion))
    if not out:
        raise ConfigError(f"sft.general_data {p} holds no records; add JSONL lines or unset it")
    return out


def general_count(n_task: int, ratio: float) -> int:
    """General records to add to ``n_task`` task examples so they make ``ratio`` of the training set.

    ``k = round(n_task * ratio / (1 - ratio))``: 0 when there are no task examples (a round with nothing verified
    learns nothing from general data alone) or ``ratio`` is 0.
    """
    if n_task <= 0 or ratio <= 0:
        return 0
    return round(n_task * ratio / (1.0 - ratio))


def draw_general(records: list[GeneralRecord], k: int, seed: int) -> list[GeneralRecord]:
    """``k`` records (at most all of them) sampled without replacement, deterministic in ``seed``, in file order."""
    k = min(k, len(records))
    picked = sorted(random.Random(seed).sample(range(len(records)), k))
    return [records[i] for i in picked]


def example_row(example_id: str, origin: str, completion: str, *, prompt: Prompt | None = None, messages=None) -> dict:
    """One row of a round's training examples file (the filter stage's ``examples.parquet``).

    ``trajectory_id`` holds the example's id (a prompt id for a reference solution, a record hash for general data);
    ``messages_json`` the chat turns when they are not the prompt's own rendering (general data).
    """
    return dict(
        trajectory_id=example_id,
        prompt_id=prompt.prompt_id if prompt else example_id,
        source=prompt.source if prompt else "general",
        question=prompt.question if prompt else "",
        completion=completion,
        origin=origin,
        messages_json=None if messages is None else json.dumps([{"role": r, "content": c} for r, c in messages]),
    )


def reference_examples(prompts: list[Prompt]) -> tuple[list[dict], list[Prompt]]:
    """``(example rows, prompts without a solution)``: each prompt's reference ``solution`` as a training example."""
    rows, missing = [], []
    for p in prompts:
        if p.solution and p.solution.strip():
            rows.append(example_row(p.prompt_id, "reference", p.solution, prompt=p))
        else:
            missing.append(p)
    return rows, missing


def general_examples(records: list[GeneralRecord]) -> list[dict]:
    """Example rows of general SFT records (their own chat turns, origin ``general``)."""
    return [example_row(r.example_id, "general", r.completion, messages=r.messages) for r in records]


def training_example_rows(run_id: str, consumed: list[str], examples: list[dict]) -> list[dict]:
    """``training_examples`` rows of a training run: each consumed example id with its origin (default rollout)."""
    origin = {e["trajectory_id"]: e.get("origin") or "rollout" for e in examples}
    return [dict(training_run_id=run_id, trajectory_id=t, origin=origin.get(t, "rollout")) for t in consumed]


def fit_error(tokenizer, examples: list[tuple[list[dict[str, str]], str]], max_seq_len: int, what: str) -> str | None:
    """One line when the longest (chat, completion) example would be cut by ``sft.max_seq_len``, else None.

    An example takes its chat rendered with the generation prompt, the completion and the EOS, tokens (as
    ``loop.sft.tokenize_example``). ``what`` names the examples in the message (e.g. 'reference solution').
    """
    longest, worst = 0, None
    for messages, completion in examples:
        n = len(tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"])
        n += len(tokenizer(completion, add_special_tokens=False)["input_ids"]) + 1
        if n > longest:
            longest, worst = n, completion
    if longest <= max_seq_len:
        return None
    return (
        f"sft.max_seq_len ({max_seq_len}) < the longest {what} with its prompt ({longest} tokens: {worst[:40]!r}...), "
        f"so training would truncate; set sft.max_seq_len >= {longest}"
    )
