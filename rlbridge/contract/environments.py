"""The engine-neutral environment interface that environment plugins implement (multi-turn
episodes, optionally with tools): one instance per episode, text in, text out. Adapters drive it
from the engine's own multi-turn machinery (verl: a registered agent loop and verl tools; OpenRLHF:
an AgentExecutor); a backend that cannot rejects `environment`."""

from __future__ import annotations

import inspect
import json
import re
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from rlbridge.errors import ConfigError


@dataclass
class StepResult:
    reward: float
    """Reward for this turn; an episode's reward is the sum over its turns."""
    done: bool
    """True ends the episode."""
    feedback: str = ""
    """Text appended to the conversation before the policy's next turn (ignored when done). Engines
    with chat templates send it as a user message, which the passthrough template renders as is."""


class Environment(ABC):
    """One episode. `reset` gets the data row and returns the first observation (the text the
    policy continues); `step` gets the policy's turn and returns a StepResult."""

    tools: tuple[str, ...] = ()
    """Names of methods of this class that the policy may call as tools. Each has type hints and a
    docstring (first paragraph: the description; a Google-style `Args:` section: the parameters'
    descriptions) and returns text. The engine parses tool calls in its own format, calls the method
    on the episode's instance and sends the text back as a tool message; a turn that calls tools is
    not passed to `step` unless it is the episode's last turn."""

    @abstractmethod
    def reset(self, row: dict[str, Any], prompt: str) -> str:
        """Start an episode for this row; `prompt` is the row's prompt as the engine renders it."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Score the policy's turn and say what comes next."""


def make_environment(spec: dict[str, Any]) -> Environment:
    """An environment instance from a config spec ({name, args, max_turns}), through the registry."""
    from rlbridge.contract.registry import get_plugin_manager

    plugin = get_plugin_manager().get("environment", spec["name"], "environment.name")
    return plugin.factory(**spec.get("args", {}))


def environment_class(spec: dict[str, Any]) -> type[Environment]:
    """The class of the environment a spec names: the factory itself when it is a class, else the
    class of one instance (factories are expected to be cheap)."""
    from rlbridge.contract.registry import get_plugin_manager

    factory = get_plugin_manager().get("environment", spec["name"], "environment.name").factory
    return factory if isinstance(factory, type) else type(factory(**spec.get("args", {})))


TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
"""A hermes-format tool call (the format verl parses too): the one rlbridge parses itself where an
engine has no tool-call parsing of its own (TRL's rollout_func, OpenRLHF's agent executor)."""


def parse_tool_calls(text: str) -> list[tuple[str | None, Any]]:
    """(name, arguments) of each hermes-format tool call in the text; unparsable JSON gives (None, error)."""
    calls: list[tuple[str | None, Any]] = []
    for raw in TOOL_CALL.findall(text):
        try:
            call = json.loads(raw)
            calls.append((str(call["name"]), call.get("arguments") or {}))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            calls.append((None, f"Invalid tool call {raw!r}: {exc}"))
    return calls


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def tool_schemas(env_class: type[Environment]) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas for the environment's `tools`, from their signatures and docstrings."""
    schemas = []
    for name in env_class.tools:
        where = f"{env_class.__name__}.{name} (listed in tools)"
        method = getattr(env_class, name, None)
        if not callable(method):
            raise ConfigError(
                f"environment tool {where} is not a method of the class; define it or remove it from tools"
            )
        doc = inspect.getdoc(method)
        if not doc:
            raise ConfigError(f"environment tool {where} has no docstring; the policy needs its description")
        description, arg_docs = _parse_docstring(doc)
        hints = typing.get_type_hints(method)
        properties, required = {}, []
        for param in list(inspect.signature(method).parameters.values())[1:]:  # skip self
            origin = typing.get_origin(hints.get(param.name)) or hints.get(param.name)
            if origin not in _JSON_TYPES:
                raise ConfigError(
                    f"environment tool {where}: parameter '{param.name}' needs a type hint among "
                    f"{', '.join(t.__name__ for t in _JSON_TYPES)}"
                )
            properties[param.name] = {"type": _JSON_TYPES[origin], "description": arg_docs.get(param.name, "")}
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": {"type": "object", "properties": properties, "required": required},
                },
            }
        )
    return schemas


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    description = doc.split("\n\n")[0].replace("\n", " ").strip()
    args: dict[str, str] = {}
    section = re.search(r"^Args:\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if section:
        for line in section.group(1).splitlines():
            match = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if match:
                args[match.group(1)] = match.group(2).strip()
    return description, args
