"""EvoEnv (spec envs-selfplay-eval.md section 2): the (d) list (staged validation of hand-written good and
bad environments in the sandbox, calibration with a fake solver of accuracy q, novelty against a renamed
seed, rotation), the generator reward and the pool's EMA by hand, grading, the part's draw and generator
round on a scripted context, and the recipe end to end with an exact resume of its pool."""

import dataclasses
import math

import pytest
import torch

from helpers import batch_context, round_context, text_rollouts
from reasonrl.config.train import TrainConfig
from reasonrl.errors import UserError
from reasonrl.parts import EvoEnv
from reasonrl.parts.evoenv import env_name
from reasonrl.recipes import get_recipe
from reasonrl.rewards.evoenv import evoenv_generator_reward, in_band
from reasonrl.tasks import get_task
from reasonrl.tasks.env_check import EnvCheck, check_envs, novel
from reasonrl.tasks.env_grammar import CATALOGUE, grammar_env
from reasonrl.tasks.env_pool import EnvPool, env_id
from reasonrl.tasks.env_seeds import SEED_ENVS
from reasonrl.tasks.evoenv import parse_answer, parse_review, solve_item
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_part

TASK = get_task("evoenv")
GOOD = grammar_env("sum(x*x for x in xs)%9")
OS = "import os\n" + GOOD
RANDOM = (
    'class E(Env):\n  name = "noise"\n  def sample(self, s, d):\n    return [random.randint(0, 9) for _ in '
    "range(5)]\n  def reference(self, xs):\n    return sum(xs) % 7\n"
)
ALWAYS = GOOD + "  def score(self, i, a):\n    return 1.0\n"
LEAK = (
    'class E(Env):\n  name = "sum"\n  def sample(self, s, d):\n    return R(s).choices(range(10), k=3 + d)\n'
    '  def prompt(self, xs):\n    return "sum of %s is %d=?" % (" ".join(map(str, xs)), sum(xs))\n'
    "  def reference(self, xs):\n    return sum(xs)\n"
)
LOOP = GOOD.replace("return R(s).choices(range(10), k=3 + d)", "while True:\n      pass")
WRONG_REF = GOOD + "  def score(self, i, a):\n    return float(a == 'x')\n"


# ------------------------------------------------------------------ the spec's (d) list: validation


def test_every_seed_and_catalogue_environment_passes_l1_to_l3():
    reports = check_envs(list(SEED_ENVS.values()) + list(CATALOGUE))
    assert [(r.stage, r.reason) for r in reports if not r.ok] == []
    assert all(len(r.samples) == 16 for r in reports)  # 8 seeds x 2 difficulties, rendered


def test_bad_environments_fail_at_their_stage():
    codes = [
        GOOD,
        OS,
        RANDOM,
        ALWAYS,
        LEAK,
        LOOP,
        WRONG_REF,
        "class E(Env:\n",
        "x = 1\n",
        "class E(Env):\n  name = 'n'\n  def prompt(self, i):\n    return 'p'\n",
        GOOD + "print(open('/etc/passwd').read())\n",
        GOOD.replace("R(s)", "__import__('os') and R(s)"),
        GOOD.replace("return R(s).choices(range(10), k=3 + d)", "return [0] * 10 ** 9"),
    ]
    reports = check_envs(codes)
    assert [r.stage for r in reports] == [
        "",
        "banned",
        "determinism",
        "degenerate",
        "leak",
        "run",
        "consistency",
        "parse",
        "interface",
        "interface",
        "banned",
        "banned",
        "run",
    ]
    assert reports[0].ok and reports[0].level == 0
    assert reports[1].reason == "os" and reports[1].level == 1
    assert "CallTimeout" in reports[5].reason and reports[5].level == 2
    # score always 1: the empty answer scores 1.00 on every instance (> 0.5)
    assert reports[3].reason == "answer 'empty' scores 1.00 on average (> 0.5)" and reports[3].level == 3
    assert reports[4].reason == "the prompt's token -1 is the answer in 100% of the instances"
    assert "not 1" in reports[6].reason  # score(reference) = 0: the reference is not what score accepts
    assert "MemoryError" in reports[12].reason or "sandbox" in reports[12].reason


def test_check_thresholds_are_options():
    # a single instance per difficulty level cannot show diversity: 2 distinct of 2 is 100%, but with
    # min_distinct above 1 nothing passes (a test that the option is read, not the default)
    strict = check_envs([GOOD], EnvCheck(seeds=2, difficulties=1, min_distinct=1.0))[0]
    assert strict.ok and len(strict.samples) == 2
    # "sum(xs)%3": another instance's reference (a remainder mod 3) matches about a third of the time;
    # with degenerate_max 0.1 that fails, with the default 0.5 it passes
    mod3 = grammar_env("sum(xs)%3")
    assert check_envs([mod3])[0].ok
    assert check_envs([mod3], EnvCheck(degenerate_max=0.1))[0].stage == "degenerate"


def test_a_renamed_copy_of_a_seed_is_not_novel():
    renamed = SEED_ENVS["lis"].replace("class LIS(Env)", "class Longest(Env)").replace('"lis"', '"longest"')
    ((fresh, top),) = novel([renamed], list(SEED_ENVS.values()))
    assert not fresh and top > 0.8
    # batch dedup: two copies of one new environment in a batch, the first stays
    new = grammar_env("sum(xs[1::2])%5")
    assert [f for f, _ in novel([new, new], list(SEED_ENVS.values()))] == [True, False]
    # 5-gram Jaccard by hand: "a b c d e f" vs "a b c d e g": shingles {abcde, bcdef} and {abcde, bcdeg},
    # 1 shared of 3 -> 1/3
    assert novel(["a b c d e g"], ["a b c d e f"], tau=0.3) == [(False, pytest.approx(1 / 3))]


def test_novelty_by_embedding_cosine():
    # texts with no shared 5-gram (Jaccard 0); fixed embeddings: the pool at (1, 0); "near" at (0.95, 0.3122)
    # has cosine 0.95 / |(0.95, 0.3122)| = 0.95 / 1.0000 = 0.95 >= 0.9: rejected; "far" at (0, 1): cosine 0
    vectors = {
        "pool text one two three": [1.0, 0.0],
        "near text four five six": [0.95, 0.3122],
        "far text seven eight nine": [0.0, 1.0],
    }
    embed = lambda texts: [vectors[t] for t in texts]  # noqa: E731
    got = novel(["near text four five six", "far text seven eight nine"], ["pool text one two three"], embed=embed)
    assert [f for f, _ in got] == [False, True] and got[0][1] == pytest.approx(0.95, abs=1e-4)
    # the batch counts too: a second "far" is a near-duplicate of the first (cosine 1)
    assert [f for f, _ in novel(["far text seven eight nine", "far text seven eight nine"], [], embed=embed)] == [
        True,
        False,
    ]


# ------------------------------------------------------------------ rewards and the pool by hand


def test_generator_reward_by_level_and_mode():
    assert [evoenv_generator_reward(level, None) for level in (1, 2, 3, 4)] == [-1.0, -1.0, -0.5, -0.5]
    # learnability: 1 - p_hat inside (0, 1), 0 at either end
    assert [evoenv_generator_reward(0, p) for p in (0.0, 0.25, 1.0)] == [0.0, 0.75, 0.0]
    # only admitted environments are paid (spec 2 (b)): p_hat 0.05 (< p_lo 0.1) and 0.9 (> p_hi 0.8) earn 0,
    # not 0.95 and 0.1; paid="calibrated" (the reward before issue 41) pays 1 - p_hat to both
    assert [evoenv_generator_reward(0, p) for p in (0.05, 0.1, 0.8, 0.9)] == [
        0.0,
        pytest.approx(0.9),
        pytest.approx(0.2),
        0.0,
    ]
    assert [evoenv_generator_reward(0, p, paid="calibrated") for p in (0.05, 0.9)] == [
        pytest.approx(0.95),
        pytest.approx(0.1),
    ]
    # band [0.1, 0.8]: 1 inside (ends included), 0 outside
    assert [evoenv_generator_reward(0, p, "band") for p in (0.05, 0.1, 0.8, 0.95)] == [0.0, 1.0, 1.0, 0.0]
    assert in_band(0.5, 0.1, 0.8) and not in_band(0.81, 0.1, 0.8)
    with pytest.raises(ValueError):
        evoenv_generator_reward(0, None)
    with pytest.raises(ValueError):
        evoenv_generator_reward(0, 0.5, "max")
    with pytest.raises(ValueError):
        evoenv_generator_reward(0, 0.5, paid="all")


def test_pool_ema_rotation_and_capacity_by_hand():
    pool = EnvPool([], capacity=3, ema=0.5, p_hi=0.8, p_zero=0.05, patience=2)
    seed = pool.add("seed", name="s", seed=True, step=0, p_hat=None)
    easy = pool.add("easy", name="e", seed=False, step=1, p_hat=0.6)
    # 0.6 -> 0.5*0.6 + 0.5*1 = 0.8 (not above 0.8: no count) -> 0.9 (1) -> 0.95 (2: retired)
    for want, high in ((0.8, 0), (0.9, 1), (0.95, 2)):
        pool.observe(easy, 1.0)
        assert pool.get(easy)["p_hat"] == pytest.approx(want) and pool.get(easy)["high"] == high
    pool.observe(seed, 1.0)  # a seed's first check sets its EMA; seeds are never retired
    assert [e["name"] for e in pool.rotate()] == ["e"] and pool.get(seed)["p_hat"] == 1.0
    hard = pool.add("hard", name="h", seed=False, step=2, p_hat=0.1)
    pool.observe(hard, 0.0), pool.observe(hard, 0.0)  # 0.1 -> 0.05 (at p_zero: 1) -> 0.025 (2)
    assert pool.get(hard)["zero"] == 2 and [e["name"] for e in pool.rotate()] == ["h"]
    for step in (3, 4, 5):  # capacity 3: the seed and the two newest written ones stay
        pool.add(f"w{step}", name=f"w{step}", seed=False, step=step, p_hat=0.5)
    assert [e["name"] for e in pool.entries] == ["s", "w4", "w5"]
    assert pool.stats()["evoenv/pool_written"] == 2.0 and env_id("seed") == pool.entries[0]["id"]


# ------------------------------------------------------------------ grading


def test_answers_are_graded_by_the_environments_own_score():
    assert parse_answer("think\nA: 7 \n") == "7" and parse_answer("7") is None and parse_answer("") is None
    assert [parse_review(t) for t in ("yes", "No.", "maybe", "")] == [True, False, None, None]
    env = {"id": "subset", "code": SEED_ENVS["subset_sum"]}
    item = solve_item(
        env, {"instance": {"xs": [1, 2, 3, 4], "target": 5, "plant": [1, 4]}, "prompt": "p", "reference": "1 4"}, 0
    )
    texts = ["A:1 4", "A:2 3", "A:5", "A:1 1 3", "no answer"]
    TASK.prepare(texts, [item.meta] * len(texts))
    # verify-only: any sub-multiset with the target sum passes, not only the planted one
    assert [TASK.verify(t, item.answer, item.meta) for t in texts] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert TASK.extract_answer("A:2 3") == "2 3"
    with pytest.raises(ValueError, match="only solver prompts"):
        TASK.verify("x", "", {"role": "generate"})


def test_the_task_demonstrates_three_prompts_and_holds_out_instance_seeds():
    import itertools

    train = list(itertools.islice(TASK.iter_items("train", 0), 60))
    assert {it.meta["role"] for it in train} == {"solve", "generate", "review"}
    assert {it.demo for it in train if it.meta["role"] == "review"} == {"yes", "no"}
    test = list(itertools.islice(TASK.iter_items("test", 0), 20))
    assert {it.meta["role"] for it in test} == {"solve"}
    assert all(int(it.key.rsplit(":", 1)[1]) >= 10**6 for it in test)
    assert all(int(it.key.rsplit(":", 1)[1]) < 10**6 for it in train if it.meta["role"] == "solve")
    TASK.prepare([it.demo for it in test], [it.meta for it in test])
    assert all(TASK.verify(it.demo, it.answer, it.meta) == 1.0 for it in test)  # every reference scores 1


# ------------------------------------------------------------------ the part on a scripted context


class Scripted:
    """The policy, scripted: ``envs`` as the generator's outputs (cycled), ``review`` as every review, and a
    solver right on the first ``round(q * n)`` of its n samples of each instance (a fake solver of accuracy q)."""

    def __init__(self, envs, q=0.5, review="yes", group_size=1):
        self.envs, self.q, self.review, self.G, self.calls = envs, q, review, group_size, []

    def sample(self, items, prompts, tag, first, n=None):
        n = n or self.G
        self.calls.append((tag.rsplit("-", 1)[0], len(items), n))
        if tag.startswith("evoenv-generate"):
            texts = [self.envs[k % len(self.envs)] for k in range(len(items) * n)]
        elif tag.startswith("evoenv-review"):
            texts = [self.review] * (len(items) * n)
        else:
            right = round(self.q * n)
            texts = [f"A:{it.answer}" if j < right else "A:wrong" for it in items for j in range(n)]
        return text_rollouts(prompts, texts, n)


def test_short_modules_share_their_boilerplate():
    # why the recipe sets novelty_tau 0.8 (spec: 0.5): a grammar environment with an expression the pool
    # lacks is 0.5-0.75 similar to the catalogue's (same class, sample and reference lines)
    pool = [e["code"] for e in TASK.envs]
    ((fresh, top),) = novel([GOOD], pool)
    assert not fresh and 0.5 <= top < 0.8 and novel([GOOD], pool, tau=0.8)[0][0]


def _round(part, script, state, group_size=1, position=0):
    """The generator's round: (groups, metrics)."""
    ctx = round_context(None, task=TASK, sample=script.sample, state=state, position=position, group_size=group_size)
    return part.extend(ctx)


def test_calibration_rejects_a_too_easy_environment_and_admits_a_learnable_one():
    part = EvoEnv(proposals=1, estimate_instances=2, estimate_samples=20, review="off", novelty_tau=0.8)
    easy_state, mid_state = {}, {}
    easy, easy_m = _round(part, Scripted([GOOD], q=0.95), easy_state)
    # q = 0.95: 19 of 20 right on each instance, p_hat 0.95 > 0.8: rejected, and the spec pays admitted
    # environments only (section 2 (b) "if admitted, r_gen = 1 - p_hat"): 0, not 1 - 0.95
    assert easy.rewards.tolist() == [[0.0]] and easy.correct.tolist() == [[0.0]]
    assert easy_m["evoenv/rejected_calibration"] == 1.0 and easy_m["evoenv/admitted"] == 0.0
    mid, _ = _round(part, Scripted([GOOD], q=0.5), mid_state)
    # q = 0.5: p_hat 0.5 in [0.1, 0.8]: admitted, reward 0.5, the pool has one written environment
    assert mid.rewards.tolist() == [[0.5]] and mid.correct.tolist() == [[1.0]]
    written = [e for e in mid_state["pool"] if not e["seed"]]
    assert [(e["code"], e["p_hat"], e["name"]) for e in written] == [(GOOD, 0.5, "sum(x*x for x in xs)%9")]
    assert len(easy_state["pool"]) == len(TASK.envs) == 22


def test_a_calibration_reject_earns_nothing_unless_paid_calibrated():
    # q = 0.05: 1 of 20 right on each of the 2 instances, p_hat = 2 / 40 = 0.05 < p_lo 0.1: too hard, rejected.
    # Before issue 41 it earned 1 - 0.05 = 0.95, the most any environment could earn; spec: 0
    part = EvoEnv(proposals=1, estimate_instances=2, estimate_samples=20, review="off", novelty_tau=0.8)
    hard, hard_m = _round(part, Scripted([GOOD], q=0.05), {})
    assert hard.rewards.tolist() == [[0.0]] and hard_m["evoenv/rejected_calibration"] == 1.0
    old, old_m = _round(dataclasses.replace(part, paid="calibrated"), Scripted([GOOD], q=0.05), {})
    assert old.rewards.tolist() == [[pytest.approx(0.95)]] and old_m["evoenv/admitted"] == 0.0
    # an admitted one is paid alike in both: q = 0.5, p_hat 0.5 -> 1 - 0.5
    mid, _ = _round(dataclasses.replace(part, paid="calibrated"), Scripted([GOOD], q=0.5), {})
    assert mid.rewards.tolist() == [[0.5]]


def test_generator_round_rewards_every_stage():
    renamed = SEED_ENVS["lis"].replace("class LIS(Env)", "class Longest(Env)")
    part, state = EvoEnv(proposals=1, estimate_instances=2, estimate_samples=2, novelty_tau=0.8), {}
    script = Scripted(["class E(Env:", OS, ALWAYS, renamed, GOOD, GOOD], q=0.5, group_size=6)
    g, g_m = _round(part, script, state, group_size=6)
    # parse -1, banned -1, degenerate -0.5, novelty (a renamed seed) -0.5, admitted (p_hat 0.5) 0.5, and the
    # batch's second copy of GOOD: novelty -0.5
    assert g.rewards.tolist() == [[-1.0, -1.0, -0.5, -0.5, 0.5, -0.5]]
    assert g_m["evoenv/rejected_novelty"] == 2.0 and g_m["evoenv/admitted_total"] == 1.0
    assert [c[0] for c in script.calls] == ["evoenv-generate", "evoenv-review", "evoenv-calibrate"]
    assert script.calls[1][1:] == (1, 3)  # one environment reviewed, 3 votes
    no, no_m = _round(part, Scripted([grammar_env("sum(xs[1::2])%5")], review="no"), {})
    assert no.rewards.tolist() == [[-0.5]] and no_m["evoenv/rejected_review"] == 1.0


def test_draw_is_seeded_by_position_and_retires_an_environment_that_breaks():
    part = EvoEnv()
    (a, ma), (b, _), (c, _) = (part.draw(round_context(None, task=TASK, state={}, position=p), 4) for p in (5, 5, 9))
    assert ma == {"evoenv/draw_failed": 0.0}  # the seed environments all render
    assert [it.key for it in a] == [it.key for it in b] != [it.key for it in c]
    assert all(it.meta["role"] == "solve" and it.prompt.startswith("#S\n") for it in a)
    broken = GOOD.replace("return R(s).choices(range(10), k=3 + d)", "return 1 / 0")
    state = {
        "pool": [
            {
                "id": "broken",
                "code": broken,
                "name": "b",
                "seed": False,
                "born": 1,
                "p_hat": 0.5,
                "difficulty": 1,
                "high": 0,
                "zero": 0,
                "checks": 0,
            },
            {
                "id": env_id(CATALOGUE[0]),
                "code": CATALOGUE[0],
                "name": "s",
                "seed": True,
                "born": 0,
                "p_hat": None,
                "difficulty": 1,
                "high": 0,
                "zero": 0,
                "checks": 0,
            },
        ]
    }
    drawn, metrics = part.draw(round_context(None, task=TASK, state=state, position=0), 8)
    # every pick of the broken environment failed to render (the run's count and this draw's agree)
    assert state["draw_failures"] == metrics["evoenv/draw_failed"] >= 1 and [e["id"] for e in state["pool"]] == [
        env_id(CATALOGUE[0])
    ]
    assert {it.meta["env"] for it in drawn} == {env_id(CATALOGUE[0])}


def test_rotation_from_the_solvers_rollouts_and_per_role_advantages():
    part = EvoEnv(ema=0.5, patience=1)
    state = {
        "pool": [
            {
                "id": "w",
                "code": GOOD,
                "name": "w",
                "seed": False,
                "born": 1,
                "p_hat": 0.7,
                "difficulty": 1,
                "high": 0,
                "zero": 0,
                "checks": 0,
            }
        ]
    }
    items = [
        dataclasses.replace(
            solve_item({"id": "w", "code": GOOD}, {"instance": [1], "prompt": "p", "reference": "1"}, k)
        )
        for k in range(2)
    ]
    items.append(dataclasses.replace(items[0], meta={"role": "generate"}))
    correct = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    ctx = batch_context(
        rewards=correct.clone(), correct=correct, items=items, kinds=torch.tensor([0, 0, 1]), state=state, task=TASK
    )
    _, m = part.score_batch(ctx)
    # the solve rows' accuracy 3/4: EMA 0.5 * 0.7 + 0.5 * 0.75 = 0.725 (not above 0.8: stays)
    assert state["pool"][0]["p_hat"] == pytest.approx(0.725) and m["evoenv/retired_total"] == 0.0
    part.score_batch(dataclasses.replace(ctx, correct=torch.ones(3, 2)))  # 0.5 * 0.725 + 0.5 = 0.8625 > 0.8
    assert state["pool"] == [] and state["retired"] == 1
    adv, _ = part.shape_advantages(torch.zeros(3, 2), ctx)
    # solve rows [1, 1, 1, 0]: mean 0.75, unbiased std 0.5 -> +0.5, +0.5, +0.5, -1.5; generate rows constant: 0
    assert adv.view(-1).tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5, 0.0, 0.0], abs=1e-5)


def test_options_names_and_the_task_it_needs():
    with pytest.raises(UserError, match="'evoenv.reward' = 'max'"):
        check_part(EvoEnv(reward="max"))
    with pytest.raises(UserError, match="evoenv.p_hi"):
        check_part(EvoEnv(p_lo=0.5, p_hi=0.4))
    with pytest.raises(UserError, match="evoenv.judge"):
        check_part(EvoEnv(review="judge"))
    with pytest.raises(UserError, match="--task evoenv"):
        EvoEnv().draw(round_context(None, task=get_task("arithmetic"), state={}), 1)
    assert env_name(SEED_ENVS["lis"]) == "lis" and env_name("class Q(Env):\n  pass\n") == "Q"
    r = get_recipe("evoenv")
    assert dict(r.run_defaults) == {"task": "evoenv"} and r.rounds == [("evoenv", r.evoenv)]


# ------------------------------------------------------------------ the recipe, with an exact resume


@pytest.mark.slow
def test_evoenv_trains_three_steps_and_resumes_its_pool_exactly(sharp_tiny, tmp_path):
    import copy

    recipe = get_recipe("evoenv")
    recipe = dataclasses.replace(
        recipe,
        sampling=dataclasses.replace(recipe.sampling, max_new_tokens=60),
        evoenv=EvoEnv(proposals=1, estimate_instances=2, estimate_samples=2, novelty_tau=0.8),
    )
    cfg = TrainConfig(
        recipe="evoenv", task="evoenv", steps=3, prompts_per_step=3, eval_every=0, save_every=0, final_eval_problems=0
    )

    def trainer(folder, steps):
        model, tok = copy.deepcopy(sharp_tiny[0]).train(), sharp_tiny[1]
        return Trainer(model, tok, TASK, recipe, dataclasses.replace(cfg, steps=steps), tmp_path / folder)

    straight = trainer("a", 3)
    rows = [straight.train_step() for _ in range(3)]
    for r in rows:
        assert all(math.isfinite(v) for k, v in r.items() if isinstance(v, float) and k != "evoenv/pool_p_hat")
        assert {"evoenv/generated", "evoenv/pool_size", "evoenv/generator_reward", "evoenv/retired_total"} <= set(r)
    first = trainer("b", 3)
    first.train_step(), first.train_step()
    first.save()
    resumed = trainer("b", 3)
    assert resumed.resume() == 2
    assert resumed.batches.parts.state("evoenv") == first.batches.parts.state("evoenv")
    last = resumed.train_step()
    assert {k: v for k, v in last.items() if not k.startswith(("time/", "tokens_per_s"))} == {
        k: v for k, v in rows[2].items() if not k.startswith(("time/", "tokens_per_s"))
    }
    assert resumed.batches.parts.state("evoenv") == straight.batches.parts.state("evoenv")


JUDGE = """
SEEN = []


def judge(code, instances):
    SEEN.append((code, list(instances)))
    return "%9" in code


def unsure(code, instances):
    return "maybe"
"""


def test_review_by_a_users_judge_file(tmp_path):
    # L4 by the user's callable instead of the policy: it says yes to the "%9" environment only, so that one
    # is calibrated (p_hat 0.5, reward 0.5) and the other is rejected at review (-0.5); no review round is sampled
    path = tmp_path / "judge.py"
    path.write_text(JUDGE)
    part = EvoEnv(
        proposals=1, estimate_instances=2, estimate_samples=2, novelty_tau=0.8, review="judge", judge=f"{path}:judge"
    )
    script = Scripted([GOOD, grammar_env("sum(xs[1::2])%5")], q=0.5, group_size=2)
    g, g_m = _round(part, script, {}, group_size=2)
    assert g.rewards.tolist() == [[0.5, -0.5]] and g_m["evoenv/rejected_review"] == 1.0
    assert [c[0] for c in script.calls] == ["evoenv-generate", "evoenv-calibrate"]
    bad = EvoEnv(
        proposals=1, estimate_instances=2, estimate_samples=2, novelty_tau=0.8, review="judge", judge=f"{path}:unsure"
    )
    with pytest.raises(UserError, match="returned 'maybe', not True or False"):
        _round(bad, Scripted([GOOD]), {})


def test_a_validation_stops_a_module_after_its_first_timeout():
    # three renders of a module that loops on seed 2 only: without the stop each call gets its own 1 s; with it,
    # the calls after the first timeout fail at once, marked as not run (L2 rejects the module on its first failure)
    from reasonrl.tasks.env_runtime import call_envs

    code = GOOD.replace(
        "return R(s).choices(range(10), k=3 + d)",
        "while s == 2:\n      pass\n    return R(s).choices(range(10), k=3 + d)",
    )
    calls = [("@render", (s, 1)) for s in (1, 2, 3)]
    (every,), (stopped,) = (call_envs([(code, calls)], limit=1.0, stop_after_timeout=stop) for stop in (False, True))
    assert [r["ok"] for r in every] == [True, False, True]
    assert every[1]["error"] == "CallTimeout: the call ran past its time limit"
    assert [r["ok"] for r in stopped] == [True, False, False] and stopped[1] == every[1]
    assert stopped[2]["error"] == "CallTimeout: not run: an earlier call ran past its time limit"
