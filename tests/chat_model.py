"""A real-format chat model directory, built in seconds with nothing downloaded (what a user's
``--model DIR`` holds): a byte-level BPE tokenizer trained with ``tokenizers`` on a small corpus,
Qwen-style special tokens, a Jinja chat template (Qwen2.5's layout, with Qwen3's
``enable_thinking`` switch), a ``generation_config.json`` listing two end ids (``<|im_end|>`` and
``<|endoftext|>``) while the tokenizer's own EOS is ``<|endoftext|>`` only (as in a Qwen base
tokenizer, so stopping at ``<|im_end|>`` is the generation config's doing), and a tiny random Qwen2
model over it, saved with ``save_pretrained``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if not (m['role'] == 'system' and loop.first) %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
CORPUS = [
    f"What is {a} plus {b}? The answer is {a + b}. Please reason step by step." for a in range(20) for b in range(5)
]
CORPUS += [
    "system user assistant You are a helpful assistant. Previous attempt: Find the error and give a "
    "corrected full solution. \\boxed{42} Answer: 7"
] * 20
CONTEXT = 256  # max_position_embeddings: the context-length tests count against it


def build_tokenizer() -> PreTrainedTokenizerFast:
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[1:],
    )
    tok.chat_template = TEMPLATE
    return tok


def build_chat_model_dir(out: Path, seed: int = 0) -> Path:
    """Write the tokenizer and a tiny random Qwen2 (2 layers, hidden 32) to ``out``."""
    tok = build_tokenizer()
    end, eos = tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(
        eos_token_id=[end, eos], pad_token_id=tok.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
