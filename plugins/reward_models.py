"""A tiny reward model built locally (`builtin:tiny-reward`), for tests and demos of `reward: [{model: ...}]`
without a model hub.

It is a Qwen2 sequence-classification model (one label: the score) with tiny-digits' tokenizer,
trained for a few seconds on generated preference pairs of the digit task: for a prompt of one digit
repeated four times, a completion with more of that digit is preferred (Bradley-Terry loss). So its
score means something: it rises with the fraction of the prompt's digit in the completion, like the
digit_match reward function. Training is seeded and deterministic on CPU.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

BUILDER_VERSION = 1
SPEC = {"builder_version": BUILDER_VERSION, "kind": "tiny-reward", "hidden": 64, "layers": 2, "steps": 150, "batch": 32}


def _pair(rng: random.Random, length: int = 8) -> tuple[str, str, str]:
    """(prompt, preferred completion, other completion): the preferred one has more of the prompt's digit."""
    digit = rng.choice("0123456789")
    others = [d for d in "0123456789" if d != digit]
    hits = sorted(rng.sample(range(length + 1), 2))

    def completion(n: int) -> str:
        chars = [digit] * n + [rng.choice(others) for _ in range(length - n)]
        rng.shuffle(chars)
        return "".join(chars)

    return digit * 4, completion(hits[1]), completion(hits[0])


def tiny_reward(target: Path) -> str:
    target = Path(target)
    marker = target / "rlbridge_builder.json"
    if marker.exists() and json.loads(marker.read_text()) == SPEC:
        return str(target)
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from rlbridge_plugins.models import build_tokenizer, save_model_dir

    tok = build_tokenizer()
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=SPEC["hidden"],
        intermediate_size=128,
        num_hidden_layers=SPEC["layers"],
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    rng = random.Random(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(cfg)
        optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(SPEC["steps"]):
            pairs = [_pair(rng) for _ in range(SPEC["batch"])]
            texts = [p + c for p, c, _ in pairs] + [p + r for p, _, r in pairs]
            batch = tok(texts, return_tensors="pt", padding=True)
            scores = model(**batch).logits.squeeze(-1)
            loss = -torch.nn.functional.logsigmoid(scores[: SPEC["batch"]] - scores[SPEC["batch"] :]).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
    model.eval()
    return save_model_dir(model, tok, target, SPEC)
