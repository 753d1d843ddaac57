"""The rlbridge reward plugins as an OpenRLHF reward function.

OpenRLHF loads the file passed as --reward.remote_url (a generated two-line file that imports this
function) inside each vLLM rollout actor and calls `reward_func(queries, prompts, labels)` once per
sample. `queries` is prompt + completion decoded with special tokens kept, so the completion's token
ids can be recovered exactly with the model's tokenizer. OpenRLHF swallows exceptions raised here
(the sample gets no reward); every one is recorded as a reward_error event, which the launcher counts
and reports.
"""

from __future__ import annotations

import json
import os
import traceback

from rlbridge.engine.engine_io import score_inputs, write_event
from rlbridge.contract.rewards import RewardInput

MODEL_ENV = "RLBRIDGE_OPENRLHF_MODEL"
_tokenizer = None


def _tok():
    global _tokenizer
    if _tokenizer is None:
        from transformers import AutoTokenizer

        _tokenizer = AutoTokenizer.from_pretrained(os.environ[MODEL_ENV])
    return _tokenizer


def reward_func(queries, prompts, labels, **kwargs):
    import torch

    try:
        inputs = []
        for query, prompt, label in zip(queries, prompts, labels):
            raw = query[len(prompt):] if query.startswith(prompt) else query
            ids = _tok()(raw, add_special_tokens=False)["input_ids"]
            info = json.loads(label) if label else {}
            inputs.append(
                RewardInput(
                    prompt=info.get("prompt", prompt),
                    completion=_tok().decode(ids, skip_special_tokens=True),
                    completion_ids=ids,
                    answer=info.get("answer"),
                    metadata=info.get("row", {}),
                )
            )
        totals, per_plugin = score_inputs(inputs)
    except Exception as exc:
        write_event({"kind": "reward_error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        raise
    for i, total in enumerate(totals):
        write_event({"kind": "reward_sample", "total": total, "plugins": {k: v[i] for k, v in per_plugin.items()}})
    rewards = torch.tensor(totals, dtype=torch.float32)
    extra = {name: torch.tensor([v if v is not None else 0.0 for v in values]) for name, values in per_plugin.items()}
    return {"rewards": rewards, "scores": rewards, "extra_logs": extra}
