"""Per round of a campaign: how much of its generation taught nothing (zero-variance groups) and what it picked.

For ``ratchet status`` and the HTML report: the share of the round's groups (prompt x step) whose G rewards were
all equal, the completion tokens spent on them, refills, and the histogram of the picked prompts' estimated pass
rates (``round_prompts.estimate``, ``tasks.selection``).
"""

from __future__ import annotations

from ratchet.loop.evaluation.scoring import config_version
from ratchet.loop.tasks.picking import histogram
from ratchet.store.prompt_history import round_selection
from ratchet.store.queries import campaign_by_name

BINS = 5  # pass-rate bins of width 0.2


def selection_rows(con, campaign: str) -> list[dict]:
    """``round_selection`` rows of ``campaign`` with ``zero_variance_share`` (of groups), ``zero_variance_token_share``
    (of rollout tokens) and ``pass_rate_histogram`` (counts of picked prompts' estimates in 5 bins of 0.2; empty for
    a round recorded before ``round_prompts``)."""
    stored = campaign_by_name(con, campaign)  # by name: after `ratchet run --reset` the name's id is another
    if stored is None:
        return []
    out = []
    for r in round_selection(con, stored["campaign_id"], config_version(stored["config"])):
        share = r["zero_variance_groups"] / r["groups"] if r["groups"] else None
        tshare = r["zero_variance_tokens"] / r["tokens"] if r["tokens"] else None
        hist = histogram(r["estimates"], BINS) if r["estimates"] else []
        out.append({**r, "zero_variance_share": share, "zero_variance_token_share": tshare, "pass_rate_histogram": hist})
    return out


def histogram_text(counts: list[int]) -> str:
    """``0-.2:3 .2-.4:5 ...`` (empty: ``—``)."""
    if not counts:
        return "—"
    edges = [f"{i / len(counts):.1f}".lstrip("0") for i in range(len(counts) + 1)]
    edges[0] = "0"
    edges[-1] = "1"
    return " ".join(f"{edges[i]}-{edges[i + 1]}:{c}" for i, c in enumerate(counts))


def selection_line(r: dict) -> str:
    """One line of a round's selection for ``ratchet status``."""
    share = "—" if r["zero_variance_share"] is None else f"{r['zero_variance_share']:.0%}"
    refill = f", refilled {r['refilled']}" if r.get("refilled") else ""
    return (
        f"round {r['round_index']} ({r['selection'] or 'uniform'}): zero-variance groups {r['zero_variance_groups']}/"
        f"{r['groups']} ({share}), {r['zero_variance_tokens']} of {r['tokens']} rollout tokens{refill}; "
        f"picked pass-rate estimates {histogram_text(r['pass_rate_histogram'])}"
    )
