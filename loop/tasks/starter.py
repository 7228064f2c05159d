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
MAX_HELDOUT = 400  # enough for the gate to see a few-point change (docs/gate.md); more only costs eval time
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


def starter_config(
    files: list[Path], config_path: Path, *, fewshot: int = FEWSHOT, verifier: str | None = None
) -> tuple[str, dict[Path, str]]:
    """The TOML text of a campaign over ``files`` and the few-shot files it names (path -> JSONL text).

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
    n = len(sources)
    heldout = min(min(s.heldout for s in sources), MAX_HELDOUT // n) * n
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
        f"# Written by `ratchet init --tasks`: a first campaign over {', '.join(str(f) for f in files)}.",
        "# Every other key takes its default (`ratchet init --path full.toml` writes them all, with what each does).",
        "# Check it without starting a round: `ratchet run --dry-run --config " + config_path.name + "`.",
        f"campaign = {toml_value(sources[0].name)}",
        "",
        "[tasks]",
        f"# every source can give its share of {heldout} held-out prompts (at most {MAX_HELDOUT}: enough for the gate to see a",
        "# few-point change; fewer make the gate promote only large gains)",
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
        lines += ["", "[[tasks.sources]]", f"name = {toml_value(s.name)}", f"path = {toml_value(str(s.path))}"]
        lines += [f"{k} = {toml_value(v)}" for k, v in s.fields.items()]
        lines += [f"system_prompt = {toml_value(DEFAULT_SYSTEM_PROMPTS[s.format])}"]
        if s.format == "math" and s.shots:
            shot_path = config_dir / f"{config_path.stem}.{s.name}.fewshot.jsonl"
            extra[shot_path] = "".join(json.dumps({"question": q, "answer": a}, ensure_ascii=False) + "\n" for q, a in s.shots)
            lines += [
                f"fewshot = {len(s.shots)}",
                f"fewshot_path = {toml_value(str(shot_path))}  # worked examples from the file",
            ]
        elif s.format == "records":
            lines += ["fewshot = 0  # each record's prompt is the whole chat; the verifier decides what it reads"]
        elif s.format != "math":
            lines += [f"fewshot = {min(fewshot, 1)}  # the file's own reference solution as the example"]
        else:
            lines += ["fewshot = 0  # the file has only bare answers: no worked example to show"]
    return "\n".join(lines) + "\n", extra
