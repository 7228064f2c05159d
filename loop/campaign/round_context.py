"""What a stage derives from its two parameters (config path, round index): paths, ids, prompts, markers.

Stages pass only these small values between each other; everything else is re-derived here or read
from the stage's Parquet outputs and the store. Used by the Prefect stage tasks and by the device
pool's worker processes alike, so it imports no Prefect.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from ratchet.common.files import atomic_write_text, file_mode
from ratchet.common.seeds import derive_seed
from ratchet.loop.campaign.curriculum import phase_of
from ratchet.loop.config import GRPOConfig, RatchetConfig, SFTConfig
from ratchet.loop.evaluation.metrics import eval_set_id
from ratchet.loop.evaluation.scoring import reward_spec, reward_version
from ratchet.loop.tasks.picking import History, Slot, round_slots
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.tasks.task_sets import TaskSet
from ratchet.verifiers.reward import RewardSpec

PINNED_EVAL_FILE = "eval_set.json"


def now() -> datetime:
    return datetime.now(UTC)


def short_hash(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:16]


def campaign_id_of(name: str, epoch: int = 0) -> str:
    """The store id of campaign ``name``'s ``epoch``-th start (``campaign_epoch``: 0 unless ``ratchet run --reset``
    retired earlier starts that never completed a round)."""
    return short_hash("campaign", name) if epoch == 0 else short_hash("campaign", name, epoch)


@dataclass(frozen=True)
class Ctx:
    """A round's (or, at round 0, the campaign's) derived values.

    ``cfg`` is what the round runs with: the campaign config, or under ``[[phases]]`` its phase's effective config
    (``ratchet.loop.campaign.curriculum.phase_of``), in which case ``campaign_cfg`` is the campaign's own. Evaluation (the held-out
    prompts, how they are rendered, the eval set id) always follows the campaign's config, so every phase's gate
    compares on the same eval set.
    """

    cfg: RatchetConfig
    round_index: int = 0
    step: int = 0  # on-policy step inside the round (grpo.steps_per_round); 0 for one-step rounds
    campaign_cfg: RatchetConfig | None = None
    phase_index: int | None = None  # 0-based [[phases]] entry (curriculum phase) of the round; None without phases

    @cached_property
    def reward(self) -> RewardSpec:
        """The round's ``RewardSpec``, built once from its ``[verifier]`` section; every scorer of the round takes it."""
        return reward_spec(self.cfg.verifier.model_dump(), [s.model_dump() for s in self.cfg.tasks.sources])

    @cached_property
    def verifier_version(self) -> str:
        """The campaign's verifier version (``ratchet.loop.evaluation.scoring.reward_version``: the composite
        verifier's, plus its sources' own verifiers' identities): what the round's verdicts carry and its queries select.

        Raises:
            PluginError: a source's verifier cannot be imported.
        """
        return reward_version(self.reward)

    @property
    def eval_cfg(self) -> RatchetConfig:
        """The config evaluation follows: the campaign's (a phase never changes the eval set)."""
        return self.campaign_cfg or self.cfg

    @property
    def phase_name(self) -> str | None:
        """The name of the round's curriculum phase (its ``[[phases]]`` entry, stored in ``rounds.stage``); None without
        phases. Not a pipeline stage (generate, verify, ...: ``stage_dir``)."""
        if self.phase_index is None or self.campaign_cfg is None:
            return None
        return self.campaign_cfg.phase_name(self.phase_index)

    @property
    def db(self) -> Path:
        return Path(self.cfg.db)

    @property
    def campaign_id(self) -> str:
        return campaign_id_of(self.cfg.campaign, self.cfg.campaign_epoch)

    @property
    def campaign_dir(self) -> Path:
        return self.cfg.resolved_run_dir() / self.cfg.campaign

    @property
    def round_id(self) -> str:
        return f"{self.campaign_id}-r{self.round_index}"

    def stage_dir(self, stage: str) -> Path:
        """``<campaign>/round-<n>/<stage>``; steps after the first of a multi-step round: ``round-<n>/step-<s>/<stage>``."""
        round_dir = self.campaign_dir / f"round-{self.round_index}"
        return round_dir / stage if self.step == 0 else round_dir / f"step-{self.step}" / stage

    def at_step(self, step: int) -> Ctx:
        return Ctx(self.cfg, self.round_index, step, self.campaign_cfg, self.phase_index)

    @property
    def steps(self) -> int:
        """On-policy steps of a round: grpo.steps_per_round for GRPO, 1 for rejection-sampling fine-tuning."""
        return self.cfg.grpo.steps_per_round if self.cfg.algorithm == "grpo" else 1

    @property
    def trainer_cfg(self) -> GRPOConfig | SFTConfig:
        """The round's trainer settings: ``[grpo]`` for GRPO, ``[sft]`` for rejection sampling and cold-start SFT."""
        return self.cfg.grpo if self.cfg.algorithm == "grpo" else self.cfg.sft

    @property
    def checkpoints_dir(self) -> Path:
        return self.cfg.resolved_run_dir() / "checkpoints"

    @cached_property
    def tasks(self) -> TaskSet:
        return TaskSet(self.cfg.tasks, self.cfg.evals)

    @cached_property
    def eval_tasks(self) -> TaskSet:
        """The campaign's task set, which renders the evaluation prompts (the phase's ``tasks`` may differ)."""
        return self.tasks if self.campaign_cfg is None else TaskSet(self.eval_cfg.tasks, self.eval_cfg.evals)

    @cached_property
    def _eval_ids(self) -> frozenset[str]:
        return frozenset(p.prompt_id for p in self.heldout())

    def messages(self, p: Prompt) -> list[dict[str, str]]:
        """The chat of a prompt: an evaluation prompt as the campaign renders it, any other as the round's tasks do."""
        if self.campaign_cfg is not None and p.prompt_id in self._eval_ids:
            return self.eval_tasks.messages(p)
        return self.tasks.messages(p)

    @property
    def pinned_eval_path(self) -> Path:
        """The campaign's evaluation prompts as the store pinned them (written by the prepare-campaign task)."""
        return self.campaign_dir / PINNED_EVAL_FILE

    def fresh_heldout(self) -> list[Prompt]:
        """The evaluation prompts drawn from the task files and config now (what a new campaign pins)."""
        return self.eval_tasks.eval_prompts(self.eval_cfg)

    @cached_property
    def _heldout(self) -> list[Prompt]:
        if self.pinned_eval_path.is_file():
            return [Prompt(**r) for r in json.loads(self.pinned_eval_path.read_text())]
        return self.fresh_heldout()

    def heldout(self) -> list[Prompt]:
        """The evaluation prompts in their pinned order (drawn once per context: sympy computes arithmetic golds)."""
        return self._heldout

    def with_heldout(self, prompts: list[Prompt]) -> Ctx:
        """This context evaluating ``prompts`` instead of the pinned ones (a refreshed gating slice: its eval set id
        before it is pinned)."""
        other = Ctx(self.cfg, self.round_index, self.step, self.campaign_cfg, self.phase_index)
        other.__dict__["_heldout"] = list(prompts)  # the cached property's slot (frozen dataclass: no setattr)
        return other

    def train_prompts(self) -> list[Prompt]:
        """This step's share of the round's seeded train prompts (all of them in a one-step round); never an eval
        question. The prompts a round samples are ``round_slots``' (the same ones under ``tasks.selection = "uniform"``
        without refill); preflight checks and a cold-start sft round's reference solutions use these."""
        drawn = self.tasks.train_excluding(
            self.cfg.tasks.train_prompts_per_round,
            seed=derive_seed("train_prompts", self.cfg.tasks.seed, self.round_index),
            evals=self.heldout(),
        )
        n, k = len(drawn), self.steps
        return drawn[self.step * n // k : (self.step + 1) * n // k]

    @property
    def refill_reserve(self) -> int:
        """Refill prompts the round may draw beyond ``tasks.train_prompts_per_round`` (all its steps together):
        ``floor(grpo.max_oversample x train_prompts_per_round)`` for a GRPO round with dynamic sampling, else 0."""
        g = self.cfg.grpo
        if self.cfg.algorithm != "grpo" or not g.dynamic_sampling:
            return 0
        return math.floor(g.max_oversample * self.cfg.tasks.train_prompts_per_round)

    def round_slots(self, history: History) -> list[Slot]:
        """Every prompt the round may sample, with its step and estimate (``ratchet.loop.tasks.picking.round_slots``):
        ``tasks.selection`` over the round's seeded candidates given the store's ``history``. Never an eval question."""
        t = self.cfg.tasks
        return round_slots(
            self.tasks,
            t,
            seed=derive_seed("train_prompts", t.seed, self.round_index),
            evals=self.heldout(),
            history=history,
            group_size=self.cfg.generation.group_size,
            steps=self.steps,
            reserve=self.refill_reserve,
        )

    def eval_set_id(self, verifier: str | None = None) -> str:
        """Identity of the campaign's evaluation (prompts and decoding settings); ``verifier``: the id it had under
        another verifier version (``ratchet.flows.rounds.state.reverify.carry_over``)."""
        cfg = self.eval_cfg
        e, t = cfg.eval, cfg.tasks
        settings = {
            "max_new_tokens": cfg.generation.max_new_tokens_cap,  # the 'auto' maximum: comparable across rounds
            "num_samples": e.num_samples,
            "temperature": e.temperature,
            "system_prompt": t.system_prompt,
            "fewshot": t.fewshot,
            **({"sources": [(s.source_name(), s.system_prompt, s.fewshot) for s in t.sources]} if t.sources else {}),
            "verifier": verifier or self.verifier_version,
            "format_template": cfg.verifier.format_template,
        }
        return eval_set_id([p.prompt_id for p in self.heldout()], settings)


def load_ctx(config_path: str | Path, round_index: int = 0, step: int = 0) -> Ctx:
    """The context of round ``round_index`` (0: the campaign) from a saved config (``save_config``).

    Under ``[[phases]]``, a round's ``cfg`` is its phase's effective config (``ratchet.loop.campaign.curriculum.phase_of``), derived
    from the saved campaign config and the round index alone, so a resumed round runs with the same settings.
    """
    cfg = RatchetConfig.model_validate_json(Path(config_path).read_text())
    if round_index < 1 or not cfg.phases:
        return Ctx(cfg, round_index, step)
    phase, effective = phase_of(cfg, round_index)
    return Ctx(effective, round_index, step, campaign_cfg=cfg, phase_index=phase)


def pin_eval_prompts(ctx: Ctx, prompts: list[Prompt]) -> Path:
    """Write the evaluation prompts the store pinned where every stage of the campaign reads them."""
    return atomic_write_text(ctx.pinned_eval_path, json.dumps([asdict(p) for p in prompts]))


def save_config(cfg: RatchetConfig) -> Path:
    """Write the campaign's config where its tasks can read it (under ``[service] file_mode``: the run dir's first
    files); returns the path."""
    path = cfg.saved_config_path()
    with file_mode(cfg.service.file_mode):
        return atomic_write_text(path, cfg.model_dump_json(indent=1))


# --- stage markers: a stage is done iff its marker exists (written last, atomically) -------------


def read_marker(stage_dir: Path) -> dict | None:
    m = stage_dir / "_SUCCESS.json"
    return json.loads(m.read_text()) if m.is_file() else None


def write_marker(stage_dir: Path, info: dict) -> dict:
    atomic_write_text(stage_dir / "_SUCCESS.json", json.dumps(info, indent=1, default=str))
    return info


class Timer:
    """Splits a stage's wall time into compute (model/verifier work) and the rest (store, files)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.compute_s = 0.0

    @contextmanager
    def compute(self) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.compute_s += time.perf_counter() - t

    def summary(self) -> dict:
        return {"wall_s": time.perf_counter() - self.t0, "compute_s": self.compute_s}
