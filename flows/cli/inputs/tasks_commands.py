"""``ratchet tasks check``: a task file through the campaign's loader and the verifier, every failing record reported."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import cell, console, fail, plain_table

tasks_app = typer.Typer(no_args_is_help=True, help="Task files: check them before a campaign.")


@tasks_app.command("check")
def tasks_check(
    file: Path = typer.Argument(..., help="Task file (.jsonl, .jsonl.gz, .parquet or a save_to_disk folder)."),
    format: Optional[str] = typer.Option(
        None,
        "--format",
        help="Task format: math | humaneval | mbpp | stdio | records (default: detected from the fields; records with "
        "--verifier). 'table' or 'json' here "
        "choose the output, as --output does (older spelling).",
    ),
    task_format: Optional[str] = typer.Option(None, "--task-format", help="Same as --format math|humaneval|mbpp|stdio."),
    split: Optional[str] = typer.Option(None, "--split", help="Split of a save_to_disk DatasetDict folder (e.g. 'test')."),
    question_field: Optional[str] = typer.Option(None, "--question-field", help="Field holding the question/statement."),
    answer_field: Optional[str] = typer.Option(None, "--answer-field", help="Field holding the gold answer (math)."),
    tests_field: Optional[str] = typer.Option(None, "--tests-field", help="Field holding the tests."),
    entry_point_field: Optional[str] = typer.Option(None, "--entry-point-field", help="Field naming the function under test."),
    solution_field: Optional[str] = typer.Option(None, "--solution-field", help="Field holding a reference solution."),
    solutions: Optional[Path] = typer.Option(
        None, "--solutions", help='Samples JSONL ({"task_id": ..., "completion": ...}) to score instead of the references.'
    ),
    timeout_s: float = typer.Option(20.0, "--timeout-s", min=0.1, help="Limit per sandboxed run, seconds."),
    output: str = typer.Option("table", "--output", help="table | json (one line per task that did not pass, then the summary)"),
    max_records: Optional[int] = typer.Option(
        None, "--max-records", min=1, help="Records one task file may hold (default 1,000,000; env RATCHET_MAX_TASK_RECORDS)."
    ),
    verifier: Optional[str] = typer.Option(
        None,
        "--verifier",
        help="A records file's verifier: 'package.module:function' (imported from the current folder first) or an entry "
        "point of ratchet.verifiers (e.g. math); run on each record's reference.",
    ),
    sandbox: bool = typer.Option(False, "--sandbox", help="Run --verifier inside the kernel sandbox, as sandbox = true does."),
) -> None:
    """Load a task file as a campaign would and run every reference solution (or sample) through the verifier.

    Exits 1 when any task failed or could not be loaded (a records file: only when a record could not be loaded or its
    verifier failed on it; a record without a reference is only loaded), 0 otherwise, 2 when the file or the verifier
    cannot be read."""
    from ratchet.loop.config import RecordFields
    from ratchet.loop.tasks.check import check_task_file
    from ratchet.loop.tasks.formats import FORMATS, TaskDataError
    from ratchet.verifiers.plugins import PluginError

    if max_records is not None:  # the bound every reader of this process applies (ratchet.loop.tasks.readers)
        import os

        from ratchet.loop.tasks.readers import RECORDS_ENV

        os.environ[RECORDS_ENV] = str(max_records)
    if format in ("table", "json"):
        output, format = format, None
    task_format = task_format or format
    if output not in ("table", "json"):
        fail(f"--output {output!r} is not one of table, json")
    if task_format is not None and task_format not in FORMATS:
        fail(f"--format {task_format!r} is not one of {', '.join(FORMATS)} (or table, json for the output)")
    fields = RecordFields(
        path=str(file),
        split=split,
        question_field=question_field,
        answer_field=answer_field,
        tests_field=tests_field,
        entry_point_field=entry_point_field,
        solution_field=solution_field,
    )
    try:
        with console.status(f"verifying the tasks of {file}…"):
            results, summary = check_task_file(
                file, task_format=task_format, samples=solutions, timeout_s=timeout_s, fields=fields,
                verifier=verifier, plugin_dir=Path.cwd() if verifier else None, sandbox=sandbox,
            )  # fmt: skip
    except (TaskDataError, PluginError) as e:
        fail(_cli_hint(str(e)))
    results = [dataclasses.replace(r, detail=_cli_hint(r.detail)) for r in results]
    summary["groups"] = [{**g, "detail": _cli_hint(g["detail"])} for g in summary["groups"]]
    bad = [r for r in results if r.status not in ("passed", "loaded")]
    if output == "json":
        for r in bad:
            print(json.dumps({"task_id": r.task_id, "status": r.status, "detail": r.detail}))
        print(json.dumps(summary))
    else:
        t = plain_table("tasks", "status", "why", title=f"{file}: tasks that did not pass")
        for g in summary["groups"]:
            ids = ", ".join(g["task_ids"]) + (
                f" (+{g['count'] - len(g['task_ids'])} more)" if g["count"] > len(g["task_ids"]) else ""
            )
            t.add_row(*map(cell, [f"{g['count']}: {ids}", g["status"], g["detail"][:300]]))
        if bad:
            console.print(t)
        loaded = f", {summary['loaded']} loaded only (no reference)" if summary["loaded"] else ""
        console.print(
            f"{summary['passed']}/{summary['total']} passed, {summary['failed']} failed, {summary['errors']} errors"
            f"{loaded}; pass@1 {summary['pass_at_1']:.3f}",
            highlight=False,
            markup=False,
        )
    records = verifier is not None or task_format == "records"
    if summary["errors"] if records else bad:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``tasks`` to the main CLI."""
    app.add_typer(tasks_app, name="tasks")


def _cli_hint(text: str) -> str:
    """A loader message's config-key fix (``or set question_field``) as this command's flag (``or pass
    --question-field``): `ratchet tasks check` is told fields on its command line."""
    return re.sub(r"\(or set (\w+)_field\)", lambda m: f"(or pass --{m.group(1).replace('_', '-')}-field)", text)
