"""Data-parallel GRPO: R ranks (``accelerate launch``, gloo on CPU / NCCL on GPU) vs one process on the same batch.

Trains one GRPO pass (DAPO token-mean loss: the aggregation whose per-rank token counts differ) from the
same checkpoint on the same rollouts, once in this process and once under ``accelerate launch --num_processes
R``, and compares the saved weights.

    python benchmarks/data_parallel.py [--ranks 2] [--model DIR] [--groups 16] [--group-size 4]

Without ``--model`` a small random Llama (SmolLM2's tokenizer, hidden 128, 4 layers) is built in a temp dir.

Last line: JSON with
- ``ranks``: R; ``examples_per_rank``: sequences each rank trained on (list, rank order); ``total_examples``;
- ``max_rel_param_diff_vs_single``: max over weight tensors W of ||W_ranks - W_single||_2 / ||W_init||_2
  (Frobenius norms in float64; W_ranks - W_single = dW_ranks - dW_single since both start from W_init).
  Target <= 1e-5 (float32 summation order is the only difference);
- ``s_per_step_single`` / ``s_per_step_ranks``: wall seconds of ``train_grpo`` (model load, old log-probs,
  optimizer steps, save; process start excluded) divided by its optimizer steps, one process / rank 0 of R,
  each process with ``OMP_NUM_THREADS`` threads (default 1).
  On a 2-core CPU the ranks share the cores, so R ranks are not faster there; on R GPUs each rank does 1/R
  of the forward/backward work.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXTS = ["Answer: 7", "3 + 4 = 7, so the result is 7.\nAnswer: 7", "Answer: 12", "Let me add: 5 + 9 = 14.\nAnswer: 14"]


def _samples(groups: int, g: int):
    from ratchet.loop.train.examples import ChatExample
    from ratchet.loop.train.grpo import GRPOSample

    out = []
    for i in range(groups):
        msgs = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": f"What is {i} + {i + 3}?"}]
        for k in range(g):
            text = TEXTS[(i + k) % len(TEXTS)] + " Done." * ((i * g + k) % 5)
            out.append(GRPOSample(i, ChatExample(msgs, text), float((i + k) % 2), False))
    return out


def _train(model: str, out: Path, groups: int, g: int) -> dict:
    """One GRPO pass into ``out``; returns this rank's rows and timing."""
    from ratchet.loop.config import GRPOConfig
    from ratchet.loop.train.grpo import GRPORun, train_grpo

    cfg = GRPOConfig(loss_type="dapo", lr=3e-4, mini_batch_size=max(2, groups * g // 2), micro_batch_size=4)
    res = train_grpo(model, _samples(groups, g), out, cfg, GRPORun(temperature=1.0, max_completion_length=32, seed=1))
    return {"rows": len(res.rank_rows), "seconds": res.seconds, "steps": res.steps}


def _tiny_model(dest: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ratchet.loop.checkpoints import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default=None, help="checkpoint directory (default: a small random Llama)")
    ap.add_argument("--groups", type=int, default=16, help="prompts in the batch")
    ap.add_argument("--group-size", type=int, default=4, help="completions per prompt (G)")
    ap.add_argument("--rank-run", default=None, help=argparse.SUPPRESS)  # internal: one rank of the launched run
    args = ap.parse_args()
    if args.rank_run:
        info = _train(args.model, Path(args.rank_run), args.groups, args.group_size)
        Path(args.rank_run, f"rank-{os.environ.get('RANK', '0')}.json").write_text(json.dumps(info))
        return
    from ratchet.loop.train.data_parallel import max_rel_param_diff

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(_tiny_model(Path(tmp) / "init"))
        # Both runs in child processes with the same thread count per process (OMP_NUM_THREADS, default 1).
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        common = ["--model", model, "--groups", str(args.groups), "--group-size", str(args.group_size)]
        single_dir, multi = Path(tmp) / "single", Path(tmp) / "multi"
        subprocess.run([sys.executable, __file__, *common, "--rank-run", str(single_dir)], check=True, env=env)
        single = json.loads((single_dir / "rank-0.json").read_text())
        launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(args.ranks)]
        launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", __file__]
        t0 = time.perf_counter()
        subprocess.run([*launch, *common, "--rank-run", str(multi)], check=True, env=env)
        ranks = [json.loads((multi / f"rank-{r}.json").read_text()) for r in range(args.ranks)]
        print(f"launched run: {time.perf_counter() - t0:.1f} s wall (process start and model load included)", file=sys.stderr)
        result = {
            "ranks": args.ranks,
            "examples_per_rank": [r["rows"] for r in ranks],
            "total_examples": args.groups * args.group_size,
            "max_rel_param_diff_vs_single": max_rel_param_diff(single_dir, multi, model),
            "s_per_step_single": single["seconds"] / single["steps"],
            "s_per_step_ranks": ranks[0]["seconds"] / ranks[0]["steps"],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
