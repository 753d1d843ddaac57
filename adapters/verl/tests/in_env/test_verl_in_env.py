"""verl-specific checks that need verl installed; they run in the verl environments
(rlbridge compat run, translate) and skip elsewhere."""

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl")

from packaging.version import Version

from rlbridge.errors import ConfigError
from rlbridge.run.loading import load_config
from rlbridge.engine.patches import export
from rlbridge.run.runner import prepare
from tests.conftest import REPO

VERL = Version(importlib.metadata.version("verl"))


def _prepare(*overrides):
    extra = [] if VERL < Version("0.6") else ["resources.gpus_per_node=1", "rollout.engine=vllm"]
    return prepare(load_config(REPO / "configs" / "quickstart.yaml", ["backend=verl", *extra, *overrides]))


def test_names_verl_accepts_silently_are_checked_against_its_registries():
    prepared = _prepare("backend_options.verl.actor_rollout_ref.actor.policy_loss.loss_mode=not_real")
    with pytest.raises(ConfigError, match="no policy loss mode 'not_real'"):
        prepared.backend.validate(prepared.plan)
    # the strategy is training.strategy's (adapters/verl/layout.py), which refuses what verl has not
    with pytest.raises(ConfigError, match="set training.strategy instead"):
        _prepare("backend_options.verl.actor_rollout_ref.actor.strategy=deepspeed")


def test_unknown_native_key_is_refused_by_verl_hydra():
    prepared = _prepare("backend_options.verl.trainer.no_such_key=1")
    with pytest.raises(ConfigError, match="verl rejected the overrides"):
        prepared.backend.validate(prepared.plan)


def test_batch_that_verl_divisibility_rejects_fails_before_launch():
    # 3 GPUs cannot split 8 prompts x 8 samples evenly: refused before launch, by the core's device
    # check (the same rule verl's own validate_config enforces, now checked once for every engine)
    with pytest.raises(ConfigError, match="does not divide"):
        _prepare("resources.gpus_per_node=3", "training.micro_batch_size=1")


@pytest.mark.skipif(not (Version("0.5.0") <= VERL < Version("0.6")), reason="the HF rollout bug exists in verl 0.5.x")
def test_exported_upstream_fix_applies_to_the_installed_verl(tmp_path):
    import verl

    from rlbridge_adapters.verl.patches.v05_cpu import HF_ROLLOUT_N

    source = Path(verl.__file__).parent / "workers" / "rollout" / "hf_rollout.py"
    (tmp_path / "verl" / "workers" / "rollout").mkdir(parents=True)
    shutil.copy(source, tmp_path / "verl" / "workers" / "rollout" / "hf_rollout.py")
    text = export(HF_ROLLOUT_N)
    diff = text.split("```diff\n", 1)[1].rsplit("```", 1)[0]
    res = subprocess.run(["patch", "-p1", "--dry-run", "-F0"], input=diff, text=True, capture_output=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


TURNS = [
    '<tool_call>{"name": "hint", "arguments": {"repeat": 2}}</tool_call><|im_end|>',  # a tool call: not stepped
    "7777<|im_end|>",  # stepped: 1/2
    "7a<|im_end|>",  # stepped: 1/4, and digit_hint(turns=2) ends the episode
]


class ScriptedServer:
    """Stands in for verl's LLM server client only: returns the next scripted turn as token ids with
    log-probs, and records the prompt ids it was sent. Everything else in the episode is verl's own
    code (Continuous Token builder, tool parser, tool loader) and rlbridge's agent loop."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.prompts, self.max_tokens = tokenizer, list(turns), [], []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        self.max_tokens.append(sampling_params["max_tokens"])
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False)[: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def _episode(tmp_path, turns, *extra):
    """One digit_hint episode through verl's own agent-loop construction, with scripted turns."""
    import asyncio
    import json

    import hydra
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rlbridge.engine.model_dir import model_dir_with_template
    from rlbridge.contract.models import materialize_model
    from rlbridge_adapters.verl.train import write_agent_loop_files
    from rlbridge_adapters.verl.validate import compose, overrides_for

    prepared = _prepare(
        "reward=[]",
        "environment={name: digit_hint, args: {turns: 2}, max_turns: 3}",
        "rollout.max_new_tokens=256",
        "model.use_chat_template=true",
        *extra,
    )
    native = prepared.plan.native
    model_dir = model_dir_with_template(
        materialize_model(prepared.config, None), native["model"]["chat_template"], tmp_path
    )
    write_agent_loop_files(native, tmp_path)
    cfg = compose(overrides_for(native, str(tmp_path), model_dir, max_prompt_length=64))
    rollout = cfg.actor_rollout_ref.rollout
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    server = ScriptedServer(tokenizer, turns)

    async def episode():
        # exactly how verl's AgentLoopWorker builds a loop from the agent-loop config and the tool config
        tools = load_all_tools(tool_config_path=rollout.multi_turn.tool_config_path, function_tool_path=None)
        entry = next(
            e
            for e in OmegaConf.load(rollout.agent.agent_loop_config_path)
            if e.name == rollout.agent.default_agent_loop
        )
        loop = hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap(tools),
        )
        return await loop.run(
            {"temperature": 1.0},
            raw_prompt=[{"role": "user", "content": "7777"}],
            extra_info={"rlbridge_row": json.dumps({"prompt": "7777", "answer": "7"})},
        )

    return asyncio.run(episode()), server, tokenizer


@pytest.mark.skipif(
    VERL < Version("0.9.1"), reason="rlbridge's verl agent loop needs verl >= 0.9.1 (ct_merge_context_msg)"
)
def test_environment_agent_loop_runs_tools_and_steps_with_verl_own_machinery(tmp_path):
    out, server, tokenizer = _episode(tmp_path, TURNS)
    assert out.reward_score == pytest.approx(0.5 + 0.25)
    assert (
        out.extra_fields["turn_scores"] == pytest.approx([0.5, 0.25]) and out.extra_fields["rlbridge_tool_calls"] == 1
    )
    # the tool ran on the episode's environment and its answer reached the policy as a tool message
    second_prompt = tokenizer.decode(server.prompts[1])
    assert second_prompt.endswith("</tool_call><|im_end|>\n<|im_start|>tool\n77<|im_end|>\n<|im_start|>assistant\n")
    # the environment's feedback went back as a user message before the third turn
    assert tokenizer.decode(server.prompts[2]).endswith(
        "7777<|im_end|>\n<|im_start|>user\n\n<|im_end|>\n<|im_start|>assistant\n"
    )
    # only the policy's tokens are trained on; each turn got the remaining response budget
    generated = [tokenizer.encode(t, add_special_tokens=False) for t in TURNS]
    assert sum(out.response_mask) == sum(map(len, generated))
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    assert tokenizer.decode(out.prompt_ids + out.response_ids) == tokenizer.decode(server.prompts[2]) + "7a<|im_end|>"
    assert server.max_tokens[0] == 256 and server.max_tokens[1] == 256 - (len(server.prompts[1]) - len(out.prompt_ids))


@pytest.mark.skipif(
    VERL < Version("0.9.1"), reason="rlbridge's verl agent loop needs verl >= 0.9.1 (ct_merge_context_msg)"
)
def test_environment_tool_output_follows_verl_truncation_settings(tmp_path):
    options = (
        "backend_options.verl={actor_rollout_ref.rollout.multi_turn: {max_tool_response_length: 4, "
        "tool_response_truncate_side: right}}"
    )
    out, server, tokenizer = _episode(tmp_path, [TURNS[0].replace('"repeat": 2', '"repeat": 6'), *TURNS[1:]], options)
    assert "<|im_start|>tool\n7777...(truncated)<|im_end|>" in tokenizer.decode(server.prompts[1])
    assert out.reward_score == pytest.approx(0.75)
