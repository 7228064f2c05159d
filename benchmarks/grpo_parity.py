"""What both sides of a Ratchet-vs-TRL GRPO comparison share: the settings, the samples and TRL's step clock.

Used by ``grpo_vs_trl.py`` (SmolLM2 on CPU) and ``gpu_check.py`` (random Qwen2-style models on a GPU), so the two
benchmarks compare the same things: GRPO advantages (std-scaled), the ``grpo`` loss (seq-mean-token-mean), eps 0.2,
beta 0, AdamW (0.9, 0.99) at a constant LR, grad-norm clip 1.0, one optimizer step per on-policy step, every group
kept (TRL has no dynamic sampling). Ratchet's imports stay inside the functions: ``gpu_check.py`` maps the
``ratchet`` namespace onto the checkout before it calls them.
"""

from __future__ import annotations

from pathlib import Path


def ratchet_grpo(
    lr: float, sequences: int, *, mask_truncated: bool, gradient_checkpointing: bool = False, micro_batch_size: int = 8
):
    """Ratchet's ``GRPOConfig`` for one optimizer step over ``sequences`` completions per on-policy step, in
    forward/backward passes of ``micro_batch_size`` sequences (TRL's side runs the whole batch in one)."""
    from ratchet.loop.config import GRPOConfig

    return GRPOConfig(
        advantage="grpo",
        loss_type="grpo",
        beta=0.0,
        dynamic_sampling=False,
        mask_truncated=mask_truncated,
        lr=lr,
        ppo_epochs=1,
        mini_batch_size=sequences,
        micro_batch_size=min(micro_batch_size, sequences),
        gradient_checkpointing=gradient_checkpointing,
    )


def trl_grpo_args(
    out_dir: str | Path,
    *,
    prompts_per_step: int,
    group_size: int,
    max_new_tokens: int,
    lr: float,
    steps: int,
    seed: int,
    mask_truncated: bool,
    gradient_checkpointing: bool,
    cpu: bool,
    bf16: bool,
):
    """TRL's ``GRPOConfig`` with the settings of ``ratchet_grpo`` (and sampling at temperature 0.8, top-p 1, no top-k).

    ``gradient_checkpointing`` is explicit because TRL's default (True) differs from Ratchet's (False).

    Raises:
        ImportError: TRL is not installed.
    """
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=prompts_per_step * group_size,
        num_generations=group_size,
        max_completion_length=max_new_tokens,
        learning_rate=lr,
        lr_scheduler_type="constant",
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        epsilon=0.2,
        num_iterations=1,
        temperature=0.8,
        top_p=1.0,
        top_k=0,
        mask_truncated_completions=mask_truncated,
        gradient_checkpointing=gradient_checkpointing,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=cpu,
        bf16=bf16,
        seed=seed,
        shuffle_dataset=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def grpo_samples(comps, chats: list[list[dict[str, str]]], rewards: list[float]) -> list:
    """Ratchet's ``GRPOSample``s of one step's completions: the sampled ids and the sampler's log-probs, one reward each.

    Args:
        comps: the engine's ``Completion``s; ``chats[c.prompt_index]`` is the chat each was sampled from.
        rewards: one per completion, in ``comps``' order.
    """
    from ratchet.loop.train.examples import ChatExample
    from ratchet.loop.train.grpo import GRPOSample

    return [
        GRPOSample(
            c.prompt_index,
            ChatExample(chats[c.prompt_index], c.text, c.token_ids),  # the sampled ids
            r,
            c.finish_reason == "length",
            c.logprobs,
            c.prompt_hash,
        )
        for c, r in zip(comps, rewards, strict=True)
    ]


def step_clock(times: list[float], before=None, after=None, ready=None, sync=None):
    """A ``TrainerCallback`` appending each TRL optimizer step's wall seconds (generation included) to ``times``.

    ``ready()`` runs when training begins (the model is loaded), ``before(step)`` before a step's clock starts,
    ``after(step)`` after it stops; ``sync()`` (e.g.
    ``torch.cuda.synchronize``) runs at both ends so queued GPU work is counted in its own step.
    """
    import time

    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            if ready:
                ready()

        def on_step_begin(self, *a, **k):
            if before:
                before(len(times))  # generation runs inside the step, after this
            if sync:
                sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            if sync:
                sync()
            times.append(time.perf_counter() - self.t0)
            print(f"trl step {len(times) - 1}: {times[-1]:.2f} s", flush=True)
            if after:
                after(len(times) - 1)

    return StepClock()
