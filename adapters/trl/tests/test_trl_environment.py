"""Environment episodes on TRL (adapters/trl/environment.py): TRL's own GRPOTrainer renders and
tokenizes, rlbridge's rollout_func drives the episode. Only the policy is scripted (the trainer's
one-turn generation returns fixed token ids), as the verl agent-loop test scripts verl's server."""

import pytest

trl = pytest.importorskip("trl")

from rlbridge.contract.models import builtin_model_dir  # noqa: E402
from rlbridge.contract.registry import get_plugin_manager  # noqa: E402
from rlbridge_adapters.trl.environment import EnvironmentRollout, parse_tool_calls, trainer_class  # noqa: E402
from tests.conftest import REPO  # noqa: E402


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast

    model = (
        get_plugin_manager().get("model_builder", "tiny-digits", "model.path").build(builtin_model_dir("tiny-digits"))
    )
    tok = PreTrainedTokenizerFast.from_pretrained(model)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("out")),
        max_completion_length=128,
        num_generations=2,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to="none",
        max_steps=1,
    )
    cls = trainer_class(trl.GRPOTrainer)
    return cls(
        model=model,
        reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "7777", "answer": "7"}]),
        processing_class=tok,
        rollout_func=lambda prompts, trainer: None,
    )


def script(trainer, turns):
    """The policy's turns, as token ids: each call returns the next turn for every active episode."""
    tok = trainer.processing_class
    queue = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in turns]
    seen = []

    def generate(prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        seen.append([list(p) for p in prompt_ids])
        ids = queue.pop(0)
        return [list(ids) for _ in prompt_ids], None

    trainer._generate_single_turn = generate
    return seen


def test_tool_call_then_feedback_turns_with_masks_and_the_episode_reward(trainer):
    tok = trainer.processing_class
    rollout = EnvironmentRollout(
        {"name": "digit_hint", "args": {"turns": 2}, "max_turns": 3}, "prompt", use_chat_template=False
    )
    trainer._rlbridge_rows = [{"prompt": "7777", "answer": "7"}]
    seen = script(trainer, ['<tool_call>{"name": "hint", "arguments": {"repeat": 2}}</tool_call>', "77", "7a"])
    out = rollout(["7777"], trainer)
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    text = tok.decode(ids)
    # turn 1 called the tool (not stepped); its result '77' came back as context (mask 0)
    assert text.startswith('<tool_call>{"name": "hint", "arguments": {"repeat": 2}}</tool_call><|im_end|>77')
    first = (
        len(
            tok('<tool_call>{"name": "hint", "arguments": {"repeat": 2}}</tool_call>', add_special_tokens=False)[
                "input_ids"
            ]
        )
        + 1
    )
    assert mask[:first] == [1] * first and mask[first : first + 2] == [0, 0]
    # turns 2 and 3 were stepped: 2/2 * 1/2 + 1/2 * 1/2, then digit_hint(turns=2) said done
    assert out["rlbridge_environment_reward"] == [pytest.approx(0.5 + 0.25)]
    assert out["rlbridge_turns"] == [3.0] and out["rlbridge_tool_calls"] == [1.0]
    # the ids the policy generated are in the completion as generated, and each turn saw all before it
    assert sum(mask) == first + 3 + 3 and seen[1][0] == out["prompt_ids"][0] + ids[: first + 2]
    assert out["logprobs"] is None  # HF generation gives none, as in TRL's own path


def test_hermes_tool_call_parsing():
    assert parse_tool_calls('x <tool_call>{"name": "a", "arguments": {"k": 1}}</tool_call>') == [("a", {"k": 1})]
    assert parse_tool_calls("<tool_call>{bad}</tool_call>")[0][0] is None
    assert parse_tool_calls("no call") == []


def test_rloo_cannot_run_an_environment():
    from rlbridge.errors import CapabilityError
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    config = load_config(
        REPO / "configs" / "multiturn.yaml",
        ["backend=trl", "algorithm.name=rloo", "algorithm.kl_placement=reward"],
    )
    with pytest.raises(CapabilityError, match="RLOOTrainer has no rollout_func"):
        prepare(config)
