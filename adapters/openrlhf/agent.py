"""rlbridge environment plugins as an OpenRLHF agent: the file passed as --train.agent_func_path
(a generated file importing AgentExecutor from here) is loaded by OpenRLHF inside each vLLM rollout
actor; OpenRLHF's MultiTurnAgentExecutor drives one instance per episode. Imported only there."""

from __future__ import annotations

import json
import os
import traceback

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from rlbridge.engine.engine_io import write_event
from rlbridge.contract.environments import make_environment

ENVIRONMENT_ENV = "RLBRIDGE_ENVIRONMENT"


class RLBridgeEpisode(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.spec = json.loads(os.environ[ENVIRONMENT_ENV])
        self.env = make_environment(self.spec)
        self.turns = 0
        self.total = 0.0

    async def reset(self, states: dict, **kwargs):
        info = json.loads(states["label"]) if states.get("label") else {}
        return {"observation": self.env.reset(info.get("row", {}), states["observation"])}

    async def step(self, states: dict, **kwargs):
        from rlbridge.engine.workers import step_environment

        try:
            result = step_environment(self.env, states["action_text"])  # the worker pool: timeouts and fault counts
        except Exception as exc:  # OpenRLHF would swallow it: record it, then let it fail the episode
            write_event({"kind": "reward_error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
            raise
        self.turns += 1
        self.total += result.reward
        done = result.done or self.turns >= self.spec.get("max_turns", 1) or self._budget_spent(states, result.feedback)
        if done:
            write_event({"kind": "reward_sample", "total": self.total, "plugins": {self.spec["name"]: self.total}})
        return {
            "rewards": torch.tensor([result.reward]),
            "scores": torch.tensor([result.reward]),
            "environment_feedback": "" if done else result.feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"turns": torch.tensor([float(self.turns)])},
        }


    @staticmethod
    def _budget_spent(states: dict, feedback: str) -> bool:
        """OpenRLHF stops the episode without telling the agent once prompt + turns fill --data.max_len
        (the turn's budget is sampling_params.max_tokens): end it here then, so its total is reported."""
        from rlbridge_adapters.openrlhf.reward import _tok

        budget = getattr(states.get("sampling_params"), "max_tokens", None)
        if budget is None:
            return False
        used = len(_tok()(states["action_text"] + feedback, add_special_tokens=False)["input_ids"])
        return used >= budget


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(RLBridgeEpisode)
