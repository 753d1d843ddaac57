"""Issue 25 on TRL: rollout.max_staleness >= 1 plans TRL 1.16's AsyncGRPOTrainer against a vLLM server rlbridge
starts on the split placement's rollout devices; what it refuses and why; the pieces that make it run on CPU
(the PyTorch tree attention against TRL's own trie packing, the picklable reward, TRL's metric names). The run
itself, with its staleness read from TRL's version tags: adapters/trl/tests/in_env/test_trl_async_in_env.py."""

import pickle

import pytest

from tests.conftest import QUICKSTART
from rlbridge.errors import CapabilityError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare

SPLIT = ["placement.policy=split", "placement.args={rollout_gpus: 1}"]


def _prepared(*overrides: str):
    return prepare(load_config(QUICKSTART, ["resources.gpus_per_node=0", *overrides]))


def _settings(*overrides: str) -> dict:
    prepared = _prepared(*overrides)
    return prepared.backend.native_settings(prepared.plan)


def test_max_staleness_plans_async_grpo_trainer_on_split_devices():
    settings = _settings("rollout.max_staleness=2", "rollout.weight_sync_interval=3", *SPLIT)
    assert settings["launch.trainer"] == "AsyncGRPOTrainer"
    assert settings["launch.config_module"] == "trl.experimental.async_grpo"
    assert settings["max_staleness"] == 2 and settings["weight_sync_steps"] == 3
    assert settings["launch.pause_mode"] == "wait"  # partial_rollouts false: a sync waits for in-flight requests
    assert settings["launch.placement.actor"] == 1 and settings["launch.placement.rollout"] == 1
    assert settings["token_budget"] == 0  # micro batches of training.micro_batch_size samples
    # GRPOConfig-only fields are gone (AsyncGRPOConfig would reject them)
    assert not {"beta", "loss_type", "scale_rewards", "generation_batch_size", "use_vllm", "reward_weights"} & set(
        settings
    )
    assert _settings("rollout.max_staleness=1", "rollout.partial_rollouts=true", *SPLIT)["launch.pause_mode"] == "keep"
    # rollout.engine vllm (what auto means here) plans the same: GRPOTrainer's vLLM-only fields are dropped
    explicit = _settings("rollout.max_staleness=1", "rollout.engine=vllm", *SPLIT)
    assert explicit["launch.trainer"] == "AsyncGRPOTrainer" and not any(
        k.startswith("vllm_importance") for k in explicit
    )


def test_the_async_plan_is_accepted_by_trls_own_config_class():
    pytest.importorskip("trl.experimental.async_grpo")
    prepared = _prepared("rollout.max_staleness=1", *SPLIT)
    prepared.backend.validate(prepared.plan)  # AsyncGRPOConfig(**args): TRL's own __post_init__


@pytest.mark.parametrize(
    "overrides, match",
    [
        (("resources.gpus_per_node=2",), "one training process"),  # colocate on 2 GPUs: two trainer devices
        (("algorithm.kl_coef=0.05", *SPLIT), "no reference model"),
        (("algorithm.name=rloo", "algorithm.kl_placement=reward", *SPLIT), "GRPO only"),
        (("rollout.engine=hf", *SPLIT), "vLLM only"),
        (("algorithm.rollout_correction=token_truncate", "rollout.engine=vllm", *SPLIT), "sampling log-probabilities"),
        (("algorithm.epochs_per_rollout=2", *SPLIT), "each sample once"),
        (("engine_version=1.18.0", "engine_env=auto", *SPLIT), "1.18"),
    ],
)
def test_async_trl_refuses_what_async_grpo_trainer_cannot_do(overrides, match):
    with pytest.raises(CapabilityError, match=match) as info:
        _settings("rollout.max_staleness=1", *overrides)
    assert "rollout.max_staleness" in str(info.value)


def test_colocated_async_runs_the_server_on_the_training_device():
    settings = _settings("rollout.max_staleness=1")
    assert settings["launch.trainer"] == "AsyncGRPOTrainer"
    assert settings["launch.placement.shared"] is True and settings["launch.placement.actor"] == 1
    gpu = _settings("rollout.max_staleness=1", "resources.gpus_per_node=1", "rollout.gpu_memory_utilization=0.4")
    assert gpu["launch.server.gpu_memory_utilization"] == 0.4 and gpu["use_cpu"] is False


def test_split_placement_without_max_staleness_is_refused_naming_the_fix():
    with pytest.raises(CapabilityError, match="rollout.max_staleness >= 1") as info:
        _settings(*SPLIT)
    assert "placement.policy" in str(info.value) and "NCCL" in str(info.value)


def test_cpu_tree_attention_matches_per_sequence_attention():
    """TRL's own trie packing (TreeRow.pack) of three samples that share a prompt and fork, through the patched
    tree attention, gives each target the log-probability the unpacked sequence gets with plain SDPA."""
    torch = pytest.importorskip("torch")
    packing = pytest.importorskip("trl.experimental.async_grpo.packing")
    from transformers import AutoModelForCausalLM

    from rlbridge.contract.models import materialize_path
    from rlbridge_adapters.trl.patches.async_grpo_cpu import TorchVarlenAttention, use_torch_tree_attention

    use_torch_tree_attention()
    packing.register_tree_attention()
    path = materialize_path("builtin:tiny-digits", "model.path")
    reference = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    tree = AutoModelForCausalLM.from_pretrained(path, attn_implementation=packing.TREE_ATTENTION)
    prompt = [10, 11, 12, 13]
    seqs = [prompt + [20, 21, 22], prompt + [20, 30], prompt + [40, 41, 42, 43]]
    row = packing.TreeRow()
    for s in seqs:
        row.add(
            {
                "input_ids": torch.tensor(s),
                "completion_mask": torch.tensor([0] * 4 + [1] * (len(s) - 4)),
                "old_log_probs": torch.zeros(len(s)),
                "advantage": 1.0,
                "group_id": 0,
            }
        )
    packed = row.pack()
    assert len(packed["input_ids"]) < sum(map(len, seqs))  # the prompt is forwarded once: a real trie
    with torch.no_grad():
        logits = (
            tree(
                input_ids=packed["input_ids"][None],
                position_ids=packed["position_ids"][None],
                tree_kv_index=packed["tree_kv_index"],
                tree_cu_seqlens_q=packed["tree_cu_seqlens_q"],
                tree_cu_seqlens_k=packed["tree_cu_seqlens_k"],
                tree_max_seqlen_q=int(packed["tree_max_seqlens"][0]),
                tree_max_seqlen_k=int(packed["tree_max_seqlens"][1]),
            )
            .logits[0]
            .log_softmax(-1)
        )
        positions = packed["token_index"].tolist()
        k = 0
        for s in seqs:
            unpacked = reference(input_ids=torch.tensor([s])).logits[0].log_softmax(-1)
            for t in range(4, len(s)):
                assert abs(logits[positions[k], s[t]] - unpacked[t - 1, s[t]]) < 1e-4, (s, t)
                k += 1
    # the mask is FlashAttention's bottom-right one: a top-left mask gives other numbers
    q = torch.randn(3, 2, 8)
    kv = torch.randn(5, 2, 8)
    cu_q, cu_k = torch.tensor([0, 3], dtype=torch.int32), torch.tensor([0, 5], dtype=torch.int32)
    out = TorchVarlenAttention.flash_attn_varlen_func(q, kv, kv, cu_q, cu_k, 3, 5)
    last = torch.nn.functional.scaled_dot_product_attention(
        q[2:].transpose(0, 1), kv.transpose(0, 1), kv.transpose(0, 1)
    )
    assert torch.allclose(out[2], last.transpose(0, 1)[0], atol=1e-6)  # the last query sees every key
    with pytest.raises(NotImplementedError):
        TorchVarlenAttention.flash_attn_varlen_func(q, kv, kv, cu_q, cu_k, 3, 5, window_size=(4, 0))


def test_spawned_reward_pickles_and_scores_decoded_completions_with_its_weight(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from rlbridge.contract.models import materialize_path
    from rlbridge_adapters.trl.async_run import SpawnedReward

    tok_dir = materialize_path("builtin:tiny-digits", "model.path")
    tok = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    reward = SpawnedReward({"name": "digit_match", "weight": 2.0, "args": {}}, 0, "answer", tok_dir)
    reward(
        {"x": 1} and [[{"role": "user", "content": "3333"}]],
        [[{"role": "assistant", "content": ""}]],
        [tok("33", add_special_tokens=False)["input_ids"]],
        answer=["3"],
    )  # builds the plugin
    clone = pickle.loads(pickle.dumps(reward))  # what TRL's spawned rollout worker receives
    assert (
        clone._tok is None and clone._pool is None and clone._scorer is None and clone.__name__ == "digit_match"
    )  # built again where it runs
    ids = [tok("3333", add_special_tokens=False)["input_ids"], tok("35", add_special_tokens=False)["input_ids"]]
    prompts = [[{"role": "user", "content": "3333"}]] * 2
    scores = clone(prompts, [[{"role": "assistant", "content": ""}]] * 2, ids, answer=["3", "3"])
    assert scores[0] == pytest.approx(2.0) and scores[1] == pytest.approx(1.0)  # digit_match x weight 2


def test_trl_async_metrics_map_to_canonical_names():
    from rlbridge_adapters.trl.async_run import canonical_async

    out = canonical_async(
        {
            "reward": 0.5,
            "rewards/digit_match": 0.5,
            "sample/staleness_mean": 0.4,
            "sample/staleness_max": 1.0,
            "perf/rollout_wait_s": 0.2,
            "perf/weight_sync_s": 0.05,
            "rollout/backpressure_s": 0.3,
            "loss": 0.1,
            "entropy": None,
        }
    )
    assert out["reward/mean"] == 0.5 and out["reward/digit_match/mean"] == 0.5
    assert out["async/staleness_mean"] == 0.4 and out["async/staleness_max"] == 1.0
    assert out["async/trainer_idle_s"] == 0.2 and out["async/rollout_idle_s"] == 0.3
    assert out["timing/weight_sync_s"] == 0.05 and "entropy" not in out


def test_shared_memory_weight_transfer_pauses_loads_and_checks_every_tensor(tmp_path, monkeypatch):
    """The transfer against a stand-in for vLLM's HTTP endpoints (the real server: the engine test): the pause
    mode follows rollout.partial_rollouts, the file holds every tensor sent, a worker that loaded fewer raises,
    and the events file gets the sync's bytes and tensors."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    from rlbridge.engine.events import EVENTS_ENV
    from rlbridge_adapters.trl.vllm_server import SharedMemoryWeightTransfer

    calls, short = [], {"by": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, body: bytes, kind="application/json"):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            calls.append(self.path)
            self._answer(b'vllm:num_requests_running{m="x"} 3.0\nvllm:num_requests_waiting{m="x"} 2.0\n', "text/plain")

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            calls.append(self.path)
            if self.path == "/collective_rpc":
                loaded = load_file(body["args"][0])
                self._answer(json.dumps({"results": [str(len(loaded) - short["by"])]}).encode())
            else:
                self._answer(b"{}")

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events.jsonl"))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    weights = [("a.weight", torch.ones(2, 3)), ("b.weight", torch.zeros(4))]
    try:
        keep = SharedMemoryWeightTransfer(url, pause_mode="keep")
        keep.pause()
        keep.send_weights(iter(weights))
        keep.resume()
        assert "/pause?mode=keep" in calls and calls[-1] == "/resume"
        assert keep.take_partial() == 5 and keep.take_partial() == 0  # running + waiting requests at the pause
        assert keep.last["tensors"] == 2 and keep.last["bytes"] == (6 + 4) * 4
        assert sorted(load_file(keep.path)) == ["a.weight", "b.weight"]
        event = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])
        assert event["kind"] == "weight_sync" and event["tensors"] == 2
        wait = SharedMemoryWeightTransfer(url, pause_mode="wait")
        wait.pause()
        assert calls[-1] == "/pause?mode=wait" and wait.take_partial() == 0
        short["by"] = 1
        with pytest.raises(RuntimeError, match="loaded"):
            wait.send_weights(iter(weights))
        for transfer in (keep, wait):
            transfer.destroy()
            assert not __import__("os").path.exists(transfer.path)
    finally:
        server.shutdown()
