"""A TRL-style reward function, as GRPOTrainer(reward_funcs=[...]) would call it (unchanged).

Used by rlbridge with: reward: [{native: trl, function: examples/native_rewards/trl_reward.py:digit_share}]
"""


def digit_share(prompts, completions, completion_ids, answer, **kwargs):
    """Answer-digit characters per generated token (completion_ids: the engine's own token ids, so
    special tokens the text does not show still count); None where the row has no answer."""
    out = []
    for completion, ids, digit in zip(completions, completion_ids, answer):
        if digit is None:
            out.append(None)
            continue
        out.append(min(completion.count(str(digit)), len(ids)) / max(len(ids), 1))
    return out
