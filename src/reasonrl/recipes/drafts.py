"""Mismatched wrong drafts: Dr. GRPO on prompts that carry a weak model's wrong draft for another
problem (weak-to-strong elicitation, arXiv 2605.17314; spec distill-and-data.md section 9).

The draft options are dotted keys: ``drafts.mode=mismatched_wrong drafts.file=drafts.jsonl``
(``reasonrl drafts make`` writes the file); ``drafts.mode=no_draft`` (no file needed) and
``matched_wrong`` / ``mismatched_correct`` are the paper's ablations.
"""

import dataclasses

from ..parts import Drafts, Smoke
from .grpo import DR_GRPO

DRAFTS = dataclasses.replace(
    DR_GRPO,
    name="drafts",
    summary="a weak model's wrong draft of another problem in the prompt",
    details=(
        "Dr. GRPO on prompts that carry a weak model's wrong draft of a *different* problem "
        "(`drafts.mode=mismatched_wrong`; also `no_draft`, `matched_wrong`, `mismatched_correct`), seeded "
        "derangement, the `N/A` template at evaluation (`reasonrl drafts make`)"
    ),
    doc="drafts.md",
    smoke=Smoke(metrics=("drafts/with_draft_frac", "drafts/mismatched_frac")),
    paper="Mismatched wrong drafts (weak-to-strong elicitation), arXiv 2605.17314",
    inferred=(
        "mode mismatched_wrong, derangement and tier choice seeded 0, the spec's exact template, prompt cap 3072 "
        "tokens met by cutting the draft alone (spec defaults: drafts.mode / seed / template / max_prompt_tokens)",
        "derangement: Python's random.Random(seed).shuffle, then each fixed point i swapped with i+1 (mod n); the "
        "tier choice within a tier is seeded by (seed, the source problem's key); the spec's shuffle RNG is unknown",
        "the universe is the drafts file's problems, looked up in the task's train stream (seed 0); a draft without "
        "'correct' is judged by the task's verifier, 'quasi' (right answer, wrong format) defaults to 'correct'",
        "{problem} is the task's prompt without trailing whitespace; held-out prompts use 'Thinking: N/A' (spec)",
        "Dr. GRPO with beta 0 (spec) but dr_grpo's tiny-CPU settings: G=8 (spec 16), lr 5e-5 cosine (spec 5e-6 "
        "constant), Adam beta2 0.99 (spec 0.99), full fine-tuning (spec LoRA r16 a32: lora.r=16 lora.alpha=32)",
        "the shaper only reports drafts/* metrics (share of prompts with a draft, with another problem's, with a "
        "wrong one, and how often a completion's answer copies the draft's); correction / copy bonuses are off "
        "as in the spec's headline run",
    ),
    drafts=Drafts(),
)
