"""`rlbridge doctor RUN_DIR`: how the run in a directory ended, read from what it left (run_state.json,
summary.json and its `failure` record), in sentences: for a failed or hung run what failed, in which
process, the evidence and what to change."""

from __future__ import annotations

from pathlib import Path


def explain(run_dir: Path | str) -> list[str]:
    """`rlbridge doctor RUN_DIR`: how the run there ended, and for a failed or hung one what failed,
    in which process, the evidence and what to change, in sentences."""
    import json
    import time

    from rlbridge.diagnosis import runstate

    run_dir = Path(run_dir)
    lines: list[str] = []
    summary_path = run_dir / "summary.json"
    state = runstate.read_state(run_dir)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    if (
        state
        and state.get("status") == "running"
        and isinstance(state.get("pid"), int)
        and state["pid"] > 0
        and runstate.pid_alive(state["pid"])
    ):
        last = runstate.last_step(run_dir / "metrics.jsonl")
        age = (
            time.time() - (run_dir / "metrics.jsonl").stat().st_mtime if (run_dir / "metrics.jsonl").exists() else None
        )
        lines.append(
            f"{run_dir}: running (pid {state['pid']}), last step {last if last is not None else 'none yet'}"
            + (f", written {age:.0f} s ago" if age is not None else "")
        )
        lines.append(f"`rlbridge stacks {run_dir}` shows where each of its processes is now.")
        return lines
    if summary is None:
        previous = runstate.previous_run(run_dir) if state else None
        if previous:
            after = f" after step {previous['last_step']}" if "last_step" in previous else ""
            return [
                f"{run_dir}: the run was killed{after} ({previous['reason']}); `rlbridge train CONFIG --resume` "
                "continues "
                "from its last complete checkpoint"
            ]
        return [f"{run_dir}: no summary.json or run_state.json: not a run directory, or the run never started"]
    status = summary.get("status")
    steps = summary.get("steps", 0)
    lines.append(
        f"{run_dir}: {status} after {steps} step(s) on "
        f"{summary.get('backend')} {summary.get('engine_version') or ''}".rstrip()
    )
    for r in summary.get("restarts", []):
        lines.append(
            f"restart {r['n']} after step {r.get('after_step')}: {r.get('kind')} in {r.get('process')} "
            f"(resumed from {r.get('from_checkpoint') or 'the start'})"
            + (f"; it was in {r['frame']}, stacks in {r['stacks']}" if r.get("stacks") else "")
        )
    failure = summary.get("failure")
    if status == "completed" or not failure:
        if summary.get("error"):
            lines.append(f"error: {summary['error']}")
        return lines
    lines.append(f"cause: {failure.get('kind')} in {failure.get('process')} ({failure.get('role')})")
    if failure.get("frame"):
        lines.append(f"stuck in: {failure['frame']}")
    if failure.get("evidence"):
        lines.append(f"evidence: {failure['evidence']}")
    lines.append(f"what to change: {failure.get('hint')}")
    retry = "would be restarted" if failure.get("retryable") else "is not restarted (the same config would fail again)"
    lines.append(f"with training.max_restarts this kind {retry}")
    for key in ("log", "stacks"):
        if failure.get(key):
            lines.append(f"{key}: {failure[key]}")
    return lines
