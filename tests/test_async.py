"""Issue 25: the asynchronous loop's canonical knobs (rollout.max_staleness, partial_rollouts,
weight_sync_interval), what each backend plans for them or why it refuses, and the staleness that
rlbridge measures in OpenRLHF's async loop (the end-to-end run is
adapters/openrlhf/tests/in_env/test_openrlhf_async_in_env.py)."""

import time
import types

import pytest
import yaml

from tests.conftest import QUICKSTART, registered_backends
from rlbridge.contract.config import RunConfig
from rlbridge.errors import CapabilityError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare


def _settings(*overrides: str) -> dict:
    prepared = prepare(load_config(QUICKSTART, ["resources.gpus_per_node=0", *overrides]))
    return prepared.backend.native_settings(prepared.plan)


def test_async_knobs_need_max_staleness():
    with pytest.raises(ValueError, match="partial_rollouts needs rollout.max_staleness"):
        RunConfig.model_validate({"reward": [{"name": "digit_match"}], "rollout": {"partial_rollouts": True}})
    with pytest.raises(ValueError, match="weight_sync_interval needs rollout.max_staleness"):
        RunConfig.model_validate({"reward": [{"name": "digit_match"}], "rollout": {"weight_sync_interval": 3}})
    config = RunConfig.model_validate(
        {
            "reward": [{"name": "digit_match"}],
            "rollout": {"max_staleness": 2, "partial_rollouts": True, "weight_sync_interval": 3},
        }
    )
    dumped = yaml.safe_load(yaml.safe_dump(config.model_dump(mode="json")))
    assert RunConfig.model_validate(dumped).rollout == config.rollout  # a written config.yaml loads again


def test_openrlhf_max_staleness_is_the_async_queue_size():
    settings = _settings("backend=openrlhf", "rollout.max_staleness=3", "rollout.partial_rollouts=true")
    assert settings["train.async_enable"] is True
    assert settings["train.async_queue_size"] == 3
    assert settings["train.partial_rollout_enable"] is True
    without_partial = _settings("backend=openrlhf", "rollout.max_staleness=3")
    assert "train.partial_rollout_enable" not in without_partial


@pytest.mark.parametrize("backend", registered_backends())
def test_max_staleness_0_is_the_synchronous_plan_unchanged(backend):
    sync = _settings(f"backend={backend}")
    assert _settings(f"backend={backend}", "rollout.max_staleness=0", "rollout.weight_sync_interval=1") == sync
    assert not {k for k in sync if "async" in k or "partial_rollout" in k or "staleness" in k}


@pytest.mark.parametrize(
    "overrides, match",
    [
        (("engine_version=0.9.10",), "--async_train"),
        (("resources.gpus_per_node=2",), "placement.policy: split"),
        (("rollout.weight_sync_interval=2",), "after every training step"),
    ],
)
def test_openrlhf_refuses_what_its_async_loop_cannot_do(overrides, match):
    with pytest.raises(CapabilityError, match=match) as info:
        _settings("backend=openrlhf", "rollout.max_staleness=1", *overrides)
    assert "rollout." in str(info.value)


def test_openrlhf_async_with_split_placement_on_gpus():
    settings = _settings(
        "backend=openrlhf",
        "rollout.max_staleness=1",
        "resources.gpus_per_node=3",
        "placement.policy=split",
        "placement.args={rollout_gpus: 1}",
    )
    assert settings["train.async_enable"] is True
    assert settings["actor.num_gpus_per_node"] == 2 and settings["vllm.num_engines"] == 1
    assert "train.colocate_all" not in settings


SPLIT = ("placement.policy=split", "placement.args={rollout_gpus: 1}")


def test_verl_max_staleness_1_plans_the_one_step_off_trainer_on_a_rollout_pool_of_its_own():
    prepared = prepare(load_config(QUICKSTART, ["backend=verl", "rollout.max_staleness=1", *SPLIT]))
    native = prepared.plan.native
    assert native["entry_point"] == "verl.experimental.one_step_off_policy.main_ppo"
    o = native["overrides"]
    assert o["actor_rollout_ref.hybrid_engine"] is False
    assert (o["trainer.n_gpus_per_node"], o["rollout.n_gpus_per_node"]) == (1, 1)  # logical devices on CPU
    assert native["ray"]["logical_gpus"] == 2
    # verl's checkpoint engines need CUDA: on CPU the weights go through rlbridge's file engine
    assert o["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "rlbridge_file"
    assert "one_step_off_policy.main_ppo" in prepared.backend.render_native(prepared.plan)
    # on GPUs: the trainer keeps the rest of each node, and verl's own (nccl) checkpoint engine
    gpus = prepare(
        load_config(
            QUICKSTART,
            [
                "backend=verl",
                "rollout.max_staleness=1",
                "resources.gpus_per_node=4",
                "placement.policy=split",
                "placement.args={rollout_gpus: 2}",
                "rollout.engine=vllm",
            ],
        )
    ).plan.native["overrides"]
    assert (gpus["trainer.n_gpus_per_node"], gpus["rollout.n_gpus_per_node"]) == (2, 2)
    assert "actor_rollout_ref.rollout.checkpoint_engine.backend" not in gpus


@pytest.mark.parametrize(
    "overrides, match",
    [
        (("rollout.max_staleness=1",), "placement.policy: split"),
        (("rollout.max_staleness=1", "engine_version=0.5.0", *SPLIT), "0.9.1 only"),
        # fully_async_main aborts the generations in flight at a sync: without partial rollouts it trains them cut short
        (("rollout.max_staleness=2", *SPLIT), "trains them cut short"),
        (("rollout.max_staleness=1", "rollout.weight_sync_interval=2", *SPLIT), "partial_rollouts: true"),
        (
            (
                "rollout.max_staleness=2",
                "rollout.partial_rollouts=true",
                "rollout.weight_sync_interval=2",
                *SPLIT,
                "checkpoint.interval=2",
            ),
            "names the checkpoint by parameter version",
        ),
        ((*SPLIT,), "rollout.max_staleness >= 1 with placement.policy: split"),
    ],
)
def test_verl_refuses_what_it_cannot_launch_saying_why(overrides, match):
    with pytest.raises(CapabilityError, match=match) as info:
        _settings("backend=verl", *overrides)
    assert "placement.policy" in str(info.value) or "rollout." in str(info.value)


def test_verl_max_staleness_2_plans_the_fully_async_trainer():
    """Beyond one_step_off: verl's fully_async_main, with the run's length in prompts (its yaml's 100 would cut it),
    the staleness fraction at the bound, a sync every weight_sync_interval steps and evaluation per version."""
    prepared = prepare(
        load_config(
            QUICKSTART,
            [
                "backend=verl",
                "rollout.max_staleness=2",
                "rollout.partial_rollouts=true",
                "rollout.weight_sync_interval=2",
                "training.steps=6",
                "training.batch_size=3",
                "data.eval={type: generator, name: digit_copy, args: {num_rows: 8}}",
                "data.eval_interval=4",
                *SPLIT,
            ],
        )
    )
    native = prepared.plan.native
    assert native["entry_point"] == "verl.experimental.fully_async_policy.fully_async_main"
    o = native["overrides"]
    assert o["rollout.total_rollout_steps"] == 18  # 6 steps x 3 prompts
    assert (o["data.train_batch_size"], o["data.gen_batch_size"]) == (0, 1)
    assert o["async_training.staleness_threshold"] == 2.0
    assert (o["async_training.trigger_parameter_sync_step"], o["async_training.partial_rollout"]) == (2, True)
    assert o["trainer.test_freq"] == 2  # every 4 steps = every 2 parameter versions
    assert o["actor_rollout_ref.hybrid_engine"] is False
    # its task runner, trainer, rollouter and message queue ask Ray for 23 CPUs of their own
    assert native["ray"]["num_cpus"] == 8 + 23
    assert "fully_async_main" in prepared.backend.render_native(prepared.plan)
    # max_staleness 1 with partial rollouts is fully_async_main too (one_step_off finishes every generation)
    partial = prepare(
        load_config(QUICKSTART, ["backend=verl", "rollout.max_staleness=1", "rollout.partial_rollouts=true", *SPLIT])
    ).plan.native
    assert partial["entry_point"].endswith("fully_async_main")
    assert partial["overrides"]["async_training.staleness_threshold"] == 1.0


def test_verl_staleness_comes_from_its_own_version_tags():
    """version_metrics: samples tagged with the global_steps their weights were synced at; versions maps a
    tag to the actor updates those weights held (one_step_off syncs before each update)."""
    import numpy as np

    from rlbridge_adapters.verl.asynchrony import version_metrics

    versions = {0: 0, 1: 0, 2: 1}  # the initial sync, then step 1's sync (before its update), then step 2's
    tags = {"min_global_steps": np.array([0, 0], dtype=object), "max_global_steps": np.array([0, 0], dtype=object)}
    assert version_metrics(tags, versions, updates=0)["rlbridge/staleness_max"] == 0.0  # step 1
    tags = {"min_global_steps": np.array([1, 2], dtype=object), "max_global_steps": np.array([1, 2], dtype=object)}
    status = version_metrics(tags, versions, updates=2)  # trained at step 3
    assert (status["rlbridge/staleness_mean"], status["rlbridge/staleness_max"]) == (1.5, 2.0)
    assert status["rlbridge/partial_rollouts"] == 0.0
    spanned = {"min_global_steps": np.array([1], dtype=object), "max_global_steps": np.array([2], dtype=object)}
    assert version_metrics(spanned, versions, updates=2)["rlbridge/partial_rollouts"] == 1.0
    with pytest.raises(RuntimeError, match="never synced"):
        version_metrics({"min_global_steps": np.array([7], dtype=object)}, versions, updates=2)
    assert version_metrics({}, versions, updates=0) == {}  # the synchronous trainer tags nothing


# ---- the staleness rlbridge measures in OpenRLHF's loop (asynchrony.async_status) ----


def test_async_status_counts_versions_from_the_broadcasts_before_generation_started():
    from rlbridge_adapters.openrlhf.asynchrony import async_status

    syncs = [10.0, 20.0, 30.0]  # broadcasts completed: versions 1, 2, 3 (the run started at step 0)
    # trained at step 3: one batch generated from version 1 (started at 15), one from version 3 (started at 31)
    stamps = [(15.0, 18.0, 0.5), (31.0, 33.0, 2.0)]
    status = async_status(stamps, syncs, base=0, step=3)
    assert status["rlbridge/staleness_max"] == 2.0
    assert status["rlbridge/staleness_mean"] == 1.0
    assert status["rlbridge/partial_rollouts"] == 0.0
    assert status["rlbridge/rollout_idle"] == 2.0
    # generation that spanned the broadcast at 20: a partial rollout
    assert async_status([(19.0, 21.0, 0.0)], syncs, base=0, step=2)["rlbridge/partial_rollouts"] == 1.0
    # a resumed run counts from its step
    assert async_status([(5.0, 6.0, 0.0)], [], base=40, step=40)["rlbridge/staleness_max"] == 0.0
    assert async_status([None], syncs, base=0, step=1) == {}


def test_openrlhf_instrumentation_tags_samples_and_reports_staleness():
    """The wrappers on plain stand-ins for SamplesGenerator and BasePPOTrainer: a batch generated before the
    trainer's first broadcast and trained at step 1 is one version old."""
    from rlbridge_adapters.openrlhf import asynchrony

    class Sample:
        pass

    class SamplesGenerator:
        def generate_samples(self, **kwargs):
            return [Sample(), Sample()], None, 1, False

    class BasePPOTrainer:
        def train_step(self, rollout_samples, global_step):
            self.broadcast_to_vllm()
            return {"policy_loss": 0.0}, global_step + 1

        def broadcast_to_vllm(self):
            pass

    asynchrony.instrument_generator(types.SimpleNamespace(SamplesGenerator=SamplesGenerator))
    asynchrony.instrument_trainer(types.SimpleNamespace(BasePPOTrainer=BasePPOTrainer))
    generator, trainer = SamplesGenerator(), BasePPOTrainer()
    first, second = generator.generate_samples()[0], generator.generate_samples()[0]  # both before any broadcast
    status, step = trainer.train_step(first, 0)
    assert status["rlbridge/staleness_max"] == 0.0 and step == 1
    status, step = trainer.train_step(second, 1)
    assert status["rlbridge/staleness_max"] == 1.0 and status["rlbridge/staleness_mean"] == 1.0
    assert status["rlbridge/trainer_idle"] >= 0.0


def test_the_synchronous_ray_actor_class_is_instrumented_too():
    """ray.remote copies the methods into the actor's class when it decorates it (OpenRLHF's synchronous
    PPOTrainer, decorated in the module the hook instruments): that copy must be replaced as well, or
    the synchronous loop reports no staleness (found on a real run)."""
    from rlbridge_adapters.openrlhf import asynchrony

    class BasePPOTrainer:
        def train_step(self, rollout_samples, global_step):
            return {}, global_step + 1

        def broadcast_to_vllm(self):
            pass

    def ray_copy(method):  # ray.remote's copy: a wrapper whose __wrapped__ is the method
        def wrapper(*args, **kwargs):
            return method(*args, **kwargs)

        wrapper.__wrapped__ = method
        return wrapper

    methods = {name: ray_copy(getattr(BasePPOTrainer, name)) for name in ("train_step", "broadcast_to_vllm")}
    copied = type("Class", (BasePPOTrainer,), methods)  # what ray.remote builds
    module = types.SimpleNamespace(
        BasePPOTrainer=BasePPOTrainer,
        PPOTrainer=types.SimpleNamespace(__ray_metadata__=types.SimpleNamespace(modified_class=copied)),
    )
    asynchrony.instrument_trainer(module)
    assert copied.train_step._rlbridge and BasePPOTrainer.train_step._rlbridge
    assert copied.broadcast_to_vllm._rlbridge and BasePPOTrainer.broadcast_to_vllm._rlbridge


def test_a_generation_that_starts_once_the_broadcast_is_in_has_the_new_weights():
    """OpenRLHF's async generator waits for the vLLM lock the trainer's broadcast holds and starts generating
    as soon as it is released, which is before train_step returns: that batch has the new weights (version 1,
    trained at step 1: staleness 0) and is no partial rollout, though its generation ends after train_step."""
    import threading

    from rlbridge_adapters.openrlhf import asynchrony

    class Sample:
        pass

    started, finish = threading.Event(), threading.Event()

    class SamplesGenerator:
        def generate_samples(self, wait=False):
            if wait:
                started.set()
                finish.wait(5)
            return [Sample()], None, 1, False

    batches = []

    class BasePPOTrainer:
        def train_step(self, rollout_samples, global_step):
            self.broadcast_to_vllm()
            if global_step == 0:  # the generator actor takes the lock the broadcast released
                thread = threading.Thread(target=lambda: batches.append(generator.generate_samples(wait=True)[0]))
                thread.start()
                started.wait(5)
                time.sleep(0.01)  # what train_step does after the broadcast (the KL controller, its timers)
            return {}, global_step + 1

        def broadcast_to_vllm(self):
            time.sleep(0.01)

    asynchrony.instrument_generator(types.SimpleNamespace(SamplesGenerator=SamplesGenerator))
    asynchrony.instrument_trainer(types.SimpleNamespace(BasePPOTrainer=BasePPOTrainer))
    generator, trainer = SamplesGenerator(), BasePPOTrainer()
    trainer.train_step(generator.generate_samples()[0], 0)
    time.sleep(0.01)
    finish.set()
    while not batches:
        time.sleep(0.01)
    status, _ = trainer.train_step(batches[0], 1)
    assert status["rlbridge/staleness_max"] == 0.0 and status["rlbridge/partial_rollouts"] == 0.0, status


def test_a_buffered_sample_keeps_the_stamp_of_the_call_that_generated_it():
    """OpenRLHF serves the extras of an over-sized vLLM call (--rollout.vllm_generate_batch_size) from a
    buffer in later calls: their generation started at the first call, not the one that returns them."""
    from rlbridge_adapters.openrlhf import asynchrony

    class SamplesGenerator:
        def __init__(self):
            self.buffer = [object.__new__(type("Experience", (), {})) for _ in range(4)]

        def generate_samples(self, **kwargs):
            served, self.buffer = self.buffer[:2], self.buffer[2:]  # one vLLM call made all four
            return served, None, 1, False

    asynchrony.instrument_generator(types.SimpleNamespace(SamplesGenerator=SamplesGenerator))
    generator = SamplesGenerator()
    kept = list(generator.buffer)
    generator.generate_samples()
    first_start = kept[0]._rlbridge_generation[0]
    assert not hasattr(kept[2], "_rlbridge_generation")
    generator.buffer = kept  # as if the first call had left them all in the buffer
    generator.generate_samples()
    assert kept[0]._rlbridge_generation[0] == first_start  # not restamped


def test_openrlhf_async_metrics_are_canonical():
    from rlbridge.contract.metrics import is_canonical
    from rlbridge_adapters.openrlhf.metrics import to_canonical

    out = to_canonical(
        {
            "rlbridge/staleness_mean": 0.5,
            "rlbridge/staleness_max": 1.0,
            "rlbridge/trainer_idle": 0.1,
            "rlbridge/rollout_idle": 0.2,
            "rlbridge/partial_rollouts": 0.0,
            "timing/broadcast": 0.3,
        }
    )
    assert out["async/staleness_max"] == 1.0 and out["timing/weight_sync_s"] == 0.3
    assert all(is_canonical(k) for k in out)


def test_remote_digit_match_waits_like_a_remote_call_and_scores_like_digit_match():
    import time

    from rlbridge.contract.rewards import RewardInput
    from rlbridge_plugins.rewards import digit_match, remote_digit_match

    inputs = [
        RewardInput(prompt="3333", completion=c, completion_ids=[1] * len(c), answer="3") for c in ("333", "3a3b", "")
    ]
    start = time.perf_counter()
    scores = remote_digit_match(min_ms=20, max_ms=40)(inputs)
    waited = time.perf_counter() - start
    assert scores == digit_match()(inputs)
    assert 3 * 0.020 <= waited < 3 * 0.040 + 0.5  # one wait per sample, within the bounds
    with pytest.raises(ValueError, match="min_ms <= max_ms"):
        remote_digit_match(min_ms=50, max_ms=10)
