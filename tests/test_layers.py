"""The layout guardrails: one ``ratchet`` namespace, no bare top-level packages, and the import contract.

The contract itself lives in ``pyproject.toml`` (``[tool.importlinter]``) and ``.ci/run`` runs ``lint-imports``;
these tests show that it reads the real folders and that an import against the layers breaks it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "verifiers", "loop", "store", "flows")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _py(code: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _lint(cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_installed_names_are_under_ratchet_and_map_to_the_repository_folders(tmp_path):
    out = _py("import ratchet.verifiers, ratchet.flows, ratchet.loop, ratchet.store; print(ratchet.flows.__file__)", tmp_path)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve() == REPO / "flows" / "__init__.py"


@pytest.mark.parametrize("bare", ["verifiers", "flows", "loop", "store"])
def test_bare_package_names_are_not_importable(tmp_path, bare):
    out = _py(f"import {bare}", tmp_path)  # cwd is not the repository: only what is installed counts
    assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, out.stdout + out.stderr


def test_ratchet_works_beside_another_package_called_verifiers(tmp_path):
    """PyPI's ``verifiers`` (RL environments) in the same environment: both import, neither shadows the other."""
    stub = tmp_path / "site" / "verifiers"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("THIRD_PARTY = True\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    code = (
        "import verifiers\nfrom ratchet.verifiers import verify_math\n"
        "assert verifiers.THIRD_PARTY\nassert verify_math('4', r'The answer is \\boxed{4}').correct\nprint('ok')"
    )
    out = _py(code, tmp_path, env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_tests_and_benchmarks_import_only_ratchet_names():
    bare = re.compile(r"^\s*(?:from|import)\s+(?:flows|loop|store|verifiers|common)\b", re.M)
    offenders = [
        str(p.relative_to(REPO))
        for d in ("tests", "benchmarks", *PACKAGES)
        for p in (REPO / d).rglob("*.py")
        if bare.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is in the test extra: pip install -e '.[test]'")
def test_import_contract_holds_on_the_real_folders(tmp_path):
    out = _lint(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout
    n_files = int(re.search(r"Analyzed (\d+) files", out.stdout).group(1))
    assert n_files >= sum(1 for d in PACKAGES for _ in (REPO / d).rglob("*.py"))


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is in the test extra: pip install -e '.[test]'")
@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("verifiers/reward.py", "import ratchet.store.db", "Verifiers import neither"),
        ("loop/gate/__init__.py", "import ratchet.flows.rounds.campaign", "Layers"),
        ("flows/compute/learner_requests.py", "import prefect", "Worker processes and trainers"),
        ("store/queries.py", "import ratchet.loop.gate", "Layers"),
    ],
)
def test_an_import_against_the_layers_breaks_the_contract(tmp_path, module, line, contract):
    """A copy of the packages under ``tmp/ratchet`` (first on the path) with one bad import added fails ``lint-imports``."""
    root = tmp_path / "ratchet"
    for d in PACKAGES:
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # added against the layers\n", encoding="utf-8")
    out = _lint(tmp_path, {**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode != 0, out.stdout[-3000:]
    broken = out.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken
