"""STRIDE: language-driven stepwise trajectory redirection (arXiv 2605.18851).

GRPO on the first round plus a redirection round (:class:`~reasonrl.parts.Redirect`): each failed
rollout is critiqued (the first wrong step named), the steps before it are kept and ``n_r = 4``
continuations are regenerated under prompt + critique, then trained without the critique on their
suffix tokens, with the harmless advantage ``max(r(y') - b, 0)`` and the clipped importance ratio.

The critic defaults to the task's exact critique (``redirect.critic=task``): the shipped tiny
reasoner was never taught to write critiques, so as a verifier it produces no parseable
``<first_error>`` tag until it is warm-started on critiques (tasks.guidance.synthetic_critiques);
``redirect.critic=model`` co-trains the policy as the verifier, as the paper does.
"""

import dataclasses

from ..parts import Redirect, Smoke
from .grpo import GRPO

STRIDE = dataclasses.replace(
    GRPO,
    name="stride",
    summary="failed rollouts redirected from their first wrong step under a critique",
    details=(
        "a second round: each failed rollout's first wrong step is named by a critique, the steps before it "
        "kept, 4 continuations regenerated under the critique and trained without it on their suffix only, "
        "harmless advantage max(r - b, 0), clipped importance ratio (`redirect`)"
    ),
    doc="selfteach.md",
    smoke=Smoke(metrics=("stride/redirects", "stride/success_rate", "stride/unparsed")),
    paper="STRIDE: language-driven stepwise trajectory redirection, arXiv 2605.18851 (abstract and intro only)",
    inferred=(
        "redirect.critic=task: the task's exact first-error critique (the tiny reasoner cannot write critiques "
        "without warm-starting); critic=model co-trains the policy as the verifier (paper)",
        "steps: the task's own step splitting (arithmetic: column steps), else blank lines (spec)",
        "redirect.n_r=4 continuations per redirected trajectory from the kept prefix (spec default)",
        "redirect.harmless=true: r(y') - b with b the original group mean, negatives clipped to 0 (spec default)",
        "redirect.ratio=true, redirect.clip=5: sequence ratio pi(suffix|x,prefix)/pi(suffix|x,critique,prefix) "
        "clipped to [0, 5], detached, as a row weight; behaviour log-probs re-scored without the critique",
        "redirect.lambda_r=1: the redirected-suffix rows' weight (spec default)",
        "redirect.eta=0.5: verifier reward 1[verdict agrees] + 0.5 x 1[its redirect succeeded] (spec default); a "
        "redirect succeeds when any of its n_r continuations is correct",
        "redirect.n_v=4 critiques per failed trajectory (critic=model), advantages group-relative over them",
        "groups: G // n_r redirections of one prompt per group; a prompt's leftover redirections are dropped",
        "redirect.max_redirects=null: at most one redirection per first-round prompt per step "
        "(round-robin over prompts)",
        "redirect.template='{critique}\\n': the critique text placed between the prompt and the kept prefix",
        "advantage, loss (clip 0.2, seq-mean-token-mean, no KL), sampling (T=0.8) and optimiser as grpo",
    ),
    redirect=Redirect(),
)
