"""``ratchet eval``: how good is a model on a task file, without a campaign.

The file is read as ``ratchet init --tasks`` reads it (format and fields detected, ``loop.tasks.starter.read_source``),
its prompts are rendered as a campaign's source would render them (the format's system prompt and, with ``fewshot``,
the worked examples ``init`` would write), generated on an engine placed as a round's, and verified by the verifier a
round would use, with the settings of a campaign config when one is given. Greedy pass@1 comes with its Wilson score
interval; with ``samples = K``, the unbiased pass@k for k = 1, 2, 4, ... K. Nothing is written unless a store is
given (``ratchet.flows.rounds.eval_store``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ratchet.flows.compute.engine import Placement, open_engine
from ratchet.flows.compute.messages import engine_spec
from ratchet.flows.rounds.eval_store import stored_checkpoint
from ratchet.flows.rounds.stages.pipeline import prompt_rows
from ratchet.flows.rounds.stages.round_engine import rank_groups
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.checkpoints import resolve_model
from ratchet.loop.config import RatchetConfig
from ratchet.loop.evaluation.metrics import pass_at_k, wilson_interval
from ratchet.loop.evaluation.scoring import score_items
from ratchet.loop.generation.sampling import SamplingParams
from ratchet.loop.tasks.sources import Prompt, chat_messages
from ratchet.loop.tasks.starter import read_source

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelEval:
    """The outcome of one ``evaluate_model``.

    Attributes:
        model: the model reference as given; ``model_dir`` the folder it resolved to.
        tasks: the task file; ``format`` its detected format.
        prompts: prompts evaluated; ``correct`` of them right at greedy decoding.
        pass1: ``correct / prompts``; ``ci95`` its 95 % Wilson score interval.
        samples: sampled completions per prompt (0: greedy only); ``pass_at_k`` the unbiased estimate per k.
        reasons: greedy verdict reasons and their counts (``ok``, ``wrong``, ``no_answer``, ...).
        seconds: wall seconds (engine start included); ``completion_tokens`` generated in all.
        round_id: the stored round of the evaluation-only campaign (``store``), None when nothing was written.
    """

    model: str
    model_dir: str
    tasks: str
    format: str
    prompts: int
    correct: int
    pass1: float
    ci95: tuple[float, float]
    samples: int
    pass_at_k: dict[int, float] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    completion_tokens: int = 0
    round_id: str | None = None

    def to_json(self) -> dict:
        """The one-line JSON of ``ratchet eval --format json``: ``pass@1``, ``ci95``, ``prompts`` and the rest."""
        return {
            "pass@1": round(self.pass1, 4),
            "ci95": [round(self.ci95[0], 4), round(self.ci95[1], 4)],
            "prompts": self.prompts,
            "correct": self.correct,
            **{f"pass@{k}": round(v, 4) for k, v in self.pass_at_k.items() if k > 1},
            "samples": self.samples,
            "reasons": self.reasons,
            "model": self.model,
            "tasks": self.tasks,
            "format": self.format,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 1),
            **({"round_id": self.round_id} if self.round_id else {}),
        }


def sample_ks(samples: int) -> list[int]:
    """1, 2, 4, ... up to ``samples``, and ``samples`` itself."""
    ks = [k for k in (2**i for i in range(12)) if k <= samples]
    return ks + ([samples] if samples and samples not in ks else [])


def eval_config(
    model: str,
    tasks: Path,
    base: RatchetConfig | None,
    fewshot: int,
    system_prompt: str | None = None,
    plugins: dict | None = None,
) -> tuple[RatchetConfig, list[tuple[str, str]]]:
    """The config a round of ``base`` (defaults without one) would have with ``tasks`` as its only source and ``model``
    as its model, and the worked examples to show. A source of ``base`` reading the same file lends its settings
    (fields, system prompt, verifier, environment); ``system_prompt`` and ``plugins`` (``verifier``, ``environment``,
    ``max_turns`` keys of a ``[[tasks.sources]]`` entry; a ``module:attr`` is imported from the current folder first)
    override them.

    Raises:
        TaskDataError: the file cannot be read (``read_source``'s message).
        pydantic.ValidationError: the resulting config is invalid.
    """
    data = base.model_dump(mode="json") if base is not None else {}
    data.pop("phases", None)
    data.pop("evals", None)
    data["model"] = {**data.get("model", {}), "name_or_path": model}
    same = [s for s in data.get("tasks", {}).get("sources", []) if Path(s["path"]).resolve() == Path(tasks).resolve()]
    lent = {**(same[0] if same else {}), **{k: v for k, v in (plugins or {}).items() if v is not None}}
    src = read_source(tasks, 0.2, fewshot, verifier=lent.get("verifier"))
    source = {**src.fields, **lent, "path": str(tasks), "name": src.name, "fewshot": 0}
    if plugins and any(plugins.values()):
        source.setdefault("plugin_dir", str(Path.cwd()))
    if system_prompt is not None:
        source["system_prompt"] = system_prompt
    data["tasks"] = {**data.get("tasks", {}), "sources": [source]}
    cfg = RatchetConfig.model_validate(data)
    return cfg, src.shots[:fewshot]


def evaluate_model(
    model: str,
    tasks: Path,
    *,
    base: RatchetConfig | None = None,
    prompts: int | None = None,
    samples: int = 0,
    fewshot: int = 0,
    max_new_tokens: int | None = None,
    system_prompt: str | None = None,
    plugins: dict | None = None,
    store: tuple[Path, str] | None = None,
    heldout_only: bool = False,
) -> ModelEval:
    """Greedy pass@1 (and pass@k with ``samples``) of ``model`` on the first ``prompts`` prompts of ``tasks``.

    Args:
        model: a local checkpoint folder or the ``smollm2-135m-instruct`` alias (``resolve_model``).
        tasks: a task file of any format ``ratchet init --tasks`` reads.
        base: a campaign config whose generation, verifier and compute settings to use (None: the defaults).
        prompts: at most this many prompts, in file order (None: all of them).
        samples: sampled completions per prompt at ``eval.temperature`` for pass@k (0: greedy only).
        fewshot: worked examples before each question (math: as ``init`` writes them; code: reference solutions).
        max_new_tokens: the generation cap (None: the config's largest, ``generation.max_new_tokens_cap``).
        system_prompt: the system message (None: the format's default, or that of ``base``'s source of the file).
        plugins: a records file's ``verifier`` and a multi-turn ``environment`` with its ``max_turns`` (``eval_config``);
            an environment's prompts run as episodes, as a round's evaluation runs them.
        store: ``(db, campaign)``: store the evaluation as the next round of that evaluation-only campaign
            (``ratchet.flows.rounds.eval_store.record_evaluation``); None: nothing is written. ``model`` may then
            also be a stored checkpoint's id (or a unique prefix of one).
        heldout_only: only the file's held-out split (a campaign's ``[[evals]]`` entry drawn from a source).

    Raises:
        ValueError: ``model`` looks like a checkpoint id the store does not hold (once), or ``campaign`` trains.
        ModelError: the model cannot be resolved. TaskDataError: the file cannot be read, or holds no prompt.
        StageTimeout, WorkerFailed: generation failed (``ratchet.flows.compute.engine``).
    """
    from ratchet.loop.tasks.formats import TaskDataError

    t0 = time.monotonic()
    cfg, shots = eval_config(model, tasks, base, fewshot, system_prompt, plugins)
    ctx = Ctx(cfg)
    member = ctx.tasks.members[0]
    shown = {q for q, _ in shots}
    todo: list[Prompt] = [
        p for p in member.source.prompts if p.question not in shown and (not heldout_only or p.split == "heldout")
    ][:prompts]
    if not todo:
        raise TaskDataError(f"{tasks} holds no prompt to evaluate (after {len(shots)} few-shot example(s))")
    chats = [  # a records prompt is rendered by its source (its own chat, if it is one); the others with the shots
        ctx.messages(p)
        if p.task_format == "records"
        else chat_messages(member.system_prompt, shots or member.source.fewshot(fewshot), p.question)
        for p in todo
    ]
    g = cfg.generation
    cap = max_new_tokens or g.max_new_tokens_cap
    model_dir = stored_checkpoint(store[0] if store else None, model) or resolve_model(model)
    rows = prompt_rows(todo)
    with open_engine(
        engine_spec(model_dir, g, cfg.model.dtype), Placement(tuple(rank_groups(cfg))), gen=g, compute=cfg.compute, log=logger
    ) as engine:
        run = _sampler(cfg, engine, model_dir, todo, chats)
        greedy_params = SamplingParams(n=1, temperature=0.0, max_new_tokens=cap, stop=g.stop)
        greedy = run(greedy_params, "eval")
        sample_params = SamplingParams(
            n=max(samples, 1), temperature=cfg.eval.temperature, top_p=g.top_p, max_new_tokens=cap, seed=g.seed, stop=g.stop
        )
        sampled = run(sample_params, "eval samples") if samples else []

    def score(comps: list) -> list:  # an episode (its opening chat, then its turns) goes to its environment's score()
        episodes = [[*chats[c.prompt_index], *c.messages] if c.messages else None for c in comps]
        return score_items([c.text for c in comps], [rows[c.prompt_index] for c in comps], ctx.reward, episodes)

    scored = score(greedy)
    verdicts = [vd for _, vd in scored]
    correct = sum(v.correct for v in verdicts)
    reasons: dict[str, int] = {}
    for v in verdicts:
        reasons[v.reason] = reasons.get(v.reason, 0) + 1
    per_prompt = [0] * len(todo)
    scored_samples = score(sampled) if sampled else []
    for c, (_, v) in zip(sampled, scored_samples):
        per_prompt[c.prompt_index] += int(v.correct)
    at_k = {k: sum(pass_at_k(samples, c, k) for c in per_prompt) / len(todo) for k in sample_ks(samples)}
    round_id = None
    if store is not None:
        from ratchet.flows.rounds.eval_store import record_evaluation

        metrics = {"heldout/pass@1": correct / len(todo), "heldout/no_answer_rate": reasons.get("no_answer", 0) / len(todo)}
        metrics |= {f"heldout/pass@{k}": v for k, v in at_k.items() if k > 1}
        runs = [("eval_greedy", greedy_params, greedy, scored)]
        runs += [("eval_sample", sample_params, sampled, scored_samples)] if sampled else []
        round_id = record_evaluation(store[0], store[1], cfg, model_dir, model, todo, chats, runs, metrics, time.monotonic() - t0)
    return ModelEval(
        model=model,
        model_dir=str(model_dir),
        tasks=str(tasks),
        format=str(member.source.format),
        prompts=len(todo),
        correct=correct,
        pass1=correct / len(todo),
        ci95=wilson_interval(correct, len(todo)),
        samples=samples,
        pass_at_k=at_k,
        reasons=dict(sorted(reasons.items())),
        seconds=time.monotonic() - t0,
        completion_tokens=sum(len(c.token_ids) for c in [*greedy, *sampled]),
        round_id=round_id,
    )


def _sampler(cfg: RatchetConfig, engine, model_dir: Path, todo: list[Prompt], chats: list[list[dict]]):
    """``run(params, name)``: completions of every chat, or episodes for a source with an ``environment``
    (``ratchet.loop.environments.sample_mixed``: one engine call per turn; bounded by ``sft.max_seq_len`` and
    ``generation.max_model_len`` as a round's)."""
    src = cfg.tasks.sources[0]
    if not src.environment:
        return lambda params, name: engine.generate(chats, params, name)
    from transformers import AutoTokenizer

    from ratchet.flows.rounds.stages.multi_turn import episode_token_bound, source_environment
    from ratchet.loop.environments import EpisodeSpec, prompt_record, sample_mixed

    ref = source_environment(src)
    specs = [EpisodeSpec(ref.make, prompt_record(p), chat, src.max_turns, ref.name) for p, chat in zip(todo, chats)]
    tok = AutoTokenizer.from_pretrained(model_dir)
    bound = episode_token_bound(cfg)
    return lambda params, name: sample_mixed(lambda batch, p: engine.generate(batch, p, name), tok, chats, specs, params, bound)
