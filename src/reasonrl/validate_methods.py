"""The rules of the data-selection and outside-signal methods' options (issues #13 and #14), kept
apart from :mod:`reasonrl.validate` so that each module stays small; ``validate.RULES`` includes them."""
from __future__ import annotations

from pathlib import Path

from .data.drafts import MODES
from .data.drafts import template_problem as draft_template_problem
from .losses.dpo import ALL_CORRECT, DECAY_SCHEDULES, NEGATIVES
from .losses.vpd import E_KL_ESTIMATORS, M_DIVERGENCES
from .parts.feedback import FEEDBACK
from .parts.fest import REFERENCES, SUP_LOSSES
from .parts.vpd import ATTEMPTS as VPD_ATTEMPTS
from .rules import SEED, Rule, above, at_least, one_of, within

METHOD_RULES: dict[str, Rule] = {
    # D2Evo (parts/d2evo.py)
    **{f"d2evo.{k}": at_least(1) for k in ("iteration_steps", "estimate_samples", "solver_samples", "anchors_per_step",
                                           "ngram")},
    "d2evo.p_lo": within(0, 1),
    "d2evo.p_hi": Rule(lambda v, c: c.get("d2evo.p_lo", 0) <= v <= 1,
                       lambda c: f"in [d2evo.p_lo = {c.get('d2evo.p_lo')}, 1]"),
    "d2evo.p_star": within(0, 1), "d2evo.eta": at_least(0), "d2evo.floor": within(0, 1), "d2evo.weight": at_least(0),
    "d2evo.parse": one_of(("prefix", "line")),
    "d2evo.template": Rule(lambda v, _: "{prompt}" in v, "text containing {prompt} (the anchor's prompt)"),
    # FEST (parts/fest.py)
    "fest.coef": at_least(0),
    "fest.gamma": within(0, 1),
    "fest.decay": one_of(DECAY_SCHEDULES),
    "fest.decay_passes": at_least(1),
    "fest.beta": above(0),
    "fest.sup_loss": one_of(SUP_LOSSES),
    "fest.reference": one_of(REFERENCES),
    "fest.n_demos": at_least(1),
    "fest.demos_per_step": at_least(1),
    "fest.demos": Rule(lambda v, _: v is None or Path(v).is_file(), "a JSONL file that exists, or null"),
    "fest.negatives": one_of(NEGATIVES),
    "fest.all_correct": one_of(ALL_CORRECT),
    "fest.temperature": above(0),
    # drafts in the prompt (parts/drafts.py); a mode but no_draft without drafts.file fails when the task is built
    "drafts.mode": one_of(MODES),
    "drafts.seed": SEED,
    "drafts.max_prompt_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null for no cap"),
    "drafts.template": Rule(lambda v, _: draft_template_problem(v) is None,
                            "a format string with {problem} and {draft} and no other field"),
    # VPD (parts/vpd.py): the teacher adapter's round and the E-/M-step terms
    "vpd.feedback": Rule(lambda v, _: v in FEEDBACK, lambda _: f"one of {sorted(FEEDBACK)} (register_feedback adds one)"),
    "vpd.template": Rule(lambda v, _: all(s in v for s in ("{prompt}", "{attempt}", "{feedback}")),
                         "text with the slots {prompt}, {attempt} and {feedback} (end it with {prompt})"),
    "vpd.attempt": one_of(VPD_ATTEMPTS),
    "vpd.beta": above(0),
    "vpd.target_kl": above(0),
    "vpd.factor": Rule(lambda v, _: v >= 1, ">= 1 (1: a fixed beta)"),
    "vpd.band": Rule(lambda v, _: v >= 1, ">= 1"),
    "vpd.beta_min": above(0),
    "vpd.beta_max": Rule(lambda v, c: v >= c.get("vpd.beta_min", v), lambda c: f">= vpd.beta_min = {c.get('vpd.beta_min')}"),
    "vpd.e_kl": one_of(E_KL_ESTIMATORS),
    "vpd.e_coef": at_least(0),
    "vpd.clip": above(0),
    "vpd.m_divergence": one_of(M_DIVERGENCES),
    "vpd.m_coef": at_least(0),
    "vpd.alpha": at_least(0),
    # SU-01: shares of the final batch; the ordinary groups need the rest (parts/su01.py)
    "refine_replay.refine_share": within(0, 1, open_hi=True),  # the sum of both: the replay_share rule
    "refine_replay.replay_share": Rule(lambda v, c: 0 <= v and v + c.get("refine_replay.refine_share", 0) < 1,
                                       "in [0, 1 - refine_replay.refine_share)"),
    "refine_replay.capacity": at_least(1),
}
