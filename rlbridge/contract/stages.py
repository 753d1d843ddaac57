"""Rows of the offline stages (algorithm.name sft, dpo, reward_model): what each stage reads, checked
once for every engine when the rows are loaded (docs/stages.md).

sft: `prompt` (data.prompt_key) + `completion` text, or `messages`, a chat as a list of
{role, content} (with model.use_chat_template: true). dpo and reward_model: `prompt` + `chosen` +
`rejected` texts, one preference pair per row. The engine adapters turn these canonical rows into
their own formats.
"""

from __future__ import annotations

from typing import Any

from rlbridge.errors import ConfigError

SFT_COLUMNS = ("prompt", "completion")
CHAT_COLUMN = "messages"
PAIR_COLUMNS = ("prompt", "chosen", "rejected")


def row_format(rows: list[dict[str, Any]], config, field_name: str) -> str:
    """'prompt_completion', 'messages' or 'pairs', after checking that every row has it."""
    stage, key = config.algorithm.name, config.data.prompt_key
    first = rows[0]
    if stage == "sft":
        if CHAT_COLUMN in first and key not in first:
            if not config.model.use_chat_template:
                raise ConfigError(
                    f"{field_name}: chat rows ('{CHAT_COLUMN}') are rendered with the chat template: set "
                    "model.use_chat_template: true (model.chat_template to give one)"
                )
            fmt, needed = "messages", (CHAT_COLUMN,)
        else:
            fmt, needed = "prompt_completion", (key, "completion")
    else:
        fmt, needed = "pairs", (key, "chosen", "rejected")
    for i, row in enumerate(rows):
        missing = [c for c in needed if c not in row]
        if missing:
            what = "'messages' (a chat) or prompt + completion" if stage == "sft" else "prompt, chosen and rejected"
            raise ConfigError(
                f"{field_name}: row {i} has no column {', '.join(repr(m) for m in missing)}: algorithm.name "
                f"{stage} reads {what} (data.prompt_key names the prompt column); it has {sorted(row)}"
            )
        if fmt == "messages":
            chat = row[CHAT_COLUMN]
            if not (
                isinstance(chat, list)
                and chat
                and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in chat)
            ):
                raise ConfigError(
                    f"{field_name}: row {i}: '{CHAT_COLUMN}' must be a non-empty list of {{role, content}}"
                )
        else:
            bad = [c for c in needed if not isinstance(row[c], str)]
            if bad:
                raise ConfigError(
                    f"{field_name}: row {i}: {', '.join(bad)} must be text (got "
                    f"{', '.join(type(row[c]).__name__ for c in bad)})"
                )
    return fmt


def canonical_rows(rows: list[dict[str, Any]], config, field_name: str) -> tuple[str, list[dict[str, Any]]]:
    """The stage's columns of every row under their canonical names (the prompt column renamed
    from data.prompt_key), and the rows' format."""
    fmt = row_format(rows, config, field_name)
    key = config.data.prompt_key
    if fmt == "messages":
        return fmt, [
            {CHAT_COLUMN: [{"role": m["role"], "content": m["content"]} for m in r[CHAT_COLUMN]]} for r in rows
        ]
    columns = SFT_COLUMNS if fmt == "prompt_completion" else PAIR_COLUMNS
    return fmt, [{c: r[key if c == "prompt" else c] for c in columns} for r in rows]
