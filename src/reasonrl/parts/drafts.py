"""Drafts in the prompt (mismatched wrong drafts, arXiv 2605.17314; spec distill-and-data.md section 9).

A dataset transform, no loop change (spec 9 (c)): the part wraps the run's task
(:meth:`Drafts.wrap_task`, called where the run builds its task) so that train prompts carry a
draft per ``mode`` and held-out prompts the ``N/A`` template, and it reports what the batch's
prompts showed (:meth:`Drafts.score_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..data.draft_task import DraftTask, draft_metrics
from ..data.drafter import builtin_drafts, draft_table
from ..data.drafts import MAX_PROMPT_TOKENS, MODES, TEMPLATE, template_problem
from ..config.rules import SEED, Rule, one_of
from .protocol import BatchContext, TaskSetup, register_part


@register_part("drafts")
@dataclass(frozen=True)
class Drafts:
    """``drafts.mode``: no_draft | matched_wrong | mismatched_wrong (the paper's) | mismatched_correct;
    ``drafts.file``: the drafts JSONL (``reasonrl drafts make``); null: the built-in drafter's drafts
    of the first 512 train problems, made in memory when the task is built (no model, a second or so:
    :func:`reasonrl.data.drafter.builtin_drafts`), so ``reasonrl train --recipe drafts`` runs alone;
    ``drafts.seed``: the derangement's and the tier choice's seed (spec: 0); ``drafts.max_prompt_tokens``:
    the prompt cap met by cutting the draft alone (spec: 3072; null: no cap); ``drafts.template``:
    the prompt, with the fields {problem} and {draft} (spec's exact text by default)."""

    AFTER = ("fest",)  # the order it ran in before the order was declared (parts/registry.py)
    mode: str = "mismatched_wrong"
    file: str | None = None
    seed: int = 0
    max_prompt_tokens: int | None = MAX_PROMPT_TOKENS
    template: str = TEMPLATE

    RULES: ClassVar[dict[str, Rule]] = {
        "mode": one_of(MODES),
        "seed": SEED,
        "max_prompt_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null for no cap"),
        "template": Rule(
            lambda v, _: template_problem(v) is None,
            lambda c: (
                "a format string with {problem} and {draft} and no other field "
                f"(this one {template_problem(c.get('template'))})"
            ),
        ),
    }

    def wrap_task(self, ctx: TaskSetup) -> tuple[DraftTask, dict[str, float]]:
        """The task with drafts; the tokenizer counts (and cuts) the prompt's tokens (None: characters)."""
        task, tokenizer = ctx.task, ctx.tokenizer
        codec = (
            {}
            if tokenizer is None
            else {
                "encode": lambda s: tokenizer(s, add_special_tokens=False)["input_ids"],
                "decode": lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
            }
        )
        drafts = self.file
        if drafts is None and self.mode != "no_draft":  # the built-in drafter, in memory (its own seed stream)
            drafts = draft_table(builtin_drafts(task, seed=self.seed))
        wrapped = DraftTask(
            task,
            drafts,
            self.mode,
            seed=self.seed,
            max_prompt_tokens=self.max_prompt_tokens,
            template=self.template,
            **codec,
        )
        return wrapped, {}

    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        """The batch's draft statistics (:func:`draft_metrics`)."""
        return None, draft_metrics(ctx.items, ctx.answers)
