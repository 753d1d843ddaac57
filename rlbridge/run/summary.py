"""What a run leaves in output_dir besides metrics.jsonl: summary.json and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def summarize(history: list[dict[str, float]]) -> dict[str, Any]:
    rewards = [(row["step"], row["reward/mean"]) for row in history if "reward/mean" in row]
    step_times = [row["timing/step_s"] for row in history if "timing/step_s" in row]
    out: dict[str, Any] = {"steps": int(history[-1]["step"]) if history else 0}
    if rewards:
        tail = [r for _, r in rewards[-max(1, len(rewards) // 10) :]]
        out.update(
            reward_first=rewards[0][1],
            reward_last=rewards[-1][1],
            reward_max=max(r for _, r in rewards),
            reward_last10pct_mean=sum(tail) / len(tail),
            first_step_reward_ge_0_9=next((s for s, r in rewards if r >= 0.9), None),
        )
    for name in ("loss/sft", "loss/dpo", "loss/reward_model"):  # an offline stage's loss (docs/stages.md)
        losses = [row[name] for row in history if name in row]
        if losses:
            out.update(loss=name, loss_first=losses[0], loss_last=losses[-1])
    if step_times:
        ordered = sorted(step_times)
        out.update(step_s_median=ordered[len(ordered) // 2], train_s=sum(step_times))
    return out


# Plotters started with the run (prestart_plot): a process that imports matplotlib while the engine
# trains, then draws when told, so the end of `rlbridge train` pays for the drawing only.
_PLOTTERS: dict[str, Any] = {}


def prestart_plot(metrics: Path, path: Path, title: str) -> None:
    """Start the plotter of a run's reward.png (a no-op where matplotlib is not installed)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("matplotlib") is None:
        return
    try:
        _PLOTTERS[str(path)] = subprocess.Popen(
            [sys.executable, "-m", "rlbridge.run.summary", "--wait", str(metrics), str(path), title],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        pass


def _finish_prestarted(path: Path) -> bool:
    proc = _PLOTTERS.pop(str(path), None)
    if proc is None:
        return False
    import subprocess

    try:
        proc.stdin.close()  # "draw now": metrics.jsonl is complete
        return proc.wait(timeout=120) == 0 and Path(path).exists()
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        return False


def plot(history: list[dict[str, float]], path: Path, title: str) -> str | None:
    """Reward and step time against step, as a PNG. Returns why it was skipped, or None."""
    if _finish_prestarted(path):
        return None
    try:
        # the object API with the Agg canvas, not pyplot: no backend selection or figure manager,
        # which keeps this end-of-run cost (inside `rlbridge train`'s wall time) small
        from matplotlib.figure import Figure
    except ImportError:
        return "matplotlib is not installed (pip install 'rlbridge[plot]')"
    fig = Figure(figsize=(7, 6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for key in sorted({k for row in history for k in row if k.startswith("reward/") and k.endswith("/mean")}):
        pts = [(row["step"], row[key]) for row in history if key in row]
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], label=key, lw=2 if key == "reward/mean" else 1)
    ax1.set_ylabel("reward")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.grid(alpha=0.3)
    pts = [(row["step"], row["timing/step_s"]) for row in history if "timing/step_s" in row]
    ax2.plot([p[0] for p in pts], [p[1] for p in pts], color="tab:orange")
    ax2.set_ylabel("step time (s)")
    ax2.set_xlabel("training step")
    ax2.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m rlbridge.run.summary METRICS_JSONL PNG TITLE`: plot from a metrics file (used to draw
    the plot with an engine environment's matplotlib when the user's environment has none)."""
    import json
    import sys

    args = list(argv or sys.argv[1:])
    if args[:1] == ["--wait"]:  # started with the run: import now, draw when stdin closes
        args = args[1:]
        import matplotlib.figure  # noqa: F401

        sys.stdin.read()
    metrics, png, title = args[:3]
    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    # non-finite values are null (and named in "nonfinite"): leave them out of the plot
    history = [{k: v for k, v in row.items() if isinstance(v, (int, float))} for row in rows]
    skipped = plot(history, Path(png), title)
    if skipped:
        print(skipped, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
