"""``ratchet sql``: one read-only query of the store, printed as a table, CSV, JSON or DuckDB's line mode."""

from __future__ import annotations

import csv
import datetime
import io
import json
from pathlib import Path

import typer

from ratchet.flows.cli.common import DB_HELP, PlainConsole, cell, console, fail, plain_table, safe


def sql(
    query_text: str = typer.Argument(..., metavar="QUERY", help="One read-only SQL query (SELECT, WITH, DESCRIBE, SHOW, ...)."),
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    format: str = typer.Option(
        "table", "--format", help="table | csv | json | line (one 'column = value' per line, rows apart: for wide results)"
    ),
    timeout_s: float = typer.Option(
        60.0, "--timeout-s", min=0.1, help="Stop the query after this many seconds (it reads snapshots and takes no lock)."
    ),
) -> None:
    """Query the trajectory store, read-only: no file access, no ATTACH/INSTALL/SET, one statement. Safe while a round writes."""
    import duckdb

    from ratchet.store.db import StoreError, query

    if format not in SQL_FORMATS:
        fail(f"--format {format!r} is not one of {', '.join(SQL_FORMATS)}")
    try:
        cols, rows = query(db, query_text, timeout_s=timeout_s)
    except StoreError as e:
        fail(str(e))
    except duckdb.Error as e:  # DuckDB's whole message: its "Did you mean" hint and the caret under the error's place
        fail(f"{type(e).__name__}: {str(e).strip() or 'no message'}")
    print(render_rows(cols, rows, format), end="")


def _csv_value(v):
    """A CSV field: nested values (DuckDB LIST, STRUCT, MAP) as JSON text, never Python's repr."""
    return json.dumps(v, default=str) if isinstance(v, (dict, list, tuple)) else v


SQL_FORMATS = ("table", "csv", "json", "line")


def _shown(v):
    """A value as the table and line formats show it: a timestamp to the second (csv and json keep every digit)."""
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ", timespec="seconds")
    return v


def render_rows(cols: list[str], rows: list[tuple], fmt: str) -> str:
    """``rows`` as ``fmt``: json (a list of objects), csv (nested values as JSON), line (DuckDB's ``.mode line``: one
    ``column = value`` per line, names right-aligned, a blank line between rows) or a plain table."""
    if fmt == "json":
        return json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")  # LF, as shells and other Unix tools read lines (RFC 4180 says CRLF)
        w.writerow(cols)
        w.writerows([_csv_value(v) for v in r] for r in rows)
        return buf.getvalue()
    if fmt == "line":
        width = max((len(c) for c in cols), default=0)
        out = [
            "\n".join(f"{c:>{width}} = {'NULL' if v is None else safe(_csv_value(_shown(v)))}" for c, v in zip(cols, r)) + "\n"
            for r in rows
        ]
        return "\n".join(out) + f"{'' if not rows else chr(10)}{len(rows)} row(s)\n"
    t = plain_table(*cols)
    for r in rows:
        t.add_row(*(cell(_shown(v)) for v in r))
    buf = PlainConsole(file=io.StringIO(), width=max(100, console.width), force_terminal=False)
    buf.print(t)
    # rich cuts cells to fit the width: then say where the whole values are (a cell's widest line, 3 per border/pad)
    widest = [max([len(c), *(max(map(len, str(r[k]).splitlines() or [""])) for r in rows)]) for k, c in enumerate(cols)]
    squeezed = 1 + sum(3 + w for w in widest) > buf.width
    hint = (
        f"; {len(cols)} columns do not fit in {buf.width} characters: --format line shows every value whole" if squeezed else ""
    )
    buf.print(f"{len(rows)} row(s){hint}", highlight=False, soft_wrap=True)
    return buf.file.getvalue()
