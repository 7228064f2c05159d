"""``ratchet export --what model``: a checkpoint as a self-contained Hugging Face folder with its model card.

The folder holds the checkpoint's weights, config, tokenizer and generation config (no Ratchet manifest), so
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` load it anywhere, and ``README.md``:
the model card with the lineage the store records (``ratchet.store.read.model_card``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ratchet.common.output import check_output, output_path
from ratchet.flows.compute.resolve import verified_checkpoint_dir
from ratchet.loop.checkpoints import MANIFEST, check_loadable, hub_model_id
from ratchet.store.db import connect, require_store
from ratchet.store.read.model_card import model_card, model_lineage


def export_model(db: Path, campaign: str, checkpoint: str, out: Path) -> tuple[str, Path]:
    """Write ``checkpoint`` (an id or ``promoted``) of ``campaign`` to the new folder ``out``.

    Returns:
        ``(checkpoint_id, out)``.
    Raises:
        OutputRefused: ``out`` exists (a folder is never replaced) or is inside a store, a run dir, a checkpoint or
            ``$RATCHET_HOME`` (``ratchet.common.output``).
        StoreError: ``db`` is not a store.
        ValueError: no such campaign or checkpoint (``ratchet.store.read.model_card.resolve_checkpoint``).
        LookupError: the checkpoint's weights were never saved.
        ModelError: its folder changed since its id was recorded, was deleted by retention, or is not loadable.
    """
    runs = [Path(db).with_suffix(".runs")]  # the store's default run dir (every checkpoint folder is refused too)
    check_output(out, folder=True, protected=runs)  # a model export never replaces anything
    with connect(db, read_only=True) as con:
        require_store(con, db)
        lineage = model_lineage(con, campaign, checkpoint)
        src = verified_checkpoint_dir(con, lineage.checkpoint_id)  # the files hash to the recorded id
    check_loadable(src)
    with output_path(out, folder=True, protected=runs) as tmp:
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(MANIFEST, "README.md"))
        if not (tmp / "generation_config.json").is_file():  # from the model config: its bos/eos/pad token ids
            from transformers import AutoConfig, GenerationConfig

            GenerationConfig.from_model_config(AutoConfig.from_pretrained(tmp)).save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(lineage, hub_model_id(lineage.base_model_ref)))
    return lineage.checkpoint_id, out
