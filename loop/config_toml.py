"""``ratchet init``: a complete, commented ``ratchet.toml`` rendered from the config models themselves.

Every key is written with its default and its field description as the comment, so the file can
never drift from ``loop.config`` (a test loads it back and compares it to the defaults).
"""

from __future__ import annotations

import json
import textwrap
import typing
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ratchet.loop.config import PrefectConfig, RatchetConfig

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
    """One TOML literal for a default value (str, bool, int, float, or a sequence of them).

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
            out += [
                f"# {name} =",
                f"# (none by default; written as [[{table}]] tables, see the README's 'Task sources and evaluation sets')",
                "",
            ]
            continue
        out.append(f"# {name} =" if value is None else f"{name} = {toml_value(value)}")
        out.append("")
    return out


def render_default_toml() -> str:
    """The whole default ``ratchet.toml`` (the demo campaign), every key commented with its description."""
    cfg = RatchetConfig()
    lines = [HEADER, *_section_lines(cfg)]
    for name, info in RatchetConfig.model_fields.items():
        sub = getattr(cfg, name)
        if isinstance(sub, BaseModel):
            lines += [f"[{name}]", *_comment_block(type(sub)), *_section_lines(sub, name)]
    lines += ["[prefect]", *_comment_block(PrefectConfig), *_section_lines(PrefectConfig())]
    return "\n".join(lines).rstrip() + "\n\n" + FOOTER


def _comment_block(model: type[BaseModel]) -> list[str]:
    doc = (model.__doc__ or "").strip()
    return textwrap.wrap(doc, 100, initial_indent="# ", subsequent_indent="# ") + [""] if doc else []
