"""The run manifest and `rlbridge reproduce`, on real TRL runs (quickstart, HF rollout, 3 steps)."""

import importlib.metadata
import json
import shutil
import sys

import pytest
from packaging.version import Version

from tests.conftest import QUICKSTART, run_cli

# non-default values: a seed, a group size, a row count and a learning rate of their own
OVERRIDES = [
    "training.steps=3",
    "training.batch_size=4",
    "algorithm.group_size=4",
    "training.seed=7",
    "training.lr=0.01",
    "data.train.args.num_rows=300",
    "rollout.max_new_tokens=8",
]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    out = tmp_path_factory.mktemp("reproduce") / "original"
    train(load_config(QUICKSTART, [*OVERRIDES, f"output_dir={out}"]), progress=False)
    return out


def test_manifest_records_source_environment_data_model_seeds_and_hardware(finished_run):
    from rlbridge.contract.data import load_rows, rows_digest
    from rlbridge.envs.provenance import _normalized
    from rlbridge.run.loading import load_config
    from rlbridge.run.manifest import config_digest, packages_digest

    manifest = json.loads((finished_run / "manifest.json").read_text())
    assert "manifest.json" in json.loads((finished_run / "summary.json").read_text())["files"]
    assert not (finished_run / "manifest.d").exists()  # merged, then removed
    assert manifest["rlbridge"]["commit"] and len(manifest["rlbridge"]["commit"]) == 40
    assert (manifest["rlbridge"]["diff_sha256"] is None) == (manifest["rlbridge"]["dirty"] is False)
    # the package set is this environment's, as importlib.metadata reads it, every distribution
    packages = manifest["engine_env"]["packages"]
    expected = {}
    for dist in importlib.metadata.distributions():  # sys.path order: the first one is what imports
        expected.setdefault(_normalized(dist.metadata["Name"]), dist.version)
    assert packages == {k: expected[k] for k in packages} and set(expected) <= set(packages)
    assert packages["torch"] == importlib.metadata.version("torch")
    assert manifest["engine_env"]["packages_sha256"] == packages_digest(packages)
    assert manifest["engine_env"]["python"] == sys.executable
    # the rows the engine loaded, hashed as loaded: 300 rows of seed 7
    config = load_config(finished_run / "config.yaml", [])
    rows = load_rows(config.data.train, config, "data.train")
    assert manifest["data"]["data.train"]["rows"] == 300
    assert manifest["data"]["data.train"]["rows_sha256"] == rows_digest(rows)
    assert manifest["job"]["config_sha256"] == config_digest(config.model_dump(mode="json"))
    model = manifest["models"]["model.path"]
    assert model["path"] == "builtin:tiny-digits" and len(model["sha256"]) == 64 and model["files"] >= 3
    assert manifest["seeds"]["training.seed"] == 7
    assert manifest["hardware"]["cpus"] >= 1 and "gpus" in manifest["hardware"]
    assert manifest["python"]["version"].count(".") == 2 and manifest["os"]["system"]


def test_reproduce_a_finished_trl_run_is_identical(finished_run, tmp_path):
    out = tmp_path / "rerun"
    res = run_cli("reproduce", str(finished_run), "--output", str(out), "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("identical"), res.stdout
    report = json.loads((out / "reproduce.json").read_text())
    assert report["verdict"] == "identical" and report["steps"] == [3, 3] and report["first_difference"] is None
    # nothing that changes the computation differs (the uncommitted diff may: others edit the tree)
    assert not [d for d in report["manifest_differences"] if not d.startswith("rlbridge uncommitted diff")]


def test_reproduce_refuses_an_environment_it_cannot_match_and_names_the_packages(finished_run, tmp_path):
    from rlbridge.bench.reproduce import ReproduceError, reproduce

    changed = tmp_path / "changed-env"
    shutil.copytree(finished_run, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["engine_env"]["packages"]["torch"] = "2.0.1"
    manifest["engine_env"]["packages"]["ghost-distribution"] = "1.0"
    (changed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ReproduceError) as err:
        reproduce(changed, tmp_path / "never", rebuild=False)
    here = importlib.metadata.version("torch")
    assert f"package torch: 2.0.1 -> {here}" in str(err.value)
    assert "package ghost-distribution: 1.0 -> absent" in str(err.value)
    assert not (tmp_path / "never").exists()  # nothing ran


def test_reproduce_rebuilds_a_missing_environment_from_its_recipe_and_pins_the_manifest_versions(
    finished_run, tmp_path, monkeypatch
):
    """No environment matches: reproduce builds one through the recipes (rlbridge.envs.create, here a
    recipe of small wheels from the local index, and tomli 2.4.1 standing in for rlbridge's own install),
    beside the existing environments, then pins the manifest's versions (tomli down to 2.4.0, setuptools
    removed). A version no index has is refused by name, with the rebuilt environment's path."""
    import ensurepip

    import yaml

    from rlbridge.engine.environments import env_path, envs_dir
    from rlbridge.envs import create as envs
    from rlbridge.envs.provenance import package_set, site_dirs
    from rlbridge.bench.reproduce import ReproduceError, rebuild_environment

    recipes = tmp_path / "engines.yaml"
    recipes.write_text(
        yaml.safe_dump(
            {
                "trl": {
                    "default": "1.16.0",
                    "distribution": "trl",
                    "torch": "six==1.17.0",
                    "versions": {"1.16.0": {"requirement": "iniconfig==2.3.0"}},
                }
            }
        )
    )
    monkeypatch.setenv("RLBRIDGE_RECIPES", str(recipes))
    monkeypatch.setenv("RLBRIDGE_INSTALLER", "pip")
    monkeypatch.setattr(envs, "_rlbridge_source", lambda extras=(): ["tomli==2.4.1"])
    existing = env_path("trl", "1.16.0")
    existing.mkdir(parents=True)
    (existing / "keep").write_text("an environment of the user's")
    manifest = json.loads((finished_run / "manifest.json").read_text())
    wanted = {"pip": ensurepip.version(), "six": "1.17.0", "iniconfig": "2.3.0", "tomli": "2.4.0"}
    manifest["engine_env"].update(
        packages=wanted, packages_sha256="ab" * 32, python=str(envs_dir() / "trl-1.16.0" / "bin" / "python")
    )
    lines = []
    python = rebuild_environment(manifest, echo=lines.append)
    assert python == envs_dir() / f"trl-1.16.0-reproduce-{'ab' * 6}" / "bin" / "python"
    assert package_set(site_dirs(python)) == wanted
    assert any(
        line.startswith("pinning 1 distribution(s) to the manifest's versions: tomli==2.4.0") for line in lines
    ), lines
    assert any(
        line.startswith("removing 1 distribution(s) the manifest does not have: setuptools") for line in lines
    ), lines
    assert (existing / "keep").read_text() == "an environment of the user's"  # built beside it
    manifest["engine_env"]["packages"] = {**wanted, "six": "0.0.1"}  # no index has it
    with pytest.raises(ReproduceError) as err:
        rebuild_environment(manifest, echo=lines.append)
    assert f"rebuilt at {python.parent.parent} from the trl==1.16.0 recipe still differs" in str(err.value)
    assert "package six: 0.0.1 -> 1.17.0" in str(err.value)


def test_reproduce_refuses_to_rebuild_for_another_python_or_an_engine_version_without_a_recipe(finished_run, tmp_path):
    from rlbridge.bench.reproduce import ReproduceError, rebuild_spec, reproduce

    changed = tmp_path / "other-python"
    shutil.copytree(finished_run, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["engine_env"]["python_version"] = "3.9.18"
    manifest["engine_env"]["packages"]["ghost-distribution"] = "1.0"  # so nothing here matches
    (changed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ReproduceError) as err:
        reproduce(changed, tmp_path / "never")
    assert f"it ran Python 3.9.18, and an environment built here runs this one's, {sys.version.split()[0]}" in str(
        err.value
    )
    assert "before rebuilding: no engine environment here matches" in str(err.value)
    assert "python 3.9.18 -> " in str(err.value)
    assert not (tmp_path / "never").exists()
    manifest["engine_env"]["python"] = "/somewhere/envs/trl-1.16.0-vllm/bin/python"
    assert rebuild_spec(manifest) == "trl==1.16.0-vllm"  # the label of the environment it ran in
    manifest["engine_env"]["python"] = "/somewhere/.venv/bin/python"
    manifest["job"]["engine_version"] = "0.0.7"
    assert rebuild_spec(manifest) == "trl==0.0.7"
    manifest["engine_env"]["python_version"] = sys.version.split()[0]
    (changed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ReproduceError, match=r"cannot rebuild the run's environment \(trl==0.0.7\).*no recipe for trl==0.0.7"
    ):
        reproduce(changed, tmp_path / "never")


def test_reproduce_names_the_first_differing_step_and_what_in_the_manifests_differs(finished_run, tmp_path):
    """A run whose data and metrics were not those of this checkout: the verdict names step 2's reward
    and the data hash and seed the manifests disagree on."""
    from rlbridge.bench.reproduce import describe, reproduce

    changed = tmp_path / "changed-run"
    shutil.copytree(finished_run, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["data"]["data.train"]["rows_sha256"] = "0" * 64
    manifest["models"]["model.path"]["sha256"] = "f" * 64
    (changed / "manifest.json").write_text(json.dumps(manifest))
    rows = [json.loads(line) for line in (changed / "metrics.jsonl").read_text().splitlines()]
    rows[1]["reward/mean"] += 0.25
    (changed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = reproduce(changed, tmp_path / "rerun")
    assert report["verdict"] in ("different", "same within noise")
    assert report["first_difference"]["step"] == 2 and report["first_difference"]["metric"] == "reward/mean"
    assert f"data.train rows_sha256: {'0' * 64} -> {manifest_rows(finished_run)}" in report["manifest_differences"]
    assert any(d.startswith("model.path model sha256: ffff") for d in report["manifest_differences"])
    text = describe(report)
    assert "first difference: step 2, reward/mean" in text and "data.train rows_sha256" in text


def manifest_rows(run_dir):
    return json.loads((run_dir / "manifest.json").read_text())["data"]["data.train"]["rows_sha256"]


def test_compare_verdicts():
    from rlbridge.bench.reproduce import compare

    base = [{"step": s, "reward/mean": 0.1 * s, "loss/policy": 0.01, "timing/step_s": 1.0 + s} for s in range(1, 9)]
    timing_only = [{**r, "timing/step_s": 9.0} for r in base]
    assert compare(base, timing_only)["verdict"] == "identical"  # timings are measured, not computed
    idle = [{**r, "async/rollout_idle_s": 0.1 * r["step"], "async/staleness_max": 0} for r in base]
    assert compare([{**r, "async/staleness_max": 0} for r in base], idle)["verdict"] == "identical"  # so are durations
    assert (
        compare(idle, [{**r, "async/staleness_max": 1} for r in idle])["first_difference"]["metric"]
        == "async/staleness_max"
    )
    noisy = [{**r, "reward/mean": r["reward/mean"] + (0.01 if r["step"] % 2 else -0.01)} for r in base]
    out = compare(base, noisy)
    assert out["verdict"] == "same within noise" and out["first_difference"]["step"] == 1
    shifted = [{**r, "reward/mean": r["reward/mean"] + 5.0} for r in base]
    out = compare(base, shifted)
    assert out["verdict"] == "different" and out["statistics"]["differing_metrics"] == ["reward/mean"]
    assert compare(base, base[:-1])["verdict"] == "different"  # a step missing


def test_deterministic_trl_run_turns_on_torch_determinism_and_reproduces_identically(tmp_path):
    import torch
    import yaml

    from rlbridge.run.loading import load_config
    from rlbridge.bench.reproduce import reproduce
    from rlbridge.run.runner import train

    out = tmp_path / "deterministic"
    try:
        train(load_config(QUICKSTART, [*OVERRIDES, "training.deterministic=true", f"output_dir={out}"]), progress=False)
        # transformers.enable_full_determinism ran (TRL's full_determinism): torch refuses nondeterministic kernels
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)  # process-wide: the other tests in this process run without it
        torch.utils.deterministic.fill_uninitialized_memory = True
    assert yaml.safe_load((out / "plan.yaml").read_text())["native"]["args"]["full_determinism"] is True
    assert json.loads((out / "manifest.json").read_text())["deterministic"] is True
    try:
        report = reproduce(out, tmp_path / "rerun")
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = True
    assert report["verdict"] == "identical", report


def _newest_versions_refusing_deterministic() -> list[tuple[str, str]]:
    """Per engine, the newest version of the compatibility matrix whose capability table plans the quickstart
    but refuses training.deterministic: the edge of that version gate, where a gate goes wrong."""
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.envs.compat import load_matrix
    from rlbridge.run.loading import load_config
    from rlbridge.testing import requirement_unmet

    refusing: dict[str, list[str]] = {}
    for cell in load_matrix():
        name, version = cell["engine"], cell["version"]
        backend, plain = get_plugin_manager().backend(name), [f"backend={name}", f"engine_version={version}"]
        deterministic = load_config(QUICKSTART, [*plain, "training.deterministic=true"])
        if not requirement_unmet(backend, load_config(QUICKSTART, plain)) and requirement_unmet(
            backend, deterministic, "training.deterministic"
        ):
            refusing.setdefault(name, []).append(version)

    def release(label: str) -> Version:  # a matrix label such as 1.16.0-vllm starts with its release
        return Version(label.split("-")[0])

    return [(name, max(versions, key=release)) for name, versions in sorted(refusing.items())]


@pytest.mark.parametrize("backend, version", _newest_versions_refusing_deterministic())
def test_deterministic_is_refused_where_the_engine_cannot_repeat_its_rollout(backend, version):
    from rlbridge.errors import RLBridgeError
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    config = load_config(QUICKSTART, [f"backend={backend}", f"engine_version={version}", "training.deterministic=true"])
    with pytest.raises(RLBridgeError, match="training.deterministic"):
        prepare(config)
    prepare(load_config(QUICKSTART, [f"backend={backend}", f"engine_version={version}"]))  # the knob alone is refused


def test_per_request_seeds_differ_within_a_group_and_repeat_across_runs():
    from rlbridge_adapters.openrlhf.patches import determinism as openrlhf
    from rlbridge_adapters.verl.patches import v09_determinism as verl

    group = [verl.request_seed(5, {"step": 3, "sample_index": 11, "rollout_n": n, "validate": False}) for n in range(8)]
    assert len(set(group)) == 8 and group == [
        verl.request_seed(5, {"step": 3, "sample_index": 11, "rollout_n": n, "validate": False}) for n in range(8)
    ]
    assert verl.request_seed(6, {"step": 3, "sample_index": 11, "rollout_n": 0, "validate": False}) != group[0]
    requests = [openrlhf.request_seed("5", "1111", 3, n) for n in range(8)]
    assert len(set(requests)) == 8 and openrlhf.request_seed("6", "1111", 3, 0) != requests[0]
    assert openrlhf.request_seed("5", "1111", 4, 0) != requests[0]  # the same prompt dispatched again: new seeds
    assert all(0 <= s < 2**32 for s in group + requests)  # vLLM's SamplingParams.seed range


def test_openrlhf_prompts_are_numbered_in_dispatch_order_and_samples_seeded_from_it(monkeypatch):
    """The rollout actor may start the generate_responses calls of a step in any order (Ray's async
    actors): the seeds come from the driver's dispatch order and each sample's number in its call."""
    import asyncio
    from dataclasses import dataclass

    from rlbridge_adapters.openrlhf.patches import determinism

    @dataclass
    class Params:  # vLLM's SamplingParams, as far as the patch touches it
        seed: int | None = None
        extra_args: dict | None = None

    sent = []

    class Method:
        def remote(self, **kwargs):
            sent.append(kwargs)
            return len(sent)

    class Engine:
        generate_responses = Method()

    class Generator:
        pass

    monkeypatch.setenv(determinism.SEED_ENV, "11")
    generator, shared = Generator(), Params()
    engine = determinism._NumberingEngine(Engine(), generator)
    for prompt in ("7777", "1111", "7777"):
        engine.generate_responses.remote(prompt=prompt, sampling_params=shared)
    assert [k["sampling_params"].extra_args for k in sent] == [{determinism.DISPATCHED: n} for n in range(3)]
    assert shared == Params()  # the generator's own params are not touched

    class Executor:
        seen = []

        async def execute(self, prompt, label, sampling_params, *args, **kwargs):
            await asyncio.sleep(0)
            self.seen.append((prompt, sampling_params.seed, sampling_params.extra_args))

    agent = type(
        "agent", (), {"SingleTurnAgentExecutor": Executor, "MultiTurnAgentExecutor": type("M", (Executor,), {})}
    )
    hooks = []
    original = determinism.when_imported
    determinism.when_imported = lambda name, hook: hooks.append((name, hook))
    try:
        determinism._per_request_seeds()
    finally:
        determinism.when_imported = original
    dict(hooks)["openrlhf.utils.agent"](agent)

    async def generate_responses(params, n):  # vllm_engine.py: n executions sharing one SamplingParams
        return await asyncio.gather(*[Executor().execute(sent[2]["prompt"], "", params) for _ in range(n)])

    asyncio.run(generate_responses(sent[2]["sampling_params"], 4))
    assert Executor.seen == [("7777", determinism.request_seed("11", "7777", 2, j), None) for j in range(4)]


def test_openrlhf_rollout_results_are_taken_in_dispatch_order():
    from rlbridge_adapters.openrlhf.patches.determinism import _InOrderRay

    class FinishedOutOfOrder:  # Ray's wait, as a stand-in: refs "b" and "c" are done, "a" is not yet
        done = {"b", "c"}

        def wait(self, refs, num_returns=1, timeout=None):
            ready = [r for r in refs if r in self.done][:num_returns]
            return ready, [r for r in refs if r not in ready]

        def get(self, ref):
            return ref

    fake = FinishedOutOfOrder()
    ray = _InOrderRay(fake)
    assert ray.wait(["a", "b", "c"], num_returns=1, timeout=10.0) == ([], ["a", "b", "c"])  # not "b" first
    fake.done.add("a")
    assert ray.wait(["a", "b", "c"], num_returns=1, timeout=10.0) == (["a"], ["b", "c"])
    assert ray.get("x") == "x"  # the rest is Ray itself


def test_bench_holds_native_arms_to_identical_rewards_at_the_native_logs_float32_precision():
    """The OpenRLHF 0.11.2 pair of the deterministic bench, steps 1-2: rlbridge's float64 mean and the float32
    mean OpenRLHF's TensorBoard log stored are one number (step 2: one float32 ulp apart); a real difference
    is still one."""
    from rlbridge.bench.report import same_curve

    assert same_curve([0.012606534090909092, 0.009905133928571428], [0.01260653417557478, 0.0099051333963871])
    assert not same_curve([0.006836], [0.006901])  # verl's step 3: another reward for the same samples
    assert not same_curve([], []) and not same_curve([0.1], [0.1, 0.2])
