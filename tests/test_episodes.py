"""Multi-turn episodes on token ids: the exact loss mask, no drift between turns, the caps and their
rewards, and losses blind to observation tokens (values worked by hand on the char tokenizer)."""

import math

import pytest
import torch

from reasonrl.envs import ScriptedEnv
from reasonrl.models.chat import PLAIN
from reasonrl.models.tokenizer import build_char_tokenizer
from reasonrl.parts import PolicyLoss
from reasonrl.recipes.grpo import GRPO
from reasonrl.rollout import concat_rollouts, select_rows
from reasonrl.rollout.base import SamplingParams, trained_tokens
from reasonrl.rollout.episode import episodes_to_rollouts, fixed_rewards, middle_truncate
from reasonrl.rollout.multiturn import EpisodeLimits, ObservationFormat, Turn, run_episodes

TOK = build_char_tokenizer()
EOS, UNK = TOK.eos_token_id, TOK.unk_token_id  # 1, 2


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False)["input_ids"]


class ScriptedPolicy:
    """Turn k of the episode whose prompt is ``p`` is ``script[p][k]`` (ids); log-prob of its j-th id:
    -(k + 1) / 10 - j / 100. Records every context it was asked to continue."""

    def __init__(self, script: dict[str, list[list[int]]]):
        self.script = {tuple(ids(p)): turns for p, turns in script.items()}
        self.contexts: list[list[int]] = []

    def sample(self, contexts, sampling, seeds):
        out = []
        for c in contexts:
            self.contexts.append(list(c))
            prompt = next(p for p in self.script if tuple(c[: len(p)]) == p)
            k = sum(1 for x in self.contexts if tuple(x[: len(prompt)]) == prompt) - 1
            turn = self.script[prompt][k][: sampling.max_new_tokens]
            reason = "eos" if turn[-1] == EOS else "length"
            out.append(Turn(turn, [-(k + 1) / 10 - j / 100 for j in range(len(turn))], reason))
        return out


def run(script, envs, limits=EpisodeLimits(), template="[{observation}]", budget=32):
    policy = ScriptedPolicy(script)
    fmt = ObservationFormat.build(TOK, template=template, marker="~")
    eps = run_episodes(
        policy,
        envs,
        [ids(p) for p in script],
        SamplingParams(max_new_tokens=budget),
        list(range(len(envs))),
        limits,
        fmt,
        lambda x: TOK.decode(x, skip_special_tokens=True),
    )
    return eps, policy


def test_loss_mask_is_exactly_the_policy_tokens():
    env = ScriptedEnv("Q", ["xy"])
    (ep,), _ = run({"Q": [ids("ab") + [EOS], ids("ANSWER:7") + [EOS]]}, [env])
    ro = episodes_to_rollouts([ep], ["Q"], 1, TOK.pad_token_id, [ep.answer])
    # a b <eos> [ x y ] A N S W E R : 7 <eos>
    assert ro.completion_ids[0].tolist() == ids("ab") + [EOS] + ids("[xy]") + ids("ANSWER:7") + [EOS]
    assert ro.trainable[0].tolist() == [1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # 3 + 4 + 9
    assert ro.completion_mask[0].tolist() == [1] * 16  # the scoring pass attends to the observation
    assert trained_tokens(ro)[0].tolist() == ro.trainable[0].tolist()
    # behaviour log-probs on the sampled tokens only: turn 1 -0.10, -0.11, -0.12; turn 2 from -0.20
    assert ro.logprobs[0, :7].tolist() == pytest.approx([-0.10, -0.11, -0.12, 0, 0, 0, 0])
    assert ro.logprobs[0, 7:9].tolist() == pytest.approx([-0.20, -0.21])
    assert (ep.finish_reason, ep.answer, ep.turns, ro.texts) == ("answer", "7", 2, ["7"])


def test_ids_across_turns_are_the_sampled_ids_not_retokenised_text():
    # an <unk> inside the first turn: decoding drops it, so re-encoding the text would lose it
    turn1 = ids("a") + [UNK] + ids("b") + [EOS]
    env = ScriptedEnv("Q", ["o"])
    (ep,), policy = run({"Q": [turn1, ids("ANSWER:1") + [EOS]]}, [env])
    assert env.actions[0] == "ab"  # the environment reads text ...
    # ... but the second turn continues from the sampled ids, and the loss trains on them
    assert policy.contexts[1] == ids("Q") + turn1 + ids("[o]")
    assert ep.ids == turn1 + ids("[o]") + ids("ANSWER:1") + [EOS]
    assert ep.segments[0].ids == turn1


def test_scripted_policy_answers_in_three_turns():
    env = ScriptedEnv("How many?", ["3 rows", "2 match"])
    (ep,), policy = run({"How many?": [ids("look") + [EOS], ids("count") + [EOS], ids("ANSWER: 2") + [EOS]]}, [env])
    assert env.actions == ["look", "count", "ANSWER: 2"]
    assert (ep.finish_reason, ep.answer, ep.turns) == ("answer", "2", 3)
    assert [s.role for s in ep.segments] == ["assistant", "observation", "assistant", "observation", "assistant"]
    assert len(policy.contexts) == 3


def test_turn_cap_ends_with_reason_turns_and_the_configured_reward():
    env = ScriptedEnv("Q", ["no", "no", "no"])
    (ep,), _ = run({"Q": [ids("a") + [EOS]] * 3}, [env], EpisodeLimits(max_turns=2))
    assert (ep.finish_reason, ep.turns, ep.answer) == ("turns", 2, None)
    assert [s.role for s in ep.segments] == ["assistant", "observation", "assistant"]  # no observation after the last
    fixed = fixed_rewards([ep], {"turns": -0.5, "context": 0.0})
    assert fixed.tolist() == [-0.5]


def test_context_cap_ends_with_reason_context_and_the_configured_reward():
    # prompt "Q" (1) + turn "abc<eos>" (4) + observation "[long reply]" (12) = 17 > 10: the observation cannot fit
    env = ScriptedEnv("Q", ["long reply"])
    (ep,), _ = run({"Q": [ids("abc") + [EOS]]}, [env], EpisodeLimits(max_context_tokens=10))
    assert ep.finish_reason == "context" and len(ep.context_ids) == 5
    # a turn longer than the room left is cut at the cap: 1 + 6 = 7 tokens, the 7th... never sampled beyond it
    env = ScriptedEnv("Q", [])
    (ep,), _ = run({"Q": [ids("abcdefghij") + [EOS]]}, [env], EpisodeLimits(max_context_tokens=7))
    assert ep.finish_reason == "context" and ep.ids == ids("abcdef") and env.actions == []
    assert fixed_rewards([ep], {"context": 0.0, "turns": -1.0}).tolist() == [0.0]
    assert math.isnan(fixed_rewards([ep], {}).item())  # without a configured value the task decides


def test_observation_is_middle_truncated_in_tokens_with_a_marker():
    assert middle_truncate(ids("abcdefghij"), 7, ids("~")) == ids("abc~hij")  # 3 + marker + 3
    assert middle_truncate(ids("abcdefgh"), 6, ids("~")) == ids("abc~gh")  # head takes the odd one
    assert middle_truncate(ids("abc"), 3, ids("~")) == ids("abc")
    env = ScriptedEnv("Q", ["0123456789"])
    (ep,), _ = run({"Q": [ids("a") + [EOS], ids("ANSWER:0") + [EOS]]}, [env], EpisodeLimits(max_obs_tokens=5))
    assert ep.segments[1].ids == ids("[01~89]")


def test_rows_of_episodes_survive_select_and_concat():
    env1, env2 = ScriptedEnv("Q", ["o"]), ScriptedEnv("R", ["r"])
    eps, _ = run(
        {"Q": [ids("a") + [EOS], ids("ANSWER:1") + [EOS]], "R": [ids("bb")]}, [env1, env2], EpisodeLimits(max_turns=1)
    )
    ro = episodes_to_rollouts(eps, ["Q", "R"], 1, 0, ["", ""], fixed_rewards(eps, {"turns": -1.0}))
    assert [e.finish_reason for e in eps] == ["turns", "turns"]
    one = select_rows(ro, [1])
    assert one.trainable.tolist() == [[1, 1]] and one.fixed_reward.tolist() == [-1.0]
    plain = select_rows(ro, [0])
    plain.trainable, plain.fixed_reward = None, None  # a row of plain sampling joins the batch
    both = concat_rollouts([one, plain], 0)
    assert both.trainable.tolist() == [[1, 1], [1, 1]]
    assert both.fixed_reward[0].item() == -1.0 and math.isnan(both.fixed_reward[1].item())


def _two_episode_batch():
    envs = [ScriptedEnv("Q", ["xyz"]), ScriptedEnv("R", ["w"])]
    eps, _ = run(
        {"Q": [ids("ab") + [EOS], ids("ANSWER:1") + [EOS]], "R": [ids("c") + [EOS], ids("ANSWER:22") + [EOS]]}, envs
    )
    return episodes_to_rollouts(eps, ["Q", "R"], 2, 0, [e.answer for e in eps])


@pytest.mark.parametrize(
    "loss",
    [
        GRPO.loss,
        PolicyLoss(agg="token-mean"),
        PolicyLoss(ratio="sequence"),
        PolicyLoss(trust_region="cispo", agg="token-mean"),
    ],
    ids=["grpo", "token-mean", "gspo", "cispo"],
)
def test_observation_logprobs_do_not_change_the_loss(loss):
    ro = _two_episode_batch()
    mask = trained_tokens(ro).float()  # (2, T)
    adv = GRPO.advantage(torch.tensor([[1.0, 0.0]])).reshape(-1)  # (R,): GRPO's group z-score, one per episode
    assert adv.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)  # 0.5 / std(N-1) of {1, 0}
    base = ro.logprobs + 0.05 * (ro.completion_mask - mask)  # (2, T) off-policy noise on the observation only
    logp = base.clone().requires_grad_()
    norm = {"n_tokens": float(mask.sum()), "n_seqs": 2, "norm_len": 32}
    out, _ = loss(logp, ro.logprobs, adv, mask, **norm)
    out.backward()
    moved = (base + 7.0 * (ro.completion_mask - mask)).requires_grad_()  # observation log-probs changed a lot
    out2, _ = loss(moved, ro.logprobs, adv, mask, **norm)
    assert out2.item() == pytest.approx(out.item(), abs=1e-7)
    obs = (ro.completion_mask - mask).bool()
    assert obs.any() and (logp.grad[obs] == 0).all()  # GRPO's reward reaches the trainable tokens alone
    assert (logp.grad[mask.bool()] != 0).all()


def test_engine_turns_are_rescored_to_their_behaviour_logprobs():
    """On the tiny model: the rows built from episodes, re-scored by the trainer's scoring pass, give
    back the behaviour log-probs on every sampled token (ids and positions line up end to end)."""
    from reasonrl.models import build_tiny
    from reasonrl.models.scoring import score_completions
    from reasonrl.rollout import HFEngine
    from reasonrl.rollout.multiturn import EngineTurns

    model, tok = build_tiny("tiny", seed=0)
    engine = HFEngine(model, tok)
    envs = [ScriptedEnv("1+2=", ["wrong, try again"] * 3) for _ in range(2)]
    prompts = [list(tok("1+2=")["input_ids"])] * 2
    fmt = ObservationFormat.build(tok, template="\nObs: {observation}\n")
    eps = run_episodes(
        EngineTurns(engine),
        envs,
        prompts,
        SamplingParams(max_new_tokens=6),
        [3, 4],
        EpisodeLimits(max_turns=3),
        fmt,
        lambda x: tok.decode(x, skip_special_tokens=True),
    )
    ro = episodes_to_rollouts(eps, ["1+2="] * 2, 2, tok.pad_token_id, ["", ""])
    assert all(e.turns == 3 and e.finish_reason == "turns" for e in eps)
    with torch.no_grad():
        logp, _ = score_completions(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    mask = trained_tokens(ro).bool()
    assert torch.allclose(logp[mask], ro.logprobs[mask], atol=1e-4)
    assert (ro.logprobs[~mask] == 0).all()


class EnvTask:
    """The arithmetic task with an environment per row: a scripted one that answers the item's
    answer in its second turn when ``answers``, else never (every episode hits the turn cap)."""

    def __init__(self, answers: bool):
        from reasonrl.tasks import get_task

        self.base, self.answers = get_task("arithmetic", max_digits=1), answers

    def __getattr__(self, name):
        return getattr(self.base, name)

    def environment(self, item):
        return AnswerEnv(item.answer if self.answers else None)


class AnswerEnv:
    def __init__(self, answer):
        self.answer, self.n, self.closed = answer, 0, False

    def reset(self, item):
        return item.prompt

    def step(self, action):
        self.n += 1
        done = self.answer is not None and self.n == 2
        return "try again", done, self.answer if done else None


@pytest.mark.parametrize("answers", [True, False])
def test_episodes_part_through_the_batch_maker(answers):
    """The part makes ordinary rollouts: the batch maker rewards them (the verifier on the env's answer,
    or the configured turn-cap reward) and its loss mask is the episodes' trainable tokens."""
    import dataclasses

    from reasonrl.loop.batch import BatchMaker
    from reasonrl.models import build_tiny
    from reasonrl.parts import Episodes
    from reasonrl.rollout import HFEngine

    model, tok = build_tiny("tiny", seed=0)
    part = Episodes(max_turns=3, max_turn_tokens=4, turn_limit_reward=-0.5, answer_format="A:{answer}")
    recipe = dataclasses.replace(GRPO, group_size=2, episodes=part)
    bm = BatchMaker(EnvTask(answers), recipe, HFEngine(model, tok), budget=8, seed=0)
    b = bm.prepare(bm.collect(2))
    reasons = b.ro.finish_reasons
    if answers:  # the verifier scores the env's answer: the item's own answer, so correct
        assert reasons == ["answer"] * 4 and b.rewards.flatten().tolist() == [1.0] * 4
    else:
        assert reasons == ["turns"] * 4 and b.rewards.flatten().tolist() == [-0.5] * 4
        assert b.correct.sum() == 0
    assert torch.equal(b.loss_mask, b.ro.trainable * b.ro.completion_mask)
    assert (b.loss_mask.sum(-1) < b.ro.completion_mask.sum(-1)).all()  # observations are in the rows, not the loss
    assert b.metrics["episode/turns_mean"] == (2.0 if answers else 3.0)


@pytest.mark.parametrize("answers", [True, False])
def test_evaluation_of_a_task_with_environments_runs_its_episodes(answers):
    """Held-out evaluation rolls out episodes under the run's episode options (the part's wrap_task), so a
    record's completion is the episode's answer, never the first action read as an answer."""
    from reasonrl.eval.runner import EvalConfig, evaluate
    from reasonrl.models import build_tiny
    from reasonrl.parts import Episodes
    from reasonrl.parts.protocol import TaskSetup
    from reasonrl.rollout import HFEngine

    model, tok = build_tiny("tiny", seed=0)
    task, _ = Episodes(max_turns=3, max_turn_tokens=4, answer_format="A:{answer}").wrap_task(
        TaskSetup(EnvTask(answers), tok, 0)
    )
    summary, records = evaluate(
        HFEngine(model, tok), task, EvalConfig(n_problems=3, samples_per_problem=0, max_new_tokens=4)
    )
    # AnswerEnv answers the item's own answer at its 2nd step when it answers; otherwise 3 turns, no answer
    assert summary["pass@1"] == (1.0 if answers else 0.0)
    assert [r["finish"] for r in records] == (["answer"] * 3 if answers else ["turns"] * 3)
    assert [r["completion"] for r in records] == ([f"A:{r['answer']}" for r in records] if answers else [""] * 3)
    # the same task, one turn allowed: the answer at turn 2 never comes
    one, _ = Episodes(max_turns=1, max_turn_tokens=4, answer_format="A:{answer}").wrap_task(
        TaskSetup(EnvTask(True), tok, 0)
    )
    summary, records = evaluate(
        HFEngine(model, tok), one, EvalConfig(n_problems=3, samples_per_problem=0, max_new_tokens=4)
    )
    assert summary["pass@1"] == 0.0 and [r["finish"] for r in records] == ["turns"] * 3


def test_the_context_cap_is_at_most_the_models_context_length():
    # a 40-position model and a 10,000-token cap: the episode stops at 40 tokens of context ("context"),
    # instead of sampling past the model's positions
    from reasonrl.models.tiny import tiny_config
    from reasonrl.rollout import HFEngine
    from reasonrl.rollout.agent import EpisodeOptions, environment_rollouts
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config("tiny", max_positions=40))
    task = EnvTask(False)
    item = task.base.iter_items("train", 0).__next__()  # a one-digit sum: a prompt of about 6 characters
    opts = EpisodeOptions(limits=EpisodeLimits(max_turns=50, max_turn_tokens=4, max_context_tokens=10_000))
    ro = environment_rollouts(
        HFEngine(model, TOK), task, [item], 1, SamplingParams(temperature=1.0, max_new_tokens=4), [7], PLAIN, opts
    )
    (ep,) = ro.extras["episodes"]
    assert ro.finish_reasons == ["context"] and len(ep.context_ids) <= 40
    assert len(ep.prompt_ids) + len(ep.ids) <= 40


class HeldEnv:
    """Holds a resource from reset to close (as a CodeAct session holds a sandbox uid); answers at its 2nd step."""

    open_now = most_open = 0

    def __init__(self, answer):
        self.answer, self.n = answer, 0

    def reset(self, item):
        HeldEnv.open_now += 1
        HeldEnv.most_open = max(HeldEnv.most_open, HeldEnv.open_now)
        return item.prompt

    def step(self, action):
        self.n += 1
        return "again", self.n == 2, self.answer if self.n == 2 else None

    def close(self):
        HeldEnv.open_now -= 1


def test_episodes_run_in_waves_of_at_most_max_live():
    # 7 rows, waves of 3: 3 + 3 + 1 episodes, never more than 3 environments open at once, every one closed,
    # and every episode answered (the 64-uid sandbox deadlocked when more episodes than uids held sessions)
    from reasonrl.models import build_tiny
    from reasonrl.rollout import HFEngine
    from reasonrl.rollout.agent import EpisodeOptions, environment_rollouts

    class Task(EnvTask):
        def environment(self, item):
            return HeldEnv(item.answer)

    model, tok = build_tiny("tiny", seed=0)
    task = Task(True)
    items = [next(task.base.iter_items("train", s)) for s in range(7)]
    HeldEnv.open_now = HeldEnv.most_open = 0
    opts = EpisodeOptions(limits=EpisodeLimits(max_turns=3, max_turn_tokens=4), max_live=3)
    ro = environment_rollouts(
        HFEngine(model, tok),
        task,
        items,
        1,
        SamplingParams(temperature=1.0, max_new_tokens=4),
        list(range(7)),
        PLAIN,
        opts,
    )
    assert HeldEnv.most_open == 3 and HeldEnv.open_now == 0
    assert ro.finish_reasons == ["answer"] * 7 and ro.texts == [it.answer for it in items]
