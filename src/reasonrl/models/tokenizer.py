"""Character-level tokenizer for the embedded tiny reasoner.

Built with the ``tokenizers`` library (a BPE model with no merges is exactly a character model)
and saved as an ordinary ``tokenizer.json``, so ``AutoTokenizer.from_pretrained(dir)`` loads it
with no reasonrl code. Every printable ASCII character plus newline and tab is a token, so
reasoning-gym prompts and user files tokenise without unknowns in the common case.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIALS = [PAD, EOS, UNK]
CHARS = [c for c in string.printable if c not in "\r\x0b\x0c"]  # 97 printable chars, newline, tab


def char_vocab() -> dict[str, int]:
    """Token id of every symbol: specials first (pad=0, eos=1, unk=2), then the characters."""
    return {tok: i for i, tok in enumerate(SPECIALS + CHARS)}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A fast HF tokenizer whose tokens are single characters (no BOS, EOS appended by callers)."""
    core = Tokenizer(models.BPE(vocab=char_vocab(), merges=[], unk_token=UNK))
    core.add_special_tokens(SPECIALS)
    core.decoder = decoders.Fuse()  # join characters back without separators
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        model_max_length=4096,
    )
    return tok
