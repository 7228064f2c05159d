"""``compute.engine = "ray"``: the round engine's ranks as Ray actors on an existing Ray cluster.

``RayEngine`` is the Ray placement of ``ratchet.flows.compute.engine.RoundEngine``: one actor per device group of
``compute.devices``, placed by one placement group (a bundle per device group: ``num_gpus`` = the group's GPUs; on
CPU ``num_cpus`` = the thread count the local placement gives a rank) and kept for the whole round. Each actor holds
the same ``EngineState`` a local rank process holds and takes the same typed requests
(``ratchet.flows.compute.messages``) as method calls, so a round's rollouts, learner passes and saves are those of
the local engine (same seeds, same thread count, same sharding). Requests and replies travel through Ray's object
store; nothing is written to shared storage but the checkpoints rank 0 saves under ``run_dir``. Several ranks form one
``torch.distributed`` group through a ``file://`` rendezvous in a private folder, so their actors must share the
driver's filesystem (one node) for learner work; generation-only use spans nodes. Ratchet (same version) must be
installed on every node (docs/devices.md). Ray is imported only here, and only when asked for
(``pip install 'ratchet[ray]'``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ratchet.flows.compute.engine import EngineBase, Placement
from ratchet.flows.compute.messages import EngineSpec, Start, StartLearner
from ratchet.flows.compute.pool import device_env
from ratchet.flows.compute.protocol import StageTimeout, WorkerFailed
from ratchet.loop.config import ComputeConfig
from ratchet.loop.train.data_parallel import fsdp_env


def connect(compute: ComputeConfig):
    """The ``ray`` module, connected to ``compute.ray_address`` (None: ``RAY_ADDRESS``, else a local instance).

    Raises:
        ImportError: Ray is not installed (names the extra).
    """
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            f"compute.engine = 'ray' needs Ray ({e}); pip install 'ratchet[ray]' or set compute.engine = 'local'"
        ) from e
    if not ray.is_initialized():
        ray.init(address=compute.ray_address, ignore_reinit_error=True, log_to_driver=True, logging_level=logging.WARNING)
    return ray


class RankActor:
    """A rank inside a Ray worker process: the rank's environment (threads, devices, rendezvous), then its requests."""

    def __init__(self, env: dict[str, str]) -> None:
        os.environ.update(env)
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
        if env.get("OMP_NUM_THREADS"):
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        from ratchet.flows.compute.worker import EngineState

        self.state = EngineState()

    def handle(self, msg: Any):
        return self.state.handle(msg)

    def node(self) -> str:
        import socket

        return socket.gethostname()


class RayEngine(EngineBase):
    """The round engine on Ray actors (see the module docstring); the same verbs as ``LocalEngine``."""

    def __init__(self, spec: EngineSpec, placement: Placement, **kw) -> None:
        super().__init__(spec, placement, **kw)
        self.progress = None  # Ray forwards the actors' output to the driver's log; no bars
        self._actors: list = []
        self._pg = None
        self._folder: str | None = None

    def start(self, learner: StartLearner | None = None) -> bool:
        """Place one actor per device group, load every engine (and the learner); see ``LocalEngine.start``."""
        ray = connect(self.compute)
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        envs, bundles = [], []
        if self.ranks > 1:
            self._folder = tempfile.mkdtemp(prefix="ratchet-rendezvous-")
        for k, group in enumerate(self.placement.groups):
            env = {
                key: v
                for key, v in device_env(group, k, self.ranks, self.compute.cpu_threads_per_worker).items()
                if key in ("OMP_NUM_THREADS", "RATCHET_DEVICE")
            }
            if self.ranks > 1:
                env |= {**(fsdp_env() if self.placement.fsdp else {}), "RANK": str(k), "WORLD_SIZE": str(self.ranks)}
                env |= {"LOCAL_RANK": str(k), "LOCAL_WORLD_SIZE": str(self.ranks)}
                env["RATCHET_RENDEZVOUS"] = str(Path(self._folder) / "store")
            gpus = len([d for d in group if d != "cpu"])
            envs.append(env)
            bundles.append({"GPU": gpus, "CPU": 1} if gpus else {"CPU": int(env.get("OMP_NUM_THREADS", "1"))})
        self._pg = placement_group(bundles, strategy="PACK")
        self._wait(self._pg.ready(), "placing the ranks", self.compute.generate_timeout_s, "compute.generate_timeout_s")
        cls = ray.remote(RankActor)
        for k, (env, bundle) in enumerate(zip(envs, bundles)):
            opts = {"num_gpus": bundle.get("GPU", 0), "num_cpus": bundle["CPU"], "max_restarts": 0}
            strategy = PlacementGroupSchedulingStrategy(placement_group=self._pg, placement_group_bundle_index=k)
            self._actors.append(cls.options(scheduling_strategy=strategy, **opts).remote(env))
            self.log.info("[ray] rank %d on %s placed (%s)", k, ",".join(self.placement.groups[k]), opts)
        self._all([Start(self.spec)] * self.ranks, "loading the model", generate=True)
        if learner is None:
            return False
        replies = self._all([learner] * self.ranks, "loading the learner", every=True)
        self.shared = all(bool(r.value) for r in replies)
        return self.shared

    def close(self) -> None:
        """Kill the actors and remove the placement group (their engines go with their processes)."""
        import ray

        for a in self._actors:
            ray.kill(a)
        self._actors = []
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
            self._pg = None
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _all(self, reqs: list, what: str, every: bool = False, generate: bool = False):
        limit, key = self._limit(generate)
        refs = [a.handle.remote(r) for a, r in zip(self._actors, reqs)]
        replies = self._wait(refs, what, limit, key)
        for k, r in enumerate(replies):
            if not r.ok:
                raise WorkerFailed(f"ray rank {k}: {what} failed: {r.error}")
        return replies if every else replies[0]

    def _wait(self, refs, what: str, limit: float, key: str):
        import ray

        try:
            return ray.get(refs, timeout=limit)
        except ray.exceptions.GetTimeoutError as e:
            self.close()
            raise StageTimeout(
                f"ray ranks: {what} ran past {key} = {limit:g} s and the actors were killed; raise {key} in the config"
            ) from e
        except ray.exceptions.RayError as e:
            self.close()
            raise WorkerFailed(f"ray ranks: {what} failed: {e}") from e
