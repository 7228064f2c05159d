"""The W&B sink of `[tracking]` in offline mode (issue 42, item 14): `ratchet track --to wandb` writes one offline run
per gated round of the tiny campaign, its metrics, config and tags those of the store, and a re-run writes nothing twice.

The offline run's transaction log (``run-<id>.wandb``, what `wandb sync` uploads) is read record by record: W&B
keeps it in LevelDB's log format (a 7-byte ``:W&B`` header, then 32 KiB blocks of records with a 7-byte header each:
crc32, length, type) holding ``wandb_internal_pb2.Record`` protobufs.
"""

import json
import struct

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import query

pytest.importorskip("wandb", reason="the W&B sink: pip install wandb (CI installs it)")
runner = CliRunner()
BLOCK = 32768


def wandb_records(path) -> list:
    """Every ``Record`` of an offline run's transaction log (full, or first/middle/last fragments joined)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    out, pos, chunk = [], 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            rec = pb.Record()
            rec.ParseFromString(chunk)
            out.append(rec)
            chunk = b""
    return out


def test_track_to_wandb_writes_offline_runs_equal_to_the_store_once(tracked_campaign, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = tmp_path / "wb"
    args = ["track", "--db", str(tracked_campaign.db), "--campaign", "tracked", "--to", "wandb", "--uri", str(folder)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "1 round(s) written, 0 already there" in r.stdout, r.output
    (log,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records(log)
    (run,) = [x.run for x in records if x.WhichOneof("record_type") == "run"]
    assert run.project == "tracked" and run.display_name == "tracked-round-1" and list(run.tags) == ["promote"]
    key = lambda item: item.key or ".".join(item.nested_key)  # noqa: E731 - W&B writes 'gate/promoted' as a nested key
    history = {
        key(i): json.loads(i.value_json) for x in records if x.WhichOneof("record_type") == "history" for i in x.history.item
    }
    (cand_p, inc_p), *_ = query(tracked_campaign.db, "SELECT candidate_pass1, incumbent_pass1 FROM gate_decisions")[1]
    assert history["gate/candidate_pass1"] == pytest.approx(cand_p) and history["gate/incumbent_pass1"] == pytest.approx(inc_p)
    assert history["gate/promoted"] == 1.0 and history["_step"] == 1
    config = {key(i): json.loads(i.value_json) for i in run.config.update}
    assert config["campaign"] == "tracked" and config["gate.margin"] == "1.0" and "tasks.path" in config
    summary = {
        key(i): json.loads(i.value_json) for x in records if x.WhichOneof("record_type") == "summary" for i in x.summary.update
    }
    assert summary["ratchet.decision"] == "promote" and summary["ratchet.campaign"] == "tracked"
    assert json.loads((folder / "ratchet-tracked.json").read_text()) == [
        query(tracked_campaign.db, "SELECT round_id FROM rounds")[1][0][0]
    ]
    r = runner.invoke(app, args)  # again: nothing new
    assert r.exit_code == 0 and "0 round(s) written, 1 already there" in r.stdout, r.output
    assert len(list(folder.glob("wandb/offline-run-*"))) == 1
