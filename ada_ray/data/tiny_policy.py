"""The embedded base policy: a tiny Qwen2 causal LM and a char-level tokenizer, built locally.

Nothing comes from a hub. The tokenizer is a `tokenizers` BPE model with an explicit vocabulary
and no merges (so: one token per character) over the characters the embedded task uses, with
<bos> prepended by its post-processor; it is saved with ``save_pretrained`` and loads with
``AutoTokenizer`` and in vLLM. The model is a standard ``Qwen2ForCausalLM`` (about 1M parameters at
the default shape), saved as safetensors.
"""

from __future__ import annotations

from pathlib import Path

from ada_ray.config import EmbeddedModelConfig

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = list("0123456789+-*= ")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", BOS_ID)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                 unk_token="<unk>")
    return hf


def build_model(shape: EmbeddedModelConfig, vocab_size: int, seed: int = 0):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads, max_position_embeddings=shape.max_positions,
        tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg)


def save_policy(model, tokenizer, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.bos_token_id = BOS_ID
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
