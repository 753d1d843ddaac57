"""The prompt file rlbridge writes for OpenRLHF: rows in OpenRLHF's format, prompts over the cap
dropped (rollout.drop_overlong_prompts) or rendered with chat-template arguments
(model.chat_template_kwargs), lengths as the policy sees them. Needs transformers, not OpenRLHF."""

from __future__ import annotations

import json
from typing import Any

from rlbridge.errors import RLBridgeError


def to_openrlhf_rows(rows: list[dict[str, Any]], prompt_key: str, answer_key: str, render=None) -> list[dict[str, Any]]:
    """OpenRLHF prompt rows: the prompt text (rendered by `render` when rlbridge applies the chat
    template itself), and the answer and row (as JSON) in the label column that OpenRLHF hands to
    the reward function."""
    return [
        {
            "prompt": render(row[prompt_key]) if render else row[prompt_key],
            "label": json.dumps({"prompt": row[prompt_key], "answer": row.get(answer_key), "row": row}, default=str),
        }
        for row in rows
    ]


def prompt_length(tok, text: str, chat: bool, template_kwargs: dict[str, Any] | None = None) -> int:
    if chat:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, **(template_kwargs or {})
        )
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def longest_prompt(
    prompts: list[str], model_dir: str, chat: bool, template_kwargs: dict[str, Any] | None = None
) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return max([1, *(prompt_length(tok, text, chat, template_kwargs) for text in set(prompts))])


def drop_overlong(
    rows: list[dict[str, Any]],
    prompt_key: str,
    cap: int,
    model_dir: str,
    chat: bool,
    template_kwargs: dict[str, Any] | None,
    field: str,
) -> list[dict[str, Any]]:
    """rollout.drop_overlong_prompts: the rows whose prompt (as the policy sees it) fits the cap."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    kept = [row for row in rows if prompt_length(tok, row[prompt_key], chat, template_kwargs) <= cap]
    if not kept:
        raise RLBridgeError(
            f"rollout.max_prompt_tokens: every prompt of {field} is longer than {cap} tokens; raise the cap"
        )
    return kept


def chat_renderer(model_dir: str, template_kwargs: dict[str, Any]):
    """model.chat_template_kwargs: OpenRLHF applies the chat template without extra arguments, so
    rlbridge renders each prompt with them and OpenRLHF takes the text as is (--data.input_template {})."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return lambda text: tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False, **template_kwargs
    )
