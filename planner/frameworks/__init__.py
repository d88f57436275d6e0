"""Framework rules (what Megatron-LM, DeepSpeed, torchtitan and NeMo can run) and launch configurations."""
