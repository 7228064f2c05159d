"""Config of a campaign's tasks: ``[tasks]``, its ``[[tasks.sources]]`` and the ``[[evals]]`` sets (see ``loop.config``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from ratchet.loop.config.frozen import _Frozen, identity
from ratchet.verifiers.math import AnswerFormat

TaskFormat = Literal["math", "humaneval", "mbpp", "stdio", "records"]
LEGACY_SOURCE_NAME = "jsonl"  # the name `tasks.source = "jsonl"` gave its file; kept by the fold (metrics, [[evals]] source)
_log = logging.getLogger(__name__)


class RecordFields(_Frozen):
    """How to read one task file: its format and, where its field names differ, which field is which."""

    path: str = Field(
        description="Task file: .jsonl, .jsonl.gz, .parquet, or a folder written by `datasets.save_to_disk` (local only)."
    )
    format: TaskFormat | None = Field(
        None,
        description="math (question + answer; GSM8K '#### 42' or a worked solution ending in \\boxed{}), humaneval (prompt, "
        "test with check(candidate), entry_point), mbpp (text, test_list, test_setup_code), stdio (statement + inputs/"
        "outputs lists), records (a `prompt` string or chat-message list and any other fields, judged by the source's own "
        "`verifier`). Unset: detected from the first record's fields.",
    )
    split: str | None = Field(None, description="Split of a `save_to_disk` DatasetDict folder (e.g. 'test').")
    question_field: str | None = Field(None, description="Field holding the question/statement, when not the format's usual one.")
    answer_field: str | None = Field(None, description="Field holding the gold answer (math), when not 'answer'/'solution'.")
    tests_field: str | None = Field(None, description="Field holding the tests (humaneval 'test', mbpp 'test_list').")
    entry_point_field: str | None = Field(None, description="Field naming the function under test (humaneval 'entry_point').")
    solution_field: str | None = Field(None, description="Field holding a reference solution ('canonical_solution', 'code').")


class TaskSourceConfig(RecordFields):
    """One ``[[tasks.sources]]`` entry: a task file with its own format, prompt template and verifier."""

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Name in metrics and the store's prompts.source; default: the file name without suffixes.",
    )
    weight: float = Field(1.0, gt=0.0, description="Share of each round's training prompts (normalised over the sources).")
    system_prompt: str | None = Field(None, description="System message of this source's prompts; default: one per format.")
    fewshot: int = Field(0, ge=0, le=8, description="Worked examples before the question (from fewshot_path, else this source).")
    fewshot_path: str | None = Field(
        None, description="JSONL of worked examples {question, answer} (the answer is the assistant turn shown verbatim)."
    )
    answer_format: AnswerFormat | None = Field(
        None,
        description="Final-answer marker this source's prompts ask for ('auto', 'boxed', 'answer_line', 'json', 'gsm8k'; "
        "see verifier.answer_format); unset: verifier.answer_format.",
        json_schema_extra=identity("neutral_default"),
    )
    group_size: int | None = Field(
        None,
        ge=1,
        description="G for this source's prompts (rft only; common practice 4-8 for math, 8-16 for code); unset: generation.group_size.",
    )

    verifier: str | None = Field(
        None,
        description="records: the verifier, 'package.module:function' (imported from the installed packages, the "
        "PYTHONPATH or the config file's folder) or an entry point of group 'ratchet.verifiers'; called as "
        "verify(completion, record) -> bool | float | ratchet.verifiers.Verdict (docs/own-task.md).",
        json_schema_extra=identity("neutral_default"),
    )
    environment: str | None = Field(
        None,
        description="A multi-turn environment, 'package.module:Class' or an entry point of group "
        "'ratchet.environments' (built in: 'python', a tool that runs the model's fenced code in the sandbox): "
        "reset(record) -> messages, step(messages) -> message | None (docs/own-task.md).",
        json_schema_extra=identity("neutral_default"),
    )
    max_turns: int = Field(
        1,
        ge=1,
        le=32,
        description="Assistant turns per episode at most (environment).",
        json_schema_extra=identity("neutral_default"),
    )
    plugin_dir: str | None = Field(
        None,
        description="The folder a 'module:function' verifier or environment is imported from first; unset: the config "
        "file's folder (filled in when the file is loaded).",
        json_schema_extra=identity("run"),
    )
    sandbox: bool = Field(
        False,
        description="Run the source's verifier inside the kernel sandbox (no network, read-only view) instead of a "
        "plain worker process.",
        json_schema_extra=identity("neutral_default"),
    )

    @model_validator(mode="after")
    def _check_plugins(self) -> TaskSourceConfig:
        if self.format == "records" and self.verifier is None and self.environment is None:
            raise ValueError(
                f"tasks source {self.source_name()!r} has format = 'records' but no verifier: set "
                "verifier = 'package.module:function' (or an environment whose score() judges episodes)"
            )
        if self.verifier is not None and self.format not in ("records", None):
            raise ValueError(
                f"tasks source {self.source_name()!r}: verifier = {self.verifier!r} needs format = 'records' (the "
                f"{self.format} format has its own verifier)"
            )
        if self.max_turns > 1 and self.environment is None:
            raise ValueError(f"tasks source {self.source_name()!r}: max_turns = {self.max_turns} needs an environment")
        return self

    @model_serializer(mode="wrap")
    def _unset_format_left_out(self, handler: SerializerFunctionWrapHandler) -> dict:
        """An unset ``answer_format`` is left out of the dump, so a campaign stored before the field existed keeps
        its settings (its sources compare equal) and its config hash."""
        out = handler(self)
        if isinstance(out, dict) and out.get("answer_format") is None:
            out.pop("answer_format", None)
        return out

    def source_name(self) -> str:
        if self.name:
            return self.name
        base = Path(self.path).name
        for suffix in (".gz", ".jsonl", ".json", ".parquet"):
            base = base.removesuffix(suffix)
        return base or "tasks"


class EvalSetConfig(_Frozen):
    """One ``[[evals]]`` entry: a file (a benchmark's test split) or a share of a task source's held-out split.

    Its prompt ids and their order are pinned in the store (``eval_set_prompts``) when the campaign is created;
    later rounds evaluate exactly those whatever happens to the files.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="Eval set name, shown in metrics.")
    source: str | None = Field(None, description="Name of a [[tasks.sources]] entry: draw from its held-out split.")
    file: RecordFields | None = Field(None, description="A task file read like a source ([evals.file] path = ..., format = ...).")
    prompts: int | None = Field(None, ge=1, le=100_000, description="How many prompts (a file: its first N; unset: all of it).")
    system_prompt: str | None = Field(None, description="System message for a file's prompts; default: one per format.")
    role: Literal["gate", "guard", "report"] = Field(
        "gate",
        description="gate: the round is promoted only if this set passes the gate's bound; guard: a canary the campaign "
        "does not train on, which halts the campaign when it is shown to drop by more than gate.margin; report: only "
        "measured. Not part of the campaign's identity.",
        json_schema_extra=identity("run"),
    )
    confirmation_prompts: int | None = Field(
        None,
        ge=0,
        le=100_000,
        description="Prompts of this set's confirmation slice (read only on promotion; docs/gate.md), drawn from the "
        "set's own reserve (its source's held-out split, or its file past the prompts the set uses). Unset: "
        "gate.confirmation_prompts for a 'gate' set, none for a guard or report set. 0: none.",
        json_schema_extra=identity("run"),
    )

    def confirmation_size(self, default: int) -> int:
        """This set's confirmation prompts: its own ``confirmation_prompts``, else ``default``
        (``gate.confirmation_prompts``) for a 'gate' set and 0 for a guard or report set."""
        if self.confirmation_prompts is not None:
            return self.confirmation_prompts
        return default if self.role == "gate" else 0

    @model_validator(mode="after")
    def _check(self) -> EvalSetConfig:
        if (self.source is None) == (self.file is None):
            raise ValueError(
                f"evals entry {self.name!r} needs exactly one of source = '<tasks source name>' or [evals.file] path = ..."
            )
        if self.source is not None and self.prompts is None:
            raise ValueError(f"evals entry {self.name!r} draws from source {self.source!r}: set prompts = N")
        return self


def fold_jsonl_source(data: dict) -> dict:
    """``[tasks]`` with ``source = "jsonl"`` (the old single-file path) as the one ``[[tasks.sources]]`` entry it means.

    The entry is the one a person would write: ``path``, ``format = "math"``, ``name = "jsonl"`` (so metrics and
    ``[[evals]] source = "jsonl"`` keep working), ``fewshot`` = ``tasks.fewshot`` (worked examples from the file, which
    the old path dropped) and ``system_prompt`` = ``tasks.system_prompt`` only when the config set one (else the math
    format's). One notice line shows the TOML to write instead. Prompt ids are those of a ``[[tasks.sources]]`` entry
    named ``jsonl`` (they were ``jsonl:<file name>``): a campaign recorded with the old key cannot continue
    (``ratchet.flows.rounds.state.identity.legacy_jsonl_conflict`` says what to do).

    Raises:
        ValueError: ``source = "jsonl"`` without ``path``, or beside ``[[tasks.sources]]``.
    """
    if not isinstance(data, dict) or data.get("source") != "jsonl":
        return data
    data = dict(data)
    if not data.get("path"):
        raise ValueError("tasks.source = 'jsonl' needs tasks.path; set tasks.path = 'my_tasks.jsonl'")
    if data.get("sources"):
        raise ValueError(
            "tasks.source = 'jsonl' and [[tasks.sources]] are both set; drop source/path and list the file under [[tasks.sources]]"
        )
    entry: dict = {"name": LEGACY_SOURCE_NAME, "path": data.pop("path"), "format": "math", "fewshot": data.pop("fewshot", 2)}
    if "system_prompt" in data:
        entry["system_prompt"] = data.pop("system_prompt")
    data["source"] = "arithmetic"
    data["sources"] = [entry]
    toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in entry.items())
    _log.warning(
        "[tasks] source = 'jsonl' is read as [[tasks.sources]] %s (the examples come from the file; without "
        "system_prompt the math format's); write that table instead (`ratchet init --tasks FILE` does)",
        toml,
    )
    return data


class TaskConfig(_Frozen):
    source: Literal["arithmetic", "jsonl"] = Field(
        "arithmetic",
        description="Where prompts come from: the built-in arithmetic tasks, or (old spelling, read as one "
        "[[tasks.sources]] entry named 'jsonl' with a notice) 'jsonl' with tasks.path.",
    )
    levels: tuple[str, ...] = Field(
        ("sum_small", "sum_2digit", "product_1digit"),
        description="Arithmetic families to draw from: sum_small (a+b, a,b<=20), sum_2digit, "
        "product_1digit, multi_step (a+b*c style), linear_equation (solve a*x+b=c).",
    )
    path: str | None = Field(
        None, description="JSONL file of {question, answer} (or GSM8K '#### 42') for source='jsonl' (old spelling; see source)."
    )
    seed: int = Field(0, description="Seeds the task generator; the held-out set depends only on this.")
    train_prompts_per_round: int = Field(48, ge=1, description="Training-split prompts sampled each round.")
    heldout_prompts: int = Field(
        48,
        ge=1,
        le=100_000,
        description="Size of the held-out evaluation set (without [[evals]]); pinned in the store when the campaign starts.",
    )
    heldout_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="Share of all prompt ids hashed into the held-out split.")
    system_prompt: str = Field(
        "Solve the arithmetic problem. Show the calculation, then give the final line as 'Answer: <number>'.",
        description="System message of every prompt.",
    )
    fewshot: int = Field(
        2,
        ge=0,
        le=8,
        description="Worked examples placed before the question as chat turns. Small models follow the "
        "'Answer:' format only with examples (SmolLM2-135M: 0% compliance zero-shot, ~100% with 2).",
    )

    selection: Literal["uniform", "frontier"] = Field(
        "uniform",
        description="How a round picks its training prompts (docs/selection.md). uniform: by seed alone. frontier: from "
        "tasks.selection_candidates x as many seeded candidates, the prompts whose Beta-posterior pass rate for the "
        "incumbent (its lineage's verdicts in the last tasks.selection_window rounds, with the source and task's pass "
        "rate as prior for unseen prompts) makes a group of G most likely to hold both right and wrong answers, i.e. "
        "to carry a gradient (GRPO) or a new solution (RFT).",
        json_schema_extra=identity("neutral_default"),
    )
    selection_explore: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="frontier: share of the round's prompts drawn uniformly from the other candidates, so prompts "
        "estimated solved or unsolved are still revisited (forgetting and late learning show up in the history).",
        json_schema_extra=identity("neutral_default"),
    )
    selection_candidates: int = Field(
        4,
        ge=1,
        le=64,
        description="frontier: seeded candidates drawn per training prompt picked (a file source offers at most its "
        "train split).",
        json_schema_extra=identity("neutral_default"),
    )
    selection_window: int = Field(
        3,
        ge=1,
        description="frontier: rounds of history the pass-rate estimate reads (the incumbent's lineage only).",
        json_schema_extra=identity("neutral_default"),
    )
    selection_prior_strength: float = Field(
        2.0,
        gt=0.0,
        description="frontier: pseudo-rollouts of the prior (Beta(m s, (1 - m) s), m the source and task's pass rate); "
        "a prompt's own verdicts outweigh it after ~s rollouts.",
        json_schema_extra=identity("neutral_default"),
    )

    sources: tuple[TaskSourceConfig, ...] = Field(
        (),
        description="[[tasks.sources]]: several task files with their own format, weight and prompt; when set, "
        "source/path/levels/system_prompt/fewshot above are not used.",
    )

    @model_validator(mode="before")
    @classmethod
    def _fold_jsonl(cls, data):
        return fold_jsonl_source(data)

    @model_validator(mode="after")
    def _check(self) -> TaskConfig:
        names = [s.source_name() for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tasks.sources names {dup} appear more than once; give each source its own name = '...'")
        return self
