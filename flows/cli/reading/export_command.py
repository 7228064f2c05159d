"""``ratchet export``: a round's (or campaign's) training set, rollouts or eval outcomes to Parquet, JSONL or a HF dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import DB_HELP, console, fail

FORMATS = ("parquet", "jsonl", "hf")
EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def output_format(format: str | None, out: Path) -> str:
    """The export format: ``--format`` when given, else the one ``--out``'s extension names (parquet without one).

    Raises:
        ValueError: the format is unknown, or ``--out``'s extension names another format than ``--format``.
    """
    by_ext = EXTENSIONS.get(out.suffix.lower())
    if format is None:
        return by_ext or "parquet"
    if format not in FORMATS:
        raise ValueError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    if by_ext is not None and by_ext != format:
        raise ValueError(
            f"--out {out} has a {by_ext} extension but --format is {format}; drop --format (the extension decides) "
            f"or name the file for {format}"
        )
    return format


def export(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    campaign: str = typer.Option(..., "--campaign", help="Campaign name."),
    round_index: Optional[int] = typer.Option(None, "--round", help="Only this round (default: every round of the campaign)."),
    what: str = typer.Option(..., "--what", help="training-set | rollouts | evals | model (a Hugging Face model folder)"),
    format: Optional[str] = typer.Option(
        None,
        "--format",
        help="parquet | jsonl | hf (a `datasets` folder, load_from_disk); default: --out's extension (.parquet, .jsonl), "
        "else parquet",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Output file (parquet, jsonl) or folder (hf)."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace --out if it exists (never a path inside a store, a run dir, a checkpoint or $RATCHET_HOME).",
    ),
    checkpoint: str = typer.Option(
        "promoted", "--checkpoint", help="--what model: a checkpoint id, or 'promoted' (the campaign's incumbent)."
    ),
) -> None:
    """Export rows with the chat the model saw (`messages` and the rendered `text`); prints each file and its rows.
    `--what model` writes a checkpoint as a Hugging Face folder with its model card (docs/export.md)."""
    if what == "model":
        return _export_model(db, campaign, checkpoint, out, round_index)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ratchet.common.output import OutputRefused, check_output, output_path, write_output
    from ratchet.loop.checkpoints import ModelError
    from ratchet.loop.tasks.chat import chats
    from ratchet.store.db import StoreError, connect, require_store
    from ratchet.store.read.export import campaign_config_json, export_table

    runs = [db.with_suffix(".runs")]  # the store's default run dir
    try:
        check_output(out, force=True, protected=runs)  # a protected path is refused first, whatever else is wrong
        format = output_format(format, out)
        check_output(out, force=force, folder=format == "hf", protected=runs)  # a datasets folder is never replaced
    except (StoreError, ValueError) as e:
        fail(str(e))
    try:
        with connect(db, read_only=True) as con:
            require_store(con, db)
            table = export_table(con, campaign, what, round_index)
            config_json = campaign_config_json(con, campaign)
        got = chats(
            config_json,
            table.select(["prompt_id", "source", "question", "completion", "prompt_messages", "episode_messages"]).to_pylist(),
        )
    except (StoreError, ValueError, ModelError) as e:
        fail(str(e))
    if got.rerendered:
        console.print(
            f"note: {got.rerendered} of {table.num_rows} rows have no stored chat (a store from before chats were "
            "stored): their messages were rebuilt from the campaign's settings and may differ from what the model saw",
            highlight=False,
        )
    table = table.drop_columns(["prompt_messages", "episode_messages"])
    table = table.append_column("messages", pa.array(got.messages)).append_column("text", pa.array(got.texts, pa.string()))
    if format == "hf":
        try:
            from datasets import Dataset
        except ImportError:
            fail(
                "--format hf needs the `datasets` package, a dependency of Ratchet missing here: pip install 'datasets>=5.2' (or use --format parquet|jsonl)"
            )
    try:
        if format == "parquet":
            with output_path(out, force=force, protected=runs) as tmp:
                pq.write_table(table, tmp)
        elif format == "jsonl":
            rows = table.to_pylist()
            write_output(out, "".join(json.dumps(r, default=str) + "\n" for r in rows), force=force, protected=runs)
        else:
            with output_path(out, folder=True, protected=runs) as tmp:
                from datasets.utils.logging import disable_progress_bar

                disable_progress_bar()  # its bar prints three times on a pipe; the line below says what was written
                # 0 rows: one empty shard, else `load_from_disk` fails on a dataset without shards (datasets 5.2)
                Dataset(table).save_to_disk(str(tmp), num_shards=1 if table.num_rows == 0 else None)
    except OutputRefused as e:  # the path changed while the rows were written (e.g. a link planted there)
        fail(str(e))
    console.print(f"{out}\t{table.num_rows} rows", highlight=False)


def _export_model(db: Path, campaign: str, checkpoint: str, out: Path, round_index: int | None) -> None:
    from ratchet.flows.cli.reading.model_export import export_model
    from ratchet.loop.checkpoints import ModelError
    from ratchet.store.db import StoreError

    if round_index is not None:
        fail("--round does not apply to --what model; pass --checkpoint ID|promoted")
    try:
        cid, folder = export_model(db, campaign, checkpoint, out)
    except (StoreError, ValueError, LookupError, ModelError) as e:
        fail(str(e))
    console.print(f"{folder}\tcheckpoint {cid}", highlight=False, soft_wrap=True)  # one line, however long the path
