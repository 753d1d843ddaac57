"""Telemetry: the TensorBoard, MLflow and W&B sinks on a real TRL run, read back with each library's
own reader (TensorBoard's EventAccumulator, the MLflow client, `wandb leet inspect` over the offline
run's .wandb log) and compared with metrics.jsonl step for step; a failing run ends FAILED / failed;
a raising sink is reported by name and loses nothing; samples.jsonl; the HTML report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlbridge import hookimpl
from rlbridge.contract.registry import PluginManager, TelemetrySinkPlugin
from rlbridge.errors import ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from tests.conftest import MINIMAL, write_config

SINKS = "telemetry.sinks=[{name: tensorboard, args: {native: true}}, {name: mlflow}, {name: wandb}]"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_tensorboard(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
    acc.Reload()
    return acc


def read_wandb(run_root: Path) -> tuple[list[dict], dict]:
    """History records and the summary of the offline run, through W&B's own reader of its .wandb log."""
    wandb_bin = Path(sys.executable).parent / "wandb"
    (log,) = run_root.glob("wandb/offline-run-*/run-*.wandb")
    records = subprocess.run(
        [str(wandb_bin), "leet", "inspect", "--json", str(log)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    history = [json.loads(line)["history"]["item"] for line in records.splitlines() if '"type":"history"' in line]
    summary = json.loads(
        subprocess.run(
            [str(wandb_bin), "leet", "inspect", "--summary", "--json", str(log)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    )
    return history, summary


def read_mlflow(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir.resolve()}/mlflow/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("rlbridge").experiment_id])
    return client, run


class FailAtStep:
    """A plugin whose step_end hook raises at `step`: the run fails there, as a plugin error does."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def rlbridge_step_end(self, step, metrics):
        if step == self.step:
            raise RuntimeError(f"boom at step {step}")


def assert_sinks_equal_metrics_jsonl(run: Path, summary: dict, steps: int, per_step: int) -> list[str]:
    """Read each sink back with its library's own reader and compare with metrics.jsonl."""
    assert summary["status"] == "completed" and summary["sink_errors"] == []
    rows = _rows(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    names = sorted({k for r in rows for k in r} - {"step"})
    assert {"reward/mean", "loss/policy", "timing/step_s"} <= set(names)

    # samples.jsonl: `per_step` rows a step, from where the engine scored the rewards
    samples = _rows(run / "samples.jsonl")
    assert [s["step"] for s in samples] == [step for step in range(1, steps + 1) for _ in range(per_step)]
    for s in samples:
        assert s["prompt"] in {d * 4 for d in "0123456789"} and isinstance(s["completion"], str)
        assert s["reward"] == pytest.approx(sum(v for v in s["rewards"].values() if v is not None))

    # TensorBoard: every canonical scalar, step for step (event files hold float32)
    acc = read_tensorboard(run / "tb")
    for name in names:
        got = [(e.step, e.value) for e in acc.Scalars(name)]
        want = [(r["step"], r[name]) for r in rows if name in r]
        assert [s for s, _ in got] == [s for s, _ in want], name
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6, abs=1e-7), name
    tags = acc.Tags()
    assert any(t.startswith("native/") for t in tags["scalars"]), "native: true writes the engine's own names"
    assert "reward/histogram" in tags["histograms"]
    assert [h.step for h in acc.Histograms("reward/histogram")] == list(range(1, steps + 1))
    assert "samples/text_summary" in tags["tensors"]
    text = acc.Tensors("samples/text_summary")[0].tensor_proto.string_val[0].decode()
    assert samples[0]["completion"].replace("|", "\\|").replace("\n", " ")[:50] in text

    # MLflow: metric history, params = the flattened config, status, artifacts, tables
    client, mrun = read_mlflow(run)
    assert mrun.info.status == "FINISHED"
    for name in names:
        history = sorted((m.step, m.value) for m in client.get_metric_history(mrun.info.run_id, name))
        assert history == [(r["step"], r[name]) for r in rows if name in r], name
    params = mrun.data.params
    assert params["training.steps"] == str(steps) and params["backend"] == summary["backend"]
    artifacts = {a.path for a in client.list_artifacts(mrun.info.run_id)}
    assert {"config.yaml", "plan.yaml", "summary.json", "samples.jsonl"} <= artifacts
    assert {a.path for a in client.list_artifacts(mrun.info.run_id, "samples")} == {
        f"samples/step_{i:06d}.json" for i in range(1, steps + 1)
    }

    # W&B offline: history records step for step, the config, the run state
    history, wsum = read_wandb(run)
    by_step = {h["_step"]: h for h in history}
    assert sorted(by_step) == list(range(1, steps + 1))
    for r in rows:
        for name in names:
            assert by_step[r["step"]][name] == r[name], (r["step"], name)
        assert by_step[r["step"]]["samples._type"] == "table-file"
        assert by_step[r["step"]]["reward/histogram._type"] == "histogram"
    assert wsum["state"] == "finished" and wsum["exit_code"] == 0
    assert wsum["config"]["training"]["steps"] == steps and wsum["summary"]["rlbridge/status"] == "completed"
    return names


@pytest.mark.engine
def test_trl_run_with_tensorboard_mlflow_wandb_reads_back_equal_to_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={run}",
            "run_name=tele",
            "training.steps=3",
            "checkpoint.interval=2",
            "telemetry.samples_per_step=3",
            SINKS,
        ],
    )
    summary = train(cfg, PluginManager(), progress=False)
    assert_sinks_equal_metrics_jsonl(run, summary, steps=3, per_step=3)
    for s in _rows(run / "samples.jsonl"):
        assert s["reward"] == pytest.approx(s["rewards"]["digit_match"])
    _, mrun = read_mlflow(run)
    assert mrun.info.run_name == "tele" and mrun.data.params["reward.0.name"] == "digit_match"
    assert mrun.data.tags["rlbridge.checkpoint.2"] == summary["checkpoints"][0]["path"]
    client = read_mlflow(run)[0]
    assert {"reward.png", "patches.json"} <= {a.path for a in client.list_artifacts(mrun.info.run_id)}
    _, wsum = read_wandb(run)
    assert wsum["name"] == "tele"


def _engine_cells() -> list:
    """The seam is the engine-neutral event stream from an engine's worker processes, in its own environment,
    to the user's sinks: CI proves it on the first CI cell (matrix.yaml's order) of an engine that scores in
    its workers, make compat on the others' (an engine run each, minutes on CPU)."""
    from packaging.version import Version

    from rlbridge.envs.compat import ci_cells

    backends = PluginManager().items["backend"]
    cells = [c["cell"].split("==") for c in ci_cells()]
    cells = [(e, v) for e, v in cells if e in backends and backends[e].item.scores_in_engine_workers]
    newest = {e: max((c for c in cells if c[0] == e), key=lambda c: Version(c[1])) for e, _ in cells}
    ordered = list(dict.fromkeys(newest[e] for e, _ in cells))
    return [ordered[0], *(pytest.param(*c, marks=pytest.mark.matrix_only) for c in ordered[1:])]


ENGINE_CELLS = _engine_cells()


@pytest.mark.engine
@pytest.mark.engine_env
@pytest.mark.parametrize("engine,version", ENGINE_CELLS)
def test_engine_in_its_environment_reads_back_equal_to_metrics_jsonl(engine, version, tmp_path, user_engine_envs):
    """The engine trains in its own environment (engine_env: auto); the sinks run here, in the user's
    process, from the steps and samples its processes send back. The engine environment has none of
    the sink libraries. Skipped until `rlbridge env create ENGINE==VERSION` made the environment."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from rlbridge.envs.create import find_env

    try:
        find_env(engine, version)
    except Exception as exc:
        pytest.skip(f"no {engine}=={version} environment here ({exc})")
    run = tmp_path / "run"
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"backend={engine}",
            f"engine_version={version}",
            "engine_env=auto",
            f"output_dir={run}",
            "run_name=tele",
            "training.steps=2",
            "resources.gpus_per_node=auto",
            "telemetry.samples_per_step=2",
            SINKS,
        ],
    )
    summary = train(cfg, PluginManager(), progress=False)
    assert summary["engine_version"] == version
    assert_sinks_equal_metrics_jsonl(run, summary, steps=2, per_step=2)


@pytest.mark.engine
def test_failing_run_ends_mlflow_failed_and_wandb_failed_with_the_error(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={run}",
            "training.steps=4",
            "telemetry.sinks=[{name: mlflow}, {name: wandb}]",
        ],
    )
    pm = PluginManager()
    pm.register(FailAtStep(2), "fail_at_2")
    with pytest.raises(RuntimeError, match="boom at step 2"):
        train(cfg, pm, progress=False)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and "boom at step 2" in summary["error"]
    client, mrun = read_mlflow(run)
    assert mrun.info.status == "FAILED"
    assert "boom at step 2" in mrun.data.tags["rlbridge.error"]
    assert {"error.txt", "summary.json"} <= {a.path for a in client.list_artifacts(mrun.info.run_id)}
    # every step written to metrics.jsonl reached the sinks, the failing one (2) included
    assert [m.step for m in client.get_metric_history(mrun.info.run_id, "reward/mean")] == [
        r["step"] for r in _rows(run / "metrics.jsonl")
    ]
    _, wsum = read_wandb(run)
    assert wsum["state"] == "failed" and wsum["exit_code"] == 1
    assert "boom at step 2" in wsum["summary"]["error"]


class RaisingSink:
    """A sink that writes its own file and raises at step 2."""

    def __init__(self, run_dir, at: int = 2) -> None:
        self.path = Path(run_dir) / "raising.txt"
        self.at = at
        self.closed = False

    @hookimpl
    def rlbridge_step_end(self, step, metrics):
        if step == self.at:
            raise ValueError("disk full")
        with open(self.path, "a") as fh:
            fh.write(f"{step}\n")

    def close(self):
        self.closed = True


class SinkPlugin:
    @hookimpl
    def rlbridge_register_telemetry_sinks(self):
        return [TelemetrySinkPlugin("raising", RaisingSink)]


def _ctx(tmp_path, sinks_yaml: str, pm: PluginManager):
    from rlbridge.run.runner import resolve
    from rlbridge.run.runtime import RunContext
    from rlbridge.run.sinks import RunSinks

    run = tmp_path / "run"
    run.mkdir()
    cfg = resolve(load_config(write_config(tmp_path, MINIMAL), [f"output_dir={run}", sinks_yaml]))
    sinks = RunSinks.build(cfg, run, pm)
    return RunContext(cfg, None, run, pm, sinks), sinks, run  # no plan: these tests start no engine


def test_a_raising_sink_is_reported_by_name_and_loses_nothing(tmp_path, capsys):
    pm = PluginManager()
    pm.register(SinkPlugin(), "sink_plugin")
    ctx, sinks, run = _ctx(tmp_path, "telemetry.sinks=[{name: raising}, {name: csv}]", pm)
    sink = sinks.pm.get_plugin("raising#0")
    for step in (1, 2, 3):
        ctx.emit_step(step, {"reward/mean": step / 10})
    ctx.close()
    assert [r["step"] for r in _rows(run / "metrics.jsonl")] == [1, 2, 3]
    assert (run / "raising.txt").read_text() == "1\n"  # what it wrote before failing is kept
    assert sink.closed and sinks.pm.get_plugin("raising#0") is None
    assert sinks.errors == [{"sink": "raising#0", "hook": "rlbridge_step_end", "error": "ValueError: disk full"}]
    assert "telemetry sink 'raising#0' failed in rlbridge_step_end (ValueError: disk full)" in capsys.readouterr().err
    assert (run / "metrics.csv").read_text().count("\n") == 4  # the other sink got every step


def test_sinks_are_pluggy_hookimpls_checked_at_registration(tmp_path):
    class Misspelt:
        @hookimpl
        def rlbridge_step_end(self, step, metric):  # no such parameter in the hookspec
            pass

    from rlbridge.run.sinks import RunSinks

    with pytest.raises(ConfigError, match="sink 'bad#0' does not implement the lifecycle hooks"):
        RunSinks([("bad#0", Misspelt())])


def test_samples_are_capped_and_step_end_gets_them(tmp_path):
    seen = []

    class Recorder:
        @hookimpl
        def rlbridge_step_end(self, step, samples, rewards):
            seen.append((step, samples, rewards))

    pm = PluginManager()
    pm.register(Recorder(), "recorder")
    ctx, _, run = _ctx(tmp_path, "telemetry.samples_per_step=2", pm)
    rows = [
        {"prompt": "p", "completion": f"c{i}", "reward": i / 4, "rewards": {"digit_match": i / 4}} for i in range(5)
    ]
    ctx.emit_step(1, {"reward/mean": 0.5}, samples=rows, rewards=[r["reward"] for r in rows] + [float("nan")])
    ctx.close()
    written = _rows(run / "samples.jsonl")
    assert [r["completion"] for r in written] == ["c0", "c1"] and written[0]["step"] == 1
    assert seen[0][0] == 1 and [s["completion"] for s in seen[0][1]] == ["c0", "c1"]
    assert seen[0][2] == [0.0, 0.25, 0.5, 0.75, 1.0]  # every finite total, for histograms


def test_wandb_online_without_a_key_is_a_config_error_not_a_prompt(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from rlbridge_plugins.telemetry import WandbSink

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="WANDB_API_KEY"):
        WandbSink(tmp_path, mode="online")
    with pytest.raises(ConfigError, match="mode 'sometimes'"):
        WandbSink(tmp_path, mode="sometimes")


# --- the HTML report ----------------------------------------------------------------------------


def fake_run(root: Path, name: str, backend: str, rewards: list[float], lr: float) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"backend: {backend}\nrun_name: {name}\ntraining: {{lr: {lr}, steps: {len(rewards)}}}\n"
    )
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": i + 1, "reward/mean": r, "loss/policy": -r / 2}) + "\n" for i, r in enumerate(rewards)
        )
    )
    (run / "summary.json").write_text(
        json.dumps({"status": "completed", "steps": len(rewards), "reward_last": rewards[-1]})
    )
    (run / "samples.jsonl").write_text(
        json.dumps({"step": len(rewards), "prompt": "1111", "completion": "<b>1111</b>", "reward": 1.0}) + "\n"
    )
    return run


def test_report_html_is_self_contained_with_every_value(tmp_path):
    from rlbridge.bench.html_report import write_report

    a = fake_run(tmp_path, "a", "trl", [0.1, 0.4, 0.9], 0.005)
    b = fake_run(tmp_path, "b", "verl", [0.2, 0.3, 0.5, 0.7, 0.8], 0.001)
    page = write_report([a, b], tmp_path / "r.html").read_text()
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    assert "<script" not in page
    for run_index, rewards in ((0, [0.1, 0.4, 0.9]), (1, [0.2, 0.3, 0.5, 0.7, 0.8])):
        for step, value in enumerate(rewards, 1):
            assert f'data-run="{run_index}" data-step="{step}" data-value="{value!r}"' in page
    assert page.count('<svg class="plot"') == 2  # reward/mean and loss/policy, in canonical order
    import re

    from rlbridge.bench.html_report import H, PAD_B, PAD_T

    ys = [float(y) for y in re.findall(r'<circle cx="[^"]+" cy="([^"]+)"', page)]
    assert len(ys) == 16 and all(PAD_T <= y <= H - PAD_B for y in ys), "every point inside its plot's axes"
    assert page.index('data-metric="reward/mean"') < page.index('data-metric="loss/policy"')
    assert "<th>training.lr</th>" in page and "<th>backend</th>" in page and "<th>training.steps</th>" in page
    assert "&lt;b&gt;1111&lt;/b&gt;" in page  # completions are escaped


def test_report_cli_rejects_a_directory_without_metrics(tmp_path):
    from tests.conftest import run_cli

    res = run_cli("report", str(tmp_path), "-o", str(tmp_path / "r.html"))
    assert res.returncode == 2 and "has no metrics.jsonl" in res.stderr and "Traceback" not in res.stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(
    _chromium() is None, reason="no chromium on PATH (apt-get install chromium; the Makefile's `make browser` does it)"
)
def test_report_renders_in_headless_chromium_with_the_runs_values(tmp_path):
    """The page, opened by a real browser: the DOM it builds holds every plotted value, and the
    screenshot shows each run's line colour."""
    from PIL import Image

    from rlbridge.bench.html_report import COLORS, write_report

    a = fake_run(tmp_path, "a", "trl", [0.1, 0.4, 0.9], 0.005)
    b = fake_run(tmp_path, "b", "verl", [0.2, 0.3, 0.5, 0.7, 0.8], 0.001)
    page = write_report([a, b], tmp_path / "r.html")
    base = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    for value in (0.1, 0.4, 0.9, 0.2, 0.3, 0.5, 0.7, 0.8):
        assert f'data-value="{value!r}"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1000,700", page.as_uri()], capture_output=True, timeout=120
    )
    image = Image.open(shot).convert("RGB")
    pixels = {c: n for n, c in image.getcolors(maxcolors=1 << 20)}
    for hex_colour in COLORS[:2]:
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        # the legend swatch is 14 x 4 = 56 pixels; the lines and points of two plots are hundreds more
        # (measured 419 and 618; 56 each when the lines are not drawn)
        assert pixels.get(rgb, 0) > 200, (
            f"run colour {hex_colour}: {pixels.get(rgb, 0)} pixels, the plots did not render"
        )


# --- the metric-name table in docs/telemetry.md -------------------------------------------------


def test_metric_table_in_docs_is_generated_from_the_adapters_maps(monkeypatch):
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, str(repo / "scripts" / "metric_table.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    spec = importlib.util.spec_from_file_location("metric_table", repo / "scripts" / "metric_table.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    doc = gen.DOC.read_text()
    from rlbridge.contract.registry import get_plugin_manager

    names = sorted(get_plugin_manager().items["backend"])  # every registered backend, from the entry points
    assert "| canonical | " + " | ".join(names) + " |" in doc

    def cells(canonical: str) -> dict[str, str]:
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{canonical}` |"))
        return dict(zip(names, (cell.strip() for cell in row.strip("|").split("|")[1:])))

    # each backend's column holds the native names its own adapter's map gives loss/policy ("—": none)
    for name in names:
        direct = importlib.import_module(f"rlbridge_adapters.{name}.metrics").DIRECT
        want = ", ".join(f"`{native}`" for native, canonical in direct.items() if canonical == "loss/policy")
        assert cells("loss/policy")[name] == (want or "—"), name
    assert cells("reward/<plugin>/mean")["trl"] == "`rewards/<plugin>/mean`"
    # a map that changes makes the table stale: the check would fail
    from rlbridge_adapters.verl import metrics as verl

    monkeypatch.setitem(verl.DIRECT, "critic/score/mean", "reward/mean")
    assert gen.render(doc) != doc and "| `critic/score/mean` |" in next(
        line for line in gen.render(doc).splitlines() if line.startswith("| `reward/mean` |")
    )


def test_doc_tables_are_generated_from_the_adapters_declarations(monkeypatch):
    """docs/roles.md, docs/batch-semantics.md and docs/metrics.md hold one column per in-tree backend, generated by
    scripts/doc_tables.py from the capability tables and the adapters' metric maps and DOC_NOTES; its --check (which
    also covers docs/telemetry.md's metric table) fails when one is not current."""
    import dataclasses
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    script = repo / "scripts" / "doc_tables.py"
    res = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    spec = importlib.util.spec_from_file_location("doc_tables", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    from tests.conftest import in_tree_backends

    from rlbridge.contract.registry import get_plugin_manager

    registered = get_plugin_manager().items["backend"]
    names = in_tree_backends()
    assert names and list(gen.in_tree_backends()) == names
    for (doc, marker), _ in gen.TABLES.items():
        text = (repo / "docs" / doc).read_text()
        begin, end = gen.markers(marker)
        block = text[text.index(begin) : text.index(end)]
        assert " | meaning | " + " | ".join(names) + " |" in block, (doc, marker)

    def stale() -> set[str]:
        return {path.name for path, (old, new) in gen.rendered().items() if old != new}

    assert stale() == set()
    # a capability note that changes makes docs/roles.md stale (the knob is one of its rows)
    knob = next(iter(gen.EVERYDAY_KNOBS))
    cls = registered[names[0]].item
    table = cls.capability_table
    with monkeypatch.context() as patch:
        patch.setattr(
            cls,
            "capability_table",
            lambda self: {**table(self), knob: dataclasses.replace(table(self)[knob], note="changed")},
        )
        assert stale() == {"roles.md"}
    # so does any adapter's metric note (docs/metrics.md), and any batch knob's native keys (docs/batch-semantics.md)
    for name in names:
        module = importlib.import_module(f"rlbridge_adapters.{name}.metrics")
        with monkeypatch.context() as patch:
            patch.setattr(
                module, "DOC_NOTES", {**getattr(module, "DOC_NOTES", {}), "grad_norm": "changed"}, raising=False
            )
            assert stale() == {"metrics.md"}, name
    knob = next(iter(gen.BATCH_KNOBS))
    with monkeypatch.context() as patch:
        patch.setattr(
            cls,
            "capability_table",
            lambda self: {**table(self), knob: dataclasses.replace(table(self)[knob], native=("changed.key",))},
        )
        assert stale() == {"batch-semantics.md"}


# --- samples from engine processes (verl, OpenRLHF): reward events -> follower -> child relay ------


class RecordingCtx:
    def __init__(self):
        self.steps = []

    def emit_step(self, step, metrics, native=None, samples=None, rewards=None):
        self.steps.append((step, metrics, samples, rewards))

    def checkpoint_saved(self, step, path):
        pass


def test_engine_reward_events_become_the_steps_samples_and_cross_the_child_pipe(tmp_path):
    import io

    from rlbridge.contract.rewards import RewardInput
    from rlbridge.engine.child import ChildContext
    from rlbridge.engine.events import reward_batch, reward_sample
    from rlbridge.engine.follower import EventFollower
    from rlbridge_adapters.verl.metrics import to_canonical

    def x(prompt, completion):
        return RewardInput(prompt=prompt, completion=completion, completion_ids=[1], answer=prompt[0], metadata={})

    ctx = RecordingCtx()
    follower = EventFollower(tmp_path / "events.jsonl", ctx, to_canonical, lambda native: "actor/pg_loss" in native)
    # step 1: per-sample events, as verl 0.9's reward loop and OpenRLHF's reward executor write them
    for p, c, total in [("1111", "11", 1.0), ("2222", "2a", 0.5), ("3333", "zz", 0.0)]:
        follower._handle(reward_sample(total, {"digit_match": total}, x(p, c)))
    follower._handle({"kind": "metrics", "step": 1, "data": {"actor/pg_loss": 0.1}})
    # step 2: one batch event, as verl 0.5's reward manager writes it
    inputs = [x("4444", "44"), x("5555", "5")]
    follower._handle(reward_batch(inputs, [1.0, 1.0], {"digit_match": [1.0, 1.0]}, train=True))
    follower._handle({"kind": "metrics", "step": 2, "data": {"actor/pg_loss": 0.2}})
    (s1, m1, rows1, totals1), (s2, m2, rows2, totals2) = ctx.steps
    assert [r["completion"] for r in rows1] == ["11", "2a", "zz"] and totals1 == [1.0, 0.5, 0.0]
    assert rows1[1] == {"prompt": "2222", "completion": "2a", "reward": 0.5, "rewards": {"digit_match": 0.5}}
    assert m1["reward/mean"] == pytest.approx(0.5)
    assert [r["prompt"] for r in rows2] == ["4444", "5555"] and totals2 == [1.0, 1.0]

    # the child relays at most telemetry.samples_per_step rows to the user's process
    cfg = load_config(write_config(tmp_path, MINIMAL), ["telemetry.samples_per_step=2"])
    pipe = io.StringIO()
    ChildContext(cfg, None, tmp_path, None, pipe).emit_step(1, m1, {}, rows1, totals1)
    event = json.loads(pipe.getvalue())
    assert [r["completion"] for r in event["samples"]] == ["11", "2a"] and event["rewards"] == [1.0, 0.5, 0.0]
