"""The context-mix warm start (reasonrl.loop.warmstart): the self-teacher contexts, written as the
recipe parts write them, over the task's own demonstrations."""

import random

import pytest

from reasonrl.parts import EGRSD, SSOPD, Correction, HintSampling, Redirect
from reasonrl.tasks import get_task
from reasonrl.tasks import guidance as g
from reasonrl.loop.warmstart import CONTEXTS, ContextMix, with_context

TASK = get_task("arithmetic")
ITEM = TASK.make_item([347, 85], ["+"])  # demo: 7+5+0=12,4+8+1=13,3+0+1=4 / A:432


def test_each_context_is_the_part_s_own_template_over_the_demonstration():
    demo = "7+5+0=12,4+8+1=13,3+0+1=4\nA:432"
    assert ITEM.demo == demo
    sol = with_context(TASK, ITEM, "solution", random.Random(0))
    assert sol.demo == demo and sol.prompt in (
        SSOPD().template.format(prompt="347+85=?\n", solution=demo),
        EGRSD().template.format(prompt="347+85=?\n", solution=demo),
    )
    hint = with_context(TASK, ITEM, "hint", random.Random(0))
    assert hint.demo == demo and hint.prompt.endswith("347+85=?\n")
    assert any(hint.prompt == HintSampling().template.format(hint=h, prompt="347+85=?\n") for h in g.hints(TASK, ITEM))
    fix = with_context(TASK, ITEM, "correction", random.Random(0))
    attempt = fix.prompt.split("Previous attempt:\n")[1].split("\nThe attempt above")[0]
    # the attempt is the demonstration with exactly one digit changed
    assert len(attempt) == len(demo) and sum(a != b for a, b in zip(attempt, demo)) == 1
    assert fix.demo == demo and fix.prompt.endswith("347+85=?\n") and Correction().template.startswith("{prompt}")


def test_a_redirect_keeps_the_steps_before_the_first_error_and_targets_the_rest():
    for seed in range(20):  # every corrupted step: the kept prefix + the target is the demonstration
        red = with_context(TASK, ITEM, "redirect", random.Random(seed))
        crit_text, prefix = red.prompt[len("347+85=?\n") :].split("</verdict>\n")
        assert crit_text.startswith("step ") or crit_text.startswith("the ")
        assert prefix + red.demo == ITEM.demo
        k = g.parse_critique(crit_text + "</verdict>").first_error
        # step k is where the kept prefix ends: k - 1 whole steps kept (steps split at commas and lines)
        assert len(g.steps(TASK, prefix)) == k - 1 if prefix else k == 1
    assert Redirect().template == "{critique}\n"


def test_the_mix_is_reproducible_keeps_held_out_items_plain_and_checks_its_arguments():
    mix = ContextMix(TASK, rate=0.5, seed=3)
    first = [it.prompt for _, it in zip(range(300), mix.iter_items("train", 0))]
    again = [it.prompt for _, it in zip(range(300), ContextMix(TASK, rate=0.5, seed=3).iter_items("train", 0))]
    plain = [it.prompt for _, it in zip(range(300), TASK.iter_items("train", 0))]
    assert first == again
    with_ctx = sum(a != b for a, b in zip(first, plain))
    assert 110 <= with_ctx <= 190  # Binomial(300, 0.5): mean 150, sd 8.7; 110..190 is +-4.6 sd
    held = [it.prompt for _, it in zip(range(50), mix.iter_items("test", 0))]
    assert held == [it.prompt for _, it in zip(range(50), TASK.iter_items("test", 0))]
    assert all(it.prompt == p for it, p in zip(ContextMix(TASK, rate=0.0).iter_items("train", 0), plain[:50]))
    for bad in (dict(rate=1.5), dict(kinds=("solution", "critique")), dict(kinds=())):
        with pytest.raises(ValueError, match="ContextMix"):
            ContextMix(TASK, **bad)
    assert set(CONTEXTS) == {"solution", "hint", "correction", "redirect"}


def test_the_pretrain_option_names_a_bad_context_kind():
    from reasonrl.errors import UserError
    from reasonrl.loop.warmstart import context_mix

    assert context_mix(TASK, "all", 0.5, 0).kinds == CONTEXTS
    assert context_mix(TASK, "hint, solution", 0.2, 0).kinds == ("hint", "solution")
    with pytest.raises(UserError, match="--contexts 'hints'"):
        context_mix(TASK, "hints", 0.5, 0)
