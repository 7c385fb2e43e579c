"""VPD (arXiv 2605.15113) glue, by hand: the teacher prompt, the attempt rule, the row pairing, the
feedback functions, the two adapters (peft's set_adapter, the grad flags), the teacher round with
its controller on a scripted maker, the options' checks; then 3 steps on the tiny model asserting
VPD's own metrics, and a resume that must load both adapters and the controller's beta.
"""

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from helpers import batch_context, loss_context, round_context, text_rollouts
from reasonrl.loop.batch import Batch
from reasonrl.loop.checkpoint import latest_checkpoint
from reasonrl.config.train import Lora, TrainConfig, apply_overrides
from reasonrl.parts.feedback import FEEDBACK, critique_feedback, feedback_fn, register_feedback, verdict_feedback
from reasonrl.errors import UserError
from reasonrl.models import build_tiny
from reasonrl.models.lora import adapter_parameters, apply_lora, use_adapter
from reasonrl.parts import VPD
from reasonrl.parts.protocol import Channel, ModelSetup
from reasonrl.parts.vpd import TEACHER, pair_rows, pick_attempts, teacher_prompt
from reasonrl.recipes import RECIPES, get_recipe
from reasonrl.tasks import ArithmeticTask
from reasonrl.config.validate import check_part

G = 2
TASK = ArithmeticTask()
ITEMS = [TASK.make_item([a, b], ["+"]) for a, b in ((1, 1), (2, 3))]  # answers 2, 5


def _peft_tiny(seed=0):
    model, tok = build_tiny("tiny", seed=seed)
    model = apply_lora(model, Lora(r=2, alpha=4.0), seed=seed)
    return VPD().setup_model(ModelSetup(model, seed))[0], tok  # (model, metrics)


# ------------------------------------------------------------------ pure glue


def test_teacher_prompt_fills_each_slot_once_and_ends_as_the_task_prompt():
    p = teacher_prompt(
        "{prompt}Previous attempt:\n{attempt}\nFeedback: {feedback}\n{prompt}",
        "1+1=?\n",
        "A:3 {feedback}",
        "step 1: wrong",
    )
    assert p == "1+1=?\nPrevious attempt:\nA:3 {feedback}\nFeedback: step 1: wrong\n1+1=?\n"


def test_pick_attempts_first_wrong_else_row_zero():
    correct = torch.tensor([[1, 0, 0], [1, 1, 1], [0, 1, 0]])
    assert pick_attempts(correct, "first_wrong").tolist() == [1, 0, 0]
    assert pick_attempts(correct, "first").tolist() == [0, 0, 0]
    with pytest.raises(ValueError):
        pick_attempts(correct, "longest")


def test_pair_rows_maps_each_student_row_to_its_teacher_row():
    # groups 0, 1 are the student's, 2, 3 the teacher's (G = 2): row 3 (group 1, j 1) <-> row 7 (group 3, j 1)
    kinds = torch.tensor([0, 0, 1, 1])
    s, t = pair_rows(kinds, torch.tensor([3, 5, 0]), 2, kind=1)  # row 5 is a teacher row: not a student row
    assert s.tolist() == [3, 0] and t.tolist() == [7, 4]
    with pytest.raises(ValueError, match="2 student groups but 1 teacher groups"):
        pair_rows(torch.tensor([0, 0, 1]), torch.tensor([0]), 2, kind=1)
    # beside another round (kind 1, one group): VPD's own groups are kind 2, found by their kind alone
    s, t = pair_rows(torch.tensor([0, 0, 1, 2, 2]), torch.tensor([1, 2]), 2, kind=2)
    assert s.tolist() == [1, 2] and t.tolist() == [7, 8]  # group 0 <-> group 3, group 1 <-> group 4


def test_feedback_functions_and_registry():
    it = ITEMS[1]  # 2+3 = 5: one column step, then the answer line
    assert critique_feedback(TASK, it, "2+3+0=6\nA:6", False) == "step 1: 2+3+0 is 5, not 6"  # from the gold working
    assert verdict_feedback(TASK, it, "A:5", True) == "The final answer is correct."
    assert feedback_fn("critique") is critique_feedback
    mine = register_feedback("test_echo", lambda task, item, attempt, correct: f"echo {attempt}")
    try:
        assert feedback_fn("test_echo") is mine and VPD(feedback="test_echo").feedback == "test_echo"
    finally:
        del FEEDBACK["test_echo"]
    with pytest.raises(ValueError):
        feedback_fn("nope")


def test_options_are_checked_by_the_parts_rules():
    for bad in (
        {"feedback": "nope"},
        {"template": "{prompt}{attempt}"},
        {"attempt": "x"},
        {"e_kl": "k2"},
        {"m_divergence": "jsd"},
    ):
        with pytest.raises(UserError, match=f"'vpd.{next(iter(bad))}' = "):
            check_part(VPD(**bad))
    r = apply_overrides(get_recipe("vpd"), {"vpd": {"beta": 0.3, "m_divergence": "sampled"}})
    assert r.vpd.beta == 0.3 and r.vpd.m_divergence == "sampled"


def test_alpha_scales_only_the_student_advantages():
    adv = torch.tensor([[1.0, -1.0], [2.0, -2.0]])
    out, m = VPD(alpha=0.5).shape_advantages(adv, batch_context(kinds=torch.tensor([0, 1])))
    assert out.tolist() == [[0.5, -0.5], [2.0, -2.0]] and m == {}
    assert VPD().shape_advantages(adv, batch_context(kinds=torch.tensor([0, 1])))[0] is adv


# ------------------------------------------------------------------ the two adapters


def test_without_lora_the_part_asks_for_lora_r():
    model, _ = build_tiny("tiny")
    with pytest.raises(UserError, match="lora.r"):
        VPD().setup_model(ModelSetup(model, 0))


def test_two_trainable_adapters_and_a_switch_that_restores_the_grad_flags():
    model, _ = _peft_tiny()
    assert list(model.peft_config) == ["default", TEACHER] and model.active_adapter == "default"
    student, teacher = adapter_parameters(model, "default"), adapter_parameters(model, TEACHER)
    assert len(student) == len(teacher) > 0 and all(p.requires_grad for p in [*student.values(), *teacher.values()])
    # make the adapters differ (peft starts B at 0), then check the switch changes the forward
    with torch.no_grad():
        for k, p in teacher.items():
            if "lora_B" in k:
                p.fill_(0.05)
    ids = torch.tensor([[5, 6, 7, 8]])
    plain = model(input_ids=ids).logits
    with use_adapter(model, TEACHER):
        assert model.active_adapter == TEACHER
        assert not any(p.requires_grad for p in student.values())  # peft's set_adapter froze the student
        through_teacher = model(input_ids=ids).logits
    assert model.active_adapter == "default" and all(p.requires_grad for p in [*student.values(), *teacher.values()])
    assert not torch.allclose(plain, through_teacher)
    # a graph built through the teacher inside the block still trains the teacher after it
    with use_adapter(model, TEACHER):
        loss = model(input_ids=ids).logits.sum()
    loss.backward()
    assert all(p.grad is not None for p in teacher.values()) and all(p.grad is None for p in student.values())
    assert VPD().setup_model(ModelSetup(model, 0)) == (model, {})  # already there (a resumed trainer): left alone


# ------------------------------------------------------------------ the teacher's round on a scripted maker


class FakeMaker:
    """A BatchMaker's surface for ``extend``: the engine holds a real two-adapter model (its active
    adapter is recorded at generation), generation and the student's re-score are scripted."""

    def __init__(self, model, state=None):
        self.task, self.seed, self.items_drawn, self.state = TASK, 0, 2, state if state is not None else {}
        self.engine = SimpleNamespace(model=model, tok=SimpleNamespace(pad_token_id=0))
        self.seen = []

    def generate(self, items, prompts, tag, first, n=None):
        self.seen.append((list(prompts), tag, first, self.engine.model.active_adapter))
        ro = text_rollouts(prompts, ["2+3+0=5\nA:5", "A:4", "1+1+0=2\nA:2", "A:2"], G)
        ro.logprobs = -1.0 * ro.completion_mask  # the teacher's sampling log-probs
        return ro

    def reward(self, items, ro):
        ok = torch.tensor(
            [
                float(TASK.extract_answer(t) == it.answer)
                for i, it in enumerate(items)
                for t in ro.texts[i * G : (i + 1) * G]
            ]
        ).view(-1, G)
        return ok.clone(), ok, {}

    def score_under(self, contexts, ro, rows, **reduce):
        assert contexts == [it.prompt for it in [ITEMS[1], ITEMS[1], ITEMS[0], ITEMS[0]]]  # the plain prompts
        return SimpleNamespace(logprobs=-2.0 * ro.completion_mask[rows])  # the student: k1 KL = -1 - (-2) = 1

    def ctx(self, batch):
        """The round's context; the policy is the engine's model unless the engine runs elsewhere."""
        remote = getattr(self.engine, "push_weights", None) is not None
        return round_context(
            batch,
            task=self.task,
            sample=self.generate,
            reward=self.reward,
            score_under=self.score_under,
            state=self.state,
            seed=self.seed,
            position=self.items_drawn,
            tok=self.engine.tok,
            group_size=G,
            policy=self.engine.model,
            in_process=not remote,
        )


def _first_round():
    texts = ["2+3+0=6\nA:6", "2+3+0=5\nA:5", "1+1+0=2\nA:2", "A:2"]  # group 0 (2+3): wrong, right; group 1: right
    items = [ITEMS[1], ITEMS[0]]
    correct = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    return Batch(
        items=items, ro=text_rollouts([it.prompt for it in items], texts, G), rewards=correct.clone(), correct=correct
    )


def test_extend_samples_the_teacher_under_feedback_and_moves_beta():
    model, _ = _peft_tiny()
    maker = FakeMaker(model)
    g, m = VPD().extend(maker.ctx(_first_round()))
    prompts, tag, first, active = maker.seen[0]
    assert tag == "vpd" and first == 0 and active == TEACHER and model.active_adapter == "default"
    assert prompts[0] == "2+3=?\nPrevious attempt:\n2+3+0=6\nA:6\nFeedback: step 1: 2+3+0 is 5, not 6\n2+3=?\n"
    assert prompts[1].startswith("1+1=?\nPrevious attempt:\n1+1+0=2\nA:2\nFeedback: all 2 steps are right\n")
    assert g.correct.tolist() == [[1.0, 0.0], [1.0, 1.0]] and torch.equal(
        g.ro.train_mask, torch.zeros_like(g.ro.train_mask)
    )
    # k1 = 1.0 > 1.5 * 0.05: beta 0.1 is this step's, 0.2 the next one's (and kept in the round state)
    assert (
        m["vpd/beta"] == 0.1 and m["vpd/beta_next"] == pytest.approx(0.2) and m["vpd/kl_measured"] == pytest.approx(1.0)
    )
    assert m["vpd/feedback_count"] == 2 and m["vpd/feedback_on_wrong"] == 1 and m["vpd/teacher_accuracy"] == 0.75
    assert maker.state == {"beta": pytest.approx(0.2)} and g.data == {"beta": 0.1}  # this step's E-step: 0.1
    # the bounds: beta_max caps the doubling
    maker2 = FakeMaker(model, state={"beta": 8.0})
    VPD().extend(maker2.ctx(_first_round()))
    assert maker2.state["beta"] == 10.0


def test_extend_refuses_an_engine_without_the_model():
    model, _ = _peft_tiny()
    maker = FakeMaker(model)
    maker.engine = SimpleNamespace(push_weights=lambda *a: None, tok=None, model=model)
    with pytest.raises(UserError, match="rollout.workers=0"):
        VPD().extend(maker.ctx(_first_round()))


# ------------------------------------------------------------------ end to end


def _cfg(tiny_dir, out, steps):
    return TrainConfig(
        model=str(tiny_dir),
        steps=steps,
        prompts_per_step=2,
        eval_every=0,
        save_every=1,
        final_eval_problems=0,
        out=str(out),
        seed=3,
        lora=Lora(r=4, alpha=8.0),
    )


RECIPE = dataclasses.replace(
    get_recipe("vpd"),
    group_size=2,
    sampling=dataclasses.replace(get_recipe("vpd").sampling, max_new_tokens=20),
    optim=dataclasses.replace(get_recipe("vpd").optim, lr=1e-3, warmup_steps=0),
)


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_recipe_is_registered_with_its_part():
    r = RECIPES["vpd"]
    assert r.vpd == VPD() and r.rounds == [("vpd", r.vpd)] and ("vpd", r.vpd.loss_term) in r.calls("loss_term")
    assert r.calls("setup_model") == [("vpd", r.vpd.setup_model)] and r.describe()["vpd"]["beta"] == 0.1
    assert r.needs == {"lora", "in_process", "policy_in_loss", "own_engine"} and dict(r.run_defaults) == {"lora.r": 8}


@pytest.mark.slow
def test_vpd_trains_three_steps_end_to_end(tiny_dir, tmp_path):
    from reasonrl.loop.run import train_run

    train_run(_cfg(tiny_dir, tmp_path / "a", 3), RECIPE)
    rows = _rows(tmp_path / "a")
    assert [r["step"] for r in rows] == [1, 2, 3]
    beta = 0.1
    for r in rows:
        assert r["vpd/beta"] == pytest.approx(beta) and r["vpd/feedback_count"] == 2.0  # one feedback per prompt
        assert 0 <= r["vpd/feedback_on_wrong"] <= 2 and 0.0 <= r["vpd/teacher_accuracy"] <= 1.0
        # the teacher reads the feedback prompt, the student the plain one: they differ from step 1 on
        # (the values themselves: test_e_and_m_step_values_by_hand)
        assert r["vpd/e_kl_term"] > 0 and r["vpd/m_loss_term"] > 0
        assert r["update/rows_skipped_frac"] == 0.5  # the teacher's rows never reach the student's loss
        beta = r["vpd/beta_next"]
        assert beta in (r["vpd/beta"] * 2, r["vpd/beta"] / 2, r["vpd/beta"]) or beta in (0.001, 10.0)
    # the checkpoint holds both adapters and the controller state
    ckpt = latest_checkpoint(tmp_path / "a")
    assert (ckpt / "adapter_model.safetensors").exists() and (ckpt / TEACHER / "adapter_model.safetensors").exists()
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)["state"]
    assert state["parts"]["vpd"]["beta"] == pytest.approx(rows[-1]["vpd/beta_next"])


@pytest.mark.slow
def test_a_resumed_vpd_run_loads_both_adapters_and_beta(tiny_dir, tmp_path):
    from safetensors.torch import load_file

    from reasonrl.models import load_model
    from reasonrl.loop.run import train_run
    from reasonrl.tasks import get_task
    from reasonrl.loop.trainer import Trainer

    train_run(_cfg(tiny_dir, tmp_path / "b", 2), RECIPE)
    ckpt = latest_checkpoint(tmp_path / "b")
    model, tok = load_model(tiny_dir)
    tr = Trainer(model, tok, get_task("arithmetic"), RECIPE, _cfg(tiny_dir, tmp_path / "b", 3), tmp_path / "b")
    fresh = {k: p.detach().clone() for k, p in adapter_parameters(tr.model, TEACHER).items()}
    assert tr.resume() == 2
    beta = _rows(tmp_path / "b")[1]["vpd/beta_next"]
    assert tr.batches.parts.state("vpd")["beta"] == pytest.approx(beta)  # the controller state came back
    for name, folder in (("default", ckpt), (TEACHER, ckpt / TEACHER)):  # both adapters, as saved
        saved = load_file(str(folder / "adapter_model.safetensors"))
        mine = adapter_parameters(tr.model, name)
        assert len(saved) == len(mine) > 0
        for k, p in mine.items():
            assert torch.equal(p.detach(), saved[k.replace(f".{name}.", ".")])
    assert any(not torch.equal(fresh[k], p) for k, p in adapter_parameters(tr.model, TEACHER).items())  # it moved
    m = tr.train_step()
    assert m["vpd/beta"] == pytest.approx(beta) and m["vpd/feedback_count"] == 2.0


# ------------------------------------------------------------------ the loss terms on a tiny two-adapter model


def _loss_batch():
    """Two student groups (kind 0) and their teacher groups (kind 1), G = 2, scripted token ids."""
    texts = ["ab", "abc", "a", "abcd", "bcd", "ab", "abc", "b"]
    ro = text_rollouts(["p"] * 4, texts, G)
    ro.completion_ids = torch.tensor([[5 + (i + t) % 7 for t in range(4)] for i in range(8)]) * ro.completion_mask
    ro.prompt_ids = torch.tensor([[3, 4]] * 4 + [[8, 9]] * 4)  # the teacher's prompt differs from the student's
    ro.prompt_mask = torch.ones(8, 2, dtype=torch.long)
    ro.logprobs = -2.0 * ro.completion_mask
    b = Batch(
        items=ITEMS * 2, ro=ro, rewards=torch.zeros(4, G), correct=torch.zeros(4, G), kinds=torch.tensor([0, 0, 1, 1])
    )
    b.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, -1.0, 1.0])
    b.loss_mask = ro.completion_mask.clone()
    b.loss_mask[4:] = 0  # the teacher's rows: zero train mask
    return b


def _grads(model, part, rows_split):
    model.zero_grad(set_to_none=True)
    b, total = _loss_batch(), 0.0
    for rows in rows_split:
        loss, m = part.loss_term(
            loss_context(
                logp=torch.zeros(len(rows), 4),
                batch=b,
                rows=torch.tensor(rows),
                model=model,
                temperature=1.0,
                n_seqs=4,
                kind=1,
                data=Channel(values={"beta": 0.5}),
            )
        )
        loss.backward()
        total += float(loss.detach())
    return total, {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters() if "lora_" in k}


def test_e_step_trains_only_the_teacher_and_m_step_only_the_student():
    model, _ = _peft_tiny()
    with torch.no_grad():  # adapters that differ, so the teacher is not the student
        for k, p in model.named_parameters():
            if "lora_B" in k:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(k)))
    _, e_only = _grads(model, VPD(m_coef=0.0), [[0, 1, 2, 3, 4, 5, 6, 7]])
    assert all(g is None or not g.abs().any() for k, g in e_only.items() if ".default." in k)  # 0 x the M-step
    assert any(g is not None and g.abs().sum() > 0 for k, g in e_only.items() if f".{TEACHER}." in k)
    _, m_only = _grads(model, VPD(e_coef=0.0), [[0, 1, 2, 3]])
    assert all(g is None or not g.abs().any() for k, g in m_only.items() if f".{TEACHER}." in k)
    assert any(g is not None and g.abs().sum() > 0 for k, g in m_only.items() if ".default." in k)
    # micro-batches add up to the whole batch (teacher row (i, j) rides with student row (i, j))
    whole, g1 = _grads(model, VPD(), [[0, 1, 2, 3]])
    split, g2 = _grads(model, VPD(), [[3, 0], [2, 1, 5]])
    assert split == pytest.approx(whole, rel=1e-5)
    assert all(torch.allclose(g1[k], g2[k], atol=1e-6) for k in g1 if g1[k] is not None)


def test_checkpoint_loading_reads_every_adapter_and_names_a_missing_one(tmp_path):
    from reasonrl.loop.checkpoint import _load_adapter

    a, _ = _peft_tiny(seed=1)
    with torch.no_grad():
        for k, p in a.named_parameters():
            if "lora_B" in k:
                p.fill_(0.3 if ".default." in k else -0.2)
    a.save_pretrained(tmp_path / "two")
    b, _ = _peft_tiny(seed=2)  # other A matrices, B = 0: every adapter weight must come from the files
    _load_adapter(tmp_path / "two", b)
    lora = lambda m: {k: v for k, v in m.state_dict().items() if "lora_" in k}  # noqa: E731 (bases differ by seed)
    assert lora(a).keys() == lora(b).keys() and all(torch.equal(v, lora(b)[k]) for k, v in lora(a).items())
    one = apply_lora(build_tiny("tiny")[0], Lora(r=2, alpha=4.0), seed=1)
    one.save_pretrained(tmp_path / "one")  # a one-adapter checkpoint (any other recipe's) still loads as before
    _load_adapter(tmp_path / "one", apply_lora(build_tiny("tiny")[0], Lora(r=2, alpha=4.0), seed=3))
    with pytest.raises(RuntimeError, match="adapter 'teacher'"):
        _load_adapter(tmp_path / "one", b)


def _hand_logp(model, adapter, prompt_ids, comp_ids):
    """(n, V) log-softmax of ``adapter``'s logits predicting ``comp_ids`` after ``prompt_ids`` (one unpadded
    forward)."""
    ids = torch.tensor([list(prompt_ids) + list(comp_ids)])
    with torch.no_grad(), use_adapter(model, adapter):
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
    return logits.log_softmax(-1)


def test_e_and_m_step_values_by_hand():
    # E-step on teacher rows 4-7 (prompt [8, 9]): PPO-clip 0.2 on the teacher's log-probs against the
    # behaviour -2, plus beta 0.5 x the exact KL(teacher(.|[8, 9]) || student(.|[3, 4])) on the teacher's tokens;
    # M-step on student rows 0-3: reverse KL(student(.|[3, 4]) || teacher(.|[8, 9])) on the STUDENT's tokens,
    # the teacher reading its feedback prompt. Each is a sum of row token-means / n_seqs = 4. Checked to fail
    # with the M-step's teacher scored under the student's prompt (ro.prompt_ids[s_rows] in VPD.m_step).
    model, _ = _peft_tiny()
    with torch.no_grad():  # adapters that differ, so the teacher is not the student
        for k, p in model.named_parameters():
            if "lora_B" in k:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(k)))
    b = _loss_batch()
    loss, m = VPD().loss_term(
        loss_context(
            logp=torch.zeros(4, 4),
            batch=b,
            rows=torch.arange(4),
            model=model,
            temperature=1.0,
            n_seqs=4,
            kind=1,
            data=Channel(values={"beta": 0.5}),
        )
    )
    student_prompt, teacher_prompt_ids = [3, 4], [8, 9]
    pg, kl, mstep, swapped = 0.0, 0.0, 0.0, 0.0
    for s, t in zip(range(4), range(4, 8)):
        n_t, n_s = int(b.ro.completion_mask[t].sum()), int(b.ro.completion_mask[s].sum())
        y_t, y_s = b.ro.completion_ids[t, :n_t].tolist(), b.ro.completion_ids[s, :n_s].tolist()
        q = _hand_logp(model, TEACHER, teacher_prompt_ids, y_t)
        pi = _hand_logp(model, "default", student_prompt, y_t)
        ratio = torch.exp(q[torch.arange(n_t), y_t] + 2.0)
        a = float(b.advantages[t])
        surrogate = torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a)
        pg += -float(surrogate.mean()) / 4
        kl += float((q.exp() * (q - pi)).sum(-1).mean()) / 4
        ps = _hand_logp(model, "default", student_prompt, y_s)
        qs = _hand_logp(model, TEACHER, teacher_prompt_ids, y_s)
        mstep += float((ps.exp() * (ps - qs)).sum(-1).mean()) / 4
        qw = _hand_logp(model, TEACHER, student_prompt, y_s)  # the swap: the teacher without its feedback prompt
        swapped += float((ps.exp() * (ps - qw)).sum(-1).mean()) / 4
    assert m["vpd/e_pg_term"] == pytest.approx(pg, rel=1e-4, abs=1e-6)
    assert m["vpd/e_kl_term"] == pytest.approx(kl, rel=1e-4) and kl > 1e-4
    assert m["vpd/m_loss_term"] == pytest.approx(mstep, rel=1e-4)
    assert abs(mstep - swapped) > 1e-3 * mstep  # the teacher's prompt matters, so a swap is seen
    assert float(loss.detach()) == pytest.approx(pg + 0.5 * kl + mstep, rel=1e-4)


def test_teacher_warm_start_trains_the_teacher_adapter_alone_on_feedback_prompts():
    # vpd.warm_steps (issue #26): the teacher reads (prompt, wrong attempt, its critique, prompt) and learns the
    # demonstration; the student's adapter and the base stay as they were, so the student starts where GRPO does
    from reasonrl.parts.vpd_warm import feedback_items

    items = feedback_items(TASK, ITEMS, VPD().template, "critique", wrong_rate=1.0, seed=0)
    for it, src in zip(items, ITEMS):
        head, attempt_and_rest = it.prompt.split("Previous attempt:\n")
        attempt, rest = attempt_and_rest.split("\nFeedback: ")
        assert head == src.prompt and it.prompt.endswith("\n" + src.prompt) and it.demo == src.demo
        assert attempt != src.demo and not TASK.verify(attempt, src.answer, src.meta)  # a wrong attempt
        assert rest.split("\n")[0] == critique_feedback(TASK, src, attempt, False)
    model, tok = _peft_tiny()
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    part = VPD(warm_steps=2, warm_batch=2)
    assert part.setup_model(ModelSetup(model, 0, TASK, tok)) == (model, {})  # already has the teacher: no warm-up
    from reasonrl.parts.vpd_warm import warm_teacher

    m = warm_teacher(
        model,
        tok,
        TASK,
        TEACHER,
        template=part.template,
        feedback=part.feedback,
        steps=2,
        batch_size=2,
        lr=1e-2,
        wrong_rate=0.8,
        seed=0,
    )
    assert set(m) == {"vpd/warm_loss_first", "vpd/warm_loss_last"}
    moved = {k for k, p in model.named_parameters() if not torch.equal(p.detach(), before[k])}
    assert moved and all(f".{TEACHER}." in k for k in moved)  # the teacher's A and B only
    assert all(p.requires_grad for k, p in model.named_parameters() if "lora_" in k)  # both adapters train after it
    with pytest.raises(UserError, match="warm_steps"):
        check_part(VPD(warm_steps=-1))
