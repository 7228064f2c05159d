"""Settings changed by ``ratchet campaign resume NAME --set KEY=VALUE``: applied to the rounds after the resume.

The change is stored in the resume's ``campaign_events.settings_json`` (``{"set": {"grpo.lr": 3e-6}}``);
each campaign run applies every recorded change on top of its config, and the same-settings check
accepts a config that already carries them (and no other difference).
"""

from __future__ import annotations

from pathlib import Path

from ratchet.common.files import atomic_write_text
from ratchet.loop.campaign.round_context import campaign_id_of, load_ctx
from ratchet.loop.config import ConfigError, RatchetConfig, _validate
from ratchet.store.db import connect
from ratchet.store.events import recorded_settings


def with_settings(cfg: RatchetConfig, changes: dict[str, object]) -> RatchetConfig:
    """``cfg`` with dotted ``changes`` (``{"grpo.lr": 3e-6}``) applied, validated like a config file.

    Raises:
        ConfigError: a key names no existing setting, or a value breaks a config rule.
    """
    data = cfg.model_dump(mode="json")
    for key, value in changes.items():
        node = data
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            if not isinstance(node.get(part), dict):
                where = ".".join(parents[:i]) or "the top level"
                raise ConfigError(f"--set {key}: no section {part!r} in {where}; sections: {_sections(node)}")
            node = node[part]
        if leaf not in node or isinstance(node[leaf], dict):
            where = ".".join(parents) or "the top level"
            raise ConfigError(f"--set {key}: no setting {leaf!r} in {where}; settings there: {', '.join(sorted(node))}")
        node[leaf] = value
    return _validate(RatchetConfig, data)


def _sections(node: dict) -> str:
    return ", ".join(sorted(k for k, v in node.items() if isinstance(v, dict))) or "none"


def parse_set(items: list[str]) -> dict[str, object]:
    """``["grpo.lr=3e-6", "tasks.name=gsm8k"]`` -> ``{"grpo.lr": 3e-06, "tasks.name": "gsm8k"}`` (TOML values,
    bare words as strings).

    Raises:
        ConfigError: an item without ``=``.
    """
    import tomllib

    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} is not KEY=VALUE; e.g. --set grpo.lr=3e-6")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key.strip()] = value
    return out


def apply_recorded_settings(config_path: str) -> str:
    """The config path the campaign's rounds run with: ``config_path`` itself when no resume changed a
    setting (or it already carries the changes), else a ``config-resumed.json`` beside the campaign's
    run dir with every recorded change applied."""
    cfg = load_ctx(config_path).cfg
    if not Path(cfg.db).exists():
        return config_path
    with connect(cfg.db, read_only=True) as con:
        changes = recorded_settings(con, campaign_id_of(cfg.campaign, cfg.campaign_epoch))
    if not changes:
        return config_path
    effective = with_settings(cfg, changes)
    if effective == cfg:
        return config_path
    path = cfg.resolved_run_dir() / cfg.campaign / "config-resumed.json"
    return str(atomic_write_text(path, effective.model_dump_json(indent=1)))
