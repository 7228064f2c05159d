"""The gate on the real SmolLM2-135M-Instruct: a clean round is promoted, a round trained on wrong golds is not.

One campaign in two [[stages]]: round 1 trains on sums with their true answers, round 2 on the same kind of sums
whose golds are shifted by one (so what the verifier calls right, and what rft trains on, is off by one). Both
rounds are gated on the same clean [[evals]] set of 200 sums the campaign never trains on. ~15 min on 2 cores.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.store.db import query

pytestmark = pytest.mark.slow


def _sums(path: Path, pairs, shift: int = 0) -> Path:
    path.write_text(
        "".join(json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b + shift)}) + "\n" for a, b in pairs)
    )
    return path


def test_clean_round_promoted_wrong_golds_round_rejected(tmp_path, smollm2_dir):
    pairs = [(a, b) for a in range(1, 31) for b in range(1, 31)]
    train, held = [p for i, p in enumerate(pairs) if i % 3], [p for i, p in enumerate(pairs) if i % 3 == 0]
    clean = _sums(tmp_path / "clean.jsonl", train)
    shifted = _sums(tmp_path / "shifted.jsonl", train, shift=1)
    evals = _sums(tmp_path / "eval.jsonl", held)
    cfg = tmp_path / "poison.toml"
    cfg.write_text(
        f'''campaign = "poison"
db = "{tmp_path / "p.duckdb"}"
[tasks]
train_prompts_per_round = 48
fewshot = 2
[[tasks.sources]]
path = "{clean}"
name = "sums"
format = "math"
[[evals]]
name = "clean"
prompts = 200
[evals.file]
path = "{evals}"
format = "math"
[[stages]]
name = "clean"
algorithm = "rft"
rounds = 1
[[stages]]
name = "wrong-golds"
algorithm = "rft"
rounds = 1
[[stages.tasks.sources]]
path = "{shifted}"
name = "sums"
format = "math"
'''
    )
    exe = Path(sys.executable).with_name("ratchet")
    p = subprocess.run([str(exe), "run", "--config", str(cfg)], capture_output=True, text=True, timeout=2400)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = query(
        tmp_path / "p.duckdb",
        "SELECT round_index, stage, decision, reason, lower_bound FROM round_summary ORDER BY round_index",
    )[1]
    assert [(r[0], r[1]) for r in rows] == [(1, "clean"), (2, "wrong-golds")], rows
    assert rows[0][2] == "promote", rows
    assert rows[1][2] in ("reject", "halt") and "not shown to be no worse" in rows[1][3], rows
    assert rows[1][4] < -0.03 < rows[0][4]
