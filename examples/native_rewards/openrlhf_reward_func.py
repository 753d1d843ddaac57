"""An OpenRLHF-style reward function, as --reward.remote_url FILE.py would load it (unchanged).

Used by rlbridge with: reward: [{native: openrlhf, function: examples/native_rewards/openrlhf_reward_func.py:reward_func}]
"""

import torch


def reward_func(queries, prompts, labels, **kwargs):
    """queries are prompt + completion; labels the answer column (here the digit to write)."""
    rewards = []
    for query, prompt, label in zip(queries, prompts, labels):
        completion = query[len(prompt):].strip()
        rewards.append(completion.count(str(label)) / len(completion) if completion else 0.0)
    rewards = torch.tensor(rewards, dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {"hit": (rewards > 0.5).float()}}
