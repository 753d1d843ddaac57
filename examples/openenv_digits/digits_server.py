"""A tiny OpenEnv environment (openenv-core): the quickstart task as an OpenEnv server. Each step's
action is the policy's text; the reward is the fraction of its characters equal to the episode's
digit; the episode ends after `turns` steps. Serve it with
`uvicorn digits_server:app --port 8000` (rlbridge starts it itself: docs/plugins.md)."""

from __future__ import annotations

from typing import Any, Optional

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class DigitsAction(Action):
    message: str = ""


class DigitsObservation(Observation):
    text: str = ""


class DigitsEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, turns: int = 2) -> None:
        super().__init__()
        self.turns, self.taken, self.digit = turns, 0, "0"
        self._state = State(step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> DigitsObservation:
        self.digit, self.taken = str(kwargs.get("answer", "0")), 0
        self._state = State(episode_id=episode_id, step_count=0)
        return DigitsObservation(text=str(kwargs.get("prompt", self.digit * 4)), done=False, reward=0.0)

    def step(self, action: DigitsAction, timeout_s: Optional[float] = None, **kwargs: Any) -> DigitsObservation:
        self.taken += 1
        self._state.step_count = self.taken
        text = action.message
        reward = text.count(self.digit) / len(text) / self.turns if text else 0.0
        return DigitsObservation(text="\n", done=self.taken >= self.turns, reward=reward)

    @property
    def state(self) -> State:
        return self._state


app = create_app(DigitsEnvironment, DigitsAction, DigitsObservation, env_name="digits", max_concurrent_envs=256)
