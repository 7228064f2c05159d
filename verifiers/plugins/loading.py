"""Finding a user's verifier or environment by name: ``package.module:attr`` or an entry point, and its identity.

A reference with a colon (``"my_pkg.checks:verify_json"``) is imported from the installed environment, the
``PYTHONPATH``, or the config file's folder (``base_dir``, searched first); one without is the name of an entry point in
the given group (``ratchet.verifiers`` or ``ratchet.environments``; Ratchet's own built-ins are registered there too,
in ``pyproject.toml``). Its identity is what every verdict stores: ``plugin:<reference>`` and a version made of the
declared one (a ``version`` or ``__version__`` attribute of the object or its module, else ``0``) and the sha256 of
the whole source file of the module that defines it, so an edited plugin is a new version and its history is
re-verified before the gate compares (``ratchet reverify``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERIFIER_GROUP = "ratchet.verifiers"
ENVIRONMENT_GROUP = "ratchet.environments"
# Ratchet's own entry points (as pyproject.toml declares them), found even when the installed metadata predates them
# (an editable install made before they were added); an installed entry point of the same name wins.
BUILTINS: dict[str, dict[str, str]] = {
    VERIFIER_GROUP: {
        "math": "ratchet.verifiers.plugins.builtins:math_answer",
        "exact": "ratchet.verifiers.plugins.builtins:exact_answer",
    },
}


class PluginError(ValueError):
    """A plugin reference that cannot be resolved (bad syntax, module or attribute missing, unknown entry point)."""


@dataclass(frozen=True)
class Plugin:
    """A resolved plugin.

    Attributes:
        obj: the callable or class.
        ref: the reference as written in the config (``module:attr`` or an entry point's name).
        target: ``module:attr`` it resolved to (an entry point's value).
        name: its name in the store (``verdicts.verifier``): ``plugin:<ref>``.
        version: ``<declared>+<sha256 of its module's file, 16 hex>`` (``verdicts.verifier_version``).
        source_file: the file of the module that defines it (None: no file, e.g. a builtin).
    """

    obj: Any
    ref: str
    target: str
    name: str
    version: str
    source_file: str | None


def _import_target(target: str, base_dir: Path | None, ref: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr or not all(p.isidentifier() for p in module_name.split(".") + attr.split(".")):
        raise PluginError(f"plugin {ref!r}: write it as 'package.module:function' (or name an entry point without a colon)")
    _forget_if_stale(module_name, base_dir)
    added = base_dir is not None and str(base_dir) not in sys.path
    if added:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(module_name)
        _loaded[module_name] = file_mtime(getattr(module, "__file__", None))
    except ImportError as e:
        where = f" (searched {base_dir}, the PYTHONPATH and the installed packages)" if base_dir else ""
        raise PluginError(f"plugin {ref!r}: cannot import module {module_name!r}{where}: {e}") from e
    finally:
        if added:
            sys.path.remove(str(base_dir))
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"plugin {ref!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}")
        obj = getattr(obj, part)
    return obj


_loaded: dict[str, int | None] = {}  # module name -> its file's mtime (ns) when this process imported it


def file_mtime(path: str | None) -> int | None:
    """A file's modification time, ns (None: no file)."""
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def _forget_if_stale(module_name: str, base_dir: Path | None) -> None:
    """Drop an imported plugin module (and its package's modules) when its file was edited since this process imported
    it, or when ``base_dir`` holds a module of that name other than the imported one (two campaigns' folders), so the
    next import reads the file the reference means now."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None) if module is not None else None
    if path is None:
        return
    top = module_name.split(".")[0]
    if top == "ratchet":  # Ratchet's own modules (the built-ins) are never re-imported under a running process
        return
    own = base_dir is not None and ((base_dir / f"{top}.py").is_file() or (base_dir / top / "__init__.py").is_file())
    elsewhere = own and base_dir not in Path(path).resolve().parents
    if not elsewhere and _loaded.get(module_name, file_mtime(path)) == file_mtime(path):
        return
    stem = top if elsewhere else module_name  # another folder's package: all of it; an edited module: itself
    for name in [n for n in sys.modules if n == stem or n.startswith(stem + ".")]:
        del sys.modules[name]
    if not elsewhere and path.endswith(".py"):  # bytecode is checked by whole seconds and size: an edit may hide
        Path(importlib.util.cache_from_source(path)).unlink(missing_ok=True)
    importlib.invalidate_caches()


def _entry_point(name: str, group: str) -> str:
    found = [ep for ep in importlib.metadata.entry_points(group=group) if ep.name == name]
    if not found and name in BUILTINS.get(group, {}):
        return BUILTINS[group][name]
    if not found:
        names = sorted({ep.name for ep in importlib.metadata.entry_points(group=group)} | set(BUILTINS.get(group, {})))
        raise PluginError(
            f"plugin {name!r}: no entry point of that name in group {group!r} (installed: {', '.join(names) or 'none'}); "
            "write 'package.module:function' to import one directly"
        )
    return found[0].value.replace(" ", "")


def declared_version(obj: Any) -> str:
    """A ``version`` / ``__version__`` attribute of ``obj``, else of its module, else ``"0"``."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    for holder in (obj, module):
        for key in ("version", "__version__"):
            value = getattr(holder, key, None)
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                return str(value)
    return "0"


def source_file(obj: Any) -> str | None:
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    try:
        return inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        return None


def file_sha256(path: str | None) -> str:
    """sha256 of a file's bytes, 16 hex digits (``"nofile"`` without one)."""
    if path is None:
        return "nofile"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def load_plugin(ref: str, group: str, *, base_dir: str | Path | None = None) -> Plugin:
    """Resolve ``ref`` (``module:attr`` or an entry point of ``group``) and compute its identity.

    Args:
        ref: as written in the config's ``verifier`` / ``environment`` key.
        group: ``VERIFIER_GROUP`` or ``ENVIRONMENT_GROUP``.
        base_dir: the config file's folder, searched before ``sys.path`` for ``module:attr`` references.

    Raises:
        PluginError: the reference is malformed, its module cannot be imported, or it names no such attribute or
            entry point. The message says which and how to write it.
    """
    ref = ref.strip()
    target = ref if ":" in ref else _entry_point(ref, group)
    obj = _import_target(target, Path(base_dir).resolve() if base_dir else None, ref)
    src = source_file(obj)
    return Plugin(obj, ref, target, f"plugin:{ref}", f"{declared_version(obj)}+{file_sha256(src)}", src)
