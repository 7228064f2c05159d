"""Reading ``ratchet.toml``: TOML, ``[[campaigns]]`` tables over the top level, dotted overrides, one error per problem."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ValidationError

from ratchet.loop.config.base import _Frozen, _merged
from ratchet.loop.config.campaign import RatchetConfig
from ratchet.loop.config.service import PrefectConfig


class ConfigError(ValueError):
    """A config file or value is invalid; the message says what and how to fix it."""


def _read_toml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; create one with `ratchet init --path {p}` or drop --config")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"cannot read {p} as UTF-8 text ({e}); point --config at a TOML file") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p} is not valid TOML ({e}); fix the syntax at that line") from e


def _campaign_tables(data: dict, where: str) -> list[dict]:
    """One dict per campaign: the top-level keys, each ``[[campaigns]]`` entry merged over them."""
    defaults = {k: v for k, v in data.items() if k not in ("campaigns", "prefect")}
    entries = data.get("campaigns")
    if entries is None:
        return [defaults]
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{where}: 'campaigns' must be a non-empty array of tables ([[campaigns]] sections)")
    tables = [_merged(defaults, e) for e in entries]
    names = [t.get("campaign", RatchetConfig.model_fields["campaign"].default) for t in tables]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(
            f"{where}: campaign names must be unique, {dup} appear more than once; give each [[campaigns]] its own campaign = '...'"
        )
    return tables


def _validate(model: type[BaseModel], data: dict, prefix: str = ""):
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in (prefix, *first["loc"]) if x != "")
        msg = first["msg"].removeprefix("Value error, ")
        where = f"config value {loc}: {msg} (got {first.get('input')!r})" if loc else f"config: {msg}"
        raise ConfigError(f"{where}; see docs/config.md") from e


def load_config(path: str | Path | None = None, **overrides: object) -> RatchetConfig:
    """Load ``ratchet.toml`` (or defaults) and apply dotted overrides like ``{"sft.lr": 1e-5}``.

    A file with several ``[[campaigns]]`` needs the ``campaign`` override to pick one (unless it
    holds exactly one); its ``[prefect]`` section is for ``ratchet up`` and ignored here.

    Raises:
        ConfigError: the file is missing, is not valid TOML, names no / an unknown campaign, or a
            value breaks a rule.
    """
    data: dict = {}
    if path is not None:
        raw = _read_toml(path)
        tables = _campaign_tables(raw, str(path))
        declared = [t.get("campaign", "demo") for t in tables] if "campaigns" in raw else []
        if declared and overrides.get("campaign") is not None and overrides["campaign"] not in declared:
            raise ConfigError(
                f"{path} declares campaigns {declared}; --campaign {overrides['campaign']!r} is not among them "
                "(check the spelling, or add a [[campaigns]] table for it)"
            )
        if len(tables) == 1:
            data = tables[0]
        else:
            names = [t.get("campaign", "demo") for t in tables]
            want = overrides.get("campaign")
            if want not in names:
                raise ConfigError(
                    f"{path} declares campaigns {names}; pick one with --campaign NAME"
                    + (f" ({want!r} is not among them)" if want else "")
                )
            data = tables[names.index(want)]
    for key, value in overrides.items():
        if value is None:
            continue
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return _validate(RatchetConfig, data)


class DaemonConfig(_Frozen):
    """What `ratchet up` serves: the Prefect server settings and every campaign of the file."""

    prefect: PrefectConfig = PrefectConfig()
    campaigns: tuple[RatchetConfig, ...]


def load_daemon_config(path: str | Path | None = None, *, interval_s: float | None = None) -> DaemonConfig:
    """Every campaign of ``ratchet.toml`` (the top level alone, or each ``[[campaigns]]`` over it) and ``[prefect]``.

    ``interval_s`` (seconds), when given, replaces every campaign's schedule with that interval.

    Raises:
        ConfigError: as ``load_config``, or ``interval_s`` <= 0.
    """
    data = _read_toml(path) if path is not None else {}
    if interval_s is not None and interval_s <= 0:
        raise ConfigError(f"--interval-s {interval_s} must be > 0 seconds; e.g. --interval-s 60")
    campaigns = []
    for i, table in enumerate(_campaign_tables(data, str(path))):
        if interval_s is not None:
            table = _merged(table, {"schedule": {"interval_s": interval_s}})
        campaigns.append(_validate(RatchetConfig, table, f"campaigns[{i}]" if "campaigns" in data else ""))
    return DaemonConfig(prefect=_validate(PrefectConfig, data.get("prefect", {}), "prefect"), campaigns=tuple(campaigns))
