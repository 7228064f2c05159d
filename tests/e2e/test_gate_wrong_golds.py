"""The gate on the real SmolLM2-135M-Instruct: a round trained on wrong golds is rejected, a clean round promoted.

One campaign, two task files of the same questions ("What is a + b?"): ``sums`` with the right golds and ``shifted``
whose golds are a + b + 10 (a task file with a systematic labelling error). Two ``[[phases]]`` of one rft round
each weight the sources 1 : 1e-6 so that round 1 trains on ``shifted`` only (the verifier rewards the completions
that match the wrong gold, and RFT trains on them) and round 2 on ``sums`` only. Both rounds are gated on the same
200 pinned held-out prompts of ``sums``: the first must be rejected, the second promoted (issue 23).
"""

import json
from pathlib import Path

import pytest

from ratchet.store.db import query
from tests.e2e.test_task_rounds import ratchet

pytestmark = pytest.mark.slow


def _files(tmp_path: Path) -> dict[str, Path]:
    """Each source's task file and its worked few-shot examples (``fewshot_path``), with golds shifted by 0 or 10."""
    pairs = [(a, b) for a in range(1, 31) for b in range(1, 31)]
    out = {}
    for name, shift in (("sums", 0), ("shifted", 10)):
        recs = [{"question": f"What is {a} + {b}?", "answer": str(a + b + shift)} for a, b in pairs]
        shots = [
            {"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b + shift}\nAnswer: {a + b + shift}"}
            for a, b in ((3, 5), (12, 7))
        ]
        for suffix, rows in (("", recs), (".fewshot", shots)):
            out[name + suffix] = tmp_path / f"{name}{suffix}.jsonl"
            out[name + suffix].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def _config(tmp_path: Path, f: dict[str, Path]) -> Path:
    def sources(w_sums: float, w_shifted: float) -> str:
        return ", ".join(
            f'{{name = "{n}", path = "{f[n]}", format = "math", fewshot = 2, fewshot_path = "{f[n + ".fewshot"]}", weight = {w}}}'
            for n, w in (("sums", w_sums), ("shifted", w_shifted))
        )

    text = f"""
campaign = "golds"
db = "{tmp_path / "g.duckdb"}"
[tasks]
train_prompts_per_round = 48
heldout_fraction = 0.3
sources = [{sources(0.5, 0.5)}]
[generation]
group_size = 4
max_new_tokens = 24
batch_size = 32
[sft]
epochs = 1
[preflight]
pilot = false
[[evals]]
name = "sums"
source = "sums"
prompts = 200
[[phases]]
name = "wrong-golds"
algorithm = "rft"
rounds = 1
tasks = {{sources = [{sources(1e-6, 1.0)}]}}
[[phases]]
name = "clean"
algorithm = "rft"
rounds = 1
tasks = {{sources = [{sources(1.0, 1e-6)}]}}
"""
    cfg = tmp_path / "golds.toml"
    cfg.write_text(text)
    return cfg


def test_a_round_trained_on_wrong_golds_is_rejected_and_a_clean_round_promoted(tmp_path, smollm2_dir):
    cfg = _config(tmp_path, _files(tmp_path))
    ratchet("run", "--config", str(cfg))
    db = tmp_path / "g.duckdb"
    trained = query(
        db,
        """SELECT r.stage, p.source, count(*) FROM training_examples e JOIN trajectories t ON t.trajectory_id = e.trajectory_id
           JOIN rounds r ON r.round_id = t.round_id JOIN prompts p ON p.prompt_id = t.prompt_id GROUP BY ALL ORDER BY ALL""",
    )[1]
    assert {stage: source for stage, source, _ in trained} == {"clean": "sums", "wrong-golds": "shifted"}, trained
    assert min(n for *_, n in trained) >= 5, trained  # each round really trained on its file's labels (measured: 8 and 36)
    rows = query(
        db,
        """SELECT r.stage, g.decision, g.reason, e.value FROM gate_decisions g JOIN rounds r USING (round_id)
           JOIN evaluations e ON e.checkpoint_id = g.candidate_checkpoint_id AND e.metric = 'heldout/sums/pass@1' ORDER BY r.round_index""",
    )[1]
    (stage1, decision1, reason1, pass1_wrong), (stage2, decision2, reason2, pass1_clean) = rows
    assert (stage1, decision1) == ("wrong-golds", "reject"), reason1
    assert (stage2, decision2) == ("clean", "promote"), reason2
    assert pass1_wrong < pass1_clean
