"""An rlbridge environment's tools as verl tools: rlbridge writes a verl tool config
(`multi_turn.tool_config_path`) with one entry per tool, whose class is EnvironmentTool and whose
schema comes from the method's signature (rlbridge.contract.environments.tool_schemas). verl's own loader
builds them once per agent-loop worker; the rlbridge agent loop executes them against the
episode's environment instance. Imported only inside verl processes."""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse


class EnvironmentTool(BaseTool):
    """A method of the episode's environment, called with the parsed arguments."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        environment = kwargs.get("environment")
        if environment is None:
            raise RuntimeError(
                f"tool '{self.name}' is an rlbridge environment tool: it runs only in the rlbridge_environment "
                "agent loop"
            )
        from rlbridge.engine.environment_steps import call_environment_tool
        from rlbridge.engine.scoring import off_the_event_loop

        # in a thread, through the worker pool: the agent loop's other episodes go on meanwhile
        text = await off_the_event_loop(call_environment_tool, environment, self.name, parameters)
        return ToolResponse(text=text), 0.0, {}
