"""OpenRLHF adapter: GRPO (group_norm), Dr. GRPO, RLOO, REINFORCE++ and PPO (GAE) through train_ppo_ray."""
