"""What the device pool and its worker processes exchange: progress lines on stdout and generation shard files.

Imports neither torch nor Prefect (the worker imports it before loading a model).
"""

from __future__ import annotations

from pathlib import Path

from ratchet.common.files import atomic_write_parquet
from ratchet.loop.generation.base import Completion


class StageTimeout(TimeoutError):
    """A stage's child process ran past its configured wall-clock limit and was killed."""


class WorkerFailed(RuntimeError):
    """A stage's child process exited with a non-zero status; the message quotes the end of its output."""


PROGRESS_PREFIX = "@ratchet-progress "  # a stdout line starting with this is JSON {"bar", "done", "total"}


def shard_file(shard_dir: Path, key: str, call: str, shard: int) -> Path:
    return shard_dir / f"{key}-{call}-{shard}.parquet"


def write_shard(path: Path, comps: list[Completion]) -> None:
    """Completions as a Parquet file, written to a temporary name and renamed (a reader never sees half a shard)."""
    import pyarrow as pa

    rows = [c.record() for c in comps]
    schema = pa.schema(
        [
            ("prompt_index", pa.int64()),
            ("sample_index", pa.int64()),
            ("text", pa.string()),
            ("token_ids", pa.list_(pa.int64())),
            ("prompt_tokens", pa.int64()),
            ("finish_reason", pa.string()),
            ("logprobs", pa.list_(pa.float64())),
            ("prompt_hash", pa.string()),
        ]
    )
    atomic_write_parquet(pa.Table.from_pylist(rows, schema=schema), path)


def merge_shards(paths: list[Path], n_prompts: int, n: int) -> list[Completion]:
    """Read shard files and return their completions in (prompt_index, sample_index) order.

    Raises:
        RuntimeError: the shards do not hold exactly one completion per (prompt, sample) job.
    """
    import pyarrow.parquet as pq

    rows = [r for p in paths for r in pq.read_table(p).to_pylist()]
    rows.sort(key=lambda r: (r["prompt_index"], r["sample_index"]))
    got = [(r["prompt_index"], r["sample_index"]) for r in rows]
    if got != [(i, s) for i in range(n_prompts) for s in range(n)]:
        raise RuntimeError(
            f"generation shards {[p.name for p in paths]} hold {len(got)} completions, expected one per "
            f"(prompt, sample) job ({n_prompts} x {n}); delete {paths[0].parent} and re-run the stage"
        )
    return [Completion.from_record(r) for r in rows]


# --- persistent rollout worker (``worker serve``) ------------------------------------------------------
# The parent writes ``req-<seq>.json`` ({"op": "generate" | "update_weights" | "stop", ...}) into the worker's
# directory; the worker handles requests in sequence order and answers each with ``resp-<seq>.json``
# ({"ok": true, ...} or {"ok": false, "error": "..."}), both written atomically (rename).


def request_file(directory: Path, seq: int) -> Path:
    return directory / f"req-{seq:06d}.json"


def response_file(directory: Path, seq: int) -> Path:
    return directory / f"resp-{seq:06d}.json"


def write_samples(path: Path, samples) -> None:
    """GRPO samples (``ratchet.loop.train.grpo.GRPOSample``) as a Parquet file for a rollout worker's "train_pass"."""
    import json

    import pyarrow as pa

    rows = [
        dict(
            group=x.group,
            messages=json.dumps(x.example.messages),
            completion=x.example.completion,
            completion_ids=None if x.example.completion_ids is None else list(x.example.completion_ids),
            reward=x.reward,
            truncated=x.truncated,
            sampler_logprobs=None if x.sampler_logprobs is None else list(x.sampler_logprobs),
            prompt_hash=x.prompt_hash,
        )
        for x in samples
    ]
    atomic_write_parquet(pa.Table.from_pylist(rows), path)


def read_samples(path: Path) -> list:
    """The ``GRPOSample`` list ``write_samples`` wrote."""
    import json

    import pyarrow.parquet as pq

    from ratchet.loop.train.examples import ChatExample
    from ratchet.loop.train.grpo import GRPOSample

    tup = lambda xs, f: None if xs is None else tuple(f(x) for x in xs)  # noqa: E731
    return [
        GRPOSample(
            r["group"],
            ChatExample(json.loads(r["messages"]), r["completion"], tup(r.get("completion_ids"), int)),
            float(r["reward"]),
            bool(r["truncated"]),
            sampler_logprobs=tup(r.get("sampler_logprobs"), float),
            prompt_hash=r.get("prompt_hash"),
        )
        for r in pq.read_table(path).to_pylist()
    ]


def backend_spec(model_path: str | Path, gen, dtype: str) -> dict:
    """What a worker needs to load its generation backend: ``{"model_path", "backend", "backend_kwargs"}``
    (``gen``: the campaign's ``GenerationConfig``); the same for the per-stage pool and the persistent rollout worker."""
    return {
        "model_path": str(model_path),
        "backend": gen.backend,
        "backend_kwargs": dict(
            dtype=dtype,
            batch_size=gen.batch_size,
            tensor_parallel_size=gen.tensor_parallel_size,
            gpu_memory_utilization=gen.gpu_memory_utilization,
            max_model_len=gen.max_model_len,
        ),
    }
