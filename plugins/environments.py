"""Built-in environment plugins."""

from __future__ import annotations

from rlbridge import hookimpl
from rlbridge.contract.environments import Environment, StepResult
from rlbridge.contract.registry import EnvironmentPlugin


class DigitTurns(Environment):
    """The quickstart task as an episode of `turns` turns: each turn is rewarded with the fraction of
    its characters equal to the row's answer digit, and the environment answers with a newline."""

    def __init__(self, turns: int = 2) -> None:
        if turns < 1:
            raise ValueError("digit_turns: turns must be >= 1")
        self.turns = turns
        self.taken = 0
        self.digit = ""

    def reset(self, row, prompt):
        self.digit = str(row.get("answer", ""))
        self.taken = 0
        return prompt

    def step(self, action):
        self.taken += 1
        reward = action.count(self.digit) / len(action) if action and self.digit else 0.0
        return StepResult(reward=reward / self.turns, done=self.taken >= self.turns, feedback="\n")


class DigitHint(DigitTurns):
    """digit_turns with a tool: the policy may ask for the rewarded digit before answering."""

    tools = ("hint",)

    def hint(self, repeat: int = 1) -> str:
        """Tell the digit that this episode rewards.

        Args:
            repeat: how many times to write the digit.
        """
        return self.digit * max(1, min(repeat, 8))


@hookimpl
def rlbridge_register_environments():
    return [
        EnvironmentPlugin("digit_turns", DigitTurns, "quickstart digits over several turns (args: turns)"),
        EnvironmentPlugin("digit_hint", DigitHint, "digit_turns with a 'hint' tool that tells the digit (args: turns)"),
    ]
