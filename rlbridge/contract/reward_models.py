"""Reward models as rewards: `reward: [{model: PATH}]`.

A reward model is a sequence-classification model with one output; its score of the prompt followed
by the completion is the reward (the convention of TRL's model rewards and OpenRLHF's reward actors).
This module is rlbridge's own scorer of such a model, used where a backend runs the reward through
rlbridge's reward shim instead of an engine reward-model worker (see each backend's capability table
for `reward`). It imports torch and transformers only when a model reward is built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

MAX_TOKENS = 4096


def model_reward(path: str, where: str, batch_size: int = 16, **unused: Any) -> Callable:
    """A reward callable over RewardInputs that scores prompt + completion with the model at `path`
    (materialized first: builtin models are built on first use)."""
    from rlbridge.contract.models import materialize_path
    from rlbridge.errors import ConfigError

    if unused:
        raise ConfigError(f"{where}.args: a model reward takes only batch_size (got {sorted(unused)})")
    directory = materialize_path(path, f"{where}.model")
    lock = threading.Lock()
    state: dict[str, Any] = {}

    def load():
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(directory)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model = AutoModelForSequenceClassification.from_pretrained(directory, num_labels=1).eval()
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tok.pad_token_id
        state.update(tok=tok, model=model, torch=torch)

    def reward(inputs: Sequence) -> list[float]:
        with lock:  # async reward loops call from several threads
            if not state:
                load()
            tok, model, torch = state["tok"], state["model"], state["torch"]
            texts = [x.prompt + x.completion for x in inputs]
            scores: list[float] = []
            with torch.no_grad():
                for i in range(0, len(texts), batch_size):
                    batch = tok(
                        texts[i : i + batch_size],
                        return_tensors="pt",
                        padding=True,
                        truncation=True,
                        max_length=MAX_TOKENS,
                        add_special_tokens=False,
                    )
                    scores += [float(v) for v in model(**batch).logits[:, 0]]
            return scores

    reward.__name__ = path.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return reward
