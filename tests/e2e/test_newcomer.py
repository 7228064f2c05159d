"""What a newcomer does first, on the real SmolLM2-135M-Instruct (issue 24, "Done when").

A GSM8K-format file of easy one-step word problems; a copy with two broken golds (`#### twelve`, a line without
`####`) refused by `ratchet tasks check` and `init`, both lines named -> `ratchet init --tasks` (task paths relative to
the config's folder) -> `ratchet run --dry-run` (rc 0, no store; the pilot's line with the pass rate's interval and
the verdicts' counts) -> `ratchet run --rounds 1`, interrupted with Ctrl-C during generation (one line, exit 130, within seconds;
the round `interrupted` in the store) and run again (it resumes, sampling only the rollout batches not committed) -> the round trains on > 0 verified-correct trajectories -> `ratchet export --what training-set
--format jsonl` rows render, with the model's chat template, to exactly their `prompt_tokens` -> `ratchet eval` of
the round's candidate by its stored id, on the file, stored with `--db` (issue 42).

Sizes are cut to fit CI (8 train prompts x G = 4, 8 held-out prompts, 64-token cap): the config `init` wrote is
otherwise used as written.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratchet.store.db import query

pytestmark = pytest.mark.slow
RATCHET = str(Path(sys.executable).with_name("ratchet"))
NAMES = ["Tom", "Ann", "Ben", "Mia", "Sam", "Lea", "Max", "Ivy"]
THINGS = ["apples", "pens", "books", "cards", "balls", "shells"]


def gsm8k_easy(n: int = 120) -> list[dict]:
    """One-step additions in GSM8K's format: worked answer with calculator annotations, then '#### N'."""
    out = []
    for i in range(n):
        who, what, a, b = NAMES[i % 8], THINGS[i % 6], 1 + i % 5, 1 + (i // 5) % 4
        q = f"{who} has {a} {what}. {who} gets {b} more {what}. How many {what} does {who} have now? ({i})"
        out.append({"question": q, "answer": f"{who} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {what}.\n#### {a + b}"})
    return out


def ratchet(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([RATCHET, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_newcomer_gsm8k_file_to_an_exact_export(tmp_path, smollm2_dir):
    from transformers import AutoTokenizer

    (tmp_path / "easy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gsm8k_easy()))
    broken = gsm8k_easy(20)
    broken[2]["answer"], broken[4]["answer"] = "Tom has 12.\n#### twelve", "Sam has 3 + 3 = 6 shells."
    (tmp_path / "broken.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
    r = ratchet("tasks", "check", "broken.jsonl", "--format", "json", cwd=tmp_path)
    assert r.returncode == 1 and json.loads(r.stdout.splitlines()[-1])["errors"] == 2, r.stdout + r.stderr
    r = ratchet("init", "--tasks", "broken.jsonl", "--path", "broken.toml", cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "broken.toml").exists(), r.stderr
    assert "broken.jsonl:3: gold 'twelve' is text" in r.stderr and "broken.jsonl:5: no '#### <answer>'" in r.stderr, r.stderr
    (tmp_path / "broken.jsonl").unlink()

    r = ratchet("init", "--tasks", "easy.jsonl", "--path", "ratchet.toml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "ratchet.toml").read_text()
    assert 'max_new_tokens = "auto"' in text and "fewshot = 2" in text
    assert 'path = "easy.jsonl"' in text and str(tmp_path) not in text  # relative to the config's folder
    said = r.stdout + r.stderr  # init sized the held-out set with the gate's plan and said so on the terminal
    assert "held-out set:" in said and "the gate's plan needs" in said and "tasks.heldout_fraction" in said, said
    text = re.sub(r"heldout_prompts = \d+", "heldout_prompts = 8", text)
    text = re.sub(r"train_prompts_per_round = \d+", "train_prompts_per_round = 8", text)
    text = re.sub(
        r"max_new_tokens_min = \d+", "max_new_tokens_min = 64\nmax_new_tokens_max = 64\ngroup_size = 4\nbatch_size = 8", text
    )
    (tmp_path / "ratchet.toml").write_text(text.replace("[sft]\n", "[sft]\nepochs = 1\n"))

    r = ratchet("run", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and "nothing was written" in r.stdout, r.stdout + r.stderr
    pilot = re.search(
        r"pilot: .* (\d+)/(\d+) verified correct \(the true rate could be \d+%-\d+%, 95%\).*verdicts: \w+ \d+", r.stderr
    )
    assert pilot and int(pilot.group(2)) >= 16, r.stderr[-3000:]  # the count, its interval, the reasons' counts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["easy.jsonl", "ratchet.easy.fewshot.jsonl", "ratchet.toml"]

    # Ctrl-C (SIGINT to the terminal's process group) once the first of the round's 4 rollout batches (8 prompts x G=4,
    # 8 per batch) is committed: one line, exit 130, in seconds
    p = subprocess.Popen([RATCHET, "run", "--rounds", "1"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)  # fmt: skip
    db = tmp_path / "ratchet.duckdb"
    generate = tmp_path / "ratchet.runs" / "easy" / "round-1" / "generate"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and p.poll() is None and not list(generate.glob("batches/*/batch-*.parquet")):
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    assert not (generate / "_SUCCESS.json").exists()
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    stopped_s = time.monotonic() - t0
    assert p.returncode == 130 and stopped_s < 15, (p.returncode, stopped_s, err[-2000:])
    assert "Traceback" not in err and err.count("SIGINT received, stopped") == 1, err[-2000:]
    assert "round 1 of campaign easy is interrupted" in err, err[-2000:]
    assert query(db, "SELECT status FROM rounds")[1] == [("interrupted",)]

    r = ratchet("run", "--rounds", "1", cwd=tmp_path)  # resumes the interrupted round
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    marker = json.loads((generate / "_SUCCESS.json").read_text())
    assert marker["batches"] == 4 and 1 <= marker["batches_resumed"] < 4, marker  # only the missing batches sampled
    trained = query(db, "SELECT count(*) FROM training_examples")[1][0][0]
    assert trained > 0, r.stdout[-3000:]

    r = ratchet("export", "--campaign", "easy", "--what", "training-set", "--format", "jsonl", "--out", "ts.jsonl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "ts.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert len(rows) == trained
    for row in rows:
        prompt = tok.apply_chat_template(row["messages"][:-1], tokenize=False, add_generation_prompt=True)
        assert len(tok(prompt, add_special_tokens=False)["input_ids"]) == row["prompt_tokens"], row["trajectory_id"]
        assert row["messages"][0]["content"].startswith("Solve the problem") and "<<" not in row["messages"][2]["content"]

    # the candidate, by its stored id, on the file's first 8 prompts: stored as a round of campaign eval-easy
    candidate = query(db, "SELECT output_checkpoint_id FROM training_runs")[1][0][0]
    r = ratchet("eval", "--model", candidate[:10], "--tasks", "easy.jsonl", "--prompts", "8", "--max-new-tokens", "64",
                "--db", "ratchet.duckdb", "--format", "json", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["prompts"] == 8 and got["ci95"][0] <= got["pass@1"] <= got["ci95"][1] and got["round_id"], got
    stored = query(db, "SELECT count(*) FROM trajectories t JOIN rounds r USING (round_id) JOIN campaigns c USING (campaign_id) "
                   "WHERE c.name = 'eval-easy' AND t.checkpoint_id = ?", [candidate])[1][0][0]  # fmt: skip
    assert stored == 8
    print(json.dumps({"interrupt_exit_s": round(stopped_s, 2), "trained_on": trained, "export_rows": len(rows), "batches_resumed": marker["batches_resumed"], "eval_pass1": got["pass@1"], "pilot": pilot.group(0)[:120]}))  # fmt: skip
