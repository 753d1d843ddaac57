"""Built-in data-source plugins for `data.*.type: generator`."""

from __future__ import annotations

import random

from rlbridge import hookimpl
from rlbridge.contract.registry import DataSourcePlugin


def digit_copy(num_rows: int = 1024, repeat: int = 4, seed: int = 0) -> list[dict]:
    """The quickstart task: the prompt is one digit repeated `repeat` times, the answer is that
    digit. Rewarded with digit_match, a policy must learn to keep writing the prompt's digit."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        digit = str(rng.randrange(10))
        rows.append({"prompt": digit * repeat, "answer": digit})
    return rows


# what the tiny builtin tokenizer can write besides digits: the noise that rejected completions carry
_NOISE = "abcdefghijklmnopqrstuvwxyz +-=*"


def digit_sft(
    num_rows: int = 1024, repeat: int = 4, length: int = 8, format: str = "prompt_completion", seed: int = 0
) -> list[dict]:
    """SFT rows of the quickstart task: prompt 'dddd', completion the digit `length` times.
    format 'messages' writes each row as a chat (user prompt, assistant completion) instead."""
    if format not in ("prompt_completion", "messages"):
        raise ValueError(f"format must be prompt_completion or messages, not {format!r}")
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        digit = str(rng.randrange(10))
        prompt, completion = digit * repeat, digit * length
        if format == "messages":
            rows.append(
                {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]}
            )
        else:
            rows.append({"prompt": prompt, "completion": completion, "answer": digit})
    return rows


def digit_preferences(num_rows: int = 1024, repeat: int = 4, length: int = 8, seed: int = 0) -> list[dict]:
    """Preference pairs of the quickstart task (dpo, reward_model): prompt 'dddd'; chosen, the digit
    `length` times; rejected, the same with 1 to `length` positions replaced by another character
    (another digit or a letter/symbol), so that a reward model learns 'more of the prompt's digit is
    better' as a graded score, the quickstart's digit_match reward, not just a yes/no."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        digit = str(rng.randrange(10))
        chosen = digit * length
        wrong = rng.sample(range(length), rng.randint(1, length))
        others = [c for c in "0123456789" + _NOISE if c != digit]
        rejected = "".join(rng.choice(others) if i in wrong else digit for i in range(length))
        rows.append({"prompt": digit * repeat, "chosen": chosen, "rejected": rejected, "answer": digit})
    return rows


@hookimpl
def rlbridge_register_data_sources():
    return [
        DataSourcePlugin("digit_copy", digit_copy, "prompt 'dddd', answer 'd' (the quickstart task)"),
        DataSourcePlugin("digit_sft", digit_sft, "sft rows: prompt 'dddd', completion 'dddddddd' (or chat messages)"),
        DataSourcePlugin(
            "digit_preferences",
            digit_preferences,
            "dpo/reward_model pairs: prompt 'dddd', chosen 'dddddddd', rejected with some positions wrong",
        ),
    ]
