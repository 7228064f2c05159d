"""Plain logs when the output is not a terminal, and the running stage in `ratchet status` (issue 24, finding 8)."""

import io
import json
import os
import re
import socket
from datetime import UTC, datetime

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.cli.common import PlainConsole
from ratchet.flows.cli.running.reporters import PlainReporter
from ratchet.flows.rounds.observe.progress import PROGRESS_FILE, bar, set_reporter
from ratchet.flows.rounds.stages.frame import stage_frame
from ratchet.loop.campaign.round_context import Ctx, save_config
from ratchet.loop.campaign.round_manifest import round_manifest
from ratchet.loop.config import load_config
from ratchet.store.db import init_db, transaction
from ratchet.store.ingest import insert_rows
from tests.flows.rounds.test_round import write_sum_tasks

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d "


def test_a_running_stage_logs_plain_lines_and_shows_in_status(tmp_path, monkeypatch):
    monkeypatch.setattr("ratchet.flows.rounds.observe.progress.FILE_INTERVAL_S", 0.0)  # every update reaches the file
    cfg = load_config(
        None,
        **{"db": str(tmp_path / "s.duckdb"), "run_dir": str(tmp_path / "elsewhere"), "campaign": "watched",
           "tasks.source": "jsonl", "tasks.path": str(write_sum_tasks(tmp_path)), "tasks.heldout_fraction": 0.3,
           "tasks.heldout_prompts": 10, "tasks.train_prompts_per_round": 12},
    )  # fmt: skip
    path, ctx = save_config(cfg), Ctx(cfg, 1)
    init_db(cfg.db)
    now = datetime.now(UTC)
    with transaction(cfg.db) as con:
        insert_rows(
            con,
            "campaigns",
            [dict(campaign_id=ctx.campaign_id, name="watched", base_checkpoint_id="b", config_json="{}", created_at=now)],
        )
        insert_rows(con, "rounds", [dict(round_id=ctx.round_id, campaign_id=ctx.campaign_id, round_index=1, incumbent_checkpoint_id="b",
                                         status="running", started_at=now, owner=f"{socket.gethostname()}:{os.getpid()}")])  # fmt: skip
        insert_rows(con, "round_manifests", [{**round_manifest(cfg, ctx.round_id, {}, None), "created_at": now}])
    out = PlainConsole(file=io.StringIO(), width=200, force_terminal=False)
    set_reporter(PlainReporter(out))
    try:
        with stage_frame(str(path), 1, "generate"):
            step = bar("k", "round 1: rollouts")
            step(0, 24)
            step(12, 24)  # within a minute of the start: no line, but the progress file moves
            r = CliRunner().invoke(app, ["status", "--db", cfg.db, "--format", "json"])
            (rnd,) = json.loads(r.stdout)["campaigns"][0]["rounds"]
            assert rnd["state"] == "running" and (rnd["stage"]["stage"], rnd["stage"]["done"], rnd["stage"]["total"]) == (
                "round 1: generate",
                12,
                24,
            )
            r = CliRunner().invoke(app, ["status", "--db", cfg.db])
            assert "(generate:" in r.stdout and "12/24)" in r.stdout, r.stdout  # 'running (generate: rollouts 12/24)', wrapped
            step(24, 24)
        assert not (ctx.stage_dir("generate") / PROGRESS_FILE).exists()
    finally:
        set_reporter(None)
    lines = out.file.getvalue().splitlines()
    assert [re.sub(STAMP, "", line) for line in lines[:4]] == [
        "round 1: generate: started",
        "round 1: rollouts: 0/24",
        "round 1: rollouts: 24/24 done",
        lines[3][len(lines[3]) - len(re.sub(STAMP, "", lines[3])) :],
    ]
    assert all(re.match(STAMP, line) for line in lines) and re.sub(STAMP, "", lines[3]).startswith("round 1: generate: done in ")
    assert len(lines) == 4
