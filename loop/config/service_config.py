"""Config of a campaign as a service: ``[schedule]``, ``[retention]``, ``[service]``, ``[preflight]`` and the daemon's
``[prefect]`` server."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.frozen import _Frozen


class ScheduleConfig(_Frozen):
    """When `ratchet up` starts the campaign (each run does `rounds_per_run` more rounds); not part of its identity."""

    rounds_per_run: int = Field(
        1, ge=1, description="Rounds each scheduled run does before it stops (1 = one round a night); the next run continues."
    )
    catch_up: int = Field(
        1,
        ge=0,
        description="Missed scheduled runs `ratchet up` still starts per campaign when it comes up after a downtime (0: none).",
    )

    cron: str = Field(
        "0 2 * * *", description="Cron expression (minute hour day month weekday), e.g. '0 2 * * *' = nightly at 02:00."
    )
    interval_s: float | None = Field(
        None,
        gt=0.0,
        description="Run every this many seconds instead of the cron (for trials); `ratchet up --interval-s N` sets it for every campaign.",
    )
    timezone: str | None = Field(
        None, description="IANA zone of the cron, e.g. 'Europe/Berlin'; unset = this machine's local zone."
    )
    active: bool = Field(
        True, description="false: the deployment is served but its schedule starts paused (`ratchet schedule resume` starts it)."
    )

    @model_validator(mode="after")
    def _check(self) -> ScheduleConfig:
        if len(self.cron.split()) != 5:
            raise ValueError(f"schedule.cron {self.cron!r} must have 5 fields (minute hour day month weekday); e.g. '0 2 * * *'")
        if self.timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"schedule.timezone {self.timezone!r} is not an IANA time zone; use e.g. 'UTC' or 'Europe/Berlin'"
                ) from None
        return self


class RetentionConfig(_Frozen):
    """What disk a campaign keeps once a round's gate has decided (rows always stay; see store/retention.py)."""

    keep_last_promoted: int = Field(
        2, ge=1, description="Promoted checkpoints whose weights are kept (besides the base, the incumbent and the best-ever)."
    )
    keep_stage_files: bool = Field(False, description="true: keep each round's stage Parquet files and shards after ingest.")
    enabled: bool = Field(True, description="false: never delete anything after a gate (`ratchet gc` still can).")


class ServiceConfig(_Frozen):
    """How a campaign's process treats the files it creates (docs/daemon.md); not part of its identity."""

    file_mode: Literal["private", "group"] = Field(
        "private",
        description="Modes of the files Ratchet creates under the store, the run dir and $RATCHET_HOME (and Prefect's "
        "database under `ratchet up`): 'private' 0600 files / 0700 folders (umask 077); 'group' 0640 / 0750 (umask 027), "
        "so users in the service's group can read the store (`ratchet sql`). CLI commands without a config: env "
        "RATCHET_FILE_MODE.",
    )


class PreflightConfig(_Frozen):
    """What `ratchet run` checks before a campaign's first round (docs/commands.md); not part of its identity."""

    pilot: bool = Field(
        True,
        description="Before a campaign's first round, `ratchet run` (and --dry-run, `ratchet check`) samples "
        "pilot_prompts train prompts x group_size with the model that will generate, at the round's sampling settings, "
        "and warns, one line each, about completions cut at max_new_tokens (with a cap that fits), a pass rate of 0 "
        "(nothing to train on) and no parseable answer. false: skip it (tests, CI).",
    )
    pilot_prompts: int = Field(
        4, ge=1, le=64, description="Train prompts the pilot samples (each group_size times); the first of round 1's draw."
    )


class TrackingConfig(_Frozen):
    """Where each gated round is also written (docs/tracking.md): any combination; the store stays the source of truth."""

    mlflow: str | None = Field(
        None,
        description="MLflow tracking URI, e.g. 'sqlite:///runs/mlflow.db' (offline) or 'http://host:5000'; one run per "
        "round. Needs `pip install 'ratchet[tracking]'`.",
    )
    tensorboard: str | None = Field(
        None, description="TensorBoard log dir: scalars per round (step = round index) under <dir>/<campaign>."
    )
    wandb: str | None = Field(None, description="W&B offline folder (`wandb sync` uploads it later); needs `pip install wandb`.")
    experiment: str | None = Field(None, description="MLflow experiment / W&B project; unset: the campaign name.")

    def sinks(self) -> dict[str, str]:
        """``{sink: URI or folder}`` of the sinks that are set."""
        return {k: v for k, v in (("mlflow", self.mlflow), ("tensorboard", self.tensorboard), ("wandb", self.wandb)) if v}


class PrefectConfig(_Frozen):
    """The Prefect server `ratchet up` starts (ignored when PREFECT_API_URL points at a running one)."""

    host: str = Field("127.0.0.1", description="Address the server and its UI listen on.")
    port: int = Field(
        4200, ge=1, le=65535, description="Port of the API and UI (http://host:port); `ratchet up --port` overrides it."
    )
    database_url: str | None = Field(
        None,
        description="Server database; unset = SQLite under $RATCHET_HOME/prefect (or env PREFECT_API_DATABASE_CONNECTION_URL). "
        "PostgreSQL: 'postgresql+asyncpg://user:pass@host:5432/prefect'.",
    )
