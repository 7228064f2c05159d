"""A sweep's comparison: one row per grid point from the store, written as CSV, JSON, markdown and a PNG plot.

The plot has three panels (held-out pass@1 of the kept checkpoint, mean KL to the reference, mean
rollout reward); x is the first grid key's values, one line per combination of the other keys.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ratchet.common.files import atomic_write_bytes, atomic_write_text
from ratchet.store.db import connect
from ratchet.store.read.reports import sweep_summary

METRICS = (
    ("final_pass1", "held-out pass@1 (kept)"),
    ("kl_mean", "KL to reference (mean)"),
    ("reward_mean", "rollout reward (mean)"),
)
COLUMNS = (
    "campaign",
    "status",
    "rounds_done",
    "promotions",
    "base_pass1",
    "final_pass1",
    "best_candidate_pass1",
    "kl_mean",
    "reward_mean",
)


def comparison_rows(db: str | Path, points: Sequence[dict[str, Any]], names: Sequence[str], status: Sequence[str]) -> list[dict]:
    """One row per grid point: its grid values, ``status`` (``completed`` or the failure), and ``sweep_summary``'s metrics.

    Raises:
        StoreError: the store cannot be opened.
    """
    with connect(db, read_only=True) as con:
        found = {r["campaign"]: r for r in sweep_summary(con, list(names))}
    rows = []
    for point, name, st in zip(points, names, status):
        metrics = found.get(name, {})
        rows.append({**point, **{c: metrics.get(c) for c in COLUMNS}, "campaign": name, "status": st})
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    return format(v, ".4g") if isinstance(v, float) else str(v)


def markdown(rows: Sequence[dict], keys: Sequence[str]) -> str:
    """The comparison as a markdown table (grid keys first, then the metrics)."""
    cols = [*keys, *COLUMNS]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict], keys: Sequence[str]) -> bytes:
    """PNG (bytes): one panel per metric, x = the first key's values, one line per value of the other keys."""
    from matplotlib.figure import Figure

    first, rest = keys[0], list(keys[1:])
    xs = list(dict.fromkeys(r[first] for r in rows))
    fig = Figure(figsize=(4.2 * len(METRICS), 3.4), dpi=100)
    for i, (metric, title) in enumerate(METRICS):
        ax = fig.add_subplot(1, len(METRICS), i + 1)
        for combo in dict.fromkeys(tuple(r[k] for k in rest) for r in rows):
            pts = [
                (xs.index(r[first]), r[metric]) for r in rows if tuple(r[k] for k in rest) == combo and r.get(metric) is not None
            ]
            label = ", ".join(f"{k}={v}" for k, v in zip(rest, combo)) or None
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        ax.set_xlabel(first)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if rest and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_comparison(rows: Sequence[dict], keys: Sequence[str], out_dir: str | Path) -> dict[str, Path]:
    """Write ``sweep.csv``, ``sweep.json``, ``sweep.md`` and ``sweep.png`` under ``out_dir`` (atomically); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cols = [*keys, *COLUMNS]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    paths = {"csv": out / "sweep.csv", "json": out / "sweep.json", "md": out / "sweep.md", "png": out / "sweep.png"}
    atomic_write_text(paths["csv"], buf.getvalue())
    atomic_write_text(paths["json"], json.dumps({"grid": list(keys), "points": list(rows)}, indent=1, default=str))
    atomic_write_text(paths["md"], markdown(rows, keys))
    atomic_write_bytes(paths["png"], plot(rows, keys))
    return paths
