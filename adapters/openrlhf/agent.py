"""rlbridge environment plugins as an OpenRLHF agent: the file passed as --train.agent_func_path
(a generated file importing AgentExecutor from here) is loaded by OpenRLHF inside each vLLM rollout
actor; OpenRLHF's MultiTurnAgentExecutor drives one instance per episode. Imported only there.

OpenRLHF's executor has no tool-call parsing: it hands each assistant turn's text to `step` and
appends what `step` returns as `environment_feedback` (outside the turn's action range, so not
trained on). So the episode parses tool calls itself, in the hermes format TRL's rollout and verl
parse too (rlbridge.contract.environments.parse_tool_calls): a turn that calls tools while another
turn may follow runs them (each through the worker pool, rlbridge.engine.environment_steps.tool_call_text) and
returns their outputs as tool messages, rendered with the chat template when the run uses one; any
other turn, and the episode's last, goes to `Environment.step`. Tool calls and steps run in a thread,
so the other episodes of the actor's event loop (OpenRLHF gathers them) generate and call meanwhile.
"""

from __future__ import annotations

import json
import os

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from rlbridge.engine.events import reward_error, reward_sample, write_event
from rlbridge.engine.scoring import off_the_event_loop
from rlbridge.contract.environments import make_environment, parse_tool_calls

ENVIRONMENT_ENV = "RLBRIDGE_ENVIRONMENT"
CHAT_ENV = "RLBRIDGE_ENVIRONMENT_CHAT"
"""'1' when the run applies the chat template (model.use_chat_template): tool messages are rendered with it."""


class RLBridgeEpisode(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.spec = json.loads(os.environ[ENVIRONMENT_ENV])
        self.env = make_environment(self.spec)
        self.max_turns = int(self.spec.get("max_turns", 1))
        self.turns = 0
        self.tool_calls = 0
        self.total = 0.0

    async def reset(self, states: dict, **kwargs):
        info = json.loads(states["label"]) if states.get("label") else {}
        return {"observation": self.env.reset(info.get("row", {}), states["observation"])}

    async def step(self, states: dict, **kwargs):
        from rlbridge.engine.environment_steps import step_environment

        action = states["action_text"]
        self.turns += 1
        last = self.turns >= self.max_turns
        calls = parse_tool_calls(action) if type(self.env).tools and not last else []
        if calls:
            self.tool_calls += len(calls)
            texts = await off_the_event_loop(self._call_tools, calls)
            reward, feedback = 0.0, self._render([{"role": "tool", "content": text} for text in texts])
            done = self._budget_spent(states, feedback)  # no room for another turn: the episode ends here
        else:
            try:  # the worker pool: timeouts and fault counts
                result = await off_the_event_loop(step_environment, self.env, action)
            except Exception as exc:  # OpenRLHF would swallow it: record it, then let it fail the episode
                write_event(reward_error(exc))
                raise
            reward, feedback = float(result.reward), result.feedback
            done = result.done or last or self._budget_spent(states, feedback)
        self.total += reward
        if done:
            write_event(reward_sample(self.total, {self.spec["name"]: self.total}))
        return {
            "rewards": torch.tensor([reward]),
            "scores": torch.tensor([reward]),
            "environment_feedback": "" if done else feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {
                "turns": torch.tensor([float(self.turns)]),
                "tool_calls": torch.tensor([float(self.tool_calls)]),
            },
        }

    def _call_tools(self, calls: list) -> list[str]:
        """The texts of one turn's tool calls, in their order (an episode's calls may depend on each other)."""
        from rlbridge.engine.environment_steps import tool_call_text

        return [tool_call_text(self.env, name, arguments) for name, arguments in calls]

    @staticmethod
    def _render(messages: list[dict]) -> str:
        """Messages appended after a turn, as TRL's rollout renders them: with the chat template (and
        the next turn's generation prompt) when the run uses one, else their contents as they are."""
        if os.environ.get(CHAT_ENV) != "1":
            return "".join(m["content"] for m in messages)
        from rlbridge_adapters.openrlhf.reward import _tok

        return _tok().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

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
