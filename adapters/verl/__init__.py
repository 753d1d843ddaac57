"""verl adapter: GRPO, Dr. GRPO, RLOO, REINFORCE++ and PPO (GAE with a critic) through verl's main_ppo."""
