"""``benchmarks/store_scale.py`` at tiny sizes: it builds both stores, compacts, checks that the catalog reads every
trajectory exactly once before and after, and prints its one JSON line (~25 s on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "store_scale.py"


def test_store_scale_prints_its_figures_and_compaction_keeps_every_row(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "3000", "--rounds", "12", "--real-rounds", "6", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["files_before"] == 12 * 3 + 1 and out["files_after"] == 1  # 3 publishes per round, then one merged file
    assert out["merged"]["trajectories"] == [37, 1] and out["merged"]["verdicts"] == [37, 1]
    for key in ("readme_round_summary", "readme_training_set", "round_summary", "ratchet_status", "ratchet_report"):
        assert out["queries_10m"][key] > 0
    assert out["ingest_rows_per_s"] > 0 and out["bulk_ingest_rows_per_s"] > 0
    assert out["catalog_ratio_3000_vs_10"] > 0
    assert not any(tmp_path.iterdir())  # its stores are removed
