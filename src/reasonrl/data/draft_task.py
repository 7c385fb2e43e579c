"""A task whose train prompts carry drafts (spec distill-and-data.md section 9; arXiv 2605.17314).

:class:`DraftTask` wraps any task as :class:`~reasonrl.loop.warmstart.ContextMix` does: the verifier,
answer extractor and options stay the task's own; only the items change.

- *Train* items are the problems of the drafts file (the "universe"), each prompt built by
  :func:`~reasonrl.data.drafts.build_draft_dataset` for the mode, cycled in seeded epochs. The
  universe is found in the task's own train stream (seed 0, the stream ``reasonrl drafts make``
  takes its problems from), by key or by prompt, so a draft for a held-out or unknown problem is
  an error, never a silent leak. A draft without ``correct`` is verified with the task's verifier.
- *Test* items are the task's held-out problems in the template with ``Thinking: N/A``.
- Without a drafts file (mode ``no_draft`` only) the train items are the task's own stream in the
  ``N/A`` template.

Each train item's ``meta["draft"]`` says where its draft came from (``source`` key, ``tier``,
``correct``, ``answer`` extracted from the draft); :func:`draft_metrics` reads it for the logs.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import UserError
from ..models.chat import prompt_text, user_text, with_user_text
from ..seeds import stable_seed
from ..tasks import Item, is_correct
from ..tasks.base import TaskWrapper, epochs
from .draft_files import DraftEntry, load_drafts
from .drafts import MAX_PROMPT_TOKENS, MODES, TEMPLATE, Draft, build_draft_dataset, draft_prompt

UNIVERSE_SEED = 0  # the train stream the universe is looked up in (and `reasonrl drafts make` draws from)


def problem_text(item: Item) -> str:
    """What fills ``{problem}``: the task's prompt (a conversation's last user turn) without its
    trailing whitespace (the arithmetic prompt ends in a newline; the template's own blank line follows)."""
    return user_text(item.prompt).rstrip()


def find_universe(task: Any, keys: Sequence[str], source: str, max_draws: int | None = None) -> list[Item]:
    """The train items whose key (or prompt) is one of ``keys``, in the order of ``keys``, looked up
    in the task's train stream (seed :data:`UNIVERSE_SEED`); a key not met within ``max_draws``
    draws (default 20 per key + 5000) is a UserError naming it and the file."""
    wanted, found = set(keys), {}
    limit = max_draws or 20 * len(wanted) + 5000
    for n, item in enumerate(task.iter_items("train", UNIVERSE_SEED)):
        for k in (item.key, prompt_text(item.prompt)):
            if k in wanted and k not in found:
                found[k] = item
        if len(found) == len(wanted) or n + 1 >= limit:
            break
    missing = [k for k in keys if k not in found]
    if missing:
        raise UserError(
            f"drafts file {source}: problem {missing[0]!r} (and {len(missing) - 1} more) is not among the "
            f"first {limit} train problems of task {task.name!r}: drafts must be made for train problems "
            "(reasonrl drafts make draws them from that stream)"
        )
    return [found[k] for k in keys]


def _as_draft(task: Any, item: Item, e: DraftEntry) -> Draft:
    correct = e.correct if e.correct is not None else is_correct(task.verify(e.text, item.answer, item.meta))
    return Draft(e.text, correct, quasi=e.quasi if e.quasi is not None else correct)


class DraftTask(TaskWrapper):
    """``task`` with drafts in its train prompts (``mode``, one of :data:`~reasonrl.data.drafts.MODES`)
    and the ``N/A`` template at evaluation. ``drafts``: a JSONL path (:mod:`.draft_files`), its rows
    by key (what ``load_drafts`` returns: the built-in drafter's), or None (``no_draft`` only).
    ``modes`` (warm starts): several modes, one per problem by a seeded hash."""

    def __init__(
        self,
        task: Any,
        drafts: str | Path | dict | None,
        mode: str = "mismatched_wrong",
        *,
        seed: int = 0,
        max_prompt_tokens: int | None = MAX_PROMPT_TOKENS,
        template: str = TEMPLATE,
        encode: Callable[[str], Sequence[int]] = list,
        decode: Callable[[Sequence[int]], str] = "".join,
        modes: tuple[str, ...] | None = None,
    ):
        modes = modes or (mode,)
        if set(modes) - set(MODES):
            raise UserError(f"unknown draft mode(s) {sorted(set(modes) - set(MODES))}; valid: {list(MODES)}")
        if drafts is None and modes != ("no_draft",):
            raise UserError(
                f"draft mode(s) {list(modes)} need a drafts file (drafts.file=PATH; "
                "make one with `reasonrl drafts make`)"
            )
        super().__init__(task)
        self.modes, self.seed, self.template = modes, seed, template
        self.rows: list[Item] | None = None
        if drafts is not None:
            table = drafts if isinstance(drafts, dict) else load_drafts(drafts)
            universe = find_universe(
                task, list(table), "(built-in drafts)" if isinstance(drafts, dict) else str(drafts)
            )
            problems, keys = [problem_text(it) for it in universe], [it.key for it in universe]
            lists = [[_as_draft(task, it, e) for e in table[k]] for it, k in zip(universe, table)]
            built = {
                m: build_draft_dataset(
                    problems,
                    lists,
                    m,
                    seed=seed,
                    max_tokens=max_prompt_tokens,
                    encode=encode,
                    decode=decode,
                    template=template,
                    keys=keys,
                )
                for m in modes
            }
            self.rows = [self._item(task, universe, built, i) for i in range(len(universe))]

    def _item(self, task: Any, universe: list[Item], built: dict, i: int) -> Item:
        item = universe[i]
        mode = random.Random(stable_seed(self.seed, "draft-mode", item.key)).choice(self.modes)
        row = built[mode][i]
        info = {"mode": mode, "source": None, "tier": None, "correct": None, "answer": None}
        if row.draft is not None:
            info.update(
                source=universe[row.source].key,
                tier=row.tier,
                correct=row.draft.correct,
                answer=task.extract_answer(row.draft.text),
            )
        return dataclasses.replace(
            item, prompt=with_user_text(item.prompt, row.prompt), meta={**item.meta, "draft": info}
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        if split == "train" and self.rows is not None:
            return epochs(self.rows, random.Random(f"{seed}:drafts:train"))
        return (self._plain(it) for it in self.task.iter_items(split, seed))

    def _plain(self, item: Item) -> Item:
        """Spec 9 (b) 4: the no-draft variant and test time show ``Thinking: N/A``."""
        info = {"mode": "no_draft", "source": None, "tier": None, "correct": None, "answer": None}
        return dataclasses.replace(
            item,
            prompt=with_user_text(item.prompt, draft_prompt(problem_text(item), None, self.template)),
            meta={**item.meta, "draft": info},
        )


class PlainShare(TaskWrapper):
    """The learner warm start's mix (``drafts warmstart --plain-rate R``): each train draw is, with
    probability ``rate`` (a seeded coin per draw), the next item of the *plain* task's own train
    stream, otherwise the next item of ``drafts``' (the template). Held-out items are ``drafts``' (the
    ``N/A`` template). [inferred here, issue #26: a warm start on the template alone took the tiny
    learner's plain pass@1 from 0.42 to 0.058, so the plain prompts it already solved are kept in the mix]"""

    delegate = "drafts"  # the template, the modes: the draft task's

    def __init__(self, drafts: DraftTask, rate: float, seed: int = 0):
        if not 0.0 <= rate < 1.0:
            raise UserError(f"--plain-rate {rate}: need 0 <= rate < 1 (1 would never show the template)")
        super().__init__(drafts.task)
        self.drafts, self.rate, self.seed = drafts, rate, seed

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        if split != "train":
            yield from self.drafts.iter_items(split, seed)
            return
        rng = random.Random(stable_seed(self.seed, "plain-share", seed))
        templated = self.drafts.iter_items("train", seed)
        plain = self.task.iter_items("train", stable_seed(seed, "plain-share-stream"))
        while True:
            yield next(plain) if rng.random() < self.rate else next(templated)


def draft_metrics(items: Sequence[Item], answers: Sequence[Sequence[str | None]]) -> dict[str, float]:
    """What the batch's prompts showed: the fraction with a draft, with another problem's draft, with
    a wrong draft; and the fraction of completions whose answer equals the shown draft's answer
    (copying; ``answers[i]`` are item i's completions' extracted answers)."""
    infos = [it.meta.get("draft") or {} for it in items]
    n = max(len(infos), 1)
    shown = [(d, a) for d, a in zip(infos, answers) if d.get("source") is not None]
    copies = [x is not None and x == d.get("answer") for d, a in shown for x in a]
    return {
        "drafts/with_draft_frac": len(shown) / n,
        "drafts/mismatched_frac": sum(
            d["source"] != it.key for it, d in zip(items, infos) if d.get("source") is not None
        )
        / n,
        "drafts/wrong_draft_frac": sum(not d["correct"] for d, _ in shown) / n,
        "drafts/copy_frac": sum(copies) / max(len(copies), 1),
    }


__all__ = ["UNIVERSE_SEED", "DraftTask", "PlainShare", "draft_metrics", "find_universe", "problem_text"]
