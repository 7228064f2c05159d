"""Library-grade dependencies: ranges in pyproject.toml, one exact tested stack in constraints.txt.

A core dependency pinned with ``==`` (or capped without a stated reason) would replace the torch or transformers a
user's environment already has; constraints.txt must pin every dependency CI installs, inside those ranges.
"""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent


def _pyproject_lines() -> list[str]:
    text = (REPO / "pyproject.toml").read_text()
    start = text.index("dependencies = [")
    return text[start : text.index("\n]", start)].splitlines()[1:]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact `name==version` pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_core_dependencies_have_no_pin_and_every_cap_a_reason():
    lines = [line for line in _pyproject_lines() if line.strip().startswith('"')]
    assert len(lines) == len(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    for line in lines:
        req = Requirement(re.search(r'"([^"]+)"', line).group(1))
        ops = {spec.operator for spec in req.specifier}
        assert not ops & {"==", "===", "~="}, f"{req}: core dependencies state ranges; pin exact versions in constraints.txt"
        assert ">=" in ops, f"{req}: state the lower bound CI runs (constraints.txt)"
        if ops & {"<", "<="}:
            assert "#" in line and len(line.split("#", 1)[1].strip()) > 10, f"{req}: an upper bound needs its reason beside it"


def test_constraints_pin_every_requirement_inside_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _constraints()
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in ("test", "docs", "ray", "tracking"):
        reqs += [Requirement(r) for r in project["optional-dependencies"].get(extra, [])]
    for req in reqs:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name}: missing from constraints.txt; regenerate it (docs/install.md)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}; regenerate it (docs/install.md)"
        )
