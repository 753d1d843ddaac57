"""AReaL's reward calling convention, for `native: areal` reward entries on any backend
(rlbridge.contract.native_rewards): `reward_fn(prompt, completions, prompt_ids, completion_ids, **data)`, one
sample per call (RLVRWorkflow._compute_rewards, areal/workflow/rlvr.py), returns a number; sync or async.
`prompt` is the prompt text, `completions` the completion text, `completion_ids` the engine's token ids,
`data` the dataset row's columns (`answer` is the answer column). rlbridge's reward inputs carry no prompt ids,
so `prompt_ids` is an empty list (AReaL's own rewards, areal/reward/*.py, do not read it)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rlbridge.contract.native_rewards import NativeConvention, Scores, accepts, call_native, number

CALL = "reward_fn(prompt, completions, prompt_ids, completion_ids"


def call(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    names, var_kw = accepts(fn)
    scores = []
    for x in inputs:
        row = {**x.metadata, "answer": x.answer}
        data = {k: v for k, v in row.items() if var_kw or k in names}
        scores.append(
            number(call_native(fn, x.prompt, x.completion, [], list(x.completion_ids), **data, **args), "reward_fn")
        )
    return Scores(scores)


def problem(sig: inspect.Signature, args: dict[str, Any]) -> str | None:
    """Callable with the four positional arguments, the row's answer (when it takes one) and the entry's args."""
    params = sig.parameters
    takes_answer = "answer" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    try:
        sig.bind(*([None] * 4), **({"answer": None} if takes_answer else {}), **args)
    except TypeError as exc:
        return f"cannot be called as {CALL}, **row{', **args' if args else ''}) ({exc})"
    return None


CONVENTION = NativeConvention(
    expected=f"{CALL}, answer=None, **kwargs) -> float",
    problem=problem,
    adapt=call,
)
