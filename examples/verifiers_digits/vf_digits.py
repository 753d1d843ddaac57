"""A tiny verifiers (v1 API, verifiers 0.4) environment for rlbridge's tests: no hub, no model.

Taskset `vf_digits`: the quickstart task (the prompt is a digit four times; the answer is the digit).
Its reward `digit_share` is the task's own `@vf.reward` method: the share of the reply's characters
equal to the answer. `DigitGameEnv` is a multi-turn v1 `Env`: its `run()` relays turns with the
trainable agent, answering each reply with feedback ("more <digit>") until `turns` replies, as a
tau-style user simulator would, but in code; `finalize()` records how many turns were played.
"""

from __future__ import annotations

import verifiers.v1 as vf


class DigitData(vf.TaskData):
    answer: str = "0"


class DigitTask(vf.Task[DigitData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def digit_share(self, task: DigitData, trace: vf.Trace) -> float:
        replies = [m.content or "" for m in trace.assistant_messages]
        text = "".join(replies)
        return text.count(task.answer) / len(text) if text else 0.0


class DigitsTasksetConfig(vf.TasksetConfig):
    num_rows: int = 64
    seed: int = 0


class DigitsTaskset(vf.Taskset[DigitTask, DigitsTasksetConfig]):
    def load(self):
        import random

        rng = random.Random(self.config.seed)
        for i in range(self.config.num_rows):
            d = str(rng.randrange(10))
            yield DigitTask(DigitData(id=f"d{i}", prompt=d * 4, answer=d), self.config.task)


class DigitGameConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    turns: int = 2


class DigitGameEnv(vf.Env[DigitGameConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as game:
            reply = await game.turn()  # the prompted task speaks first
            for _ in range(self.config.turns - 1):
                if reply.terminated:
                    break
                reply = await game.turn(f"more {task.data.answer}")

    async def finalize(self, task, episode):
        for trace in episode.traces:
            trace.record_metric("turns", float(trace.num_turns))


__all__ = ["DigitsTaskset", "DigitGameEnv"]
