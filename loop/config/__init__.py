"""Run configuration: one frozen pydantic model per section of ``ratchet.toml``, loaded by ``load_config``.

Every field carries its help text next to it, and its place in the campaign's identity
(``ratchet.loop.config.frozen.identity``: a setting that defines the campaign, one that only says how or
where it runs, or one added later with a neutral default); cross-field rules are checked at
construction and name the value, the rule and the fix. The full config of a campaign is stored with
the campaign (``campaigns.config_json``) so every round can be traced to the settings that produced it.

The sections live in one module each (``generation``, ``compute``, ``verifier``, ``training``,
``evaluation``, ``service``, ``tasks``, ``campaign``, ``loading``); this package exports every class.
"""

from ratchet.loop.config.compute import ComputeConfig
from ratchet.loop.config.evaluation import EvalConfig, GateConfig, MonitorsConfig
from ratchet.loop.config.frozen import IDENTITIES, SEED_MAX, Identity, field_identity, identity
from ratchet.loop.config.generation import DEFAULT_MODEL, ROLLOUT_TEMPERATURE, GenerationConfig, ModelConfig
from ratchet.loop.config.loading import ConfigError, DaemonConfig, _validate, load_config, load_daemon_config
from ratchet.loop.config.ratchet_config import PHASE_SECTIONS, Algorithm, PhaseConfig, RatchetConfig
from ratchet.loop.config.service_config import (
    PrefectConfig,
    PreflightConfig,
    PublishConfig,
    RetentionConfig,
    ScheduleConfig,
    ServiceConfig,
    TrackingConfig,
)
from ratchet.loop.config.tasks import EvalSetConfig, RecordFields, TaskConfig, TaskFormat, TaskSourceConfig
from ratchet.loop.config.training import GRPOConfig, SFTConfig
from ratchet.loop.config.verifier import VerifierConfig

__all__ = [
    "Algorithm",
    "ComputeConfig",
    "ConfigError",
    "DEFAULT_MODEL",
    "DaemonConfig",
    "EvalConfig",
    "EvalSetConfig",
    "GRPOConfig",
    "GateConfig",
    "MonitorsConfig",
    "GenerationConfig",
    "IDENTITIES",
    "Identity",
    "ModelConfig",
    "PHASE_SECTIONS",
    "PhaseConfig",
    "PreflightConfig",
    "PrefectConfig",
    "ROLLOUT_TEMPERATURE",
    "RatchetConfig",
    "RecordFields",
    "RetentionConfig",
    "SEED_MAX",
    "SFTConfig",
    "ScheduleConfig",
    "ServiceConfig",
    "TrackingConfig",
    "PublishConfig",
    "TaskConfig",
    "TaskFormat",
    "TaskSourceConfig",
    "VerifierConfig",
    "_validate",
    "field_identity",
    "identity",
    "load_config",
    "load_daemon_config",
]
