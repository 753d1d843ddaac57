"""TRL adapter: GRPO (and Dr. GRPO) through GRPOTrainer, RLOO through RLOOTrainer."""
