"""Built-in telemetry sinks. metrics.jsonl, samples.jsonl and summary.json are always written by the
core; these are extras, configured under `telemetry.sinks`.

A sink is a pluggy plugin of one run: its factory `(run_dir, **args)` returns an object whose methods
are marked `@hookimpl` and named like the run-lifecycle hooks of `rlbridge.contract.hookspecs`
(`rlbridge_run_start`, `rlbridge_step_end`, `rlbridge_checkpoint_saved`, `rlbridge_run_end`,
`rlbridge_run_failed`). The runner registers it for the run (rlbridge.run.sinks); all sinks run in the
user's process, whatever process the engine trains in. A sink that raises is reported with its name and
dropped for the rest of the run; metrics.jsonl and the other sinks carry on.

The TensorBoard, MLflow and W&B sinks use the libraries themselves (extras `rlbridge[tensorboard]`,
`rlbridge[mlflow]`, `rlbridge[wandb]`) and write the canonical metric names, so one dashboard shows
the same name for the same quantity whatever engine ran (docs/telemetry.md).
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from rlbridge import hookimpl
from rlbridge.contract.registry import TelemetrySinkPlugin
from rlbridge.errors import ConfigError
from rlbridge.helpers import flatten

# Files of the run directory a tracking sink uploads as artifacts, when they exist (patches.json is
# the patch report: which runtime patches were applied to the engine).
ARTIFACTS = ("config.yaml", "plan.yaml", "summary.json", "reward.png", "patches.json", "samples.jsonl", "error.txt")


class ConsoleSink:
    """Prints the canonical metrics every `every` steps (for logs where a progress bar is useless)."""

    def __init__(self, run_dir: Path, every: int = 10, keys: list[str] | None = None) -> None:
        self.every = every
        self.keys = keys or ["reward/mean", "loss/policy", "grad_norm", "timing/step_s"]

    @hookimpl
    def rlbridge_step_end(self, step: int, metrics: dict[str, float]) -> None:
        if step % self.every == 0:
            shown = " ".join(f"{k}={metrics[k]:.4g}" for k in self.keys if k in metrics)
            print(f"step {step}: {shown}", file=sys.stderr, flush=True)


class CsvSink:
    """Writes metrics.csv in the run directory, one row per step (columns from the first step)."""

    def __init__(self, run_dir: Path, filename: str = "metrics.csv") -> None:
        self.path = Path(run_dir) / filename
        self._fh = None
        self._writer = None

    @hookimpl
    def rlbridge_step_end(self, step: int, metrics: dict[str, float]) -> None:
        if self._writer is None:
            self._fh = open(self.path, "w", newline="", encoding="utf-8")
            self._writer = csv.DictWriter(self._fh, fieldnames=["step", *sorted(metrics)], extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow({"step": step, **metrics})
        self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None

    @hookimpl
    def rlbridge_run_end(self, summary: dict) -> None:
        self.close()

    @hookimpl
    def rlbridge_run_failed(self, error: BaseException, summary: dict) -> None:
        self.close()


# --- shared helpers -----------------------------------------------------------------------------


def run_files(run_dir: Path) -> list[Path]:
    return [Path(run_dir) / name for name in ARTIFACTS if (Path(run_dir) / name).is_file()]


def _import(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"telemetry.sinks: the '{extra}' sink needs {module.split('.')[0]} ({exc}); pip install 'rlbridge[{extra}]'"
        ) from exc


# --- TensorBoard --------------------------------------------------------------------------------


def samples_markdown(samples: list[dict[str, Any]], cap: int = 400) -> str:
    """Sampled rows as a markdown table (TensorBoard renders text summaries as markdown)."""

    def cell(text: Any) -> str:
        text = str(text).replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= cap else text[:cap] + "..."

    lines = ["| prompt | completion | reward |", "|---|---|---|"]
    lines += [
        f"| {cell(s.get('prompt'))} | {cell(s.get('completion'))} | {s.get('reward', float('nan')):.4g} |"
        for s in samples
    ]
    return "\n".join(lines)


class TensorBoardSink:
    """TensorBoard event files (tensorboardX's writer; TensorBoard reads them): scalars under the
    canonical names, the engine's own names under `native/` when `native: true`, sampled rows as
    text and the step's rewards as a histogram.

    The default directory is `<run_dir>/tb` (not `tensorboard/`: OpenRLHF's adapter keeps OpenRLHF's
    own TensorBoard log there, which it reads its per-step metrics from).
    """

    def __init__(self, run_dir: Path, log_dir: str | None = None, native: bool = False, flush_secs: int = 5) -> None:
        self.log_dir = Path(log_dir).expanduser() if log_dir else Path(run_dir) / "tb"
        self.native = native
        self.flush_secs = flush_secs
        self.writer = None
        _import("tensorboardX", "tensorboard")

    @hookimpl
    def rlbridge_run_start(self, config, plan, run_dir: str) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=str(self.log_dir), flush_secs=self.flush_secs)
        self.writer.add_text("config", "```\n" + json.dumps(config.model_dump(mode="json"), indent=2) + "\n```", 0)

    @hookimpl
    def rlbridge_step_end(
        self,
        step: int,
        metrics: dict[str, float],
        native: dict[str, float],
        samples: list[dict[str, Any]],
        rewards: list[float],
    ) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        if self.native:
            for name, value in native.items():
                self.writer.add_scalar(f"native/{name}", value, step)
        if samples:
            self.writer.add_text("samples", samples_markdown(samples), step)
        if rewards:
            import numpy as np

            self.writer.add_histogram("reward/histogram", np.asarray(rewards, dtype=float), step)
        self.writer.flush()

    @hookimpl
    def rlbridge_checkpoint_saved(self, step: int, path: str) -> None:
        self.writer.add_text("checkpoints", path, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    @hookimpl
    def rlbridge_run_end(self, summary: dict[str, Any]) -> None:
        self.writer.add_text(
            "summary", "```\n" + json.dumps(summary, indent=2, default=str) + "\n```", summary.get("steps", 0)
        )
        self.close()

    @hookimpl
    def rlbridge_run_failed(self, error: BaseException, summary: dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.add_text("error", f"{summary.get('status')}: {summary.get('error')}", summary.get("steps", 0))
        self.close()


# --- MLflow -------------------------------------------------------------------------------------

_MLFLOW_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
_MLFLOW_STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


class MlflowSink:
    """An MLflow run per rlbridge run: params = the resolved config flattened, metrics under the
    canonical names per step, sampled rows as tables `samples/step_NNNNNN.json`, checkpoint paths as tags,
    the run files as artifacts, and the run's status (FINISHED / FAILED / KILLED) from summary.json.

    The store is a SQLite database in the run directory (`<run_dir>/mlflow/mlflow.db`, artifacts
    beside it) unless `tracking_uri` names another (an `http://` server, `sqlite:///...`, a directory).
    MLflow has no histogram type: the reward distribution is in the sampled table only.
    """

    def __init__(
        self,
        run_dir: Path,
        tracking_uri: str | None = None,
        experiment: str = "rlbridge",
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        _import("mlflow", "mlflow")
        store = Path(run_dir).resolve() / "mlflow"
        self.local = tracking_uri is None
        self.tracking_uri = tracking_uri or f"sqlite:///{store}/mlflow.db"
        self.artifact_location = (store / "artifacts").as_uri() if self.local else None
        self.store = store
        self.experiment = experiment
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.client = None
        self.run_id: str | None = None

    @hookimpl
    def rlbridge_run_start(self, config, plan, run_dir: str) -> None:
        import logging

        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # no "creating tables" lines on the progress bar
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        if self.local:
            self.store.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        found = self.client.get_experiment_by_name(self.experiment)
        experiment_id = (
            found.experiment_id
            if found
            else self.client.create_experiment(self.experiment, artifact_location=self.artifact_location)
        )
        tags = {"rlbridge.backend": config.backend, "rlbridge.output_dir": str(Path(run_dir).resolve()), **self.tags}
        run = self.client.create_run(experiment_id, run_name=self.run_name or config.run_name, tags=tags)
        self.run_id = run.info.run_id
        params = [
            Param(_MLFLOW_KEY.sub("_", k)[:250], str(v)[:6000])
            for k, v in flatten(config.model_dump(mode="json"), lists=True).items()
        ]
        for i in range(0, len(params), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=params[i : i + 100])
        for path in run_files(Path(run_dir)):  # config and plan now: a crash still leaves them
            self.client.log_artifact(self.run_id, str(path))

    @hookimpl
    def rlbridge_step_end(self, step: int, metrics: dict[str, float], samples: list[dict[str, Any]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_MLFLOW_KEY.sub("_", k), float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])
        if samples:
            columns = {"step": [step] * len(samples)}
            for key in ("prompt", "completion", "reward"):
                columns[key] = [s.get(key) for s in samples]
            # one table file per step: appending to one file would download and rewrite it every step
            self.client.log_table(self.run_id, data=columns, artifact_file=f"samples/step_{step:06d}.json")

    @hookimpl
    def rlbridge_checkpoint_saved(self, step: int, path: str) -> None:
        self.client.set_tag(self.run_id, f"rlbridge.checkpoint.{step}", path)

    def _finish(self, summary: dict[str, Any]) -> None:
        if self.client is None or self.run_id is None:
            return
        run_dir = Path(summary.get("output_dir", ""))
        for path in run_files(run_dir):
            self.client.log_artifact(self.run_id, str(path))
        if summary.get("error"):
            self.client.set_tag(self.run_id, "rlbridge.error", str(summary["error"])[:5000])
        self.client.set_terminated(self.run_id, _MLFLOW_STATUS.get(summary.get("status"), "FAILED"))
        self.run_id = None

    @hookimpl
    def rlbridge_run_end(self, summary: dict[str, Any]) -> None:
        self._finish(summary)

    @hookimpl
    def rlbridge_run_failed(self, error: BaseException, summary: dict[str, Any]) -> None:
        self._finish(summary)


# --- Weights & Biases ---------------------------------------------------------------------------


class WandbSink:
    """A W&B run per rlbridge run, offline by default (files under `<run_dir>/wandb`, `wandb sync`
    uploads them later). Config = the resolved config, metrics under the canonical names per step,
    sampled rows as the table `samples`, the step's rewards as the histogram `reward/histogram`,
    checkpoint paths and the run's status in the summary, the run files as an artifact. The run ends
    failed (exit code 1) with the error in its summary when the rlbridge run fails.

    It never prompts: `mode: online` needs WANDB_API_KEY (or a `wandb login` done before), else a
    one-line error before the run starts. `group` puts the run in a W&B group (runs of one experiment shown together).
    """

    MODES = ("offline", "online", "disabled")

    def __init__(
        self,
        run_dir: Path,
        mode: str = "offline",
        project: str = "rlbridge",
        entity: str | None = None,
        run_name: str | None = None,
        tags: list[str] | None = None,
        dir: str | None = None,
        native: bool = False,
        group: str | None = None,
    ) -> None:
        if mode not in self.MODES:
            raise ConfigError(f"telemetry.sinks: wandb mode '{mode}' is not one of {', '.join(self.MODES)}")
        _import("wandb", "wandb")
        if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _wandb_logged_in()):
            raise ConfigError(
                "telemetry.sinks: wandb mode 'online' needs WANDB_API_KEY (or `wandb login` first); "
                "use mode: offline and `wandb sync` later"
            )
        self.mode, self.project, self.entity, self.run_name, self.tags = mode, project, entity, run_name, tags
        self.group = group
        self.dir = Path(dir).expanduser() if dir else Path(run_dir)
        self.native = native
        self.run = None

    @hookimpl
    def rlbridge_run_start(self, config, plan, run_dir: str) -> None:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.dir.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            console="off", x_disable_stats=True, x_save_requirements=False, quiet=True, save_code=False
        )
        self.run = wandb.init(
            mode=self.mode,
            dir=str(self.dir),
            project=self.project,
            entity=self.entity,
            name=self.run_name or config.run_name,
            group=self.group,
            tags=self.tags,
            config=config.model_dump(mode="json"),
            settings=settings,
            reinit="create_new",
        )
        self.run.summary["rlbridge/backend"] = config.backend

    @hookimpl
    def rlbridge_step_end(
        self,
        step: int,
        metrics: dict[str, float],
        native: dict[str, float],
        samples: list[dict[str, Any]],
        rewards: list[float],
    ) -> None:
        import wandb

        data: dict[str, Any] = dict(metrics)
        if self.native:
            data.update({f"native/{k}": v for k, v in native.items()})
        if samples:
            data["samples"] = wandb.Table(
                columns=["step", "prompt", "completion", "reward"],
                data=[[step, s.get("prompt"), s.get("completion"), s.get("reward")] for s in samples],
            )
        if rewards:
            data["reward/histogram"] = wandb.Histogram(rewards)
        self.run.log(data, step=step)

    @hookimpl
    def rlbridge_checkpoint_saved(self, step: int, path: str) -> None:
        self.run.summary[f"checkpoint/{step}"] = path

    def _finish(self, summary: dict[str, Any], exit_code: int) -> None:
        if self.run is None:
            return
        import wandb

        run, self.run = self.run, None
        try:
            files = run_files(Path(summary.get("output_dir", "")))
            if files:
                artifact = wandb.Artifact(f"run-files-{run.id}", type="rlbridge-run")
                for path in files:
                    artifact.add_file(str(path))
                run.log_artifact(artifact)
            run.summary["rlbridge/status"] = summary.get("status")
            if summary.get("error"):
                run.summary["error"] = summary["error"]
        finally:
            run.finish(exit_code=exit_code)

    @hookimpl
    def rlbridge_run_end(self, summary: dict[str, Any]) -> None:
        self._finish(summary, 0)

    @hookimpl
    def rlbridge_run_failed(self, error: BaseException, summary: dict[str, Any]) -> None:
        self._finish(summary, 1)


def _wandb_logged_in() -> bool:
    """Whether `wandb login` stored a key (in ~/.netrc), checked without any network call."""
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


@hookimpl
def rlbridge_register_telemetry_sinks():
    return [
        TelemetrySinkPlugin("console", ConsoleSink, "print canonical metrics every N steps (args: every, keys)"),
        TelemetrySinkPlugin("csv", CsvSink, "write metrics.csv in output_dir"),
        TelemetrySinkPlugin(
            "tensorboard",
            TensorBoardSink,
            "TensorBoard event files in <output_dir>/tb, canonical names (args: log_dir, native)",
        ),
        TelemetrySinkPlugin(
            "mlflow",
            MlflowSink,
            "an MLflow run, local SQLite store in <output_dir>/mlflow by default (args: tracking_uri, experiment, "
            "run_name, tags)",
        ),
        TelemetrySinkPlugin(
            "wandb",
            WandbSink,
            "a W&B run, offline by default in <output_dir>/wandb (args: mode, project, entity, run_name, tags, dir, "
            "native)",
        ),
    ]
