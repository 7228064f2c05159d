#!/usr/bin/env bash
# Wheels for benchmarks/gpu_check.py on a GPU machine whose python3 (3.12, x86-64) already has torch,
# transformers, accelerate, tokenizers, safetensors and peft, but not Ratchet's config library (pydantic and
# its parts) nor TRL (and datasets' dill/multiprocess), and that reaches no package registry. Run here, in the
# repository root: it downloads them into .whl/ (git-ignored) at the versions constraints.txt pins (~5 MB);
# carry .whl/ there and install with --target (docs/devices.md, "The GPU check").
set -euo pipefail
cd "$(dirname "$0")/.."
pins=()
for name in pydantic pydantic-core annotated-types typing-inspection typing-extensions trl datasets dill multiprocess; do
  pin=$(grep -i "^${name}==" constraints.txt) || { echo "constraints.txt pins no ${name}; add it" >&2; exit 1; }
  pins+=("$pin")
done
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" --implementation cp \
  "${platforms[@]}" -d .whl "${pins[@]}"
ls .whl
