#!/usr/bin/env bash
# Installing Ratchet must keep a torch the environment already has (a GPU user's CUDA build, say). Other torch
# builds on the index are multi-GB, so a metadata-only stand-in wheel `torch 2.99.0+test` is built here and
# installed into a fresh venv; `pip install --dry-run --report` then resolves Ratchet there and must install
# no torch. The other dependencies are today's, already installed in $1 (a path entry in the fresh venv, after
# its own site-packages, so the stand-in shadows $1's torch); --no-index keeps the check offline and fast: a
# requirement the installed stack cannot meet fails the resolve instead of downloading. The machine's pip
# config (a torch cap, local indexes) is ignored. Self-test: the same resolve with an extra `torch<2.14`
# requirement must fail, so the check can tell a kept torch from a replaced one.
set -euo pipefail
cd "$(dirname "$0")/.."
deps_venv=$(realpath "${1:-.venv-ci}")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_CONSTRAINT PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL
"$deps_venv/bin/python" - "$out/wheels" <<'PY'
import base64, hashlib, sys, zipfile
from pathlib import Path
out = Path(sys.argv[1]); out.mkdir()
files = {
    "torch-2.99.0+test.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.99.0+test\n",
    "torch-2.99.0+test.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: keep_torch\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},{len(t)}" for p, t in files.items()]
files["torch-2.99.0+test.dist-info/RECORD"] = "\n".join(record + ["torch-2.99.0+test.dist-info/RECORD,,"]) + "\n"
with zipfile.ZipFile(out / "torch-2.99.0+test-py3-none-any.whl", "w") as z:
    for p, t in files.items():
        z.writestr(p, t)
PY
"$deps_venv/bin/python" -m venv --without-pip "$out/venv"
site=$("$out/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$deps_venv/bin/pip" --python "$out/venv/bin/python" install --quiet --no-index --no-deps "$out"/wheels/torch-*.whl
"$deps_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/zz-deps.pth"
resolve() {  # resolve Ratchet (and any extra requirement given) in the fresh venv; the report goes to $out/report.json
  "$deps_venv/bin/pip" --python "$out/venv/bin/python" install --dry-run --quiet --no-index --no-build-isolation \
    --report "$out/report.json" -e . "$@"
}
resolve
"$deps_venv/bin/python" - "$out/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
names = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
if "torch" in names:
    sys.exit(f"keep_torch: installing Ratchet would replace the installed torch 2.99.0+test with torch {names['torch']}")
print(f"keep_torch: installing Ratchet keeps torch 2.99.0+test (would install: {', '.join(f'{n} {v}' for n, v in sorted(names.items()))})")
PY
if resolve "torch<2.14" 2>/dev/null; then
  echo "keep_torch: self-test failed: a resolve that needs another torch succeeded, so the check cannot fail" >&2
  exit 1
fi
