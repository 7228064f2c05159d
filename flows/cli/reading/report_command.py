"""``ratchet report``: one self-contained HTML page of a store's campaigns."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import DB_HELP, console, fail


def report(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    campaign: Optional[str] = typer.Option(None, "--campaign", help="Only this campaign (default: every campaign)."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace --out if it exists (never a path inside a store, a run dir, a checkpoint or $RATCHET_HOME).",
    ),
    last: int = typer.Option(
        30, "--last", min=0, help="Rounds of each campaign shown in detail (metrics, verifier reasons, flips); 0: every round."
    ),
) -> None:
    """Write one self-contained HTML page: pass@1 plots, rounds, gate decisions, metrics, verifier reasons."""
    from ratchet.common.output import OutputRefused
    from ratchet.flows.report.render import ReportError, write_report
    from ratchet.store.db import StoreError

    try:
        with console.status("querying the store and drawing plots…"):
            res = write_report(db, out, campaign, force=force, last=last)
    except (StoreError, ReportError, OutputRefused) as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write {out} ({e.strerror}); pass a writable --out PATH")
    if res["campaigns"] == 0:
        console.print(f"no campaigns in {db} yet; wrote {res['path']} saying so", highlight=False, soft_wrap=True)
    else:
        console.print(
            f"wrote {res['path']}: {res['campaigns']} campaign(s), {res['rounds']} round(s)", highlight=False, soft_wrap=True
        )
