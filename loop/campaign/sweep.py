"""Sweeps: parse ``--grid key=v1,v2`` options, expand their product into points, name and configure each point.

Pure functions: ``ratchet sweep`` (``flows/cli/running/recipe_commands.py``) runs one campaign per point.
The usual first sweep of RLVR practice is a log grid of the KL coefficient and the group size:

    --grid grpo.beta=0.001,0.003,0.01,0.03 --grid generation.group_size=4,8   -> 8 points

A point's campaign is ``<base campaign>-<label><value>...`` in grid order (``demo-beta0.001-g4``), so
re-running a sweep resumes the same campaigns and a point's name says its settings.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Sequence
from typing import Any

from ratchet.loop.config import ConfigError, RatchetConfig, _validate

# Short labels of keys that sweeps use often; any other key is labelled by its last dotted part.
LABELS = {"generation.group_size": "g", "grpo.beta": "beta", "sft.lr": "lr", "grpo.lr": "lr", "generation.temperature": "t"}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def parse_value(text: str) -> Any:
    """A grid value as TOML reads it (``0.01`` float, ``8`` int, ``true`` bool, ``"x"`` string); a bare word is a string."""
    text = text.strip()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_grid(spec: str) -> tuple[str, list[Any]]:
    """``"grpo.beta=0.001,0.01"`` -> ``("grpo.beta", [0.001, 0.01])``.

    Raises:
        ConfigError: no ``=``, an empty key or value, or a value repeated (the message shows the form).
    """
    key, sep, raw = spec.partition("=")
    key = key.strip()
    values = [parse_value(v) for v in raw.split(",")] if raw.strip() else []
    if not sep or not key or not values or any(v == "" for v in values):
        raise ConfigError(f"--grid {spec!r} is not KEY=V1,V2,...; e.g. --grid grpo.beta=0.001,0.003,0.01,0.03")
    if len({repr(v) for v in values}) != len(values):
        raise ConfigError(f"--grid {spec!r} repeats a value; list each value once")
    return key, values


def expand(grids: Sequence[tuple[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """The grid's points: the product of the values, first grid outermost, as ``{dotted key: value}`` dicts.

    Raises:
        ConfigError: no grid, or a key given twice.
    """
    if not grids:
        raise ConfigError("a sweep needs at least one --grid KEY=V1,V2; e.g. --grid grpo.beta=0.001,0.01")
    keys = [k for k, _ in grids]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(f"--grid {dup[0]} is given twice; put all its values in one --grid {dup[0]}=V1,V2")
    return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in grids))]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def point_name(campaign: str, point: dict[str, Any]) -> str:
    """The campaign name of a grid point: ``campaign`` then ``-<label><value>`` per key (``demo-beta0.001-g4``).

    Raises:
        ConfigError: the name would exceed the 64 characters a campaign name may have.
    """
    parts = [campaign] + [LABELS.get(k, k.rsplit(".", 1)[-1]) + _NAME_CHARS.sub("_", _fmt(v)) for k, v in point.items()]
    name = "-".join(parts)
    if len(name) > 64:
        raise ConfigError(f"sweep campaign name {name!r} is longer than 64 characters; use a shorter base campaign name")
    return name


def point_config(base: RatchetConfig, point: dict[str, Any], name: str) -> RatchetConfig:
    """``base`` with the point's dotted overrides applied and ``campaign = name``, validated like a config file.

    Raises:
        ConfigError: a key that is not a config field or a value that breaks a rule (named as in ``ratchet run``).
    """
    data = base.model_dump(mode="json")
    for key, value in point.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"--grid {key}: {part!r} is not a config section; see `ratchet init` for the keys")
            node = node[part]
        if leaf not in node:
            raise ConfigError(f"--grid {key}: {leaf!r} is not a key of [{'.'.join(parents) or 'top level'}]; see `ratchet init`")
        node[leaf] = value
    data["campaign"] = name
    return _validate(RatchetConfig, data)


def sweep_configs(base: RatchetConfig, specs: Sequence[str]) -> list[tuple[dict[str, Any], RatchetConfig]]:
    """Every point of the ``--grid`` specs with its config (campaign names unique, all validated before any run).

    Raises:
        ConfigError: a bad spec, key or value, or two points with one name (values that differ only
            in characters a name cannot hold).
    """
    points = expand([parse_grid(s) for s in specs])
    out = [(p, point_config(base, p, point_name(base.campaign, p))) for p in points]
    names = [c.campaign for _, c in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"two grid points are both named {dup[0]!r}; make the values differ in letters or digits")
    return out
