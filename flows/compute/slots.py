"""Device slots: one Prefect global concurrency limit per device, so two rounds never load models onto one GPU at once.

The only module below the flows that imports Prefect (the import-linter contract in ``pyproject.toml``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import PREFECT_API_URL

from ratchet.loop.config import ComputeConfig

SLOT_LEASE_S = 60.0  # a device slot's lease; renewed while held, so a killed holder frees it within this


def reset_device_slots(devices: tuple[str, ...]) -> list[str]:
    """Free every slot of the devices' concurrency limits (for a daemon starting after a crash of the Prefect
    server itself, whose in-memory leases were lost with it); returns the names reset. Needs a Prefect API."""

    done = []
    with get_client(sync_client=True) as client:
        for name in slot_names(devices):
            try:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(active_slots=0))
                done.append(name)
            except ObjectNotFound:
                pass
    return done


def slot_names(devices: tuple[str, ...]) -> list[str]:
    """Prefect global concurrency limit names of the devices: ``ratchet-device-cuda-0``, ``ratchet-device-cpu-<k>``."""
    out, cpu_k = [], 0
    for d in devices:
        if d == "cpu":
            out.append(f"ratchet-device-cpu-{cpu_k}")
            cpu_k += 1
        else:
            out.append("ratchet-device-" + d.replace(":", "-"))
    return out


@contextmanager
def device_slots(devices: tuple[str, ...], compute: ComputeConfig, log: logging.Logger | logging.LoggerAdapter) -> Iterator[None]:
    """Hold one slot of each device's Prefect global concurrency limit (created with limit 1 if missing).

    Only against a Prefect server (``PREFECT_API_URL`` set, as under ``ratchet up``): there a holder killed
    with ``kill -9`` loses its slots when its lease (``SLOT_LEASE_S``) runs out. Prefect's ephemeral API keeps
    leases in the memory of the process that dies with the holder, so a killed round would leave its
    slots taken for good; without a server, slots are skipped (one process, nothing to share them with).

    Raises:
        TimeoutError: the slots were not free within ``compute.slot_wait_timeout_s``.
    """

    if not compute.device_slots or not PREFECT_API_URL.value():
        yield
        return

    names = slot_names(devices)
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:  # create it; a concurrent creator may win the race
                try:
                    client.upsert_global_concurrency_limit_by_name(name, 1)
                except ObjectAlreadyExists:
                    pass
    t0 = time.monotonic()
    with concurrency(names, occupy=1, timeout_seconds=compute.slot_wait_timeout_s, strict=True, lease_duration=SLOT_LEASE_S):
        if time.monotonic() - t0 > 1:
            log.info("waited %.0f s for device slots %s", time.monotonic() - t0, names)
        yield
