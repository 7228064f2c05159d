"""Data-parallel training run for ``tests/loop/train/test_data_parallel.py`` and ``benchmarks/data_parallel.py``.

``accelerate launch --cpu --num_processes R tests/loop/train/dp_train.py MODEL OUT`` (or plain ``python`` for one
process) trains GRPO once per loss type and SFT once on a fixed tiny batch from ``MODEL``, saving each result
under ``OUT/<name>/`` and writing ``OUT/<name>/rank-<r>.json`` = {"rows": rows this rank trained on,
"grad_norms": per-step pre-clip gradient norms (GRPO), "seconds": wall time of the pass}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ratchet.loop.config import GRPOConfig, SFTConfig
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.grpo import GRPORun, GRPOSample, train_grpo
from ratchet.loop.train.sft import train_sft

COMPLETIONS = ["Answer: 7", "3 + 4 = 7, so the result is 7.\nAnswer: 7", "Answer: 12", "I think it is 5 + 9 = 14.\nAnswer: 14"]
LOSSES = ("grpo", "dapo", "dr_grpo")


def samples(groups: int = 5, g: int = 2) -> list[GRPOSample]:
    """``groups`` prompts with ``g`` completions each, of different lengths and rewards (every group has signal)."""
    out = []
    for i in range(groups):
        msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"What is {i} + {i + 3}?"}]
        for k in range(g):
            text = COMPLETIONS[(i + k) % len(COMPLETIONS)] + " ok" * (i % 3)
            out.append(GRPOSample(i, ChatExample(msgs, text), float((i + k) % 2), False))
    return out


def main(model: str, out: str, names: list[str]) -> None:
    import os
    import time

    rank = int(os.environ.get("RANK", "0"))
    batch = samples()
    for name in names:
        t0 = time.perf_counter()
        if name == "sft":
            res = train_sft(
                model,
                [x.example for x in batch],
                Path(out) / name,
                SFTConfig(lr=3e-4, epochs=1, batch_size=5, warmup_ratio=0.0, max_seq_len=128),
            )
            info = {"rows": res.rank_examples, "grad_norms": []}
        else:
            cfg = GRPOConfig(loss_type=name, lr=3e-4, mini_batch_size=5, micro_batch_size=2, max_grad_norm=1e6)
            res = train_grpo(model, batch, Path(out) / name, cfg, GRPORun(temperature=1.0, max_completion_length=32, seed=3))
            info = {"rows": res.rank_rows, "grad_norms": [m["train/grad_norm"] for m in res.step_metrics]}
        info["seconds"] = time.perf_counter() - t0
        (Path(out) / name / f"rank-{rank}.json").write_text(json.dumps(info))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] or [*LOSSES, "sft"])
