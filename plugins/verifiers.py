"""verifiers (https://github.com/PrimeIntellect-ai/verifiers, its current `verifiers.v1` API, 0.4) as
rlbridge plugins: an optional extra (`pip install 'rlbridge[verifiers]'`, in the engine's environment
too: verl and OpenRLHF load data and score in their own processes), registered through the
`rlbridge` entry-point group like a third-party package. verifiers is imported only when used.

An installed verifiers environment is a *taskset* package (`id`, importable as a module that exports
its `Taskset` subclass, and optionally an `Env` subclass, through `__all__`). Three plugins:

- data source `verifiers`: the taskset's tasks (`vf.load_taskset`), one row each: `prompt` (the
  task's prompt text), `answer` (the task data's `answer` field, if it has one), `vf_taskset` (the
  id) and `vf_task` (the task's wire data, JSON, as verifiers serialises it), so that any process
  can rebuild the task.
- reward `verifiers`: the task's own scoring (`Task.score`: its `@vf.reward` methods and plugged
  reward functions, weighted as the task declares) on a verifiers `Trace` holding the prompt and the
  completion as the sampled assistant turn. Signals that need a runtime (a sandbox) are skipped, as
  verifiers itself does offline.
- environment `verifiers`: the taskset's `Env` (its `run(task, agents)` is the episode's control
  flow, e.g. answering each reply with feedback as a user simulator would) driven through rlbridge's
  environment contract: the policy plays the env's trainable agent (`agent`, default: the only one);
  each `interaction.turn(message)` the env makes becomes the feedback of rlbridge's `step` and the
  policy's next turn is its reply. The env runs in its own thread and event loop. A turn's reward is
  the change in the task's score over the conversation so far, so the episode's reward (the sum)
  is the task's score of the whole conversation however the engine caps turns.

Not mapped: harnesses (verifiers' own agent programs, which call the model through an
OpenAI-compatible interception server), runtimes (sandboxes) and MCP toolsets; an env that plays a
second model (e.g. `user-sim`'s LLM user) is refused when it asks for that agent.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Any

from rlbridge import hookimpl
from rlbridge.contract.environments import Environment, StepResult
from rlbridge.contract.registry import DataSourcePlugin, EnvironmentPlugin, RewardPlugin
from rlbridge.errors import ConfigError


def _vf():
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ConfigError(
            "verifiers plugins need the verifiers package (0.4, the v1 API): pip install 'rlbridge[verifiers]'"
        ) from exc
    return vf


def _taskset_config(vf, taskset: str, args: dict[str, Any]):
    try:
        return vf.taskset_config_type(taskset)(id=taskset, **args)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"verifiers taskset '{taskset}' is not installed here: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"verifiers taskset '{taskset}' refused its args {args}: {exc}") from exc


def _run(coro):
    """Run a coroutine to completion from sync code, also when called inside a running event loop."""
    import asyncio  # here, not at module level: every command that loads plugins would pay for it (startup.py)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def verifiers_rows(taskset: str, num_rows: int | None = None, **taskset_args) -> list[dict]:
    """Rows from an installed verifiers taskset: prompt, answer, and the task's wire data."""
    vf = _vf()
    ts = vf.load_taskset(_taskset_config(vf, taskset, taskset_args))
    if num_rows is not None:
        ts = ts.take(num_rows)
    rows = []
    for task in ts:
        data = task.data
        row = {
            "prompt": data.prompt_text,
            "vf_taskset": taskset,
            "vf_task": json.dumps(data.model_dump(mode="json", exclude_none=True)),
        }
        if getattr(data, "answer", None) is not None:
            row["answer"] = str(data.answer)
        rows.append(row)
    if not rows:
        raise ConfigError(f"data.train.args: verifiers taskset '{taskset}' yielded no tasks")
    return rows


def _task(vf, row: dict[str, Any], taskset: str | None, taskset_args: dict[str, Any]):
    """The row's task, rebuilt from its wire data with the taskset's own Task class and config."""
    name = taskset or row.get("vf_taskset")
    wire = row.get("vf_task")
    if name is None or wire is None:
        return None
    cls = vf.task_type(name)
    data = cls.data_type().model_validate(json.loads(wire) if isinstance(wire, str) else wire)
    return cls(data, _taskset_config(vf, name, taskset_args).task)


def _trace(vf, task, agent: str = "agent"):
    from verifiers.v1.graph import MessageNode

    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(), name=agent),
    )
    messages = []
    if task.data.system_prompt:
        messages.append(vf.SystemMessage(content=task.data.system_prompt))
    if isinstance(task.data.prompt, str):
        messages.append(vf.UserMessage(content=task.data.prompt))
    elif task.data.prompt:
        messages.extend(task.data.prompt)
    for message in messages:
        trace.nodes.append(MessageNode(parent=len(trace.nodes) - 1 if trace.nodes else None, message=message))
    return trace


def _append(trace, message, sampled: bool) -> None:
    from verifiers.v1.graph import MessageNode

    trace.nodes.append(
        MessageNode(parent=len(trace.nodes) - 1 if trace.nodes else None, message=message, sampled=sampled)
    )


async def _score(task, trace) -> tuple[float, dict[str, float]]:
    """The task's own score of the trace (a fresh copy: scoring records into the trace)."""
    scored = trace.model_copy(deep=True)
    scored.rewards, scored.metrics = {}, {}
    scored.is_completed = scored.ok = True
    await task.score(scored)
    metrics = {k: float(v) for k, v in scored.metrics.items() if v is not None}
    return float(scored.reward), metrics


def verifiers_reward(taskset: str | None = None, **taskset_args):
    """The verifiers task's own scoring (its @vf.reward methods), one completion per trace."""
    vf = _vf()  # here, not per call: the import takes seconds, and a reward worker builds its rewards at its start

    def reward(inputs: Sequence) -> list[float | None]:

        async def score_all():
            out: list[float | None] = []
            for x in inputs:
                task = _task(vf, x.metadata, taskset, taskset_args)
                if task is None:
                    out.append(None)
                    continue
                trace = _trace(vf, task)
                _append(trace, vf.AssistantMessage(content=x.completion), sampled=True)
                out.append((await _score(task, trace))[0])
            return out

        return _run(score_all())

    return reward


_DONE = object()


class _Interaction:
    """What a verifiers Env's `run()` holds for the policy's agent: each `turn(message)` hands the
    message to rlbridge as feedback and returns the policy's reply."""

    def __init__(self, episode: VerifiersEnvironment, task) -> None:
        self.episode, self.task = episode, task
        self.trace = _trace(episode.vf, task, episode.agent)
        self._over = False

    async def turn(self, message=None):
        vf = self.episode.vf
        if self._over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        text = None
        if message is not None:
            for m in [vf.UserMessage(content=message)] if isinstance(message, str) else message:
                m = m if not isinstance(m, dict) else vf.UserMessage(**{k: v for k, v in m.items() if k != "role"})
                _append(self.trace, m, sampled=False)
            text = message if isinstance(message, str) else "\n".join(str(getattr(m, "content", m)) for m in message)
        action = await self.episode._ask(text, self)
        if action is _DONE:  # rlbridge ended the episode (turn cap): the env sees a terminated segment
            self._over = True
            return vf.Segment(messages=[], terminated=True)
        reply = vf.AssistantMessage(content=action)
        _append(self.trace, reply, sampled=True)
        return vf.Segment(messages=[reply])

    async def close(self):
        return self.trace


class _Agent:
    def __init__(self, episode: VerifiersEnvironment, name: str) -> None:
        self.episode, self.name, self.trainable = episode, name, True

    @asynccontextmanager
    async def interaction(self, task):
        if self.name != self.episode.agent:
            raise ConfigError(
                f"environment.args: the verifiers env asks for agent '{self.name}' besides the policy's "
                f"('{self.episode.agent}'); rlbridge drives one agent, the policy"
            )
        inter = _Interaction(self.episode, task)
        self.episode.interactions.append(inter)
        yield inter


class _Agents:
    def __init__(self, episode: VerifiersEnvironment) -> None:
        self._episode = episode
        self._made: dict[str, _Agent] = {}

    def __getattr__(self, name: str) -> _Agent:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._made.setdefault(name, _Agent(self._episode, name))


class VerifiersEnvironment(Environment):
    """One episode of a verifiers taskset's `Env`, played by the policy as one of its agents."""

    def __init__(
        self,
        taskset: str,
        env: str = "",
        agent: str | None = None,
        env_args: dict[str, Any] | None = None,
        turn_timeout_s: float = 300.0,
        **taskset_args,
    ) -> None:
        self.vf = vf = _vf()
        config = vf.resolve_env_config({"id": env, "taskset": {"id": taskset, **taskset_args}, **(env_args or {})})
        self.env = vf.environment_class(taskset, env)(config)
        roles = list(self.env._agent_specs)
        if agent is None and len(roles) != 1:
            raise ConfigError(
                f"environment.args.agent: the verifiers env has agents {roles}; name the one the policy plays"
            )
        self.agent = agent or roles[0]
        if self.agent not in roles:
            raise ConfigError(f"environment.args.agent: '{self.agent}' is none of the env's agents {roles}")
        self.taskset, self.taskset_args = taskset, taskset_args
        self.interactions: list[_Interaction] = []
        self._thread: threading.Thread | None = None
        self._loop = self._waiting = None
        # how long the env waits for the policy's next turn: engines end an episode at their turn
        # cap without a call, and the env's (daemon) thread then ends the episode as terminated
        self.turn_timeout_s = turn_timeout_s

    # -- the env's side, in its own thread -------------------------------------------------------
    async def _ask(self, feedback: str | None, inter: _Interaction):
        """Score the conversation so far, hand rlbridge the feedback, wait for the policy's turn."""
        import asyncio

        score = (await _score(self.task, inter.trace))[0] if inter.trace.num_turns else 0.0
        self._waiting = asyncio.get_running_loop().create_future()  # before the event: step() resolves it
        self._events.put(("turn", feedback, score - self._scored))
        self._scored = score
        try:
            return await asyncio.wait_for(self._waiting, self.turn_timeout_s)
        except asyncio.TimeoutError:  # the engine ended the episode without telling us (its turn cap)
            return _DONE

    def _give(self, action) -> None:
        """Resolve the env thread's wait for the policy's turn (from rlbridge's thread)."""
        loop, fut = self._loop, self._waiting
        if loop is None or fut is None:
            return

        def deliver():
            if not fut.done():
                fut.set_result(action)

        try:
            loop.call_soon_threadsafe(deliver)
        except RuntimeError:  # the env's loop is closed: its episode is over
            pass

    async def _episode(self) -> None:
        import asyncio

        vf = self.vf
        self._loop = asyncio.get_running_loop()
        try:
            agents = _Agents(self)
            await self.env.setup(agents)
            await self.env.run(self.task, agents)
            traces = [i.trace for i in self.interactions]
            mine = next((t for t in traces if t.num_turns), traces[0] if traces else _trace(vf, self.task, self.agent))
            score, metrics = await _score(self.task, mine)
            mine.rewards, mine.metrics = {}, dict(metrics)
            episode = vf.Episode(
                env=vf.EnvInfo(id=self.env.config.env_id),
                task=vf.TraceTask(type=type(self.task).__name__, data=self.task.data),
                traces=[mine],
            )
            await self.env.finalize(self.task, episode)
            self.metrics = {k: float(v) for k, v in mine.metrics.items() if v is not None}
            self._events.put(("done", None, score - self._scored))
        except BaseException as exc:
            self._events.put(("error", exc, 0.0))

    # -- rlbridge's side --------------------------------------------------------------------------
    def reset(self, row: dict[str, Any], prompt: str) -> str:
        import asyncio

        self.close()
        task = _task(self.vf, row, self.taskset, self.taskset_args)
        if task is None:
            raise ConfigError(
                "environment: the verifiers env needs rows of the verifiers data source (vf_task, vf_taskset columns)"
            )
        self.task, self.interactions, self._scored, self.metrics = task, [], 0.0, {}
        self._events: queue.Queue = queue.Queue()
        self._loop, self._waiting = None, None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._episode()), daemon=True, name="verifiers-env")
        self._thread.start()
        kind, feedback, _ = self._next()
        if kind != "turn":
            raise ConfigError("environment: the verifiers env ended its episode before the policy's first turn")
        return prompt if feedback is None else feedback

    def _next(self):
        kind, value, reward = self._events.get()
        if kind == "error":
            raise value
        return kind, value, reward

    def step(self, action: str) -> StepResult:
        self._give(action)
        kind, feedback, reward = self._next()
        if kind == "done":
            self._thread = None
            return StepResult(reward=reward, done=True)
        return StepResult(reward=reward, done=False, feedback=feedback or "")

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._give(_DONE)  # the env sees a terminated segment and finishes
        self._thread = None

    def __del__(self) -> None:
        self.close()


@hookimpl
def rlbridge_register_data_sources():
    return [
        DataSourcePlugin("verifiers", verifiers_rows, "an installed verifiers taskset's tasks by id (extra: verifiers)")
    ]


@hookimpl
def rlbridge_register_rewards():
    return [
        RewardPlugin(
            "verifiers",
            verifiers_reward,
            "a verifiers task's own rewards (@vf.reward) on the completion (extra: verifiers)",
        )
    ]


@hookimpl
def rlbridge_register_environments():
    return [
        EnvironmentPlugin(
            "verifiers",
            VerifiersEnvironment,
            "a verifiers taskset's Env, the policy playing one agent (extra: verifiers)",
        )
    ]
