"""The engine-neutral environment interface that environment plugins implement (multi-turn
episodes): one instance per episode, text in, text out. Adapters drive it from the engine's own
multi-turn machinery (OpenRLHF: an AgentExecutor); a backend that cannot rejects `environment`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass
class StepResult:
    reward: float
    """Reward for this turn; an episode's reward is the sum over its turns."""
    done: bool
    """True ends the episode."""
    feedback: str = ""
    """Text appended to the conversation before the policy's next turn (ignored when done)."""


class Environment(ABC):
    """One episode. `reset` gets the data row and returns the first observation (the text the
    policy continues); `step` gets the policy's turn and returns a StepResult."""

    @abstractmethod
    def reset(self, row: dict[str, Any], prompt: str) -> str:
        """Start an episode for this row; `prompt` is the row's prompt as the engine renders it."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Score the policy's turn and say what comes next."""


def make_environment(spec: dict[str, Any]) -> Environment:
    """An environment instance from a config spec ({name, args, max_turns}), through the registry."""
    from rlbridge.registry import get_plugin_manager

    plugin = get_plugin_manager().get("environment", spec["name"], "environment.name")
    return plugin.factory(**spec.get("args", {}))
