"""Reading ``ratchet.toml``: TOML, ``[[campaigns]]`` tables over the top level, dotted overrides, one error per problem."""

from __future__ import annotations

import difflib
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ratchet.loop.config.frozen import _Frozen, _merged
from ratchet.loop.config.ratchet_config import RatchetConfig
from ratchet.loop.config.service_config import PrefectConfig
from ratchet.verifiers.plugins import PluginError
from ratchet.verifiers.plugins.runner import resolve_verifier


class ConfigError(ValueError):
    """A config file or value is invalid; the message says what and how to fix it."""


# Arrays and inline tables nest at most this deep in a config (Ratchet's own need 2). tomllib parses nesting by
# recursion: a 100,000-deep array would end in a RecursionError traceback instead of an error that names the line.
MAX_TOML_NESTING = 32


def _read_toml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"config file {p} does not exist; create it with `ratchet init --path {p}` (or `ratchet init --tasks FILE "
            f"--path {p}` for your own tasks), or point --config at another file"
        )
    try:
        text = p.read_text(encoding="utf-8")
        _check_nesting(text, p)
        return tomllib.loads(text)
    except (UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"cannot read {p} as UTF-8 text ({e}); point --config at a TOML file") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p} is not valid TOML ({e}); fix the syntax at that line") from e
    except RecursionError:  # nesting the scan did not see (it follows TOML's string rules): still one line
        raise ConfigError(f"{p} nests arrays or tables too deeply to parse; flatten it") from None


def _check_nesting(text: str, where: Path, limit: int = MAX_TOML_NESTING) -> None:
    """Raise ConfigError at the first ``[`` / ``{`` nested deeper than ``limit``, outside strings and comments.

    Raises:
        ConfigError: names the file, the line and the limit.
    """
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "#":
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            end = i + len(quote)
            while end < n and not text.startswith(quote, end):
                if text[end] == "\n" and len(quote) == 1:
                    break  # an unclosed one-line string: tomllib reports it
                end += 2 if c == '"' and text[end] == "\\" else 1
            line += text.count("\n", i, end)
            i = end + len(quote)
            continue
        elif c in "[{":
            depth += 1
            if depth > limit:
                raise ConfigError(
                    f"{where}:{line}: arrays or inline tables nested more than {limit} deep; a Ratchet config needs 2 "
                    "at most: flatten that value"
                )
        elif c in "]}":
            depth = max(depth - 1, 0)
        i += 1


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


def _scalars(ann: Any) -> tuple[set[type], set[object], list[type[BaseModel]]]:
    """What a field annotation admits: plain scalar types, Literal values, and config models (nested or in tuples)."""
    types_, literals, models = set(), set(), []
    origin = typing.get_origin(ann)
    if ann is None or ann is type(None):
        types_.add(type(None))
    elif origin is Literal:
        literals |= set(typing.get_args(ann))
    elif origin in (typing.Union, types.UnionType, tuple, list, typing.Annotated):
        for a in typing.get_args(ann):
            if a is not Ellipsis:
                t, lit, m = _scalars(a)
                types_, literals, models = types_ | t, literals | lit, models + m
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        models.append(ann)
    elif isinstance(ann, type):
        types_.add(ann)
    return types_, literals, models


def _strict(ann: Any, value: Any) -> str | None:
    """Why ``value`` is refused for a number or boolean field, else None.

    Numbers and booleans are strict: ``lr = "3e-5"``, ``enabled = "yes"``, ``max_new_tokens = "64"`` are text quoted by
    mistake, ``true`` is no number and ``1`` no boolean (pydantic's lax mode would convert them silently). An integer
    is accepted where a float is (``lr = 1``), and a field's own words (``"auto"``) where it has some.
    """
    kinds, literals, _ = _scalars(ann)
    numeric, boolean = bool(kinds & {int, float}), bool in kinds
    if not (numeric or boolean):
        return None
    want = " or ".join(
        [
            *(["a number"] if numeric else []),
            *(["true or false"] if boolean else []),
            *(repr(x) for x in sorted(map(str, literals))),
        ]
    )
    if isinstance(value, str) and str not in kinds and value not in literals:
        return f"must be {want}, not the text {value!r}; write it without quotes"
    if isinstance(value, bool) and not boolean:
        return f"must be {want}, not {str(value).lower()}"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not numeric:
        return f"must be {want}, not {value!r}"
    return None


def _strict_errors(model: type[BaseModel], data: Any, loc: tuple = ()) -> list[tuple[tuple, str]]:
    """``(location, reason)`` for every number/boolean value of ``data`` given as another type, nested models included."""
    out: list[tuple[tuple, str]] = []
    if not isinstance(data, dict):
        return out
    for key, value in data.items():
        info = model.model_fields.get(key)
        if info is None:
            continue
        _, _, models = _scalars(info.annotation)
        if models and isinstance(value, dict):
            out += _strict_errors(models[0], value, (*loc, key))
        elif models and isinstance(value, list):
            for i, v in enumerate(value):
                out += _strict_errors(models[0], v, (*loc, key, i))
        elif (why := _strict(info.annotation, value)) is not None:
            out.append(((*loc, key), why))
    return out


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The config model a location's last key belongs to (``("tasks", "sources", 0, "x")`` -> TaskSourceConfig)."""
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        models = _scalars(info.annotation)[2] if info is not None else []
        if not models:
            return None
        model = models[0]
    return model


def _where(loc: tuple) -> str:
    out = ""
    for x in loc:
        out += f"[{x}]" if isinstance(x, int) else (f".{x}" if out else str(x))
    return out


def _validate(model: type[BaseModel], data: dict, prefix: str = ""):
    """``model`` from ``data``, or one ConfigError listing every problem (each with its dotted place, and a "did you
    mean" for a misspelled key)."""
    strict = _strict_errors(model, data)
    try:
        result = model.model_validate(data)
        if not strict:
            return result
        errors = []
    except ValidationError as e:
        errors = e.errors()
    lines = [f"config value {_where((prefix, *loc) if prefix else loc)}: {why}" for loc, why in strict]
    seen = {loc for loc, _ in strict}
    for err in errors:
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        if any(s[: len(loc)] == loc for s in seen):  # that value, or a cross-field check on its lax conversion
            continue
        full = _where((prefix, *loc) if prefix else loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            owner = _model_at(model, loc)
            close = difflib.get_close_matches(str(loc[-1]), list(owner.model_fields) if owner else [], n=1, cutoff=0.6)
            hint = f"; did you mean {_where((*loc[:-1], close[0]))!r}?" if close else "; remove it or check the spelling"
            lines.append(f"unknown config key {full}{hint}")
        elif full:
            lines.append(f"config value {full}: {msg} (got {err.get('input')!r})")
        else:
            lines.append(f"config: {msg}")
    if len(lines) == 1:
        raise ConfigError(f"{lines[0]}; see docs/config.md")
    raise ConfigError(f"{len(lines)} config errors (see docs/config.md):\n" + "\n".join(f"  {ln}" for ln in lines))


def _resolve_task_paths(table: dict, folder: Path) -> dict:
    """A campaign table with its relative task-file paths made absolute against the config file's ``folder``
    (``tasks.path``, each ``[[tasks.sources]]`` ``path``/``fewshot_path``/``plugin_dir``, each ``[[evals]]``
    ``file.path``), so a config means the same files whatever the working directory; a source with a ``verifier`` or an
    ``environment`` gets the folder as its ``plugin_dir`` unless it sets one."""

    def fix(d: Any, key: str) -> None:
        if isinstance(d, dict) and isinstance(d.get(key), str) and d[key] and not Path(d[key]).expanduser().is_absolute():
            d[key] = str((folder / d[key]).resolve())

    tasks = table.get("tasks")
    if isinstance(tasks, dict):
        tasks = table["tasks"] = dict(tasks)
        fix(tasks, "path")
        if isinstance(tasks.get("sources"), list):
            tasks["sources"] = [dict(src) if isinstance(src, dict) else src for src in tasks["sources"]]
            for src in tasks["sources"]:
                fix(src, "path")
                fix(src, "fewshot_path")
                fix(src, "plugin_dir")
                if isinstance(src, dict) and (src.get("verifier") or src.get("environment")):
                    src.setdefault("plugin_dir", str(folder))  # a 'module:function' plugin next to the config
    if isinstance(table.get("evals"), list):
        table["evals"] = [dict(e) if isinstance(e, dict) else e for e in table["evals"]]
        for e in table["evals"]:
            if isinstance(e, dict) and isinstance(e.get("file"), dict):
                e["file"] = dict(e["file"])
                fix(e["file"], "path")
    return table


def load_config(path: str | Path | None = None, **overrides: object) -> RatchetConfig:
    """Load ``ratchet.toml`` (or defaults) and apply dotted overrides like ``{"sft.lr": 1e-5}``.

    A file with several ``[[campaigns]]`` needs the ``campaign`` override to pick one (unless it
    holds exactly one); its ``[prefect]`` section is for ``ratchet up`` and ignored here. Relative task-file paths
    in the file are relative to the file's folder (``_resolve_task_paths``).

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
        tables = [_resolve_task_paths(t, Path(path).resolve().parent) for t in tables]
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
    return check_plugins(_validate(RatchetConfig, data))


def check_plugins(cfg: RatchetConfig) -> RatchetConfig:
    """``cfg``, once every source's own verifier imports (``ratchet.verifiers.plugins``), so a bad reference fails
    when the config is loaded, not mid-round.

    Raises:
        ConfigError: a verifier cannot be imported; the message names the source, the reference and why.
    """
    for s in cfg.tasks.sources:
        if s.verifier is None:
            continue
        try:
            resolve_verifier(s.verifier, base_dir=s.plugin_dir, sandbox=s.sandbox)
        except PluginError as e:
            raise ConfigError(f"config value tasks.sources[{s.source_name()!r}].verifier: {e}") from None
    return cfg


class DaemonConfig(_Frozen):
    """What `ratchet up` serves: the Prefect server settings and every campaign of the file."""

    prefect: PrefectConfig = PrefectConfig()
    campaigns: tuple[RatchetConfig, ...]


def load_daemon_config(
    path: str | Path | None = None, *, interval_s: float | None = None, work_pool: str | None = None
) -> DaemonConfig:
    """Every campaign of ``ratchet.toml`` (the top level alone, or each ``[[campaigns]]`` over it) and ``[prefect]``.

    ``interval_s`` (seconds), when given, replaces every campaign's schedule with that interval; ``work_pool``, when
    given, sets every campaign's ``schedule.work_pool``.

    Raises:
        ConfigError: as ``load_config``, or ``interval_s`` <= 0.
    """
    data = _read_toml(path) if path is not None else {}
    if interval_s is not None and interval_s <= 0:
        raise ConfigError(f"--interval-s {interval_s} must be > 0 seconds; e.g. --interval-s 60")
    campaigns = []
    for i, table in enumerate(_campaign_tables(data, str(path))):
        table = _resolve_task_paths(table, Path(path).resolve().parent) if path is not None else table
        if interval_s is not None:
            table = _merged(table, {"schedule": {"interval_s": interval_s}})
        if work_pool is not None:
            table = _merged(table, {"schedule": {"work_pool": work_pool}})
        campaigns.append(check_plugins(_validate(RatchetConfig, table, f"campaigns[{i}]" if "campaigns" in data else "")))
    return DaemonConfig(prefect=_validate(PrefectConfig, data.get("prefect", {}), "prefect"), campaigns=tuple(campaigns))
