"""``ratchet init``: a complete, commented ``ratchet.toml`` rendered from the config models themselves.

Every key is written with its default and its field description as the comment, so the file can
never drift from ``loop.config`` (a test loads it back and compares it to the defaults).
"""

from __future__ import annotations

import json
import re
import textwrap
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ratchet.loop.config import PHASE_SECTIONS, PhaseConfig, PrefectConfig, RatchetConfig

HEADER = """\
# Ratchet config, written by `ratchet init`: every key with its default and what it does.
# `ratchet run --config ratchet.toml` runs the campaign; `ratchet up --config ratchet.toml` serves it on
# its [schedule] from a Prefect server ([prefect]). Delete keys you do not change: missing keys take
# these defaults. A key shown commented out is unset by default.
#
# Several campaigns in one file: the top-level keys and sections are the defaults of every campaign,
# and each [[campaigns]] table (see the end of this file) overrides them for one campaign.
"""

FOOTER = """\
# --- more campaigns ---------------------------------------------------------------------------
# Each [[campaigns]] table is one campaign: the keys above, overridden where it says so. With at
# least one [[campaigns]] table, the top-level keys are only defaults and do not form a campaign of
# their own; `ratchet run` then needs --campaign NAME.
#
# [[campaigns]]
# campaign = "arith-nightly"
#
# [[campaigns]]
# campaign = "arith-grpo"
# algorithm = "grpo"
# [campaigns.schedule]
# cron = "0 4 * * *"
"""


def toml_value(v: Any) -> str:
    """One TOML literal for a default value (str, bool, int, float, a sequence of them, or a table of them).

    Raises:
        TypeError: a value TOML cannot hold (None has no TOML form: such keys are commented out).
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table, e.g. one [[tasks.sources]] entry inside a list; None keys left out
        keys = {k: (k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)) for k in v}
        return "{" + ", ".join(f"{keys[k]} = {toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"no TOML literal for {v!r} ({type(v).__name__})")


def _choices(info: FieldInfo) -> str:
    ann = info.annotation
    options = [ann] if typing.get_origin(ann) is Literal else typing.get_args(ann)  # Literal[...] or Literal[...] | None
    lits = [x for a in options if typing.get_origin(a) is Literal for x in typing.get_args(a)]
    others = [getattr(a, "__name__", str(a)) for a in options if typing.get_origin(a) is not Literal and a is not type(None)]
    if lits and others:  # e.g. int | Literal["auto"]
        return f" An {' or '.join(others)}, or one of: {', '.join(map(str, lits))}."
    return f" One of: {', '.join(map(str, lits))}." if lits else ""


def _comment(info: FieldInfo) -> list[str]:
    text = (info.description or "").strip() + _choices(info)
    return textwrap.wrap(text, 100, initial_indent="# ", subsequent_indent="# ") if text.strip() else []


def _table_array(info: FieldInfo) -> bool:
    """A ``tuple[SomeModel, ...]`` field: written as ``[[name]]`` tables, never as ``name = []`` (which would clash)."""
    args = typing.get_args(info.annotation)
    return bool(args) and isinstance(args[0], type) and issubclass(args[0], BaseModel)


def _section_lines(model: BaseModel, prefix: str = "") -> list[str]:
    out = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            continue
        out += _comment(info)
        if isinstance(value, tuple) and not value and _table_array(info):
            table = f"{prefix}.{name}" if prefix else name
            page = "docs/recipes.md" if name == "phases" else "docs/tasks.md"
            out += [f"# {name} =", f"# (none by default; written as [[{table}]] tables, see {page})", ""]
            continue
        set_by_ratchet = isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("set_by_ratchet")
        out.append(f"# {name} =" if value is None or set_by_ratchet else f"{name} = {toml_value(value)}")
        out.append("")
    return out


def render_default_toml() -> str:
    """The whole default ``ratchet.toml`` (the demo campaign), every key commented with its description."""
    return _render(RatchetConfig(), HEADER) + "\n\n" + FOOTER


def _render(cfg: RatchetConfig, header: str) -> str:
    """``header``, then every top-level key and section of ``cfg`` with its value and description, then ``[prefect]``."""
    lines = [header, *_section_lines(cfg)]
    for name, info in RatchetConfig.model_fields.items():
        sub = getattr(cfg, name)
        if isinstance(sub, BaseModel):
            lines += _table_lines(sub, name)
    lines += ["[prefect]", *_comment_block(PrefectConfig), *_section_lines(PrefectConfig())]
    return "\n".join(lines).rstrip()


def _table_lines(model: BaseModel, table: str) -> list[str]:
    """``[table]`` with its keys, then each nested section as its own ``[table.name]`` (e.g. ``[gate.monitors]``)."""
    lines = [f"[{table}]", *_comment_block(type(model)), *_section_lines(model, table)]
    for name in type(model).model_fields:
        sub = getattr(model, name)
        if isinstance(sub, BaseModel):
            lines += _table_lines(sub, f"{table}.{name}")
    return lines


def _comment_block(model: type[BaseModel]) -> list[str]:
    doc = (model.__doc__ or "").strip()
    return textwrap.wrap(doc, 100, initial_indent="# ", subsequent_indent="# ") + [""] if doc else []


# --- recipes ------------------------------------------------------------------------------------

RECIPES = ("r1",)

R1_HEADER = """\
# Ratchet config, written by `ratchet init --recipe r1`: the DeepSeek-R1 training pipeline
# (DeepSeek-AI 2025, "DeepSeek-R1: Incentivizing Reasoning Capability in LLMs via Reinforcement
# Learning", section 2.3) as one campaign in four [[phases]] (at the end of this file):
#
#   1. cold-start     sft   fine-tune on a few checked chain-of-thought solutions (the prompts' reference
#                           `solution`), so RL starts from readable, well-formatted reasoning
#   2. reasoning-rl   grpo  reasoning-oriented RL with the accuracy + format reward and a language-consistency
#                           reward (R1's fix for language mixing in the chain of thought)
#   3. rejection-sft  rft   rejection sampling: fine-tune on the RL policy's verified-correct rollouts, with
#                           general (non-reasoning) SFT data mixed in so other skills are kept
#   4. all-scenarios  grpo  RL again, over every task family, so the final model is trained on all of them
#
# The top-level keys and sections below are the defaults of every phase; a phase's own tables
# ([phases.sft], [phases.grpo], [phases.generation], [phases.verifier], [phases.tasks], [phases.gate])
# override them key by key for that phase's rounds. Evaluation ([eval], [[evals]], the held-out set)
# belongs to the campaign: every phase's candidate is judged against the incumbent on the same prompts,
# and the incumbent carries from phase to phase. max_rounds defaults to the phases' total rounds.
#
# As written it runs on the built-in arithmetic tasks, whose prompts carry worked solutions, so it
# loads and passes preflight as is. For real data, give phase 1 a JSONL of problems with reference
# solutions, e.g.
#   [[phases.tasks.sources]]
#   path = "cold_start.jsonl"   # {"question": ..., "solution": "...worked steps...", "answer": "42"} per line
# (the solution is trained on verbatim: write it in the output format the verifier expects), and point
# sft.general_data in phase 3 at your own general chat data.
"""


def r1_phases(general_data: str) -> list[tuple[str, dict]]:
    """The R1 recipe's phases: (explanation, ``[[phases]]`` table), small enough for one machine."""
    language = {"language_weight": 0.1, "target_language": "en"}
    return [
        (
            "Phase 1, cold start (R1 2.3.1): supervised fine-tuning on the reference solutions of the round's train\n"
            "prompts; no rollouts. The gate still decides whether the result replaces the base model.",
            {"name": "cold-start", "algorithm": "sft", "rounds": 1, "sft": {"lr": 3e-5, "epochs": 2}},
        ),
        (
            "Phase 2, reasoning-oriented RL (R1 2.3.2): GRPO on the reasoning tasks; the reward adds a\n"
            "language-consistency term (share of the completion in the target language's script).",
            {
                "name": "reasoning-rl",
                "algorithm": "grpo",
                "rounds": 2,
                "generation": {"temperature": 1.0, "group_size": 4},
                "grpo": {"beta": 0.001, "steps_per_round": 2},
                "verifier": language,
            },
        ),
        (
            "Phase 3, rejection sampling and SFT (R1 2.3.3): keep the verified-correct rollouts of the RL policy and\n"
            "fine-tune on them, with general SFT data as a share of the training set.",
            {
                "name": "rejection-sft",
                "algorithm": "rft",
                "rounds": 1,
                "generation": {"group_size": 4},
                "sft": {"general_data": general_data, "general_ratio": 0.25},
            },
        ),
        (
            "Phase 4, RL for all scenarios (R1 2.3.4): GRPO over every task family (here: every arithmetic level,\n"
            "harder ones included), the language reward kept.",
            {
                "name": "all-scenarios",
                "algorithm": "grpo",
                "rounds": 2,
                "tasks": {"levels": ["sum_small", "sum_2digit", "product_1digit", "multi_step", "linear_equation"]},
                "generation": {"temperature": 1.0, "group_size": 4},
                "grpo": {"beta": 0.001, "steps_per_round": 2},
                "verifier": language,
            },
        ),
    ]


_SECTION_MODELS = {name: RatchetConfig.model_fields[name].annotation for name in PHASE_SECTIONS}


def _phase_lines(explain: str, table: dict) -> list[str]:
    """One ``[[phases]]`` table: the explanation, then each key with its field's help text as the comment."""
    lines = ["# " + line for line in explain.splitlines()] + ["[[phases]]"]
    for key in ("name", "algorithm", "rounds"):
        lines += _comment(PhaseConfig.model_fields[key]) + [f"{key} = {toml_value(table[key])}"]
    for section in PHASE_SECTIONS:
        if section in table:
            model = _SECTION_MODELS[section]
            lines += ["", f"[phases.{section}]"]
            for key, value in table[section].items():
                lines += _comment(model.model_fields[key]) + [f"{key} = {toml_value(value)}"]
    return lines + [""]


def render_recipe(name: str) -> str:
    """A complete campaign config for a named recipe (``RECIPES``), every key commented with its description.

    ``r1``: the DeepSeek-R1 pipeline in four ``[[phases]]`` (see ``R1_HEADER``) on the built-in arithmetic tasks,
    with the shipped general SFT sample (``loop/tasks/data/general_sft.jsonl``) in phase 3.

    Raises:
        ValueError: an unknown recipe name (the message lists the known ones).
    """
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    general = str(Path(__file__).resolve().parents[1] / "tasks" / "data" / "general_sft.jsonl")
    phases = r1_phases(general)
    cfg = RatchetConfig(campaign="r1", phases=[PhaseConfig(**t) for _, t in phases])  # validates the recipe itself
    body = _render(cfg.model_copy(update={"phases": ()}), R1_HEADER)
    lines = [body, "", "# --- the phases --------------------------------------------------------------------------", ""]
    for explain, table in phases:
        lines += _phase_lines(explain, table)
    return "\n".join(lines).rstrip() + "\n"
