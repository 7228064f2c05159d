"""A campaign's whole config: ``RatchetConfig`` with its ``[[phases]]`` and the settings that define the campaign."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ratchet.loop.config.compute import ComputeConfig
from ratchet.loop.config.evaluation import EvalConfig, GateConfig
from ratchet.loop.config.frozen import _Frozen, _merged, field_identity, identity
from ratchet.loop.config.generation import ROLLOUT_TEMPERATURE, GenerationConfig, ModelConfig
from ratchet.loop.config.service_config import (
    PreflightConfig,
    PublishConfig,
    RetentionConfig,
    ScheduleConfig,
    ServiceConfig,
    TrackingConfig,
)
from ratchet.loop.config.tasks import EvalSetConfig, TaskConfig
from ratchet.loop.config.training import GRPOConfig, SFTConfig
from ratchet.loop.config.verifier import VerifierConfig

Algorithm = Literal["sft", "rft", "grpo"]
_log = logging.getLogger(__name__)

# The sections a [[phases]] table may override (whole or key by key). Evaluation settings ([eval], [[evals]]) and
# the model are the campaign's: every phase's candidate is judged on the same eval set as the last phase's.
PHASE_SECTIONS = ("tasks", "generation", "verifier", "sft", "grpo", "gate")


class PhaseConfig(_Frozen):
    """One ``[[phases]]`` entry, a curriculum phase (not a pipeline stage: generate, verify, ...): rounds of one
    algorithm with its own sources and settings (DeepSeek-R1's pipeline: cold-start SFT -> reasoning RL -> rejection
    sampling + general SFT -> RL for all scenarios). Sections given here are merged key by key over the campaign's
    top-level sections for this phase's rounds."""

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Phase name, stored with each of its rounds (rounds.stage); default 'phase-<n>' (1-based).",
    )
    algorithm: Algorithm = Field(
        description="sft: fine-tune on the phase's prompts' reference solutions (cold start, no rollouts); rft: "
        "rejection-sampling fine-tuning on verified-correct rollouts; grpo: a GRPO-family RL pass over the groups.",
    )
    rounds: int = Field(1, ge=1, description="Rounds this phase runs before the next phase starts.")
    tasks: dict | None = Field(None, description="Overrides of [tasks] for this phase (e.g. its own [[phases.tasks.sources]]).")
    generation: dict | None = Field(None, description="Overrides of [generation] (e.g. teacher, temperature, group_size).")
    verifier: dict | None = Field(None, description="Overrides of [verifier], the reward (e.g. language_weight).")
    sft: dict | None = Field(None, description="Overrides of [sft] (e.g. lr, general_data, general_ratio).")
    grpo: dict | None = Field(None, description="Overrides of [grpo] (e.g. beta, lr).")
    gate: dict | None = Field(None, description="Overrides of [gate] (e.g. a wider margin for a cold start).")


class RatchetConfig(_Frozen):
    campaign: str = Field(
        "demo",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Campaign name (letters, digits, '.', '_', '-'; it names a directory); rounds of one "
        "campaign share a held-out set and an incumbent.",
        json_schema_extra=identity("campaign"),
    )
    campaign_epoch: int = Field(
        0,
        ge=0,
        description="Which start of this campaign name the store holds: 0, or one more per `ratchet run --reset` "
        "(which retires a start that never completed a round). Ratchet sets it from the store on every run; a value "
        "written here is replaced.",
        json_schema_extra={**identity("run"), "set_by_ratchet": True},  # `ratchet init` writes it commented out
    )
    max_rounds: int | None = Field(
        None,
        ge=1,
        description="Rounds before the campaign completes; unset = no limit (a run does schedule.rounds_per_run).",
        json_schema_extra=identity("run"),
    )
    algorithm: Algorithm = Field(
        "rft",
        description="rft: rejection-sampling fine-tuning on verified-correct trajectories; grpo: a GRPO-family RL pass "
        "over the groups; sft: fine-tuning on the prompts' reference solutions (a cold start). With [[phases]], each "
        "phase's own algorithm.",
        json_schema_extra=identity("campaign"),
    )
    db: str = Field("ratchet.duckdb", description="DuckDB file of the trajectory store.", json_schema_extra=identity("run"))
    run_dir: str | None = Field(
        None,
        description="Stage outputs (Parquet, checkpoints); default '<db without suffix>.runs'.",
        json_schema_extra=identity("run"),
    )
    model: ModelConfig = Field(
        ModelConfig(), description="[model]: the base model and its dtype.", json_schema_extra=identity("campaign")
    )
    tasks: TaskConfig = Field(
        TaskConfig(),
        description="[tasks]: where prompts come from and the held-out split.",
        json_schema_extra=identity("campaign"),
    )
    generation: GenerationConfig = Field(
        GenerationConfig(), description="[generation]: rollout sampling.", json_schema_extra=identity("campaign")
    )
    verifier: VerifierConfig = Field(
        VerifierConfig(), description="[verifier]: the reward.", json_schema_extra=identity("campaign")
    )
    sft: SFTConfig = Field(
        SFTConfig(),
        description="[sft]: rejection-sampling fine-tuning (rft and sft rounds).",
        json_schema_extra=identity("campaign"),
    )
    grpo: GRPOConfig = Field(
        GRPOConfig(), description="[grpo]: the GRPO-family pass (grpo rounds).", json_schema_extra=identity("campaign")
    )
    eval: EvalConfig = Field(
        EvalConfig(), description="[eval]: held-out pass@k sampling.", json_schema_extra=identity("campaign")
    )
    gate: GateConfig = Field(
        GateConfig(),
        description="[gate]: the promote / reject / halt rule. Not part of the identity: each gate decision records the "
        "rule and settings it ran with (gate_decisions.settings_json), so changing them is never a settings conflict.",
        json_schema_extra=identity("run"),
    )
    schedule: ScheduleConfig = Field(
        ScheduleConfig(), description="[schedule]: when the daemon runs the campaign.", json_schema_extra=identity("run")
    )
    retention: RetentionConfig = Field(
        RetentionConfig(), description="[retention]: which checkpoints' weights are kept.", json_schema_extra=identity("run")
    )
    compute: ComputeConfig = Field(
        ComputeConfig(), description="[compute]: the device pool and worker processes.", json_schema_extra=identity("run")
    )
    service: ServiceConfig = Field(
        ServiceConfig(), description="[service]: modes of the files the campaign creates.", json_schema_extra=identity("run")
    )
    preflight: PreflightConfig = Field(
        PreflightConfig(),
        description="[preflight]: the pilot `ratchet run` samples before the first round.",
        json_schema_extra=identity("run"),
    )
    tracking: TrackingConfig = Field(
        TrackingConfig(), description="[tracking]: MLflow, TensorBoard, W&B sinks.", json_schema_extra=identity("run")
    )
    publish: PublishConfig = Field(
        PublishConfig(),
        description="[publish]: model registries every promoted checkpoint reaches (MLflow, the Hugging Face Hub).",
        json_schema_extra=identity("run"),
    )
    evals: tuple[EvalSetConfig, ...] = Field(
        (),
        description="[[evals]]: pinned evaluation sets; unset: tasks.heldout_prompts from the sources' held-out split.",
        json_schema_extra=identity("campaign"),
    )
    phases: tuple[PhaseConfig, ...] = Field(
        (),
        description="[[phases]]: the campaign's rounds in curriculum phases, each with its algorithm, rounds and "
        "overrides; max_rounds defaults to their total (later rounds stay in the last phase). Unset: every round is one "
        "phase. The old key [[stages]] is read as [[phases]], with a notice.",
        json_schema_extra=identity("campaign"),
    )

    @model_validator(mode="before")
    @classmethod
    def _phase_rounds(cls, data):
        """``[[stages]]`` (the old key) read as ``[[phases]]``; with phases and no max_rounds, the campaign ends after
        the phases' total rounds."""
        data = fold_stages_key(data)
        if isinstance(data, dict) and data.get("phases") and data.get("max_rounds") is None:
            phases = data["phases"]
            if isinstance(phases, (list, tuple)) and all(isinstance(s, dict) for s in phases):
                total = sum(s.get("rounds", 1) for s in phases)
                if isinstance(total, int):
                    data = {**data, "max_rounds": total}
        return data

    @model_validator(mode="after")
    def _check(self) -> RatchetConfig:
        self._check_phases()
        known = {s.source_name() for s in self.tasks.sources} or {"arithmetic"}
        for e in self.evals:
            if e.source is not None and e.source not in known:
                raise ValueError(f"evals entry {e.name!r} names source {e.source!r}; tasks sources are {sorted(known)}")
        if self.algorithm == "grpo" and any(s.group_size not in (None, self.generation.group_size) for s in self.tasks.sources):
            raise ValueError(
                "grpo needs one group size: a [[tasks.sources]] group_size differs from generation.group_size "
                f"({self.generation.group_size}); drop the per-source group_size or use algorithm = 'rft'"
            )
        k = self.gate.pass_at_k
        if k is not None and k > self.eval.num_samples:
            raise ValueError(
                f"gate.pass_at_k = {k} needs at least {k} sampled completions per held-out prompt (eval.num_samples = "
                f"{self.eval.num_samples}); set eval.num_samples >= {k} or unset gate.pass_at_k"
            )
        if self.publish.mlflow_model and not (self.publish.mlflow or self.tracking.mlflow):
            raise ValueError(
                f"publish.mlflow_model = {self.publish.mlflow_model!r} needs an MLflow URI: set publish.mlflow (or "
                "tracking.mlflow), e.g. 'sqlite:///mlflow.db'"
            )
        names = [e.name for e in self.evals]
        if self.evals and not any(e.role == "gate" for e in self.evals):
            raise ValueError(f"no [[evals]] entry has role = 'gate' ({names}); the gate needs at least one set to decide on")
        if len(set(names)) != len(names):
            raise ValueError(f"evals names {names} must be unique; give each [[evals]] its own name")
        if self.algorithm == "grpo" and self.generation.group_size < 2:
            raise ValueError(
                f"generation.group_size ({self.generation.group_size}) must be >= 2 for group advantages; "
                "set generation.group_size >= 2"
            )
        if self.algorithm == "grpo" and self.rollout_temperature == 0 and self.generation.group_size > 1:
            raise ValueError(
                f"generation.temperature (0) with group_size ({self.generation.group_size}) samples the same completion "
                "group_size times, so every GRPO advantage is 0 and nothing is learned; set generation.temperature > 0 (e.g. 0.8)"
            )
        if self.generation.teacher is not None and self.algorithm != "rft" and not self.phases:
            raise ValueError(
                f"generation.teacher ({self.generation.teacher!r}) needs algorithm = 'rft' (distillation: fine-tune on the "
                f"teacher's verified rollouts); {self.algorithm} is on-policy or uses no rollouts; unset the teacher"
            )
        if self.sft.rationalization and self.algorithm != "rft" and not self.phases:
            raise ValueError(
                f"sft.rationalization trains on hinted rollouts of unsolved prompts, an rft round's step; algorithm = "
                f"{self.algorithm!r} has none; set algorithm = 'rft' or sft.rationalization = false"
            )
        if self.algorithm == "grpo" and self.tasks.train_prompts_per_round < self.grpo.steps_per_round:
            raise ValueError(
                f"tasks.train_prompts_per_round ({self.tasks.train_prompts_per_round}) must be >= "
                f"grpo.steps_per_round ({self.grpo.steps_per_round}): each step needs its own prompts; "
                "raise train_prompts_per_round or lower steps_per_round"
            )
        tp, devices = self.generation.tensor_parallel_size, self.compute.devices
        if tp > 1 and (not self.compute.on_gpu or len(devices) % tp):
            raise ValueError(
                f"generation.tensor_parallel_size ({tp}) must divide the number of GPUs in compute.devices "
                f"({list(devices)}); list a multiple of {tp} cuda devices or lower tensor_parallel_size"
            )
        return self

    def _check_phases(self) -> None:
        names = [self.phase_name(i) for i in range(len(self.phases))]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"phases names {dup} appear more than once; give each [[phases]] its own name = '...'")
        for i in range(len(self.phases)):
            self.for_phase(i)

    def phase_name(self, index: int) -> str:
        """The name of phase ``index`` (0-based): its ``name``, else ``'phase-<index + 1>'``."""
        return self.phases[index].name or f"phase-{index + 1}"

    @property
    def rollout_temperature(self) -> float:
        """``generation.temperature``, or when unset the algorithm's default (``ROLLOUT_TEMPERATURE``)."""
        t = self.generation.temperature
        return ROLLOUT_TEMPERATURE[self.algorithm] if t is None else t

    def for_phase(self, index: int) -> RatchetConfig:
        """The config phase ``index`` (0-based) runs with: its algorithm, and its sections merged key by key over the
        campaign's (a list such as ``tasks.sources`` is replaced whole); ``phases`` is empty in it.

        Raises:
            ValueError: one line naming the phase and the bad key or value, or an override that would change the
                evaluation (``generation.max_new_tokens`` cap, ``verifier.format_template``), which every phase shares.
        """
        phase, where = self.phases[index], f"phases[{index}] ({self.phase_name(index)})"
        data = self.model_dump(mode="json", exclude={"phases"})
        data["algorithm"] = phase.algorithm
        for section in PHASE_SECTIONS:
            over = getattr(phase, section)
            if over:
                data[section] = _merged(data[section], over)
        try:
            eff = RatchetConfig.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            msg = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}: {loc + ': ' if loc else ''}{msg} (got {first.get('input')!r})") from None
        same = {
            "generation.max_new_tokens cap": (eff.generation.max_new_tokens_cap, self.generation.max_new_tokens_cap),
            "verifier.format_template": (eff.verifier.format_template, self.verifier.format_template),
        }
        for key, (mine, campaign) in same.items():
            if mine != campaign:
                raise ValueError(
                    f"{where}: {key} {mine!r} differs from the campaign's {campaign!r}; every phase is evaluated on the "
                    "same eval set, so set it at the top level instead"
                )
        return eff

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path(self.db).with_suffix(".runs")

    def with_absolute_paths(self) -> RatchetConfig:
        """This config with ``db`` and the resolved ``run_dir`` made absolute against the current directory."""
        return self.model_copy(update={"db": str(Path(self.db).resolve()), "run_dir": str(self.resolved_run_dir().resolve())})

    def saved_config_path(self) -> Path:
        """Where the campaign's config is saved for its tasks to read (``ratchet.loop.campaign.round_context.save_config``)."""
        return self.resolved_run_dir() / self.campaign / "config.json"

    def campaign_settings(self) -> dict:
        """The settings that define a campaign (a rerun with different ones must use a new name), as JSON values.

        Each field declares its place (``ratchet.loop.config.frozen.Identity``): ``run`` fields are left out,
        ``neutral_default`` fields are left out while at their default, and a section's fields inherit the
        section's. The trainer section the algorithm does not use (``grpo`` for rft, ``sft`` for grpo) is left
        out too, so a change there (or to its defaults) never turns an existing campaign into a conflict.
        """
        used = {s.algorithm for s in self.phases} or {self.algorithm}
        unused = "grpo" if "grpo" not in used else "sft" if used == {"grpo"} else None
        settings = _identity_settings(self, "campaign", skip={unused} if unused else set())
        for entry in settings.get("evals") or ():
            entry.pop("role", None)  # how a set gates is a gate setting (not part of the identity), not what is evaluated
            entry.pop("confirmation_prompts", None)  # a gate setting too: the confirmation slice is read beside the set
        if not self.phases:
            settings.pop("phases", None)  # campaigns recorded before phases existed keep their settings hash
            # the temperature sampled with, as campaigns recorded it before the per-algorithm default: an rft campaign
            # continues; a grpo one recorded at the old 0.8 default is a conflict (its rollouts would change)
            settings["generation"]["temperature"] = self.rollout_temperature
        return settings


def fold_stages_key(data):
    """A campaign table (or stored settings) with the old key ``stages`` read as ``phases``, with a one-line notice.

    Raises:
        ValueError: both ``stages`` and ``phases`` are set.
    """
    if not isinstance(data, dict) or "stages" not in data:
        return data
    if "phases" in data:
        raise ValueError("[[stages]] and [[phases]] are both set; [[stages]] is the old name of [[phases]]: keep one")
    data = {("phases" if k == "stages" else k): v for k, v in data.items()}
    _log.warning("[[stages]] is read as [[phases]] (the curriculum's phases; same meaning): rename the key")
    return data


def _identity_settings(model: BaseModel, inherited: str, skip: set[str] = frozenset()) -> dict:
    """``model``'s fields that are part of a campaign's identity, as ``model_dump(mode="json")`` writes them."""
    out = {}
    for name, info in type(model).model_fields.items():
        kind = field_identity(info, inherited)
        value = getattr(model, name)
        if name in skip or kind == "run":
            continue
        if kind == "neutral_default" and value == info.get_default(call_default_factory=True):
            continue
        if isinstance(value, BaseModel):
            out[name] = _identity_settings(value, kind)
        else:
            out[name] = model.model_dump(mode="json", include={name})[name]
    return out
