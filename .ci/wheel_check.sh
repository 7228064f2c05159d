#!/usr/bin/env bash
# Build the wheel, install it (not editable) into a fresh venv and import every ratchet.* module from it:
# a subpackage or package-data file missing from pyproject.toml fails here, not on a user's machine.
# Dependencies come from $1's site-packages (a path entry, so its editable-install hooks stay inactive).
set -euo pipefail
cd "$(dirname "$0")/.."
deps_venv=${1:-.venv-ci}
out=$(mktemp -d)
"$deps_venv/bin/pip" wheel --quiet --no-deps --no-build-isolation -w "$out/dist" . 2>/dev/null \
  || "$deps_venv/bin/pip" wheel --quiet --no-deps -w "$out/dist" .
python3 -m venv "$out/venv"
site=$("$out/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$deps_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/zz-deps.pth"
"$out/venv/bin/pip" install --quiet --no-deps "$out"/dist/ratchet-*.whl
(cd "$out" && "$out/venv/bin/python" - "$site" <<'PY'
import importlib, pkgutil, sys
site = sys.argv[1]
names, bad = [], []
for top in ("common", "verifiers", "loop", "store", "flows"):
    pkg = importlib.import_module(f"ratchet.{top}")
    names.append(pkg.__name__)
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, f"ratchet.{top}.")]
for name in names:
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # report every module that fails, then exit 1
        bad.append(f"{name}: {type(e).__name__}: {e}")
        continue
    if not (getattr(mod, "__file__", "") or "").startswith(site):
        bad.append(f"{name}: imported from {mod.__file__}, not from the installed wheel")
from importlib.resources import files
data = sorted(p.name for p in (files("ratchet.loop.tasks") / "data").iterdir())
if "code_tasks.jsonl" not in data:
    bad.append(f"package data ratchet.loop.tasks/data is incomplete: {data}")
print(f"wheel: {len(names)} ratchet.* modules imported from {site}; package data {data}")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY
)
rm -rf "$out"
