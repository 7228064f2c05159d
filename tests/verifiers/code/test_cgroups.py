"""The per-run cgroup's limits (issue 36, class 2), on a stand-in folder: what each cgroup version is told.

The real hierarchy is exercised by test_walls.py (v1 as root here); no machine here has cgroup v2 controllers, so
this checks the v2 files by writing into a temporary folder shaped like a delegated cgroup.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratchet.verifiers.code import cgroups


@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_each_run_gets_memory_swap_and_pids_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    parents = (tmp_path / "mem", tmp_path / "pids") if kind == "v1" else (tmp_path,)
    for p in parents:
        p.mkdir(exist_ok=True)
    if kind == "v2":
        (tmp_path / "cg").mkdir()
        parents = (tmp_path / "cg",)
    monkeypatch.setattr(cgroups, "_parents", lambda: (kind, parents))
    monkeypatch.setattr(Path, "mkdir", _mkdir_with_interface_files(kind))
    cg = cgroups.make_cgroup(300 * 1024**2, 8)
    assert cg is not None and cg.kind == kind
    read = [{f.name: f.read_text() for f in d.iterdir()} for d in cg.dirs]
    if kind == "v2":
        assert (read[0]["memory.max"], read[0]["memory.swap.max"], read[0]["pids.max"]) == (str(300 * 1024**2), "0", "8")
    else:
        assert read[0]["memory.limit_in_bytes"] == read[0]["memory.memsw.limit_in_bytes"] == str(300 * 1024**2)
        assert read[1] == {"pids.max": "8"}


def _mkdir_with_interface_files(kind: str):
    real = Path.mkdir

    def mkdir(self: Path, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        real(self, mode, parents, exist_ok)
        if self.name.startswith(cgroups.PREFIX) and self.parent.name != "pids":
            for name in ("memory.swap.max",) if kind == "v2" else ("memory.memsw.limit_in_bytes",):
                (self / name).write_text("max")

    return mkdir


def test_no_cgroup_says_why_and_the_run_still_has_its_walls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "_parents", lambda: "no writable cgroup v1 memory and pids hierarchy")
    assert cgroups.make_cgroup(1024**3, 8) is None
    assert "no writable cgroup" in (cgroups.cgroup_problem() or "")


def test_a_run_that_cannot_join_its_cgroup_is_refused_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cgroup whose cgroup.procs cannot be written: the verification is refused in one line, nothing runs outside."""
    from ratchet.verifiers.code import sandbox

    (tmp_path / "cg").mkdir()
    monkeypatch.setattr(sandbox, "make_cgroup", lambda *a: cgroups.Cgroup("v2", (tmp_path / "cg" / "missing",)))
    with pytest.raises(sandbox.SandboxUnavailable, match="cannot put the sandbox into its cgroup"):
        sandbox.run_job({"mode": "stdio", "program": "print(1)"}, sandbox.Limits(), isolation="kernel")
