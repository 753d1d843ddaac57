"""The engine-neutral environment interface: tool schemas from the environment's own methods."""

import pytest

from rlbridge.contract.environments import Environment, StepResult, environment_class, tool_schemas
from rlbridge.errors import ConfigError


def test_tool_schema_comes_from_signature_and_docstring():
    [schema] = tool_schemas(environment_class({"name": "digit_hint"}))
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "hint"
    assert fn["description"] == "Tell the digit that this episode rewards."
    assert fn["parameters"] == {
        "type": "object",
        "required": [],
        "properties": {"repeat": {"type": "integer", "description": "how many times to write the digit."}},
    }
    assert tool_schemas(environment_class({"name": "digit_turns"})) == []


class _Base(Environment):
    def reset(self, row, prompt):
        return prompt

    def step(self, action):
        return StepResult(0.0, True)


def test_tools_without_type_hints_or_docstrings_name_the_method():
    class NoHint(_Base):
        tools = ("look",)

        def look(self, where) -> str:
            """Look somewhere."""
            return where

    class NoDoc(_Base):
        tools = ("look",)

        def look(self, where: str) -> str:
            return where

    class Missing(_Base):
        tools = ("look",)

    with pytest.raises(ConfigError, match=r"NoHint.look.*parameter 'where' needs a type hint"):
        tool_schemas(NoHint)
    with pytest.raises(ConfigError, match=r"NoDoc.look.*no docstring"):
        tool_schemas(NoDoc)
    with pytest.raises(ConfigError, match=r"Missing.look.*not a method"):
        tool_schemas(Missing)
