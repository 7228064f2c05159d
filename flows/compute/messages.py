"""The typed messages a round's parent process and its engine ranks exchange (``ratchet.flows.compute.engine``).

The parent sends one request at a time to each rank over a private socket pair (``multiprocessing.connection``;
pickled dataclasses, nothing on disk, nothing polled) and waits for its ``Reply``. A Ray actor rank
(``ratchet.flows.compute.ray_engine``) takes the same messages as method arguments. Every request names the
work, never a store: the parent resolved the paths, seeds and caps. Imports neither torch nor Prefect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet.loop.generation.sampling import PromptInput, SamplingParams


@dataclass(frozen=True)
class EngineSpec:
    """What a rank loads once for the round: its generation backend on ``model_path``.

    ``learner_bytes``: bytes a co-located learner will hold on the rank's device (a vLLM engine on a GPU is then
    sized to what is left, with sleep mode); None when nothing is co-located.
    """

    model_path: str
    backend: str
    backend_kwargs: dict[str, Any]
    learner_bytes: int | None = None


@dataclass(frozen=True)
class Start:
    """Load the rank's engine (the first message; replied to once the weights are loaded)."""

    engine: EngineSpec


@dataclass(frozen=True)
class Generate:
    """``params.n`` completions per prompt of ``messages`` (or the ``jobs`` shard ``(start, stop)`` of those jobs); a
    prompt is a chat, or a ``TokenPrompt`` (a multi-turn episode's next turn, as token ids)."""

    messages: list[PromptInput]
    params: SamplingParams
    name: str = "rollouts"
    jobs: tuple[int, int] | None = None


@dataclass(frozen=True)
class Sync:
    """Load the weights of the checkpoint folder ``path`` into the rank's engine in place."""

    path: str
    checkpoint_id: str | None = None


@dataclass(frozen=True)
class StartLearner:
    """Load a ``GRPOLearner`` beside the engine for the round (policy from ``init_dir``, AdamW, the reference)."""

    init_dir: str
    grpo: dict[str, Any]  # GRPOConfig as JSON
    dtype: str
    ref_dir: str | None = None


@dataclass(frozen=True)
class GRPOStep:
    """One GRPO-family learner pass over ``samples`` (``GRPOSample``s); the new weights then reach the engine."""

    samples: list[Any]
    run: Any  # GRPORun


@dataclass(frozen=True)
class SFTStep:
    """One rejection-sampling fine-tuning pass: ``examples`` (``ChatExample``s) from ``init_dir`` into ``out``."""

    init_dir: str
    examples: list[Any]
    out: str
    sft: dict[str, Any]  # SFTConfig as JSON
    seed: int
    dtype: str


@dataclass(frozen=True)
class Save:
    """Write the learner's policy (the round's candidate) to ``out`` (rank 0 writes; every rank takes part)."""

    out: str
    optimizer_state: str | None = None


@dataclass(frozen=True)
class Stop:
    """Shut the engine down cleanly and exit."""


@dataclass(frozen=True)
class Reply:
    """A rank's answer: ``ok`` with ``value``, or the request's error as ``"Type: message"``; ``seconds`` of work."""

    ok: bool
    value: Any = None
    error: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def engine_spec(model_path: str | Path, gen, dtype: str, learner_bytes: int | None = None) -> EngineSpec:
    """The engine a round's ranks load (``gen``: the campaign's ``GenerationConfig``; ``dtype``: ``model.dtype``)."""
    kwargs = dict(
        dtype=dtype,
        batch_size=gen.batch_size,
        tensor_parallel_size=gen.tensor_parallel_size,
        gpu_memory_utilization=gen.gpu_memory_utilization,
        max_model_len=gen.max_model_len,
    )
    return EngineSpec(str(model_path), gen.backend, kwargs, learner_bytes)


Request = Start | Generate | Sync | StartLearner | GRPOStep | SFTStep | Save | Stop
