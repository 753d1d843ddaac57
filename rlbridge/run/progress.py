"""A progress bar with the live reward, on stderr (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainingProgress:
    def __init__(self, total: int | None, description: str) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[reward]}"),
            TextColumn("{task.fields[step_s]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total, reward="reward -", step_s="")

    def __enter__(self) -> "TrainingProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def warn(self, message: str) -> None:
        from rich.markup import escape

        self._progress.console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        reward = metrics.get("reward/mean")
        # an offline stage (docs/stages.md) has no reward: its loss shows instead
        loss = next(((n, metrics[n]) for n in ("loss/sft", "loss/dpo", "loss/reward_model") if n in metrics), None)
        step_s = metrics.get("timing/step_s")
        self._progress.update(
            self._task,
            completed=step,
            reward=f"reward {reward:.3f}" if reward is not None else f"{loss[0]} {loss[1]:.3f}" if loss else "reward -",
            step_s=f"{step_s:.2f}s/step" if step_s is not None else "",
        )
