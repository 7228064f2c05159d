"""Config of where model compute runs: ``[compute]``, the device pool and its worker processes (see ``ratchet.loop.config``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.frozen import _Frozen


class ComputeConfig(_Frozen):
    """Where generation and training run: a pool of devices, each stage's work in child processes with a time limit."""

    devices: tuple[str, ...] = Field(
        ("cpu",),
        description="Device pool: 'cpu', or a list such as ['cuda:0', 'cuda:1'] (one generation worker per device, or per "
        "generation.tensor_parallel_size devices; training under `accelerate launch` over all of them), or ['cpu', 'cpu'] "
        "for two CPU generation workers. A single string is a one-device pool.",
    )
    generate_timeout_s: float = Field(
        3600.0,
        gt=0.0,
        description="Wall-clock limit of each generation worker (model load included), seconds; then it is killed.",
    )
    train_timeout_s: float = Field(
        7200.0, gt=0.0, description="Wall-clock limit of the training process (model load and save included), seconds."
    )
    device_slots: bool = Field(
        True,
        description="Bound each device to one stage at a time across flows with Prefect global concurrency limits "
        "named 'ratchet-device-<device>' (only against a Prefect server, PREFECT_API_URL set; see docs/devices.md).",
    )
    slot_wait_timeout_s: float | None = Field(
        None, gt=0.0, description="Longest wait for a busy device's slot, seconds (None: wait until it is free)."
    )
    fsdp: bool = Field(
        False,
        description="Train with FSDP (full sharding of weights, gradients and optimizer state over the GPUs, through "
        "`accelerate launch --use_fsdp`) instead of DDP (a full replica per GPU): for models whose weights, "
        "gradients and AdamW moments (~16 bytes/parameter in fp32) do not fit one GPU. Needs >= 2 GPUs; not with LoRA.",
    )
    engine: Literal["local", "ray"] = Field(
        "local",
        description="Where generation workers run: 'local' child processes, or 'ray' actors on an existing Ray cluster "
        "(compute.ray_address; `pip install 'ratchet[ray]'`), one per device group, with the same shards and seeds.",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join when compute.engine = 'ray' ('auto', 'ray://head:10001' or 'head:6379'); "
        "None: RAY_ADDRESS from the environment, else a local Ray instance.",
    )
    persistent_rollout: bool = Field(
        True,
        description="Kept so older configs load; ignored. Every round loads one engine (and, for GRPO, one learner) at its "
        "start and keeps it to its end (ratchet.flows.compute.engine): on a pool of N devices, N ranks, each an engine and "
        "a DDP learner (with compute.fsdp an FSDP shard, the full weights all-gathered for the rank's engine after each "
        "pass); only the candidate is saved. vLLM on a GPU gets the memory the learner leaves, and sleeps while it trains.",
    )
    cpu_threads_per_worker: int | None = Field(
        None,
        ge=1,
        description="torch threads per CPU worker; None = the CPUs this process may use divided among the CPU "
        "workers (each is pinned to its own share when there are several). OMP_NUM_THREADS in the environment wins.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_device_string(cls, data):
        if isinstance(data, dict) and isinstance(data.get("devices"), str):
            data = {**data, "devices": (data["devices"],)}
        return data

    @model_validator(mode="after")
    def _check(self) -> ComputeConfig:
        import re

        if not self.devices:
            raise ValueError('compute.devices is empty; set compute.devices = "cpu" or a list like ["cuda:0", "cuda:1"]')
        bad = [d for d in self.devices if d != "cpu" and not re.fullmatch(r"cuda:\d+", d)]
        if bad:
            raise ValueError(f"compute.devices has {bad[0]!r}: each device must be 'cpu' or 'cuda:<index>' (e.g. 'cuda:0')")
        if len({d == "cpu" for d in self.devices}) > 1:
            raise ValueError(
                f"compute.devices {list(self.devices)} mixes cpu and cuda devices; list only GPUs or only 'cpu' entries"
            )
        gpus = [d for d in self.devices if d != "cpu"]
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"compute.devices {list(self.devices)} lists a GPU twice; list each cuda:<index> once")
        if self.fsdp and len(gpus) < 2:
            raise ValueError(
                f"compute.fsdp = true needs >= 2 GPUs in compute.devices (got {list(self.devices)}; accelerate "
                "builds FSDP on GPUs only, on CPU ranks it would silently be DDP); list the GPUs to shard over or set "
                "compute.fsdp = false"
            )
        return self

    @property
    def on_gpu(self) -> bool:
        return self.devices[0] != "cpu"
