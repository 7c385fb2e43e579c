"""Guidance beyond the verifier: strategy hints, a reference solution, a stepwise critique.

Self-teacher methods show the policy extra context (specs: shared/specs/distill-and-data.md):
NudgeRL (arXiv 2605.15726) conditions rollouts on short strategy *hints*; EGRSD (arXiv 2605.13255)
and SSOPD (arXiv 2605.17497) score completions under the *reference solution*; STRIDE (arXiv
2605.18851) and CIPO (arXiv 2605.14539) need a *critique* naming the first wrong step of a failed
attempt, and the text before that step to regenerate from. A task offers them through optional
methods (the :class:`GuidanceTask` protocol); the module functions below call them and raise a
:class:`~reasonrl.errors.UserError` naming the task and what it lacks when a method is missing.

- ``hints(item) -> list[str]``, ``reference_solution(item) -> str`` and
  ``critique(item, completion) -> Critique`` need knowledge of the problem: no default.
- ``steps(completion) -> list[str]`` and ``prefix_before_step(completion, k) -> (prefix, offset)``
  default to STRIDE's rule: steps are the non-blank pieces between blank lines. Steps are numbered
  from 1; ``prefix`` is ``completion[:offset]`` where ``offset`` is where step k starts (its leading
  whitespace skipped), so a redirect keeps steps 1..k-1 *and* the separator after them and the
  generator continues with step k ("A\\n\\nB\\n\\nC", k=2 -> ("A\\n\\n", 3): the spec's kept prefix
  "A", suffix loss after "A\\n\\n"). k = len(steps) + 1 (a critique of a truncated attempt: the
  missing step) keeps the whole completion.
- ``critique_prompt(item, completion) -> str``: the verifier role's prompt; a generic default.

Critique text carries ``<first_error>k</first_error>`` (``none`` when every step is right) and
``<verdict>correct|incorrect</verdict>`` after a one-line explanation; :func:`parse_critique` reads
them back from a verifier's output. Users with real data attach JSONL files of hints, solutions
and critiques to any task with :class:`GuidedTask` (:func:`load_guidance` reads and checks them).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

from ..advantages.subgroups import parse_first_error, parse_verdict
from ..errors import MissingPathError, UserError
from ..models.chat import prompt_text
from .base import Item, TaskWrapper, take_items
from .files import jsonl_rows
from .protocols import WithCritiquePrompt, WithCritiques, WithHints, WithSolutions, WithSteps, provides

VERDICTS = ("correct", "incorrect")
BLANK_LINE = re.compile(r"\n[ \t]*\n")  # STRIDE's generic step separator (spec section 7 (b))


@dataclass(frozen=True)
class Critique:
    """A stepwise judgement of one completion: ``first_error`` is the 1-based index of the first
    wrong step (None when none is named); a "correct" verdict names no wrong step."""

    text: str
    first_error: int | None
    verdict: str  # "correct" | "incorrect"

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.first_error is not None and (not isinstance(self.first_error, int) or self.first_error < 1):
            raise ValueError(f"first_error must be a 1-based step index or None, got {self.first_error!r}")
        if self.verdict == "correct" and self.first_error is not None:
            raise ValueError(f"a 'correct' verdict names no wrong step, got first_error={self.first_error}")


def make_critique(first_error: int | None, explanation: str) -> Critique:
    """The critique text for a judgement: the explanation line, then the two tags."""
    verdict = "correct" if first_error is None else "incorrect"
    text = (
        f"{explanation}\n<first_error>{'none' if first_error is None else first_error}</first_error>\n"
        f"<verdict>{verdict}</verdict>"
    )
    return Critique(text, first_error, verdict)


def parse_critique(text: str) -> Critique | None:
    """The judgement a verifier wrote, read as STRIDE's verifier reward reads it (the first of each
    tag: :func:`reasonrl.advantages.parse_first_error`, :func:`~reasonrl.advantages.parse_verdict`),
    or None when the verdict tag is missing or the tags contradict each other (a "correct" verdict
    with a wrong step named)."""
    verdict, k = parse_verdict(text), parse_first_error(text)
    if verdict is None or (verdict == "correct" and k is not None):
        return None
    return Critique(text, k, verdict)


class GuidanceTask(WithHints, WithSolutions, WithCritiques, WithCritiquePrompt, WithSteps, Protocol):
    """Every guidance ability at once (each one optional, a protocol of its own in tasks.protocols)."""

    name: str


# -- step splitting shared by the generic rule and the tasks' own separators ---------------------


def step_spans(text: str, separator: re.Pattern) -> list[tuple[int, int]]:
    """(start, end) of each non-blank piece of ``text`` between separators, leading/trailing
    whitespace trimmed, in order."""
    bounds, pos = [], 0
    for m in separator.finditer(text):
        bounds.append((pos, m.start()))
        pos = m.end()
    bounds.append((pos, len(text)))
    out = []
    for s, e in bounds:
        piece = text[s:e]
        if piece.strip():
            s += len(piece) - len(piece.lstrip())
            out.append((s, s + len(piece.strip())))
    return out


def split_steps(text: str, separator: re.Pattern) -> list[str]:
    return [text[s:e] for s, e in step_spans(text, separator)]


def prefix_at_step(text: str, k: int, separator: re.Pattern) -> tuple[str, int]:
    """(text before step k, its offset); k = number of steps + 1 keeps the whole text."""
    spans = step_spans(text, separator)
    if not 1 <= k <= len(spans) + 1:
        raise ValueError(
            f"step {k} is out of range: the completion has {len(spans)} step(s) (valid 1..{len(spans) + 1})"
        )
    offset = spans[k - 1][0] if k <= len(spans) else len(text)
    return text[:offset], offset


# -- the module functions the methods call -------------------------------------------------------

HINTS_FIX = 'attach a hints file with GuidedTask(task, hints=PATH) (rows {"key": ..., "hints": [...]})'
SOLUTIONS_FIX = 'attach a solutions file with GuidedTask(task, solutions=PATH) (rows {"key": ..., "solution": ...})'
CRITIQUES_FIX = (
    "attach a critiques file with GuidedTask(task, critiques=PATH) "
    '(rows {"key": ..., "completion": ..., "critique": ...})'
)


def _missing(task: Any, name: str, fix: str) -> UserError:
    return UserError(f"task {task.name!r} has no {name}(): {fix}")


def hints(task: Any, item: Item) -> list[str]:
    """Short strategy hints for ``item`` (NudgeRL's contexts)."""
    if not provides(task, WithHints):
        raise _missing(task, "hints", HINTS_FIX)
    out = task.hints(item)
    if not out or not all(isinstance(h, str) and h.strip() for h in out):
        raise UserError(f"task {task.name!r} gave no usable hints for {item.key!r}: {out!r}")
    return list(out)


def reference_solution(task: Any, item: Item) -> str:
    """The privileged reference solution of ``item`` (EGRSD / SSOPD teacher context)."""
    if not provides(task, WithSolutions):
        raise _missing(task, "reference_solution", SOLUTIONS_FIX)
    return task.reference_solution(item)


def critique(task: Any, item: Item, completion: str) -> Critique:
    """The task's own stepwise critique of ``completion`` (STRIDE's target / CIPO's feedback)."""
    if not provides(task, WithCritiques):
        raise _missing(task, "critique", CRITIQUES_FIX)
    return task.critique(item, completion)


def steps(task: Any, completion: str) -> list[str]:
    """The completion's steps: the task's own splitter, else STRIDE's blank-line rule."""
    return task.steps(completion) if provides(task, WithSteps) else split_steps(completion, BLANK_LINE)


def prefix_before_step(task: Any, completion: str, k: int) -> tuple[str, int]:
    """(the text a redirect keeps before step k, its length); ValueError when k is out of range."""
    if provides(task, WithSteps):
        return task.prefix_before_step(completion, k)
    return prefix_at_step(completion, k, BLANK_LINE)


def critique_prompt(task: Any, item: Item, completion: str) -> str:
    """The verifier role's prompt: the task's own, else a generic one for blank-line steps."""
    if provides(task, WithCritiquePrompt):
        return task.critique_prompt(item, completion)
    return (
        f"Problem:\n{item.prompt.strip()}\n\nSolution (steps are separated by blank lines, numbered from 1):\n"
        f"{completion}\n\nName the first wrong step and explain it in one line, then write "
        "<first_error>k</first_error> (none if every step is right) and <verdict>correct|incorrect</verdict>.\n"
    )


def synthetic_critiques(task: Any, n: int, seed: int, split: str = "train", correct_rate: float = 0.0) -> list[Item]:
    """``n`` verifier warm-start pairs: a demonstration with one digit of one random step changed
    (a fraction ``correct_rate`` left intact), as an Item whose ``prompt`` is the critique prompt
    and ``demo`` the task's critique text, so :func:`reasonrl.loop.sft.sft_batch` takes them as they are.
    ``answer`` is the verdict; ``meta`` holds first_error, verdict, the completion and the problem key."""
    if not 0.0 <= correct_rate <= 1.0:
        raise UserError(f"synthetic_critiques: correct_rate must be in [0, 1], got {correct_rate}")
    rng, out = random.Random(f"{seed}:synthetic-critiques"), []
    for item in take_items(task, split, n, seed):
        if item.demo is None:
            raise UserError(f"task {task.name!r} item {item.key!r} has no demonstration to corrupt")
        completion = item.demo if rng.random() < correct_rate else corrupt_digit(task, item.demo, rng)
        target = critique(task, item, completion)
        meta = {
            "first_error": target.first_error,
            "verdict": target.verdict,
            "completion": completion,
            "problem": item.key,
        }
        out.append(
            Item(
                key=f"{item.key}\n{completion}",
                prompt=critique_prompt(task, item, completion),
                answer=target.verdict,
                meta=meta,
                demo=target.text,
            )
        )
    return out


def corrupt_digit(task: Any, completion: str, rng: random.Random) -> str:
    """``completion`` with one digit of one step (chosen among steps holding a digit) changed."""
    parts = steps(task, completion)
    candidates = [k for k, s in enumerate(parts, 1) if re.search(r"\d", s)]
    if not candidates:
        raise UserError(f"task {task.name!r}: demonstration {completion[:80]!r} has no step with a digit to corrupt")
    k = rng.choice(candidates)
    _, offset = prefix_before_step(task, completion, k)
    where = [offset + i for i, c in enumerate(parts[k - 1]) if c.isdigit()]
    pos = rng.choice(where)
    new = rng.choice([d for d in "0123456789" if d != completion[pos]])
    return completion[:pos] + new + completion[pos + 1 :]


# -- user data: JSONL files of hints, solutions and critiques -------------------------------------

KINDS = ("hints", "solutions", "critiques")


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number = line number, object) of each non-blank line."""
    if not path.is_file():
        raise MissingPathError(f"guidance file {path} does not exist")
    return jsonl_rows(path, where=lambda n: f"{path} row {n}")


def _text(row: dict[str, Any], field: str, where: str, empty_ok: bool = False) -> str:
    if field not in row:
        raise UserError(f"{where}: missing field {field!r}; the row has {sorted(row)}")
    value = row[field]
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise UserError(f"{where}: field {field!r} must be a non-empty string, got {value!r}")
    return value


def _row_critique(row: dict[str, Any], where: str) -> Critique:
    """A critique row's judgement: fields ``verdict`` / ``first_error`` when given, else the tags."""
    text = _text(row, "critique", where)
    tagged = parse_critique(text)
    verdict = row.get("verdict", tagged.verdict if tagged else None)
    if verdict not in VERDICTS:
        raise UserError(
            f"{where}: field 'verdict' missing or malformed ({verdict!r}); give \"verdict\": "
            f'"correct"|"incorrect" or a <verdict> tag in \'critique\''
        )
    k = row["first_error"] if "first_error" in row else (tagged.first_error if tagged else None)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise UserError(f"{where}: field 'first_error' must be a 1-based step number or null, got {k!r}")
    if verdict == "correct" and k is not None:
        raise UserError(f"{where}: field 'first_error' is {k} but the verdict is 'correct'")
    return Critique(text, k, verdict)


def load_guidance(path: str | Path, kind: str) -> dict[str, Any]:
    """Rows of a JSONL guidance file keyed by problem (field ``key``, else ``prompt``):
    hints -> {key: [str, ...]}, solutions -> {key: str}, critiques -> {key: {completion: Critique}}.
    Fields other than those named are ignored. Every malformed row, and a repeated key (for
    critiques: a repeated key and completion), is a UserError naming the file and the row."""
    if kind not in KINDS:
        raise UserError(f"unknown guidance kind {kind!r}; valid: {list(KINDS)}")
    path, out, first_row = Path(path), {}, {}
    for n, row in _jsonl_rows(path):
        where = f"{path} row {n}"
        key = _text(row, "key" if "key" in row else "prompt", where)
        if kind == "hints":
            hs = row.get("hints")
            if not isinstance(hs, list) or not hs or not all(isinstance(h, str) and h.strip() for h in hs):
                raise UserError(f"{where}: field 'hints' must be a non-empty list of non-empty strings, got {hs!r}")
            value, slot = list(hs), key
        elif kind == "solutions":
            value, slot = _text(row, "solution", where), key
        else:
            completion = _text(row, "completion", where, empty_ok=True)
            value, slot = _row_critique(row, where), (key, completion)
        if slot in first_row:
            what = f"key {key!r}" + (" with this completion" if kind == "critiques" else "")
            raise UserError(f"{where}: duplicate {what} (first given in row {first_row[slot]})")
        first_row[slot] = n
        if kind == "critiques":
            out.setdefault(key, {})[slot[1]] = value
        else:
            out[key] = value
    if not out:
        raise UserError(f"guidance file {path} has no rows")
    return out


class GuidedTask(TaskWrapper):
    """Any task with guidance loaded from JSONL files attached (paths per kind, each optional).

    A row matches an item whose ``key`` (or, failing that, ``prompt``) equals the row's key; file
    tasks key items by their prompt. A kind with a file is this wrapper's method (its ``hints``,
    ``reference_solution``, ``critique``), which never falls back: a missing key is an error. A kind
    with no file is not defined here, so it is the wrapped task's own method when it has one (or the
    loud error), and ``provides(guided, WithHints)`` tells which. Everything else (items, verifier,
    options, steps, critique prompt) is the wrapped task's."""

    def __init__(
        self,
        task: Any,
        *,
        hints: str | Path | None = None,
        solutions: str | Path | None = None,
        critiques: str | Path | None = None,
    ):
        super().__init__(task)
        given = {"hints": hints, "solutions": solutions, "critiques": critiques}
        self.files = {kind: (str(p), load_guidance(p, kind)) for kind, p in given.items() if p is not None}
        if not self.files:
            raise UserError(
                f"GuidedTask({task.name!r}) needs at least one of hints=, solutions=, critiques= (a JSONL path)"
            )
        # the abilities the files give, as instance methods (the others forward to the wrapped task)
        if "hints" in self.files:
            self.hints = self._file_hints
        if "solutions" in self.files:
            self.reference_solution = self._file_solution
        if "critiques" in self.files:
            self.critique = self._file_critique

    def _row(self, kind: str, item: Item) -> Any:
        path, table = self.files[kind]
        for k in (item.key, prompt_text(item.prompt)):
            if k in table:
                return table[k]
        raise UserError(f'{kind} file {path} has no row for problem key {item.key!r}; add one with "key": {item.key!r}')

    def _file_hints(self, item: Item) -> list[str]:
        return list(self._row("hints", item))

    def _file_solution(self, item: Item) -> str:
        return self._row("solutions", item)

    def _file_critique(self, item: Item, completion: str) -> Critique:
        by_completion = self._row("critiques", item)
        if completion not in by_completion:
            raise UserError(
                f"critiques file {self.files['critiques'][0]} has no critique of completion "
                f"{completion[:80]!r} for problem key {item.key!r} "
                f"({len(by_completion)} completion(s) given)"
            )
        return by_completion[completion]


__all__ = [
    "BLANK_LINE",
    "Critique",
    "GuidanceTask",
    "GuidedTask",
    "KINDS",
    "critique",
    "critique_prompt",
    "corrupt_digit",
    "hints",
    "load_guidance",
    "make_critique",
    "parse_critique",
    "prefix_at_step",
    "prefix_before_step",
    "reference_solution",
    "split_steps",
    "step_spans",
    "steps",
    "synthetic_critiques",
]
