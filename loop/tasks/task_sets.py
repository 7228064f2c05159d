"""A campaign's tasks: its sources (one or several, weighted), their prompt templates, and its evaluation sets.

``TaskSet`` is what a round sees: it draws each round's training prompts from the sources in
proportion to their weights, renders a prompt with its own source's system prompt and few-shot
examples, and builds the evaluation prompts (``[[evals]]``, else ``tasks.heldout_prompts`` from the
sources' held-out split). Training never sees an evaluation question: ``train_excluding`` drops every
prompt whose normalized question is in the evaluation set (and the store's training query does the
same, ``store/queries.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ratchet.loop.config import EvalSetConfig, RatchetConfig, TaskConfig
from ratchet.loop.tasks.formats import DEFAULT_SYSTEM_PROMPTS
from ratchet.loop.tasks.record_prompts import chat_of, with_system
from ratchet.loop.tasks.sources import (
    FileTasks,
    Prompt,
    Split,
    TaskDataError,
    TaskSource,
    chat_messages,
    make_task_source,
    normalize_question,
)


@dataclass(frozen=True)
class Member:
    """One source of a campaign: its config name, the source, its weight and how its prompts are rendered."""

    name: str
    source: TaskSource
    weight: float
    system_prompt: str
    fewshot: int
    group_size: int | None = None


def sub_seed(seed: int, *parts: str) -> int:
    """A seed for one source or eval entry, a function of the campaign's seed and its name only."""
    return int(hashlib.sha256("\x1f".join([str(seed), *parts]).encode()).hexdigest()[:12], 16)


def apportion(n: int, weights: list[float]) -> list[int]:
    """``n`` split by ``weights`` with largest remainders (sums to ``n``; ties go to the earlier entry)."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    out = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: (out[i] - exact[i], i))[: n - sum(out)]:
        out[i] += 1
    return out


class TaskSet:
    """The sources of one campaign (``[[tasks.sources]]``, or the single ``tasks.source``)."""

    def __init__(self, t: TaskConfig, evals: tuple[EvalSetConfig, ...] = ()) -> None:
        self._eval_prompts = {f"eval:{e.name}": e.system_prompt for e in evals if e.file is not None}
        if t.sources:
            self.members = [
                Member(
                    s.source_name(),
                    src := _with_fewshot_file(FileTasks(s, s.source_name(), t.heldout_fraction), s.fewshot_path),
                    s.weight,
                    s.system_prompt if s.system_prompt is not None else DEFAULT_SYSTEM_PROMPTS[src.format],
                    s.fewshot,
                    s.group_size,
                )
                for s in t.sources
            ]
        else:
            src = make_task_source(t.source, levels=t.levels, heldout_fraction=t.heldout_fraction)
            self.members = [Member(t.source, src, 1.0, t.system_prompt, t.fewshot)]
        self._by_prompt_source = {m.source.name: m for m in self.members}

    def member(self, name: str) -> Member:
        for m in self.members:
            if m.name == name:
                return m
        raise TaskDataError(f"no task source named {name!r}; sources are {[m.name for m in self.members]}")

    def draw(self, n: int, split: Split, seed: int) -> list[Prompt]:
        """``n`` prompts of ``split`` over the sources by weight, each source with its own derived seed."""
        out: list[Prompt] = []
        for m, k in zip(self.members, apportion(n, [m.weight for m in self.members])):
            if k:
                out += m.source.draw(k, split, sub_seed(seed, "source", m.name) if len(self.members) > 1 else seed)
        return out

    def group_sizes(self, prompts: list[Prompt], default: int) -> dict[int, list[Prompt]]:
        """Prompts by their source's G (``group_size`` of a ``[[tasks.sources]]`` entry, else ``default``), in order."""
        size = {m.source.name: m.group_size or default for m in self.members}
        out: dict[int, list[Prompt]] = {}
        for p in prompts:
            out.setdefault(size.get(p.source, default), []).append(p)
        return out

    def messages(self, p: Prompt) -> list[dict[str, str]]:
        """The chat of a prompt: its source's system prompt and few-shot turns, then the question.

        An ``[[evals]]`` file's prompt gets that entry's ``system_prompt`` (else its format's default) and no
        examples; a prompt of an unknown source (a training row without one) that of the only source. A ``records``
        prompt given as a chat-message list is that chat, after the system prompt unless it has its own.
        """
        m = self._by_prompt_source.get(p.source)
        if m is None and p.source in self._eval_prompts:
            system = self._eval_prompts[p.source] or DEFAULT_SYSTEM_PROMPTS.get(p.task_format, "")
            chat = chat_of(p.record_json)
            return with_system(system, chat) if chat else chat_messages(system, [], p.question)
        if m is None:
            m = self.members[0]
        chat = chat_of(p.record_json, getattr(getattr(m.source, "spec", None), "question_field", None))
        if chat:
            return with_system(m.system_prompt, chat)
        return chat_messages(m.system_prompt, m.source.fewshot(m.fewshot), p.question)

    def eval_prompts(self, cfg: RatchetConfig) -> list[Prompt]:
        """The campaign's evaluation prompts in order: every ``[[evals]]`` entry, else the sources' held-out split.

        Raises:
            TaskDataError: fewer held-out prompts than asked for (the message gives the most there are).
        """
        return [p for _, ps in self.eval_sets(cfg) for p in ps]

    def eval_sets(self, cfg: RatchetConfig) -> list[tuple[str, list[Prompt]]]:
        """``(name, prompts)`` per ``[[evals]]`` entry in order, or ``[("heldout", ...)]`` without any."""
        t = cfg.tasks
        if not cfg.evals:
            got = self.draw(t.heldout_prompts, "heldout", seed=t.seed)
            if len(got) < t.heldout_prompts:
                need = min(0.9, t.heldout_fraction * t.heldout_prompts / max(len(got), 1))
                raise TaskDataError(
                    f"tasks.heldout_prompts = {t.heldout_prompts} but the tasks hold only {len(got)} held-out prompts "
                    f"({t.heldout_fraction:.0%} of the questions, by hash); raise tasks.heldout_fraction (about "
                    f"{-(-need * 100 // 5) * 5 / 100:g} would hold them; it moves questions out of training), set "
                    f"tasks.heldout_prompts <= {len(got)}, or add tasks"
                )
            return [("heldout", got)]
        return [(e.name, self._eval_entry(e, t.seed, t.heldout_fraction)) for e in cfg.evals]

    def reserve(self, cfg: RatchetConfig, name: str, n: int, exclude: set[str], tag: str) -> list[Prompt]:
        """Up to ``n`` held-out prompts for eval set ``name`` (an ``[[evals]]`` entry, or ``"heldout"``: the pooled
        set over the sources, by weight) whose ids are not in ``exclude`` (every prompt already pinned or gated on),
        drawn with a seed of the campaign's seed, ``tag`` and the set's name: a confirmation slice or a refreshed
        gating slice. Held-out prompts are never trained on (the split is fixed by the question's hash). Fewer than
        ``n`` (the caller decides) when the reserve holds fewer: a file's held-out prompts, an entry's file past the
        prompts it was given, or the arithmetic levels' distinct questions.
        """
        seed = sub_seed(cfg.tasks.seed, tag, name)
        if not cfg.evals:
            out: list[Prompt] = []
            for m, k in zip(self.members, apportion(n, [m.weight for m in self.members])):
                out += _fresh(m.source, k, exclude, sub_seed(seed, "source", m.name))
            return out
        e = next((x for x in cfg.evals if x.name == name), None)
        if e is None:
            raise TaskDataError(f"no [[evals]] entry named {name!r}; entries are {[x.name for x in cfg.evals]}")
        if e.source is not None:
            return _fresh(self.member(e.source).source, n, exclude, seed)
        assert e.file is not None
        src = FileTasks(e.file, f"eval:{e.name}", cfg.tasks.heldout_fraction, split="heldout")
        return [p for p in src.prompts if p.prompt_id not in exclude][:n]

    def _eval_entry(self, e: EvalSetConfig, seed: int, heldout_fraction: float) -> list[Prompt]:
        if e.source is not None:
            m = self.member(e.source)
            got = m.source.draw(e.prompts or 0, "heldout", seed=sub_seed(seed, "eval", e.name))
            if len(got) < (e.prompts or 0):
                raise TaskDataError(
                    f"evals entry {e.name!r} asks for {e.prompts} prompts but source {e.source!r} holds only {len(got)} "
                    f"held-out prompts; set prompts <= {len(got)}"
                )
            return got
        assert e.file is not None
        src = FileTasks(e.file, f"eval:{e.name}", heldout_fraction, split="heldout")
        return src.prompts[: e.prompts] if e.prompts else src.prompts

    def train_pool(self) -> list[Prompt]:
        """Every train-split prompt of the file sources (generated sources have no fixed pool)."""
        return [p for m in self.members for p in getattr(m.source, "prompts", []) if p.split == "train"]

    def train_excluding(self, n: int, seed: int, evals: list[Prompt]) -> list[Prompt]:
        """``draw(n, "train", seed)`` without any prompt whose normalized question is an evaluation question."""
        banned = {normalize_question(p.question) for p in evals}
        return [p for p in self.draw(n, "train", seed) if normalize_question(p.question) not in banned]


def _fresh(source: TaskSource, n: int, exclude: set[str], seed: int) -> list[Prompt]:
    """Up to ``n`` of ``source``'s held-out prompts outside ``exclude``: a draw of ``n + len(exclude)`` (enough however
    many excluded ones it meets) with the excluded dropped; [] when the source cannot draw that many (arithmetic
    levels with fewer distinct held-out questions: then fewer than ``n`` are fresh)."""
    if n <= 0:
        return []
    try:
        drawn = source.draw(n + len(exclude), "heldout", seed)
    except TaskDataError:
        return []
    return [p for p in drawn if p.prompt_id not in exclude][:n]


def _with_fewshot_file(src: FileTasks, path: str | None) -> FileTasks:
    """Take worked examples from a JSONL file of ``{question, answer}`` (shown verbatim) instead of the source."""
    if not path:
        return src
    import json
    from pathlib import Path

    shots = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            rec = json.loads(line)
            if not isinstance(rec, dict) or not {"question", "answer"} <= rec.keys():
                raise TaskDataError(f'{path}:{i}: few-shot lines need "question" and "answer"')
            shots.append((str(rec["question"]), str(rec["answer"])))
    src.fewshot = lambda k: shots[:k]  # type: ignore[method-assign]
    return src


def ngram_overlap(train: list[Prompt], evals: list[Prompt], n: int = 13) -> list[tuple[Prompt, Prompt]]:
    """Pairs (train prompt, eval prompt) sharing a word ``n``-gram of their normalized questions (13: GPT-3's check)."""

    def grams(q: str) -> set[tuple[str, ...]]:
        w = normalize_question(q).split()
        return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}

    index: dict[tuple[str, ...], Prompt] = {}
    for e in evals:
        for g in grams(e.question):
            index.setdefault(g, e)
    out = []
    for p in train:
        hit = next((index[g] for g in grams(p.question) if g in index), None)
        if hit is not None and normalize_question(hit.question) != normalize_question(p.question):
            out.append((p, hit))
    return out


def shared_run(a: str, b: str, n: int = 13) -> str:
    """The longest word run the normalized questions ``a`` and ``b`` share, starting at their first shared word
    ``n``-gram (what made ``ngram_overlap`` pair them); '' when they share none."""
    wa, wb = normalize_question(a).split(), normalize_question(b).split()
    at = {tuple(wb[j : j + n]): j for j in range(len(wb) - n + 1)}
    for i in range(len(wa) - n + 1):
        j = at.get(tuple(wa[i : i + n]))
        if j is not None:
            k = n
            while i + k < len(wa) and j + k < len(wb) and wa[i + k] == wb[j + k]:
                k += 1
            return " ".join(wa[i : i + k])
    return ""
