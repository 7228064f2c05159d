"""``ratchet up --work-pool NAME`` (``[schedule] work_pool``): a campaign's flow deployed to a Prefect work pool, so
that a ``prefect worker start --pool NAME`` on this or another machine runs its rounds instead of ``ratchet up``.

The deployment's entrypoint is the installed module (``ratchet.flows.rounds.campaign.campaign``), so a worker needs
Ratchet installed and nothing pulled; its parameters carry the campaign's whole config (``config``), checked and
saved by the flow run on the worker (``ratchet.flows.rounds.campaign.worker_config``): the config's paths (store,
run dir, model, task files) are the worker's. The daemon keeps the schedule, the one-run-at-a-time limit (the
deployment's concurrency limit, and the skipped ticks of ``ratchet.flows.daemon.schedules.skip_ticks``) and the UI;
it never opens such a campaign's store. See docs/daemon.md#work-pools.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

DEFAULT_POOL_TYPE = "process"  # a worker that runs each flow run as a subprocess of itself


async def ensure_work_pool(client, name: str) -> tuple[str, bool]:
    """The work pool ``name``'s type, creating it as a ``process`` pool when absent; returns ``(type, created)``.

    ``client``: an async ``PrefectClient``.

    Raises:
        prefect.exceptions.PrefectHTTPStatusError: the API refuses (e.g. an invalid name).
    """
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        return (await client.read_work_pool(name)).type, False
    except ObjectNotFound:
        try:
            return (await client.create_work_pool(WorkPoolCreate(name=name, type=DEFAULT_POOL_TYPE))).type, True
        except ObjectAlreadyExists:  # another daemon created it in between
            return (await client.read_work_pool(name)).type, False


async def deploy_to_pool(dep, pool: str) -> str:
    """Register ``dep`` (a ``RunnerDeployment`` of the campaign flow, module-path entrypoint) on work pool ``pool``,
    creating the pool when absent; returns the deployment id."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        kind, created = await ensure_work_pool(client, pool)
    if created:
        logger.warning("created work pool %s (type %s)", pool, kind)
    return str(await dep.aapply(work_pool_name=pool))
