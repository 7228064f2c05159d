"""Triage of a gate decision for people: the prompts that flipped between incumbent and candidate (right -> wrong,
wrong -> right) with both completions and verdicts, and the round's reward-hacking monitors, as markdown for the
round's gate artifact; ``ratchet report`` shows the same rows (``ratchet.store.read.flips.round_flips``,
``ratchet.store.read.round_monitors``) in its HTML page."""

from __future__ import annotations

import duckdb

from ratchet.store.read.flips import flip_counts, round_flips, round_flips_of_rounds
from ratchet.store.read.round_monitors import round_monitor_rows

FLIPS_SHOWN = 20  # rows of the gate artifact's flips table; the full list is `SELECT * FROM gate_flips`
TEXT_CHARS = 300  # characters of a completion or question shown in a cell


def clip(text: str | None, chars: int = TEXT_CHARS) -> str:
    """``text`` cut to ``chars`` characters (an ellipsis marks the cut); '' for None."""
    if text is None:
        return ""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _cell(text: str | None) -> str:
    """One markdown table cell: clipped, pipes escaped, line breaks shown as ⏎."""
    return clip(text).replace("|", "\\|").replace("\r", "").replace("\n", " ⏎ ")


def _verdict(r: dict, side: str) -> str:
    ok = "correct" if r[f"{side}_correct"] else "wrong"
    parsed = r[f"{side}_parsed"]
    truncated = ", truncated" if r[f"{side}_finish_reason"] == "length" else ""
    return (
        f"{ok} ({r[f'{side}_reason']}{truncated}; parsed {parsed!r})"
        if parsed is not None
        else f"{ok} ({r[f'{side}_reason']}{truncated})"
    )


def _shown(rows: list[dict]) -> list[dict]:
    for r in rows:
        r["incumbent_verdict"], r["candidate_verdict"] = _verdict(r, "incumbent"), _verdict(r, "candidate")
        for k in ("question", "incumbent_completion", "candidate_completion"):
            r[f"{k}_shown"] = clip(r[k])
    return rows


def report_flips(con: duckdb.DuckDBPyConnection, round_id: str, limit: int | None = None) -> list[dict]:
    """``round_flips`` rows with ``incumbent_verdict`` / ``candidate_verdict`` texts and clipped texts, for a page."""
    return _shown(round_flips(con, round_id, limit))


def report_flips_of_rounds(
    con: duckdb.DuckDBPyConnection, round_ids: list[str], limit: int | None = None
) -> dict[str, list[dict]]:
    """``report_flips`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    return {rid: _shown(rows) for rid, rows in round_flips_of_rounds(con, round_ids, limit).items()}


def flips_markdown(con: duckdb.DuckDBPyConnection, round_id: str, limit: int = FLIPS_SHOWN) -> str:
    """The gate artifact's flips section: counts, then up to ``limit`` flipped prompts (right -> wrong first) with
    question, gold, and each side's completion and verdict. '' when the round has no flips to show."""
    n = flip_counts(con, round_id)
    if not (n["right_to_wrong"] or n["wrong_to_right"]):
        return ""
    rows = report_flips(con, round_id, limit)
    lines = [
        f"### Prompts that flipped: {n['right_to_wrong']} right → wrong, {n['wrong_to_right']} wrong → right\n",
        "| eval set | prompt | flip | question | gold | incumbent completion | incumbent verdict | candidate completion "
        "| candidate verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_cell(r['eval_name'])} | `{r['prompt_id'][:12]}` | {r['flip']} | {_cell(r['question'])} | {_cell(r['gold'])} "
            f"| {_cell(r['incumbent_completion'])} | {_cell(r['incumbent_verdict'])} | {_cell(r['candidate_completion'])} "
            f"| {_cell(r['candidate_verdict'])} |"
        )
    total = n["right_to_wrong"] + n["wrong_to_right"]
    more = f"\n{total - len(rows)} more: " if total > len(rows) else "\nAll of them in SQL: "
    lines.append(f"{more}`ratchet sql \"SELECT * FROM gate_flips WHERE round_id = '{round_id}'\"`\n\n")
    return "\n".join(lines)


def monitors_markdown(con: duckdb.DuckDBPyConnection, round_id: str) -> str:
    """The gate artifact's monitors table (``round_monitors``): value, threshold, tripped; '' when none were measured."""
    rows = round_monitor_rows(con, round_id)
    if not rows:
        return ""
    fmt = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["### Monitors\n", "| monitor | candidate | reference | value | threshold | tripped |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['monitor']} | {fmt(r['candidate_value'])} | {fmt(r['reference_value'])} ({r['reference']}) "
            f"| {fmt(r['value'])} | {fmt(r['threshold'])} | {'**yes**' if r['tripped'] else 'no'} |"
        )
    return "\n".join(lines) + "\n\n"
