"""``benchmarks/gpu_check.py --device cpu --tiny`` from a checkout with nothing installed: the GPU machine's situation.

The check runs under ``python -S`` (no site processing, so no ``.pth`` file: an editable install's finder for
``ratchet.*`` is never loaded) with ``PYTHONPATH`` set to a folder of links to this environment's packages less any
``ratchet`` (an installed copy or its editable finder), from a working directory outside the repository. So
``ratchet`` is importable only through the script's own namespace mapping onto the checkout's folders, as on the
GPU machine, where nothing is pip-installed. ~30 s on 2 idle cores (one tiny model, two steps per phase).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def _site_without_ratchet(tmp: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """A folder of symlinks to every entry of this environment's site-packages except Ratchet's (and ``leave_out``).

    Its path ends in ``site-packages``: under ``-S`` ``sys.prefix`` is the base interpreter's, and dill (which
    ``datasets`` fingerprints with) pickles modules from elsewhere by value, which fails on pyarrow's types."""
    dest = tmp / "lib" / "site-packages"
    dest.mkdir(parents=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("ratchet", "__editable__", *leave_out)) or name.endswith(".pth"):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


def _run(args: list[str], site: Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "2"}
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_tiny_cpu_check_runs_without_the_installed_package(tmp_path: Path) -> None:
    site = _site_without_ratchet(tmp_path)
    # the precondition: in this interpreter nothing but the script's mapping can provide `ratchet`
    bare = _run(["-c", "import ratchet.loop"], site, tmp_path, 60)
    assert bare.returncode != 0 and "No module named 'ratchet'" in bare.stderr, bare.stderr[-2000:]

    proc = _run([str(SCRIPT), "--device", "cpu", "--tiny"], site, tmp_path, 300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])  # the last line is the JSON object
    assert out["weight_sync_ok"] is True, out
    assert {"device", "gpu", "torch", "transformers", "trl", "settings", "models", "weight_sync_ok", "wall_s"} <= out.keys()
    tiny = out["models"]["tiny"]
    assert tiny["skipped"] == {} and tiny["failed"] == {}, (tiny["skipped"], tiny["failed"])  # TRL (test extra) ran too
    sync = tiny["weight_sync"]
    assert sync["saved_equal"] and sync["in_place_equal"] and sync["before_update_differs"], sync
    for phase in ("ours_float32", "ours_bfloat16", "trl"):
        assert tiny[phase]["s_per_step"] > 0 and len(tiny[phase]["step_s"]) == out["settings"]["steps"], (phase, tiny[phase])
    assert tiny["ours_float32"]["gen_tokens_per_s"] > 0
    assert tiny["ratio"] > 0 and tiny["bf16_vs_fp32"] > 0
    assert out["device"] == "cpu" and tiny["ours_float32"]["peak_gpu_mb"] is None


def test_without_trl_the_trl_side_is_null_with_a_reason(tmp_path: Path) -> None:
    site = _site_without_ratchet(tmp_path, leave_out=("trl",))
    code = f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import gpu_check; print(gpu_check.trl_status())"
    proc = _run(["-c", code], site, tmp_path, 120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'version': None" in proc.stdout and "No module named 'trl'" in proc.stdout, proc.stdout
