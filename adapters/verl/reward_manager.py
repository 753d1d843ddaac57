"""The rlbridge reward manager for verl: verl's reward step calls it with the batch (token ids
included), and it calls the rlbridge reward plugins of the run (RLBRIDGE_REWARDS).

Two shapes, one scoring core: the legacy manager API (`__call__(data, return_dict)`, verl 0.5-0.8,
registered in `verl.workers.reward_manager`) and the reward-loop API (`async run_single(data)`,
verl 0.9, registered in `verl.experimental.reward_loop.reward_manager`). Imported only inside verl processes.
"""

from __future__ import annotations

import json
from typing import Any

from rlbridge.engine.events import reward_batch, reward_sample, write_event
from rlbridge.engine.scoring import off_the_event_loop, score_inputs
from rlbridge.contract.rewards import RewardInput

REWARD_MANAGER_NAME = "rlbridge"


def reward_input(tokenizer, item) -> tuple[RewardInput, int]:
    """One sample of a verl DataProto batch as a RewardInput, and its response length."""
    prompt_ids = item.batch["prompts"]
    prompt_len = prompt_ids.shape[-1]
    mask = item.batch["attention_mask"]
    valid_prompt = int(mask[:prompt_len].sum())
    valid_response = int(mask[prompt_len:].sum())
    response_ids = item.batch["responses"][:valid_response].tolist()
    extra = item.non_tensor_batch.get("extra_info") or {}
    row = json.loads(extra["rlbridge_row"]) if isinstance(extra, dict) and "rlbridge_row" in extra else {}
    return (
        RewardInput(
            prompt=tokenizer.decode(prompt_ids[-valid_prompt:], skip_special_tokens=True) if valid_prompt else "",
            completion=tokenizer.decode(response_ids, skip_special_tokens=True),
            completion_ids=response_ids,
            answer=item.non_tensor_batch["reward_model"]["ground_truth"],
            metadata=row,
        ),
        valid_response,
    )


def make_legacy_manager():
    import torch

    class RLBridgeRewardManager:
        """verl 0.5-0.8 reward manager API."""

        def __init__(self, tokenizer, num_examine=0, compute_score=None, reward_fn_key="data_source", **kwargs) -> None:
            self.tokenizer = tokenizer
            self.is_validation = num_examine > 0  # verl builds the validation manager with num_examine=1

        def __call__(self, data, return_dict: bool = False):
            if "rm_scores" in data.batch.keys():
                return {"reward_tensor": data.batch["rm_scores"]} if return_dict else data.batch["rm_scores"]
            reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
            inputs, lengths = zip(*(reward_input(self.tokenizer, data[i]) for i in range(len(data))))
            totals, per_plugin = score_inputs(list(inputs))
            for i, (total, length) in enumerate(zip(totals, lengths)):
                reward_tensor[i, max(length, 1) - 1] = total
            write_event(reward_batch(list(inputs), totals, per_plugin, train=not self.is_validation))
            if return_dict:
                extra = {
                    f"rlbridge/{name}": [v if v is not None else float("nan") for v in values]
                    for name, values in per_plugin.items()
                }
                return {"reward_tensor": reward_tensor, "reward_extra_info": extra}
            return reward_tensor

    return RLBridgeRewardManager


def make_reward_loop_manager():
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    class RLBridgeRewardLoopManager(RewardManagerBase):
        """verl 0.9 reward-loop manager API: one sample per call."""

        def __init__(
            self,
            config,
            tokenizer,
            compute_score=None,
            reward_router_address=None,
            reward_model_tokenizer=None,
            **kwargs,
        ):
            super().__init__(config, tokenizer, compute_score)
            self.tokenizer = tokenizer

        async def run_single(self, data) -> dict[str, Any]:
            item = data[0]
            x, _ = reward_input(self.tokenizer, item)
            # verl runs many run_single calls at once, and the worker pool scores them in parallel
            totals, per_plugin = await off_the_event_loop(score_inputs, [x])
            write_event(reward_sample(totals[0], {k: v[0] for k, v in per_plugin.items()}, x))
            return {
                "reward_score": totals[0],
                "reward_extra_info": {f"rlbridge/{k}": v[0] for k, v in per_plugin.items()},
            }

    return RLBridgeRewardLoopManager
