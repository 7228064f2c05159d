"""``ratchet init --tasks``: a first campaign config for a person's own task files.

Each file is read with the campaign's loader (``FileTasks``: a file that loads here loads in ``ratchet run``) and
becomes one ``[[tasks.sources]]`` entry with its detected format (the field mapping guessed from common names such
as MetaMathQA's ``query``/``response``), that format's system prompt and worked few-shot examples drawn from the
file's train split. Math examples keep their reasoning (GSM8K's ``<<...>>`` calculator annotations removed) and end in
the ``Answer: N`` line the prompt asks for, written to a JSONL beside the config (``fewshot_path``). Generation
lengths are ``"auto"`` with a floor that fits the examples, and the held-out size is what every source can give.

With ``verifier`` (``ratchet init --tasks FILE --verifier module:function``), a file is a ``records`` source judged by
that verifier (imported here from the config's folder, so a bad reference fails now): the only file, or, among
several, each whose fields match no built-in format (the others keep theirs: a mixed campaign).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ratchet.loop.config import GenerationConfig, RecordFields, TaskConfig
from ratchet.loop.config.template import toml_value
from ratchet.loop.tasks.formats import (
    DEFAULT_SYSTEM_PROMPTS,
    TaskDataError,
    detect_format,
    detect_spec,
    guess_fields,
    read_records,
    worked_solution,
)
from ratchet.loop.tasks.sources import FileTasks, split_of
from ratchet.verifiers.plugins.runner import resolve_verifier

FEWSHOT = 2
MAX_HELDOUT = 400  # the most init writes: past the gate plan's size more prompts only cost eval time (docs/gate.md)
CHARS_PER_TOKEN = 3.0  # a deliberately low estimate: English ~4 characters per token, digits and code fewer


@dataclass(frozen=True)
class StarterSource:
    """One task file as a ``[[tasks.sources]]`` entry: its name, fields, format, examples and split sizes."""

    name: str
    path: Path
    fields: dict[str, str]
    format: str
    shots: list[tuple[str, str]]  # written to the few-shot file (math); code shows the file's reference solutions
    train: int
    heldout: int
    longest_shot_chars: int
    longest_prompt_chars: int  # system prompt, examples and the longest question


def _records_source(path: Path, heldout_fraction: float, verifier: str) -> StarterSource:
    """A records file judged by ``verifier``: no few-shot examples, the records' own prompts."""
    name = _name(path)
    tasks = FileTasks(RecordFields(path=str(path), format="records"), name, heldout_fraction)
    longest = max((len(p.record_json or p.question) for p in tasks.prompts), default=0)
    train, heldout = sum(p.split == "train" for p in tasks.prompts), sum(p.split == "heldout" for p in tasks.prompts)
    return StarterSource(name, path, {"format": "records", "verifier": verifier}, "records", [], train, heldout, 0, longest)


def read_source(
    path: Path, heldout_fraction: float, fewshot: int = FEWSHOT, *, verifier: str | None = None, only: bool = True
) -> StarterSource:
    """One task file as it will load in a campaign, with its worked examples.

    ``verifier``: a records file's own verifier, for this file when it is the ``only`` one or its fields match no
    built-in format.

    Raises:
        TaskDataError: the file cannot be read or a record cannot be converted (the loader's message: file, line, fix).
    """
    first = next(iter(read_records(RecordFields(path=str(path)))), None)
    if first is None:
        raise TaskDataError(f'{path} holds no tasks; add lines like {{"question": "2+2?", "answer": "4"}}')
    if verifier is not None and only:
        return _records_source(path, heldout_fraction, verifier)
    if verifier is not None:
        try:
            detect_format(first[1], first[0], RecordFields(path=str(path), **guess_fields(first[1])))
        except TaskDataError:
            return _records_source(path, heldout_fraction, verifier)
    spec = detect_spec(RecordFields(path=str(path)), *first)  # as `ratchet tasks check` detects it
    fmt, fields = spec.format, guess_fields(first[1])
    name = _name(path)
    tasks = FileTasks(spec, name, heldout_fraction)  # the campaign's loader and its refusals
    shots = _math_shots(spec, heldout_fraction, fewshot) if fmt == "math" else []
    code_shots = tasks.fewshot(fewshot) if fmt != "math" else []
    return StarterSource(
        name,
        path,
        {**fields, "format": fmt},
        fmt,
        shots,
        sum(p.split == "train" for p in tasks.prompts),
        sum(p.split == "heldout" for p in tasks.prompts),
        max((len(a) for _, a in shots or code_shots), default=0),
        len(DEFAULT_SYSTEM_PROMPTS[fmt])
        + sum(len(q) + len(a) for q, a in shots or code_shots)
        + max((len(p.question) for p in tasks.prompts), default=0),
    )


_QA_LINE = re.compile(r"^[ \t]{0,4}(?:Q|A|Question|Answer)[ \t]{0,2}:", re.M)


def qa_style(shots: list[tuple[str, str]]) -> bool:
    """Whether worked examples are written as ``Q:`` / ``A:`` turns inside their text (a plain-text few-shot
    format: a model imitating it writes the next ``Q:`` after its answer)."""
    return any(_QA_LINE.search(q) and re.search(r"^[ \t]{0,4}Q[ \t]{0,2}:", q + "\n" + a, re.M) for q, a in shots)


def config_relative(path: Path, config_dir: Path) -> str:
    """``path`` as the config writes it: relative to the config's folder when it lies under it (the folder then moves,
    or is copied to the server of the systemd unit, with its task files), else absolute. A config's relative paths are
    read against its own folder, whatever the working directory (``loop.config.loading``)."""
    path = path.resolve()
    return str(path.relative_to(config_dir)) if path.is_relative_to(config_dir) else str(path)


def _name(path: Path) -> str:
    stem = path.name.split(".")[0]
    clean = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).strip("-._") or "tasks"
    return clean[:64]


def _math_shots(spec: RecordFields, heldout_fraction: float, k: int) -> list[tuple[str, str]]:
    """The first ``k`` train-split records with a worked solution, as (question, worked answer)."""
    from ratchet.loop.tasks.formats import to_record

    shots: list[tuple[str, str]] = []
    for where, raw in read_records(spec):
        rec = to_record(raw, where, "math", spec, "x")
        if split_of(rec.question, heldout_fraction) != "train":
            continue
        worked = worked_solution(raw, spec, rec.answer)
        if worked is not None:
            shots.append((rec.question, worked))
        if len(shots) == k:
            break
    return shots


def heldout_plan(sources: list[StarterSource], heldout_fraction: float, config_name: str) -> tuple[int, str]:
    """The held-out size ``init`` writes and the terminal line that says why, from the gate's plan
    (``loop.gate.error_rates``, what ``ratchet gate plan`` prints): the size at which the default gate promotes a true
    5-point drop <= alpha and a true 5-point gain >= 80% of the time (discordance 0.2), rounded up to 2 digits and
    at most ``MAX_HELDOUT``, or what the files give when that is fewer (every source its equal share), then the
    promote rates at that size and the one-line fix (``tasks.heldout_fraction``).

    Returns:
        ``(held-out prompts, line)``.
    """
    from ratchet.loop.config import GateConfig
    from ratchet.loop.gate.error_rates import EFFECT, needed_prompts, promote_rate, rounded_up

    gate, n = GateConfig(), len(sources)
    target = min(rounded_up(needed_prompts(gate, 100) or MAX_HELDOUT), MAX_HELDOUT)
    per_source = min(s.heldout for s in sources)
    size = min(per_source, -(-target // n)) * n
    rate = lambda d: promote_rate(gate, size, d, 400, seed=1)  # noqa: E731
    if size >= target:
        return size, (
            f"held-out set: {size} prompts, the gate's plan for a 5-point change: a true -{EFFECT * 100:.0f} points is "
            f"promoted {rate(-EFFECT):.1%} of the time, +{EFFECT * 100:.0f} points {rate(EFFECT):.0%} "
            f"(`ratchet gate plan --eval-prompts {size}`)"
        )
    short = min(sources, key=lambda s: s.heldout)
    why = f"{short.name} gives {short.heldout} and every source gives an equal share" if n > 1 else "all the file gives"
    need = heldout_fraction * -(-target // n) / max(per_source, 1)
    fix = (
        f"raise tasks.heldout_fraction to ~{min(-(-need * 100 // 5) * 5 / 100, 0.5):g} in {config_name} (it is "
        f"{heldout_fraction:g}: that share of the questions, by hash, is held out)"
        + ("" if need <= 0.5 else ", and add tasks: half of them would still be too few")
    )
    return size, (
        f"held-out set: only {size} prompts ({why}); the gate's plan needs ~{target} to promote a true +5 points 80% of the "
        f"time: at {size} it promotes a true +10 points {rate(0.10):.0%} of the time, +5 points {rate(EFFECT):.0%}. "
        f"To promote smaller real gains, {fix}"
    )


def starter_config(
    files: list[Path], config_path: Path, *, fewshot: int = FEWSHOT, verifier: str | None = None
) -> tuple[str, dict[Path, str], list[str]]:
    """The TOML text of a campaign over ``files``, the few-shot files it names (path -> JSONL text), and the lines
    the terminal shows about what was chosen and why (the held-out size: ``heldout_plan``).

    Raises:
        TaskDataError: a file cannot be loaded, or the files leave no held-out prompt for some source.
        PluginError: ``verifier`` cannot be imported from the config's folder (or the installed packages).
    """
    t = TaskConfig()
    config_dir = config_path.resolve().parent
    if verifier is not None:
        resolve_verifier(verifier, base_dir=config_dir)
    only = len(files) == 1
    sources = [read_source(f.resolve(), t.heldout_fraction, fewshot, verifier=verifier, only=only) for f in files]
    names = [s.name for s in sources]
    if len(set(names)) < len(names):
        sources = [StarterSource(**{**s.__dict__, "name": f"{s.name}-{i}"}) for i, s in enumerate(sources)]
    # TaskSet.draw splits the held-out set over the (equally weighted) sources: each must hold its share.
    heldout, plan_line = (
        heldout_plan(sources, t.heldout_fraction, config_path.name) if all(s.heldout for s in sources) else (0, "")
    )
    if heldout < 1:
        empty = [s.name for s in sources if s.heldout == 0]
        raise TaskDataError(
            f"{', '.join(empty)}: no held-out prompts ({t.heldout_fraction:.0%} of the questions, by hash, go there); add tasks"
        )
    train = min(t.train_prompts_per_round, sum(s.train for s in sources))
    longest = max(s.longest_shot_chars for s in sources)
    floor = max(64, min(256, int(2 * longest / CHARS_PER_TOKEN)))
    cap = GenerationConfig().max_new_tokens_max
    # training takes prompt + completion: room for the longest prompt (chat template ~10 tokens a turn) and the cap
    prompt_tokens = max(s.longest_prompt_chars / CHARS_PER_TOKEN + 10 * (2 * fewshot + 2) for s in sources)
    max_seq_len = -(-int(prompt_tokens + cap + 1) // 64) * 64
    lines = [
        f"# Written by `ratchet init --tasks`: a first campaign over {', '.join(config_relative(f, config_dir) for f in files)}.",
        "# Every other key takes its default (`ratchet init --path full.toml` writes them all, with what each does).",
        "# Check it without starting a round: `ratchet run --dry-run --config " + config_path.name + "`.",
        f"campaign = {toml_value(sources[0].name)}",
        "",
        "[tasks]",
        *(f"# {line}" for line in textwrap.wrap(plan_line, 116)),
        f"heldout_prompts = {heldout}",
        f"train_prompts_per_round = {train}",
        "",
        "[generation]",
        '# "auto": each round caps completions at the last round\'s length P90, within [min, max]; the floor fits',
        "# the longest worked example below twice, so a first round is not cut short",
        'max_new_tokens = "auto"',
        f"max_new_tokens_min = {floor}",
        *(
            [
                "# the examples are written `Q:` / `A:`: a model that answers goes on with an invented next `Q:`;",
                "# sampling stops there (the verifier never reads past it either, and nothing past it trains)",
                'stop = ["\\nQ:"]',
            ]
            if any(qa_style(src.shots) for src in sources)
            else []
        ),
        "",
        "[sft]",
        f"# the longest prompt (estimated) plus max_new_tokens_max ({cap}): training never truncates (the preflight checks it)",
        f"max_seq_len = {max_seq_len}",
    ]
    extra: dict[Path, str] = {}
    for s in sources:
        lines += [
            "",
            "[[tasks.sources]]",
            f"name = {toml_value(s.name)}",
            f"path = {toml_value(config_relative(s.path, config_dir))}",
        ]
        lines += [f"{k} = {toml_value(v)}" for k, v in s.fields.items()]
        lines += [f"system_prompt = {toml_value(DEFAULT_SYSTEM_PROMPTS[s.format])}"]
        if s.format == "math" and s.shots:
            shot_path = config_dir / f"{config_path.stem}.{s.name}.fewshot.jsonl"
            extra[shot_path] = "".join(json.dumps({"question": q, "answer": a}, ensure_ascii=False) + "\n" for q, a in s.shots)
            lines += [
                f"fewshot = {len(s.shots)}",
                f"fewshot_path = {toml_value(config_relative(shot_path, config_dir))}  # worked examples from the file",
            ]
        elif s.format == "records":
            lines += ["fewshot = 0  # each record's prompt is the whole chat; the verifier decides what it reads"]
        elif s.format != "math":
            lines += [f"fewshot = {min(fewshot, 1)}  # the file's own reference solution as the example"]
        else:
            lines += ["fewshot = 0  # the file has only bare answers: no worked example to show"]
    return "\n".join(lines) + "\n", extra, [plan_line]
