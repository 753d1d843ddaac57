"""OpenRLHF's reward shim hands plugins the token ids vLLM generated, not a re-encoding of their
text, in the OpenRLHF environments. OpenRLHF's own SingleTurnAgentExecutor.execute runs (prompt
tokenisation, sampling budget, the observation tokens and action range it returns); only the vLLM
engine is scripted, returning a split the BPE tokenizer would never write ('1' '1' for '11')."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace


from .openrlhf_runtime import require_openrlhf_runtime  # noqa: E402

require_openrlhf_runtime()

from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV  # noqa: E402
from rlbridge.engine.workers import reset_engine_scorer  # noqa: E402

SEEN: list[list[int]] = []


def record():
    def reward(inputs):
        SEEN.extend(list(x.completion_ids) for x in inputs)
        return [float(len(x.completion_ids)) for x in inputs]

    return reward


class ScriptedVLLM:
    def __init__(self, action_ids):
        self.action_ids, self.prompts = action_ids, []

    async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
        self.prompts.append(list(prompt_ids))
        out = SimpleNamespace(token_ids=list(self.action_ids), text="", finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def test_reward_plugin_gets_the_generated_ids(tmp_path, monkeypatch):
    from rlbridge_adapters.openrlhf.reward import RewardExecutor
    from rlbridge_plugins.models import build_bpe_tokenizer

    tok = build_bpe_tokenizer()
    one, eleven = tok.convert_tokens_to_ids("1"), tok.convert_tokens_to_ids("11")
    action = [one, one, tok.eos_token_id]  # decodes to '11', which the tokenizer writes as one token
    assert tok(tok.decode(action[:2]), add_special_tokens=False)["input_ids"] == [eleven]
    monkeypatch.setenv(
        REWARDS_ENV, json.dumps([{"name": "record", "weight": 1.0, "args": {}, "factory": f"{__name__}:record"}])
    )
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events.jsonl"))
    monkeypatch.setenv("RLBRIDGE_ROLLOUT_WORKERS", json.dumps({"mode": "inline"}))
    reset_engine_scorer()
    SEEN.clear()
    engine = ScriptedVLLM(action)
    label = json.dumps({"prompt": "1111", "answer": "1", "row": {"prompt": "1111"}})
    params = SimpleNamespace(max_tokens=8, logprobs=None)
    out = asyncio.run(RewardExecutor().execute("1111", label, params, 64, tok, engine))
    assert SEEN == [action] and out["reward"] == 3.0
    assert out["observation_tokens"] == engine.prompts[0] + action
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "reward_sample" and e["total"] == 3.0 for e in events)
