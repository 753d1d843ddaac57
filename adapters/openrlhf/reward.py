"""The rlbridge reward plugins as an OpenRLHF agent executor, so that plugins get the token ids the
engine generated.

OpenRLHF's `reward_func(queries, prompts, labels)` (--reward.remote_url FILE.py) only sees text: the
query is prompt + completion decoded with special tokens kept, and recovering the completion's ids
from it means re-encoding, which a BPE tokenizer does not invert (the policy may emit a
non-canonical split such as '1' '1' where the tokenizer would write '11'). So rlbridge passes
--train.agent_func_path instead: the generated file imports RewardExecutor below as AgentExecutor,
OpenRLHF loads it inside each vLLM rollout actor, and for every sample it runs OpenRLHF's own
SingleTurnAgentExecutor (generation, truncation, log-probs) and then scores the action span of the
token ids it returned. An exception raised by a plugin is recorded as a reward_error event (which the
launcher counts and reports) and fails the rollout.
"""

from __future__ import annotations

import json
import os

from openrlhf.utils.agent import SingleTurnAgentExecutor

from rlbridge.contract.rewards import RewardInput
from rlbridge.engine.events import reward_error, reward_sample, write_event
from rlbridge.engine.scoring import off_the_event_loop, score_inputs

MODEL_ENV = "RLBRIDGE_OPENRLHF_MODEL"
_tokenizer = None


def _tok():
    """The run's tokenizer (for budget arithmetic in the environment agent; never for reward ids)."""
    global _tokenizer
    if _tokenizer is None:
        from transformers import AutoTokenizer

        _tokenizer = AutoTokenizer.from_pretrained(os.environ[MODEL_ENV])
    return _tokenizer


def reward_input(prompt: str, label: str | None, action_ids: list[int], tokenizer) -> RewardInput:
    """One sample as plugins see it: the engine's action token ids, and their text."""
    info = json.loads(label) if label else {}
    return RewardInput(
        prompt=info.get("prompt", prompt),
        completion=tokenizer.decode(action_ids, skip_special_tokens=True),
        completion_ids=list(action_ids),
        answer=info.get("answer"),
        metadata=info.get("row", {}),
    )


class RewardExecutor(SingleTurnAgentExecutor):
    """OpenRLHF's single-turn executor without a reward endpoint, scored with the run's plugins."""

    def __init__(self):
        super().__init__(None)

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, *args, **kwargs):
        output = await super().execute(
            prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, *args, **kwargs
        )
        start, end = output["action_ranges"][-1]
        x = reward_input(prompt, label, output["observation_tokens"][start:end], hf_tokenizer)
        try:
            totals, per_plugin = await off_the_event_loop(score_inputs, [x])  # OpenRLHF gathers every sample's execute
        except Exception as exc:
            write_event(reward_error(exc))
            raise
        plugins = {k: v[0] for k, v in per_plugin.items()}
        write_event(reward_sample(totals[0], plugins, x))
        output.update(
            reward=totals[0],
            scores=totals[0],
            extra_logs={name: (value if value is not None else 0.0) for name, value in plugins.items()},
        )
        return output
