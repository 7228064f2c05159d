"""The chat each exported trajectory was generated from: the one stored with it (``trajectories.prompt_messages``).

Only rows of a store from before chats were stored are rebuilt from the campaign's stored settings (its task set:
each source's system prompt and few-shot examples), and they are counted so the caller can say so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ratchet.loop.checkpoints import resolve_model
from ratchet.loop.config import RatchetConfig
from ratchet.loop.generation.sampling import render_prompt
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.tasks.task_sets import TaskSet


@dataclass(frozen=True)
class Chats:
    """Per row: ``messages`` (the prompt's chat plus the assistant completion) and ``texts`` (the prompt rendered with
    the base model's chat template and generation prompt, then the completion: what the trainer saw);
    ``rerendered``: rows without a stored chat, rebuilt from the campaign's settings."""

    messages: list[list[dict[str, str]]]
    texts: list[str]
    rerendered: int


def chats(config_json: str, rows: list[dict]) -> Chats:
    """The chats of export rows (each with ``prompt_messages``, ``source``, ``question``, ``completion``; a multi-turn
    episode's ``episode_messages`` too: its chat is then the opening and every turn).

    Raises:
        ModelError: the campaign's base model cannot be found.
    """
    from transformers import AutoTokenizer

    cfg = RatchetConfig.model_validate(json.loads(config_json))
    tok = AutoTokenizer.from_pretrained(resolve_model(cfg.model.name_or_path))
    tasks: TaskSet | None = None
    messages, texts, rerendered = [], [], 0
    for r in rows:
        if r.get("prompt_messages"):
            prompt = json.loads(r["prompt_messages"])
        else:  # a row of a store from before chats were stored
            tasks = tasks or TaskSet(cfg.tasks, cfg.evals)
            prompt = tasks.messages(Prompt(r["prompt_id"], r.get("source") or "", "", r["question"], "", "train"))
            rerendered += 1
        if r.get("episode_messages"):  # a multi-turn episode: every turn after its opening chat
            episode = [*prompt, *json.loads(r["episode_messages"])]
            messages.append(episode)
            texts.append(tok.apply_chat_template(episode, tokenize=False))
            continue
        messages.append([*prompt, {"role": "assistant", "content": r["completion"]}])
        texts.append(render_prompt(tok, prompt) + r["completion"])
    return Chats(messages, texts, rerendered)
