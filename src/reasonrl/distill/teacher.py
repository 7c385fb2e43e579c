"""An external teacher: a frozen second model that scores the student's own tokens (TGPO, RKL-OPD, KDRL).

:func:`get_teacher` loads a local HF model directory once per process (then returns the cached
handle), in eval mode with every parameter frozen. ``offload=True`` keeps it on the CPU and moves it
to the student's device only for its forward (:meth:`TeacherModel.score`), so a GPU holds both
models only while the teacher runs. The id-level methods read the teacher's distribution at the
student's token ids, so the two vocabularies must be the same: :func:`check_vocab` raises a
:class:`~reasonrl.errors.UserError` naming both tokenizers and the first id where they differ.

``builtin:teacher`` is the stronger tiny reasoner for the built-in arithmetic task, a longer warm
start of the shipped base's architecture (``src/reasonrl/models/teacher``; docs/teacher.md says how it
was made). Scoring reuses :func:`~reasonrl.distill.context.score_under_context`, which reduces the
vocabulary inside the forward to what the method asks for (log-probs of the sampled tokens, argmax
ids, top-k), a chunk of rows at a time.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor

from ..errors import MissingPathError, UserError
from ..models.loading import check_model_name, load_model, resolve_dtype
from .context import ContextScores, score_under_context

BUILTIN = "builtin:teacher"
TEACHER_DIR = Path(__file__).resolve().parent.parent / "models" / "teacher"
BUILD = "reasonrl pretrain --steps 600 --eval-every 100 --half --out src/reasonrl/models/teacher"

_CACHE: dict[tuple[str, str, bool, str], "TeacherModel"] = {}


def resolve_teacher_path(name: str) -> str:
    """``builtin:teacher`` -> the shipped teacher's directory; anything else must be a local HF directory."""
    if name == BUILTIN:
        if not (TEACHER_DIR / "config.json").is_file():
            raise MissingPathError(
                f"teacher.model={BUILTIN}: the built-in teacher is missing from {TEACHER_DIR}; "
                f"build it with:\n  {BUILD}"
            )
        return str(TEACHER_DIR)
    if name.startswith("tiny:") or name == "base":
        check_model_name(name)
        return name  # a fresh tiny model (tests) or the shipped base, as load_model reads them
    if not Path(name).is_dir():
        raise MissingPathError(
            f"teacher.model={name!r} is not a local directory; give an HF model directory "
            f"(e.g. a run's final/ folder) or {BUILTIN}"
        )
    check_model_name(name)
    return name


def teacher_problem(name: str) -> str | None:
    """Why ``teacher.model`` cannot load (None: it can), checked before any model is loaded. A
    missing built-in teacher is reported when the teacher is first needed (with the command that
    builds it), so a checkout without the checkpoint still validates every recipe."""
    if name == BUILTIN:
        return None
    try:
        resolve_teacher_path(name)
    except UserError as err:
        return str(err)
    return None


class TeacherModel:
    """A frozen model (no grad, eval mode) on ``device``, or parked on the CPU with ``offload``."""

    def __init__(self, model, tokenizer, path: str, device: str, offload: bool):
        self.model, self.tok, self.path, self.device, self.offload = model, tokenizer, path, device, offload
        self.model.eval()
        self.model.requires_grad_(False)  # frozen: no parameter of it ever gets a gradient
        self.checked: set[int] = set()  # student tokenizers already compared (by id)

    @contextlib.contextmanager
    def on_device(self) -> Iterator[torch.nn.Module]:
        """The model on ``device`` for one forward; with offload it goes back to the CPU afterwards."""
        if not self.offload:
            yield self.model
            return
        self.model.to(self.device)
        try:
            yield self.model
        finally:
            self.model.to("cpu")

    def check_student(self, student_tok) -> None:
        """Same vocabulary as ``student_tok`` (checked once per student tokenizer)."""
        if id(student_tok) not in self.checked:
            check_vocab(self.tok, student_tok, self.path, getattr(student_tok, "name_or_path", "") or "<in memory>")
            self.checked.add(id(student_tok))

    def score(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        completion_ids: Tensor,
        completion_mask: Tensor,
        *,
        temperature: float = 1.0,
        argmax: bool = False,
        top_k: int = 0,
        chunk_rows: int = 64,
    ) -> ContextScores:
        """The teacher's scores of the student's tokens under the student's own prompt: (R, P) left-padded
        prompts + (R, T) completions -> (R, T) log-probs of the sampled tokens [+ argmax ids, top-k], no grad."""
        with self.on_device() as model, torch.no_grad():
            return score_under_context(
                model,
                prompt_ids,
                prompt_mask,
                completion_ids,
                completion_mask,
                temperature=temperature,
                grad=False,
                argmax=argmax,
                top_k=top_k,
                chunk_rows=chunk_rows,
            )


def check_vocab(teacher_tok, student_tok, teacher_name: str, student_name: str) -> None:
    """UserError unless both tokenizers map every token to the same id (TGPO reads the teacher's
    argmax *ids* in the student's vocabulary; RKL-OPD and KDRL the teacher's log-prob of the student's ids)."""
    t, s = teacher_tok.get_vocab(), student_tok.get_vocab()
    if t == s:
        return
    t_by_id, s_by_id = {i: w for w, i in t.items()}, {i: w for w, i in s.items()}
    for i in range(max(len(t_by_id), len(s_by_id), max(t_by_id, default=0) + 1, max(s_by_id, default=0) + 1)):
        if t_by_id.get(i) != s_by_id.get(i):
            raise UserError(
                f"teacher tokenizer ({teacher_name}) and student tokenizer ({student_name}) differ: the first "
                f"differing id is {i}: teacher {t_by_id.get(i)!r}, student {s_by_id.get(i)!r} (vocabularies of "
                f"{len(t)} and {len(s)} tokens). Id-level teacher methods need the same vocabulary; use a "
                "teacher of the student's family or one aligned to its tokenizer"
            )


def get_teacher(name: str, *, device: str = "cpu", offload: bool = False, dtype: str = "float32") -> TeacherModel:
    """The teacher for ``name`` (loaded on the first call, then cached per process: once per run)."""
    path = resolve_teacher_path(name)
    key = (path, str(device), offload, dtype)
    if key not in _CACHE:
        model, tok = load_model(path, dtype=resolve_dtype(dtype), device="cpu" if offload else str(device))
        _CACHE[key] = TeacherModel(model, tok, path, str(device), offload)
    return _CACHE[key]


def clear_teachers() -> None:
    """Drop the cached teachers (frees their memory)."""
    _CACHE.clear()
