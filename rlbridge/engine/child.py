"""The engine side of a run launched in an engine environment: `python -m rlbridge.engine.child JOB`.

The parent (the user's `rlbridge train`) planned the run and wrote JOB (resolved config, plan, run
directory). This process runs the backend and sends each event as one JSON line on the file
descriptor in RLBRIDGE_EVENT_FD; the parent maps them onto its hooks, metrics.jsonl and progress bar.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

EVENT_FD_ENV = "RLBRIDGE_EVENT_FD"


class ChildContext:
    def __init__(self, config, plan, run_dir: Path, plugins, events) -> None:
        self.config = config
        self.plan = plan
        self.run_dir = Path(run_dir)
        self.plugins = plugins
        self._events = events

    def _send(self, **event) -> None:
        self._events.write(json.dumps(event) + "\n")
        self._events.flush()

    def emit_step(
        self,
        step: int,
        metrics: dict,
        native: dict | None = None,
        samples: list | None = None,
        rewards: list | None = None,
    ) -> None:
        safe_native = {k: v for k, v in (native or {}).items() if isinstance(v, (int, float))}
        rows = [  # only the rows the parent keeps cross the pipe
            {
                "prompt": str(r.get("prompt", "")),
                "completion": str(r.get("completion", "")),
                "reward": r.get("reward"),
                "rewards": r.get("rewards") or {},
            }
            for r in (samples or [])[: self.config.telemetry.samples_per_step]
        ]
        self._send(
            kind="step",
            step=step,
            metrics={k: float(v) for k, v in metrics.items()},
            native=safe_native,
            samples=rows,
            rewards=[float(r) for r in rewards or [] if r is not None],
        )

    def checkpoint_saved(self, step: int, path: str) -> None:
        self._send(kind="checkpoint", step=step, path=str(path))

    def emit_eval(self, step: int, metrics: dict) -> None:
        self._send(
            kind="eval", step=step, metrics={k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        )

    def warn(self, message: str) -> None:
        """Shown on the user's console by the parent."""
        self._send(kind="warning", message=message)


def main(job_path: str) -> int:
    from rlbridge.contract.backend import Plan
    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.registry import get_plugin_manager

    from rlbridge.engine import lifeline

    job = json.loads(Path(job_path).read_text())
    # dies with the user's process, taking every engine process with it (see rlbridge.engine.lifeline)
    lifeline.install(job["run_dir"])
    events = os.fdopen(int(os.environ[EVENT_FD_ENV]), "w", buffering=1)
    ctx = None
    try:
        config = RunConfig.model_validate(job["config"])
        plan = Plan.from_dict(job["plan"])
        pm = get_plugin_manager()
        backend = pm.backend(config.backend)
        ctx = ChildContext(config, plan, Path(job["run_dir"]), pm, events)
        ctx._send(kind="started", pid=os.getpid(), engine_version=backend.require_engine(), python=sys.executable)
        backend.train(plan, ctx)  # run, or run_stage for an offline stage
        return 0
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        message = f"{type(exc).__name__}: {exc}"
        failure = getattr(exc, "failure", None)  # set by launchers that know which engine process died
        events.write(
            json.dumps({"kind": "error", "message": message, "traceback": traceback.format_exc(), "failure": failure})
            + "\n"
        )
        events.flush()
        traceback.print_exc()
        return 2 if exc.__class__.__module__.startswith("rlbridge") else 1
    finally:
        lifeline.kill_descendants(grace_s=3.0)  # nothing of the run outlives it (Ray, vLLM, workers)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
