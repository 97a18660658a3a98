"""Training: model and tokenizer presets (SFT and GRPO learners follow)."""
