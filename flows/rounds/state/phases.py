"""What a round needs checked or registered beyond the plain loop: each curriculum phase's training data at preflight
(task files, reference solutions, general SFT data, sequence lengths, a teacher), and the teacher's checkpoint row."""

from __future__ import annotations

import logging
from pathlib import Path

from ratchet.loop.campaign.curriculum import phase_bounds
from ratchet.loop.campaign.round_context import Ctx, now
from ratchet.loop.checkpoints import check_loadable, read_checkpoint_id, resolve_model
from ratchet.loop.config import ConfigError, RatchetConfig
from ratchet.loop.tasks.sources import Prompt, TaskDataError
from ratchet.loop.tasks.supervised import fit_error, load_general_data, reference_examples
from ratchet.loop.train.lengths import check_no_truncation
from ratchet.store.ingest import insert_rows


def phase_contexts(cfg: RatchetConfig) -> list[Ctx]:
    """The context of the campaign's first round, or of each phase's first round under ``[[phases]]``."""
    if not cfg.phases:
        return [Ctx(cfg)]
    return [Ctx(cfg.for_phase(i), first, 0, cfg, i) for i, (_, first, _) in enumerate(phase_bounds(cfg))]


def check_training_data(ctx: Ctx, model_dir: Path) -> None:
    """A round's training data can be made: task files load, prompts are left, sequences fit (no truncation), an sft
    phase's prompts have reference solutions, ``sft.general_data`` parses, and a teacher loads.

    Raises:
        TaskDataError, ConfigError, ModelError: one line naming the phase (if any), what is wrong and the fix.
    """
    where = f"phase {ctx.phase_name!r}: " if ctx.phase_name else ""
    try:
        check_tasks(ctx)
        train = ctx.train_prompts()
        # every file source's train prompt, plus a draw of the generated ones (which have no fixed pool)
        conversations = [ctx.messages(p) for p in [*ctx.tasks.train_pool(), *train]]
        check_no_truncation(ctx.cfg, model_dir, conversations)
        if ctx.cfg.algorithm == "sft" and not reference_examples(train)[0]:
            raise TaskDataError(
                f"algorithm 'sft' trains on reference solutions, and none of the {len(train)} train prompts drawn has one; "
                "use [[tasks.sources]] with a 'solution' field (or solution_field = ...)"
            )
        check_supervised_fit(ctx, model_dir, [*ctx.tasks.train_pool(), *train])
        if ctx.cfg.generation.teacher is not None:
            check_loadable(resolve_model(ctx.cfg.generation.teacher))
    except (TaskDataError, ConfigError) as e:
        if not where:
            raise
        raise type(e)(f"{where}{e}") from e


def check_supervised_fit(ctx: Ctx, model_dir: Path, prompts: list[Prompt]) -> None:
    """An sft round's reference solutions and ``sft.general_data``'s records fit ``sft.max_seq_len`` with their prompts.

    Raises:
        ConfigError: one line with the longest example's length and the limit that fits it.
    """
    groups = []
    if ctx.cfg.algorithm == "sft":
        groups.append(("reference solution", [(ctx.messages(p), p.solution) for p in prompts if p.solution]))
    if ctx.cfg.sft.general_data is not None:
        records = load_general_data(ctx.cfg.sft.general_data)
        groups.append(
            ("general_data record", [([{"role": r, "content": c} for r, c in g.messages], g.completion) for g in records])
        )
    if not groups:
        return
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    for what, examples in groups:
        if error := fit_error(tok, examples, ctx.cfg.sft.max_seq_len, what):
            raise ConfigError(error)


def check_tasks(ctx: Ctx) -> None:
    """The task files load, the evaluation set has the prompts asked for, and training has prompts without any
    evaluation question; a 13-gram overlap between training and evaluation questions is reported (a warning).

    Raises:
        TaskDataError: what is wrong with the task data or counts, and the fix.
    """
    from ratchet.loop.tasks.task_sets import ngram_overlap, shared_run

    evals = ctx.heldout()
    if not ctx.train_prompts():
        raise TaskDataError("no training prompts are left once the evaluation questions are excluded; add training tasks")
    overlap = ngram_overlap(ctx.tasks.train_pool(), evals)
    if overlap:
        train, ev = overlap[0]
        run = shared_run(train.question, ev.question)
        logging.getLogger(__name__).warning(
            "decontamination: %d training question(s) share a 13-word run with an evaluation question, e.g. training "
            "question %s and evaluation question %s share %r (%d words)",
            len(overlap),
            _opening(train.question),
            _opening(ev.question),
            run[:300] + ("…" if len(run) > 300 else ""),
            len(run.split()),
        )


def _opening(question: str, width: int = 50) -> str:
    """A question's first ``width`` characters, whitespace collapsed, quoted (``repr``), '…' where it was cut."""
    text = " ".join(question.split())
    return repr(text[:width]) + ("…" if len(text) > width else "")


def teacher_checkpoint(ctx: Ctx) -> str | None:
    """The checkpoint id of the round's ``generation.teacher`` (None: the incumbent generates)."""
    teacher = ctx.cfg.generation.teacher
    return None if teacher is None else read_checkpoint_id(resolve_model(teacher))


def register_teacher(con, ctx: Ctx) -> None:
    """Register the round's teacher as a checkpoint row (like the base model), so its rollouts name it."""
    teacher = ctx.cfg.generation.teacher
    if teacher is None:
        return
    path = resolve_model(teacher)
    row = dict(
        checkpoint_id=read_checkpoint_id(path),
        parent_id=None,
        training_run_id=None,
        model_ref=teacher,
        path=str(path.resolve()),
        created_at=now(),
    )
    insert_rows(con, "checkpoints", [row])
