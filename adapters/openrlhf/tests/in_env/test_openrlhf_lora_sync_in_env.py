"""OpenRLHF 0.11 LoRA weight sync (no engine start): ActorPPOTrainer.broadcast_to_vllm sends the peft
model's parameters as peft names them, which vLLM's own weight loader rejects; the adapter's patch
(openrlhf-lora-merged-weight-sync) sends the merged weights under the base model's names. Runs in the
OpenRLHF environment and skips elsewhere."""

import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("vllm")

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from vllm.model_executor.models.utils import AutoWeightsLoader

from rlbridge.contract.models import materialize_path
from rlbridge_adapters.openrlhf.patches import _lora, merged_lora_broadcast


def _peft_model():
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(materialize_path("builtin:tiny-digits", "model.path")),
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
    )
    for name, param in model.named_parameters():
        if "lora_B" in name:  # as after training (peft starts B at zero)
            param.data.normal_(0, 0.05)
    return model


def test_vllm_rejects_the_peft_names_openrlhf_sends():
    base = AutoModelForCausalLM.from_pretrained(materialize_path("builtin:tiny-digits", "model.path"))
    name, param = next((n, p) for n, p in _peft_model().named_parameters() if "base_layer" in n)
    with pytest.raises(ValueError, match="no module or parameter named 'base_model'"):
        AutoWeightsLoader(base).load_weights([(name, param.data)])


def test_the_patch_sends_merged_weights_under_base_names():
    model = _peft_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sent = {}

    def openrlhf_broadcast(self):  # OpenRLHF's loop: every named parameter of self.actor.model.module to vLLM
        for n, p in self.actor.model.module.named_parameters():
            sent[n] = p.detach().clone()

    class Trainer:
        class actor:
            class model:
                module = model

    merged_lora_broadcast(openrlhf_broadcast)(Trainer)
    base = AutoModelForCausalLM.from_pretrained(materialize_path("builtin:tiny-digits", "model.path"))
    assert set(sent) == {n for n, _ in base.named_parameters()}  # base names only, no adapter tensors
    assert AutoWeightsLoader(base).load_weights(list(sent.items())) == set(sent)  # vLLM's loader takes them
    prefix = "base_model.model.model.layers.0.self_attn.q_proj."
    a, b = before[prefix + "lora_A.default.weight"], before[prefix + "lora_B.default.weight"]
    merged = before[prefix + "base_layer.weight"] + (16 / 8) * b @ a
    assert torch.allclose(sent["model.layers.0.self_attn.q_proj.weight"], merged, atol=1e-6)
    after = dict(model.named_parameters())
    assert all(torch.allclose(after[n], before[n], atol=1e-6) for n in before)  # unmerged again, names restored


def test_applies_only_with_lora():
    assert _lora({"args": ["--ds.lora.rank", "8"]}) and not _lora({"args": ["--ds.lora.rank", "0"]})
    assert not _lora({"args": ["--actor.model_name_or_path", "m"]})
