"""Built-in model builders for `model.path: builtin:NAME`: tiny random models made locally, so that
the quickstart, the tests and CI need no model hub.

The tokenizer is character level over printable ASCII plus tab and newline, built in the
byte-level alphabet that transformers' Qwen2Tokenizer uses. Engines reload it with AutoTokenizer,
which for a `qwen2` model type rebuilds a byte-level BPE Qwen2Tokenizer from the vocabulary
whatever tokenizer class the files name; because our vocabulary is already byte-level symbols
without merges, that rebuild tokenizes exactly like the tokenizer we save (tested).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from rlbridge import hookimpl
from rlbridge.contract.registry import ModelBuilderPlugin

BUILDER_VERSION = 2
SPECIAL_TOKENS = ["<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ALPHABET_BYTES = [9, 10] + list(range(32, 127))


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map, which byte-level BPE vocabularies use."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars)))


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    byte_map = _byte_to_unicode()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for b in ALPHABET_BYTES:
        vocab[byte_map[b]] = len(vocab)
    tk = Tokenizer(BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False, byte_fallback=False))
    tk.normalizer = normalizers.NFC()
    # Same pipeline as Qwen2Tokenizer: split, then map bytes to the byte-level alphabet.
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\s+|\S"), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        bos_token=None,
        unk_token=None,
        padding_side="left",
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def bpe_corpus() -> list[str]:
    """What the BPE tokenizer of tiny-bpe is trained on: the digit task's strings (runs of one digit,
    so '11', '1111'... become tokens) and a little English and arithmetic, deterministic."""
    lines = [d * n for d in "0123456789" for n in (2, 3, 4, 6, 8)]
    lines += [f"{a} + {b} = {a + b}" for a in range(0, 40, 3) for b in range(0, 30, 7)]
    words = "the answer is a number think step by step hint digit repeat copy write final result tool call".split()
    lines += [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    return lines * 4


def build_bpe_tokenizer(vocab_size: int = 320):
    """A byte-level BPE tokenizer trained here with the `tokenizers` library (the Qwen2 pipeline:
    byte-level pre-tokenizer and decoder), so that decoding then re-encoding a policy's sampled ids
    often differs from them: the tokenizer writes '11' as one token, a policy may sample '1' '1'."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(bpe_corpus(), trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        bos_token=None,
        unk_token=None,
        padding_side="left",
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(
    target: Path, hidden: int = 64, layers: int = 2, heads: int = 2, seed: int = 0, tokenizer: str = "char"
) -> str:
    """A random Qwen2 model (head_dim = hidden/heads >= 32 for vLLM's CPU attention) with the
    char-level tokenizer (or the trained BPE one: tokenizer='bpe'), saved in float32. Idempotent;
    written to a temp dir and moved into place."""
    target = Path(target)
    marker = target / "rlbridge_builder.json"
    spec = {"builder_version": BUILDER_VERSION, "hidden": hidden, "layers": layers, "heads": heads, "seed": seed}
    if tokenizer != "char":
        spec["tokenizer"] = tokenizer
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return str(target)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_bpe_tokenizer() if tokenizer == "bpe" else build_tokenizer()
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    fork = torch.random.fork_rng()
    with fork:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(cfg).to(torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return save_model_dir(model, tok, target, spec)


def save_model_dir(model, tok, target: Path, spec: dict) -> str:
    """Write a built model and its tokenizer to `target` atomically (a temporary sibling, then one
    rename), with the spec it was built from; a crash never leaves a half-written model behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        _portable_tokenizer_config(tmp)
        (tmp / "rlbridge_builder.json").write_text(json.dumps(spec))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _portable_tokenizer_config(directory: Path) -> None:
    """transformers 5 names its tokenizer class TokenizersBackend, which transformers 4 (verl 0.5.0's)
    cannot load; PreTrainedTokenizerFast reads the same tokenizer.json in both. The chat template
    also goes into tokenizer_config.json, where transformers 4 looks for it."""
    path = directory / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    data.setdefault("chat_template", CHAT_TEMPLATE)
    path.write_text(json.dumps(data, indent=2))


def tiny_digits(target: Path) -> str:
    return build_tiny_model(target)


def tiny_bpe(target: Path) -> str:
    return build_tiny_model(target, tokenizer="bpe")


# Qwen2.5-0.5B's architecture (config.json of Qwen/Qwen2.5-0.5B): same tensor shapes, so the same
# memory and FLOPs per token, with random weights and the char-level tokenizer (the embedding keeps
# Qwen's 151936 rows; ids past the tokenizer are never sampled by a trained policy, only by chance)
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def qwen25_05b_shape(target: Path) -> str:
    """A random model of Qwen2.5-0.5B's shape (~494M parameters), built locally (no hub), saved in
    bfloat16 (~1 GB). For GPU benchmarks where the real weights cannot be downloaded."""
    target = Path(target)
    marker = target / "rlbridge_builder.json"
    spec = {"builder_version": BUILDER_VERSION, "shape": "qwen2.5-0.5b", **QWEN25_05B}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return str(target)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer()
    cfg = Qwen2Config(**QWEN25_05B, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return save_model_dir(model, tok, target, spec)


@hookimpl
def rlbridge_register_model_builders():
    return [
        ModelBuilderPlugin(
            "qwen2.5-0.5b-shape",
            qwen25_05b_shape,
            "random model of Qwen2.5-0.5B's shape (896 hidden x 24 layers, 14/2 heads, 151936 vocab; ~494M "
            "parameters), "
            "char-level tokenizer; for GPU benchmarks without a hub",
        ),
        ModelBuilderPlugin(
            "tiny-digits",
            tiny_digits,
            "random Qwen2, 64 hidden x 2 layers, head_dim 32, char-level tokenizer (~60k parameters)",
        ),
        ModelBuilderPlugin(
            "tiny-bpe",
            tiny_bpe,
            "tiny-digits with a byte-level BPE tokenizer trained locally (320 tokens): re-encoding sampled ids differs",
        ),
        ModelBuilderPlugin(
            "tiny-reward",
            _tiny_reward,
            "reward model: Qwen2 sequence classifier (one score) with tiny-digits' tokenizer, trained for seconds on "
            "generated digit-task preference pairs (more of the prompt's digit scores higher); for reward: [{model: "
            "...}]",
        ),
    ]


def _tiny_reward(target: Path) -> str:
    from rlbridge_plugins.reward_models import tiny_reward

    return tiny_reward(target)
