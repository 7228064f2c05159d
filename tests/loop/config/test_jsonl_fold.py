"""`tasks.source = "jsonl"` (the old single-file path) is read as the one [[tasks.sources]] entry it means (#24)."""

import json
import logging
from datetime import UTC, datetime

import pytest

from ratchet.flows.rounds.state.identity import CampaignConflict, check_same_settings
from ratchet.loop.campaign.round_context import Ctx, campaign_id_of
from ratchet.loop.config import ConfigError, load_config
from ratchet.loop.tasks.formats import DEFAULT_SYSTEM_PROMPTS
from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows


@pytest.fixture
def gsm8k(tmp_path):
    f = tmp_path / "gsm8k.jsonl"
    rows = [
        {
            "question": f"Ann has {i} apples and buys {i + 2} more. How many now?",
            "answer": f"{i}+{i + 2}=<<{i}+{i + 2}={2 * i + 2}>>{2 * i + 2}\n#### {2 * i + 2}",
        }
        for i in range(300)
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_old_key_becomes_a_source_with_the_math_prompt_and_the_files_examples(gsm8k, caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config(None, **{"tasks.source": "jsonl", "tasks.path": str(gsm8k)})
    (src,) = cfg.tasks.sources
    assert (src.name, src.path, src.format, src.fewshot, src.system_prompt) == ("jsonl", str(gsm8k), "math", 2, None)
    assert cfg.tasks.path is None and cfg.tasks.source == "arithmetic"
    (line,) = [r.getMessage() for r in caplog.records if "source = 'jsonl'" in r.getMessage()]
    assert f'[[tasks.sources]] name = "jsonl", path = "{gsm8k}", format = "math", fewshot = 2' in line
    tasks = Ctx(cfg).tasks
    (m,) = tasks.members
    assert m.system_prompt == DEFAULT_SYSTEM_PROMPTS["math"] and m.fewshot == 2  # the old path: arithmetic prompt, 0 shots
    (p,) = tasks.draw(1, "train", 0)
    chat = tasks.messages(p)
    assert [t["role"] for t in chat] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert chat[-1]["content"] == p.question and p.source == "jsonl"


def test_the_table_the_notice_prints_is_the_same_campaign(gsm8k):
    old = load_config(
        None, **{"tasks.source": "jsonl", "tasks.path": str(gsm8k), "tasks.fewshot": 0, "tasks.system_prompt": "sys"}
    )
    table = load_config(
        None, **{"tasks.sources": [{"name": "jsonl", "path": str(gsm8k), "format": "math", "fewshot": 0, "system_prompt": "sys"}]}
    )
    assert old.campaign_settings() == table.campaign_settings()
    assert Ctx(old).eval_set_id() == Ctx(table).eval_set_id()
    assert [p.prompt_id for p in Ctx(old).heldout()] == [p.prompt_id for p in Ctx(table).heldout()]


def test_old_key_errors_say_what_to_change(gsm8k):
    with pytest.raises(ConfigError, match="needs tasks.path"):
        load_config(None, **{"tasks.source": "jsonl"})
    with pytest.raises(ConfigError, match="both set"):
        load_config(None, **{"tasks.source": "jsonl", "tasks.path": str(gsm8k), "tasks.sources": [{"path": str(gsm8k)}]})


def test_a_campaign_recorded_with_the_old_key_is_refused_with_the_way_on(tmp_path, gsm8k):
    cfg = load_config(
        None, campaign="nightly", db=str(tmp_path / "s.duckdb"), **{"tasks.source": "jsonl", "tasks.path": str(gsm8k)}
    )
    recorded = cfg.campaign_settings()
    recorded["tasks"] = {
        **recorded["tasks"],
        "source": "jsonl",
        "path": str(gsm8k),
        "sources": [],
    }  # as stores before the fold hold it
    init_db(cfg.db)
    with transaction(cfg.db) as con:
        insert_rows(
            con,
            "checkpoints",
            [dict(checkpoint_id="b0", path="/models/base", model_ref="m", created_at=datetime.now(UTC).replace(tzinfo=None))],
        )
        row = dict(
            campaign_id=campaign_id_of("nightly"),
            name="nightly",
            base_checkpoint_id="b0",
            config_json=json.dumps(recorded),
            created_at=datetime.now(UTC).replace(tzinfo=None),
        )
        insert_rows(con, "campaigns", [row])
    with connect(cfg.db, read_only=True) as con, pytest.raises(CampaignConflict) as e:
        check_same_settings(con, cfg)
    msg = str(e.value)
    assert "tasks.source = 'jsonl'" in msg and "--campaign nightly-v2" in msg and "/models/base" in msg
