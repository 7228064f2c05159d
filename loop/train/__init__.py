"""Training: rejection-sampling fine-tuning (SFT) and the GRPO family, with their losses, advantages, length rules and data-parallel sharding."""
