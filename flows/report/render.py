"""What a person reads about rounds: the metrics table, the held-out pass@1 plot, and ``ratchet report``.

The same rows feed the round's Prefect table artifact (``ratchet.flows.rounds.observe.closing.publish_round``) and the HTML page
``ratchet report`` writes; every number comes from a query in ``store.queries``. This module only
arranges and draws them.

Plots are PNG from matplotlib's Agg canvas (no display, no pyplot state). Prefect 3.9's UI renders
a markdown artifact's ``![...](data:image/png;base64,...)`` inline: checked with headless Chromium
on the artifact's page (the image loads at its full 800 px width; tests/e2e/test_ui_browser.py keeps
checking it), so the gate artifact embeds the plot and also names the PNG file on disk.
"""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import jinja2

from ratchet.common.files import atomic_write_bytes
from ratchet.common.output import check_output, write_output
from ratchet.flows.report.picks import histogram_text, selection_rows
from ratchet.flows.report.triage import report_flips_of_rounds
from ratchet.store.db import connect, require_store
from ratchet.store.events import events_of
from ratchet.store.read.costs import cost_per_point, round_costs
from ratchet.store.read.reports import base_pass1, campaign_phases, campaign_table, drift_history, pass1_history, report_campaigns
from ratchet.store.read.round_metrics import (
    gate_set_rows_of_rounds,
    heldout_completion_metrics_of_rounds,
    rollout_metrics_by_source_of_rounds,
    rollout_metrics_of_rounds,
    round_evaluations_of_rounds,
    round_phases,
    round_training_of_rounds,
    training_origins_of_rounds,
)
from ratchet.store.read.round_monitors import round_monitor_rows_of_rounds

PLOT_NAME = "heldout_pass1.png"
REPORT_FLIPS = 100  # flipped prompts listed per round (the rest: the gate_flips view)
DECISION_COLORS = {"promote": "#2ca02c", "reject": "#ff7f0e", "halt": "#d62728", "no_candidate": "#7f7f7f"}


class ReportError(ValueError):
    """The report cannot be made as asked (e.g. an unknown campaign); the message says what to pass instead."""


def _num(x: float | int | None) -> float | int | None:
    return round(x, 4) if isinstance(x, float) else x


def _reasons(h: dict | None) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted((h or {}).items(), key=lambda kv: (-kv[1], kv[0])))


def metrics_rows(con: duckdb.DuckDBPyConnection, round_id: str, verifier_version: str | None = None) -> list[dict]:
    """The round's metrics as ``{metric, scope, value}`` rows (names ``split/name``; the table artifact and the report).

    Held-out: every stored evaluation metric (pass@1, sampled pass@k, no-answer rate) of the
    incumbent and the candidate, and their completions' length P90 (tokens), format error rate,
    truncation rate and verdict reasons (per task source too: ``heldout/<source>/pass@1``). Rollouts, per task
    and overall: pass@1, pass@k (k = group size), reward mean, format error rate, truncation rate, length P90
    (tokens), verdict reasons; per task source (when several, or code) pass@1, reward mean and reasons.
    Training: KL to the reference (grpo only), every scalar training metric, and the examples per origin when
    not all are rollouts (reference solutions, general data). Under ``[[phases]]`` the first row names the phase.
    """
    return metrics_rows_of_rounds(con, [round_id], verifier_version)[round_id]


def round_queries(con: duckdb.DuckDBPyConnection, round_ids: list[str], verifier_version: str | None = None) -> dict:
    """The per-round report queries over trajectories and verdicts, each run once for all of ``round_ids``:
    ``{"phase" | "evaluations" | "heldout" | "rollouts" | "by_source" | "training" | "origins": {round_id: ...}}``
    (``ratchet.store.read.round_metrics``)."""
    return {
        "phase": round_phases(con, round_ids),
        "training": round_training_of_rounds(con, round_ids),
        "origins": training_origins_of_rounds(con, round_ids),
        "evaluations": round_evaluations_of_rounds(con, round_ids),
        "heldout": heldout_completion_metrics_of_rounds(con, round_ids, verifier_version),
        "rollouts": rollout_metrics_of_rounds(con, round_ids, verifier_version),
        "by_source": rollout_metrics_by_source_of_rounds(con, round_ids, verifier_version),
    }


def metrics_rows_of_rounds(
    con: duckdb.DuckDBPyConnection, round_ids: list[str], verifier_version: str | None = None, queries: dict | None = None
) -> dict[str, list[dict]]:
    """``metrics_rows`` of each of ``round_ids``: ``{round_id: rows}``; ``queries``: ``round_queries`` of (at least)
    these rounds, run here when None."""
    q = queries if queries is not None else round_queries(con, round_ids, verifier_version)
    return {round_id: _metrics_rows(round_id, q) for round_id in round_ids}


def _metrics_rows(round_id: str, q: dict) -> list[dict]:
    rows: list[dict] = []
    add = lambda metric, scope, value: rows.append({"metric": metric, "scope": scope, "value": _num(value)})  # noqa: E731
    if (phase := q["phase"][round_id]) is not None:
        add("round/phase", "[[phases]] entry", phase)
    for e in q["evaluations"][round_id]:
        add(e["metric"], f"{e['role']} {e['checkpoint_id'][:12]}", e["value"])
    for h in q["heldout"][round_id]:
        scope = f"{h['role']} {h['checkpoint_id'][:12]}"
        for name in ("completion_tokens_p90", "format_error_rate", "truncated_rate"):
            add(f"heldout/{name}", scope, h[name])
        add("heldout/reasons", scope, _reasons(h["reasons"]))
    for r in q["rollouts"][round_id]:
        scope = "rollouts, all tasks" if r["task"] == "all" else f"rollouts, task {r['task']}"
        add("rollout/pass@1", scope, r["pass_at_1"])
        add(f"rollout/pass@{r['k']}", scope, r["pass_at_k"])
        for name in ("reward_mean", "format_error_rate", "truncated_rate", "completion_tokens_p90"):
            add(f"rollout/{name}", scope, r[name])
        add("rollout/reasons", scope, _reasons(r["reasons"]))
    by_source = q["by_source"][round_id]
    if len(by_source) > 1 or any(r["task_format"] != "math" for r in by_source):  # per source when there is more than one
        for r in by_source:
            scope = f"rollouts, source {r['source']} ({r['task_format']}, verifier {r['verifier']})"
            add("rollout/pass@1", scope, r["pass_at_1"])
            add("rollout/reward_mean", scope, r["reward_mean"])
            add("rollout/reasons", scope, _reasons(r["reasons"]))
            if r["task_format"] == "records":  # a user's own verifier: how often it failed (not trained on)
                add("rollout/verifier_errors", scope, r["verifier_errors"])
    if (t := q["training"][round_id]) is not None:
        steps = f", last of {t['steps']} steps" if t["steps"] > 1 else ""
        scope = f"training ({t['algorithm']}, {t['num_examples']} examples{steps})"
        if t["kl_mean"] is not None:
            add("train/kl", scope, t["kl_mean"])
        for name, value in sorted((t["metrics"] or {}).items()):
            if name != "train/kl/mean" or t["kl_mean"] is None:
                add(name, scope, value)
        origins = q["origins"][round_id]
        if set(origins) - {"rollout"}:  # reference solutions or general data: say how many of each
            for origin, n in sorted(origins.items()):
                add("train/examples", f"{scope}, origin {origin}", n)
    return rows


def pass1_plot(con: duckdb.DuckDBPyConnection, campaign: str) -> bytes | None:
    """PNG (bytes) of a campaign's held-out pass@1 across rounds, or None when the campaign has no rounds yet.

    x: round index (0 = the base model); line: pass@1 of the checkpoint each round ends with;
    points: each round's candidate, coloured by the gate's decision; a round without a decision is a vertical line
    (dashed and labelled while it runs), never a point.
    """
    drawn = pass1_axes(con, campaign)
    return None if drawn is None else _png(*drawn)


def pass1_axes(con: duckdb.DuckDBPyConnection, campaign: str):
    """The pass@1 plot's matplotlib ``(Figure, Axes)`` before rendering (``pass1_plot``), or None without rounds."""
    from matplotlib.figure import Figure

    base = base_pass1(con, campaign)
    hist = pass1_history(con, campaign)
    if not hist:
        return None
    kept = ([(0, base)] if base is not None else []) + [
        (h["round_index"], h["kept_pass1"]) for h in hist if h["kept_pass1"] is not None
    ]
    fig = Figure(figsize=(8, 4), dpi=100)
    ax = fig.add_subplot()
    ax.step(
        [x for x, _ in kept], [y for _, y in kept], where="post", color="#1f77b4", marker="o", label="kept (incumbent after gate)"
    )
    for decision, color in DECISION_COLORS.items():
        pts = [
            (h["round_index"], h["candidate_pass1"])
            for h in hist
            if h["decision"] == decision and h["candidate_pass1"] is not None
        ]
        if pts:
            ax.scatter(
                [x for x, _ in pts], [y for _, y in pts], color=color, marker="D", zorder=3, label=f"candidate: {decision}"
            )
    # A round without a gate decision has no pass@1 to plot: a vertical line at its index says so (a mark at 0.0 read as
    # a pass@1 of 0; issue 42, finding 10), dashed while it runs.
    for running, style, label in (
        (True, "--", "running: no decision yet"),
        (False, ":", "no gate (failed, crashed, interrupted)"),
    ):
        xs = [h["round_index"] for h in hist if h["decision"] is None and (h["status"] == "running") == running]
        for i, x in enumerate(xs):
            ax.axvline(x, color="#7f7f7f", linestyle=style, linewidth=1.2, label=label if i == 0 else None)
            if running:
                ax.text(x, 0.5, f" round {x} running", rotation=90, va="center", color="#555555", fontsize=8)
    last = max(h["round_index"] for h in hist)
    ax.set(
        xlim=(-0.5, last + 0.5),
        ylim=(-0.03, 1.03),
        xlabel="round (0 = base)",
        ylabel="held-out pass@1 (greedy)",
        title=f"campaign {campaign}: held-out pass@1 across rounds",
    )
    if last <= 40:
        ax.set_xticks(range(0, last + 1))
    else:  # a tick per round of a year of nightly rounds is a black bar (and seconds of drawing)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig, ax


def drift_plot(con: duckdb.DuckDBPyConnection, campaign: str) -> bytes | None:
    """PNG (bytes) of the drift curve: each eval set's candidate pass@1 minus the base's, by round
    (``store.reports.drift_history``), the drift set's upper bound as triangles and ``-gate.max_drift`` as a dashed
    line; None when no round measured drift."""
    drawn = drift_axes(con, campaign)
    return None if drawn is None else _png(*drawn)


def drift_axes(con: duckdb.DuckDBPyConnection, campaign: str):
    """The drift plot's matplotlib ``(Figure, Axes)`` before rendering (``drift_plot``), or None without drift."""
    from matplotlib.figure import Figure

    hist = drift_history(con, campaign)
    if not hist:
        return None
    fig = Figure(figsize=(8, 3.5), dpi=100)
    ax = fig.add_subplot()
    for name in dict.fromkeys(h["eval_name"] for h in hist):
        pts = [(h["round_index"], h["change"]) for h in hist if h["eval_name"] == name]
        role = next(h["role"] for h in hist if h["eval_name"] == name)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"{name} ({role}): candidate - base")
    ubs = [(h["round_index"], h["drift_upper_bound"]) for h in hist if h["drift_upper_bound"] is not None]
    if ubs:
        ax.scatter(
            [x for x, _ in ubs], [y for _, y in ubs], marker="v", color="#d62728", zorder=3, label="upper bound (drift set)"
        )
    limit = next((h["max_drift"] for h in reversed(hist) if h["max_drift"] is not None), None)
    if limit is not None:
        ax.axhline(-limit, color="#d62728", linestyle="--", linewidth=1, label=f"-gate.max_drift ({limit:g})")
    ax.axhline(0.0, color="#7f7f7f", linewidth=0.8)
    # Axes that read in points: at least -0.1 .. +0.1 around the data, 0 and the limit (matplotlib's autoscale around a
    # single round's point read 0.96-1.04, issue 42, finding 10), whole rounds on x.
    ys = (
        [h["change"] for h in hist if h["change"] is not None]
        + [y for _, y in ubs]
        + [0.0]
        + ([-limit] if limit is not None else [])
    )
    lo, hi = min(ys) - 0.02, max(ys) + 0.02
    pad = max(0.0, 0.2 - (hi - lo)) / 2
    rounds = sorted({h["round_index"] for h in hist})
    ax.set(
        xlabel="round",
        ylabel="pass@1 change from the base",
        title=f"campaign {campaign}: drift from the base",
        ylim=(lo - pad, hi + pad),
        xlim=(rounds[0] - 0.5, rounds[-1] + 0.5),
    )
    ax.set_xticks(rounds)
    return fig, ax


def write_pass1_plot(con: duckdb.DuckDBPyConnection, campaign: str, path: str | Path) -> Path | None:
    """Write the pass@1 plot to ``path`` (atomically); returns the path, or None when there is nothing to plot."""
    png = pass1_plot(con, campaign)
    if png is None:
        return None
    return atomic_write_bytes(path, png)


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for inline embedding (markdown artifacts, the HTML report)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# --- ratchet report --------------------------------------------------------------------------------

_TEMPLATE = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Ratchet report: {{ db }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
 table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
 th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
 th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
 .promote { color: #2ca02c; font-weight: bold; } .reject { color: #ff7f0e; font-weight: bold; } .no_candidate { color: #7f7f7f; }
 .halt, .failed, .crashed, .interrupted { color: #d62728; font-weight: bold; } .empty { color: #666; font-style: italic; }
 pre { white-space: pre-wrap; margin: 0; max-width: 28em; font-size: 0.85em; }
 details { margin: 0.3em 0 1em; } summary { cursor: pointer; font-weight: 600; }
</style></head><body>
<h1>Ratchet report</h1>
<p>Store <code>{{ db }}</code>, written {{ generated }}.</p>
{% if not campaigns %}
<p class="empty">{{ empty_message }}</p>
{% endif %}
{% for c in campaigns %}
<h2>Campaign {{ c.name }}</h2>
<p>algorithm <b>{{ c.algorithm }}</b>, base checkpoint <code>{{ c.base_checkpoint_id }}</code>, created {{ c.created_at }},
 base held-out pass@1 {{ fmt(c.base_pass1) }}.</p>
{% if not c.rounds %}
<p class="empty">No rounds yet in campaign {{ c.name }}: run <code>ratchet run</code> (or wait for its schedule).</p>
{% else %}
{% if c.plot %}<img alt="held-out pass@1 across rounds of {{ c.name }}" src="{{ c.plot }}">{% endif %}
{% if c.drift_plot %}<img alt="drift from the base across rounds of {{ c.name }}" src="{{ c.drift_plot }}">{% endif %}
{% if c.events %}
<h3>Halts, pauses and resumes</h3>
<table><tr><th>when</th><th>action</th><th>after round</th><th>by</th><th>reason</th></tr>
{% for e in c.events %}<tr><td>{{ e.created_at }}</td><td class="{{ e.action }}">{{ e.action }}</td><td class="num">{{ e.after_round_index }}</td>
<td>{{ e.actor }}</td><td>{{ e.reason }}{% if e.changes %} (settings changed: {{ e.changes }}){% endif %}</td></tr>
{% endfor %}
</table>
{% endif %}
<h3>Rounds and gate decisions</h3>
<table><tr><th>round</th><th>phase</th><th>state</th><th>incumbent</th><th>candidate</th><th>incumbent pass@1</th><th>candidate pass@1</th>
<th>confirmed pass@1</th><th>&Delta;</th><th>&Delta; lower bound</th><th>rollouts</th><th>verified correct</th><th>trained on</th><th>decision</th><th>reason</th></tr>
{% for r in c.rounds %}
<tr><td class="num">{{ r.round_index }}</td><td>{{ r.stage or '—' }}</td><td class="{{ r.status }}">{{ r.status }}</td>
<td><code>{{ (r.incumbent_checkpoint_id or '')[:12] }}</code></td><td><code>{{ (r.candidate_checkpoint_id or '—')[:12] }}</code></td>
<td class="num">{{ fmt(r.incumbent_pass1) }}</td><td class="num">{{ fmt(r.candidate_pass1) }}</td>
<td class="num">{{ fmt(r.get('confirmed_pass1')) }}</td><td class="num">{{ fmt(r.delta, '+.3f') }}</td><td class="num">{{ fmt(r.get('lower_bound'), '+.3f') }}</td>
<td class="num">{{ r.rollouts }}</td><td class="num">{{ r.verified_correct }}</td><td class="num">{{ r.training_examples }}</td>
<td class="{{ r.decision or '' }}">{{ r.decision or 'no gate decision' }}</td><td>{{ r.reason or '' }}</td></tr>
{% endfor %}
</table>
{% if c.costs %}
<h3>Cost per promoted point</h3>
<p>{{ '{:,.0f}'.format(c.cost.tokens) }} tokens generated, {{ fmt(c.cost.compute_s / 60, '.1f') }} compute min, {{ fmt(c.cost.wall_s / 60, '.1f') }} wall min
 over {{ c.cost.rounds }} rounds; {{ fmt(c.cost.promoted_points, '+.1f') }} points of promoted pass@1{% if c.cost.tokens_per_point is not none %}:
 {{ '{:,.0f}'.format(c.cost.tokens_per_point) }} tokens, {{ fmt(c.cost.compute_s_per_point / 60, '.1f') }} compute min and
 {{ fmt(c.cost.wall_s_per_point / 60, '.1f') }} wall min per point{% else %} (no promoted gain yet){% endif %}.</p>
<table><tr><th>round</th><th>tokens</th><th>compute s</th><th>wall s</th><th>decision</th><th>promoted points</th></tr>
{% for r in c.costs %}<tr><td class="num">{{ r.round_index }}</td><td class="num">{{ r.tokens }}</td><td class="num">{{ fmt(r.compute_s, '.0f') }}</td>
<td class="num">{{ fmt(r.wall_s, '.0f') }}</td><td>{{ r.decision or '—' }}</td><td class="num">{{ fmt(r.promoted_points, '+.1f') }}</td></tr>
{% endfor %}</table>
{% endif %}
{% if c.selection %}
<h3>Prompt selection and zero-variance groups</h3>
<p>Groups whose G rewards are all equal teach GRPO nothing (no advantage) and RFT nothing new; tasks.selection = frontier
 picks prompts whose estimated pass rate is neither ~0 nor ~1 (docs/selection.md).</p>
<table><tr><th>round</th><th>selection</th><th>groups</th><th>zero-variance groups</th><th>rollout tokens</th>
<th>tokens on zero-variance groups</th><th>refilled</th><th>picked prompts by estimated pass rate</th></tr>
{% for r in c.selection %}<tr><td class="num">{{ r.round_index }}</td><td>{{ r.selection or '—' }}</td><td class="num">{{ r.groups }}</td>
<td class="num">{{ r.zero_variance_groups }} ({{ fmt(r.zero_variance_share, '.0%') }})</td><td class="num">{{ r.tokens }}</td>
<td class="num">{{ r.zero_variance_tokens }} ({{ fmt(r.zero_variance_token_share, '.0%') }})</td><td class="num">{{ r.refilled if r.refilled is not none else '—' }}</td>
<td>{{ hist(r.pass_rate_histogram) }}</td></tr>
{% endfor %}
</table>
{% endif %}
{% if c.detailed|length < c.rounds|length %}
<p>Details of the last {{ c.detailed|length }} of {{ c.rounds|length }} rounds (<code>ratchet report --last 0</code>: every round).</p>
{% endif %}
{% for r in c.detailed %}
<details {% if loop.last %}open{% endif %}><summary>Round {{ r.round_index }} ({% if r.stage %}phase {{ r.stage }}, {% endif %}{{ r.status }}{% if r.decision %}, {{ r.decision }}{% endif %}):
 metrics and verifier reasons</summary>
{% if r.gate_sets|length > 1 %}
<table><tr><th>eval set</th><th>role</th><th>prompts</th><th>incumbent pass@1</th><th>candidate pass@1</th><th>confirmed pass@1</th>
<th>&Delta; lower bound</th><th>vs best promoted</th><th>passed</th><th>reason</th></tr>
{% for g in r.gate_sets %}<tr><td>{{ g.eval_name }}</td><td>{{ g.role }}</td><td class="num">{{ g.num_prompts }}</td>
<td class="num">{{ fmt(g.incumbent_pass1) }}</td><td class="num">{{ fmt(g.candidate_pass1) }}</td>
<td class="num">{{ fmt(g.get('confirmed_pass1')) }}</td>
<td class="num">{{ fmt(g.lower_bound, '+.3f') }}</td><td class="num">{{ fmt(g.best_lower_bound, '+.3f') }}</td>
<td>{{ 'yes' if g.passed else 'no' }}</td><td>{{ g.reason }}</td></tr>
{% endfor %}</table>
{% endif %}
{% if r.flips %}
<p>Prompts that flipped between incumbent and candidate ({{ r.flips|selectattr('incumbent_correct')|list|length }} right &rarr; wrong,
 {{ r.flips|rejectattr('incumbent_correct')|list|length }} wrong &rarr; right{% if r.flips|length >= flips_shown %}; the first {{ flips_shown }}, all in the view gate_flips{% endif %}):</p>
<table><tr><th>eval set</th><th>prompt</th><th>flip</th><th>question</th><th>gold</th><th>incumbent completion</th><th>incumbent verdict</th>
<th>candidate completion</th><th>candidate verdict</th></tr>
{% for f in r.flips %}<tr><td>{{ f.eval_name }}</td><td><code>{{ f.prompt_id[:12] }}</code></td><td>{{ f.flip }}</td><td>{{ f.question_shown }}</td>
<td>{{ f.gold }}</td><td><pre>{{ f.incumbent_completion_shown }}</pre></td><td>{{ f.incumbent_verdict }}</td>
<td><pre>{{ f.candidate_completion_shown }}</pre></td><td>{{ f.candidate_verdict }}</td></tr>
{% endfor %}</table>
{% endif %}
{% if r.monitors %}
<table><tr><th>monitor</th><th>candidate</th><th>reference</th><th>value</th><th>threshold</th><th>tripped</th></tr>
{% for m in r.monitors %}<tr><td>{{ m.monitor }}</td><td class="num">{{ fmt(m.candidate_value) }}</td>
<td class="num">{{ fmt(m.reference_value) }} ({{ m.reference }})</td><td class="num">{{ fmt(m.value) }}</td>
<td class="num">{{ fmt(m.threshold) }}</td><td class="{{ 'halt' if m.tripped else '' }}">{{ 'yes' if m.tripped else 'no' }}</td></tr>
{% endfor %}</table>
{% endif %}
{% if r.verifier %}
<table><tr><th>task</th><th>prompts</th><th>rollouts</th><th>pass@1</th><th>pass@k</th><th>k</th><th>reward mean</th>
<th>format errors</th><th>truncated</th><th>length P90 (tokens)</th><th>verdict reasons</th></tr>
{% for v in r.verifier %}
<tr><td>{{ v.task }}</td><td class="num">{{ v.prompts }}</td><td class="num">{{ v.rollouts }}</td><td class="num">{{ fmt(v.pass_at_1) }}</td>
<td class="num">{{ fmt(v.pass_at_k) }}</td><td class="num">{{ v.k }}</td><td class="num">{{ fmt(v.reward_mean) }}</td>
<td class="num">{{ fmt(v.format_error_rate) }}</td><td class="num">{{ fmt(v.truncated_rate) }}</td>
<td class="num">{{ fmt(v.completion_tokens_p90, '.1f') }}</td><td>{{ v.reasons_text }}</td></tr>
{% endfor %}
</table>
{% endif %}
{% if r.metrics %}
<table><tr><th>metric</th><th>scope</th><th>value</th></tr>
{% for m in r.metrics %}<tr><td>{{ m.metric }}</td><td>{{ m.scope }}</td><td class="num">{{ m.value if m.value is not none else '—' }}</td></tr>
{% endfor %}
</table>
{% else %}<p class="empty">No metrics stored for this round (it stopped before verifying its rollouts).</p>{% endif %}
</details>
{% endfor %}
{% endif %}
{% endfor %}
</body></html>
""")


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


# Rounds whose details (verifier reasons, metrics, gate sets, flips, monitors) a report shows by default: each
# costs a few queries over the store's trajectories, so a year of nightly rounds would take minutes (issue 41).
REPORT_DETAIL_ROUNDS = 30


def campaign_report(con: duckdb.DuckDBPyConnection, campaign: dict, last: int = REPORT_DETAIL_ROUNDS) -> dict:
    """Everything the page shows about one campaign (a row of ``report_campaigns``): every round in the rounds
    table and the plots, the details of the ``last`` rounds (0: of every round)."""
    base, rounds = campaign_table(con, campaign["name"])
    detailed = rounds[-last:] if last else rounds
    ids = [r["round_id"] for r in detailed]
    q = round_queries(con, ids)  # each once for all detailed rounds
    metrics, flips = metrics_rows_of_rounds(con, ids, queries=q), report_flips_of_rounds(con, ids, REPORT_FLIPS)
    gate_sets, monitors = gate_set_rows_of_rounds(con, ids), round_monitor_rows_of_rounds(con, ids)
    for r in detailed:
        rid = r["round_id"]
        r["verifier"] = [{**v, "reasons_text": _reasons(v["reasons"])} for v in q["rollouts"][rid]]
        r["metrics"], r["gate_sets"], r["flips"], r["monitors"] = metrics[rid], gate_sets[rid], flips[rid], monitors[rid]
    png = pass1_plot(con, campaign["name"]) if rounds else None
    events = events_of(con, campaign["name"])
    phases = " -> ".join(f"{s['name']} ({s['algorithm']}, {s['rounds']} rounds)" for s in campaign_phases(con, campaign["name"]))
    drift = drift_plot(con, campaign["name"]) if rounds else None
    page = {**campaign, "base_pass1": base, "rounds": rounds, "plot": data_uri(png) if png else None, "events": events}
    page["detailed"] = detailed
    page["drift_plot"] = data_uri(drift) if drift else None
    page["selection"] = selection_rows(con, campaign["name"]) if rounds else []
    page["costs"] = round_costs(con, campaign["name"]) if rounds else []
    page["cost"] = cost_per_point(page["costs"])
    return page | ({"algorithm": f"in phases: {phases}"} if phases else {})


def report_pages(db: str | Path, campaign: str | None = None, last: int = REPORT_DETAIL_ROUNDS) -> list[dict]:
    """``campaign_report`` of every campaign in the store (oldest first), or only of ``campaign``; ``last``: as there.

    Raises:
        StoreError: the store cannot be opened (see ``store.db.connect``).
        ReportError: ``campaign`` is not in the store (the message lists the names that are).
    """
    with connect(db, read_only=True) as con:
        require_store(con, db)
        campaigns = report_campaigns(con, campaign)
        if campaign is not None and not campaigns:
            names = [c["name"] for c in report_campaigns(con)]
            raise ReportError(
                f"campaign {campaign!r} is not in {db}; campaigns there: {', '.join(names) or 'none'} "
                "(pass one of them to --campaign, or leave --campaign out)"
            )
        return [campaign_report(con, c, last) for c in campaigns]


def render_report(db: str | Path, pages: list[dict]) -> str:
    """One self-contained HTML page (plots inline as base64 PNG) from ``report_pages``."""
    return _TEMPLATE.render(
        db=str(db),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        campaigns=pages,
        fmt=_fmt,
        hist=histogram_text,
        flips_shown=REPORT_FLIPS,
        empty_message=f"No campaigns in {db} yet: run `ratchet demo --db {db}` or `ratchet run`.",
    )


def write_report(
    db: str | Path, out: str | Path, campaign: str | None = None, *, force: bool = False, last: int = REPORT_DETAIL_ROUNDS
) -> dict:
    """Write the HTML report of the store (or of one campaign) to ``out``, atomically (``ratchet.common.output``);
    ``last``: the rounds shown in detail (0: every round).

    Returns:
        ``{"path", "campaigns", "rounds"}``: where it went and how many campaigns and rounds it shows.
    Raises:
        OutputRefused: ``out`` is inside a store, a run dir, a checkpoint or ``$RATCHET_HOME``, or exists (without
            ``force``), checked before the store is read; StoreError, ReportError: as ``report_pages``;
        OSError: ``out`` cannot be written.
    """
    runs = [Path(db).with_suffix(".runs")]  # the store's default run dir
    check_output(out, force=force, protected=runs)
    pages = report_pages(db, campaign, last)
    write_output(out, render_report(db, pages), force=force, protected=runs)
    return {"path": str(out), "campaigns": len(pages), "rounds": sum(len(p["rounds"]) for p in pages)}


def _png(fig, ax) -> bytes:
    """A finished plot's PNG bytes: grid, legend, tight layout (matplotlib ``Figure``/``Axes``)."""
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
