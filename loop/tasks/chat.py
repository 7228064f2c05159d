"""The chat a stored prompt was generated and trained on, rebuilt from a campaign's stored settings."""

from __future__ import annotations

import json

from ratchet.loop.checkpoints import resolve_model
from ratchet.loop.config import RatchetConfig
from ratchet.loop.generation.base import render_prompt
from ratchet.loop.tasks.sources import chat_messages, make_task_source


def chats(config_json: str, questions: list[str], completions: list[str]) -> tuple[list[list[dict]], list[str]]:
    """For each (question, completion): the messages (system, few-shot turns, user, assistant) and the prompt text
    rendered with the campaign's base model's chat template plus the completion (what the trainer saw).

    Raises:
        ModelError: the campaign's base model cannot be found.
    """
    from transformers import AutoTokenizer

    cfg = RatchetConfig.model_validate(json.loads(config_json))
    t = cfg.tasks
    shots = make_task_source(t.source, levels=t.levels, path=t.path, heldout_fraction=t.heldout_fraction).fewshot(t.fewshot)
    tok = AutoTokenizer.from_pretrained(resolve_model(cfg.model.name_or_path))
    messages, texts = [], []
    for q, c in zip(questions, completions, strict=True):
        prompt = chat_messages(t.system_prompt, shots, q)
        messages.append([*prompt, {"role": "assistant", "content": c}])
        texts.append(render_prompt(tok, prompt) + c)
    return messages, texts
