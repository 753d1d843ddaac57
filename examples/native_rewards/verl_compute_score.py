"""A verl-style reward function, as verl's custom_reward_function would load it (unchanged).

Used by rlbridge with: reward: [{native: verl, function: examples/native_rewards/verl_compute_score.py:compute_score}]
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Fraction of the completion's characters equal to the answer digit; the length is a metric."""
    text = solution_str.strip()
    score = text.count(str(ground_truth)) / len(text) if text else 0.0
    return {"score": score, "chars": float(len(text))}
