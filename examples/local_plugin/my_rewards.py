"""A reward plugin in a file beside the config: no package, no entry point.

Used with `plugins: [my_rewards.py]` in the config (paths relative to the config file) or
`rlbridge train CONFIG -p examples/local_plugin/my_rewards.py`, then `reward: [{name: brevity}]`.
"""

from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin


def brevity(max_tokens: int = 32):
    def reward(inputs):  # list[rlbridge.contract.rewards.RewardInput]
        return [1.0 - min(len(x.completion_ids), max_tokens) / max_tokens for x in inputs]

    return reward


@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("brevity", brevity, "shorter is better (a local plugin)")]
