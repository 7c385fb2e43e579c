"""The part protocol (parts/protocol.py), from the outside: a toy method defined in this file alone
(registered, with a rule, a score, a shaper, a second round, a loss term and an after-step hook)
joins the loop, the config, the validation and the checkpoints without a line changed anywhere
else; two second rounds in one recipe each see their own groups."""

import dataclasses
from typing import ClassVar

import pytest
import torch

from helpers import batch_context
from reasonrl.loop.batch import BatchMaker
from reasonrl.config.train import TrainConfig, apply_overrides, split_config, valid_keys
from reasonrl.errors import UserError
from reasonrl.parts import Correction, Groups, Recipe
from reasonrl.parts.protocol import HOOKS, NEEDS, PART_TYPES, PartModule, Parts, register_part
from reasonrl.recipes import get_recipe
from reasonrl.config.rules import Rule, at_least
from reasonrl.tasks import get_task
from reasonrl.config.validate import check_run, problems

from fakes import FakeEngine, kind


TOY: Recipe  # built once the toy part is registered (the fixture below)


@pytest.fixture(autouse=True, scope="module")
def _toys_registered():
    """The toy parts are registered while this module's tests run, and only then: the registry is global, and
    tests elsewhere read its order (tests/test_registry.py) and list its parts (tests/test_docs_tables.py)."""
    global TOY
    register_part("toy")(Toy)
    register_part("toy_head")(ToyHead)
    TOY = Recipe(name="toy", paper="a test", toy=Toy(), group_size=4)
    yield
    PART_TYPES.pop("toy", None)
    PART_TYPES.pop("toy_head", None)


@dataclasses.dataclass(frozen=True)
class Toy:
    """A toy method: advantages of first-round groups times ``scale``; one extra group per first-round
    group that has a wrong answer (its prompt again, tag "toy"); a loss term ``coef * (token-mean
    log-prob of its own rows)``; a step counter in its state."""

    scale: float = 2.0
    coef: float = 0.5

    RULES: ClassVar[dict[str, Rule]] = {
        "scale": at_least(0),
        "coef": Rule(lambda v, c: v >= 0 and c.get("scale") > 0, "toy.coef >= 0 with toy.scale > 0"),
    }

    def score_batch(self, ctx):
        ctx.data.rows["seen"] = torch.ones(len(ctx.rollouts.texts))  # (R,) per-row data, cut with the rows
        return None, {"toy/rows": float(len(ctx.rollouts.texts))}

    def shape_advantages(self, adv, ctx):
        scale = torch.where(ctx.kinds == 0, self.scale, 1.0)  # (B,)
        return adv * scale.view(-1, *([1] * (adv.dim() - 1))), {"toy/first_groups": float((ctx.kinds == 0).sum())}

    def extend(self, ctx):
        b = ctx.batch
        wrong = [i for i in range(len(b.items)) if b.correct[i].min() == 0]
        ctx.state["extends"] = ctx.state.get("extends", 0) + 1
        items = [b.items[i] for i in wrong]
        ro = ctx.sample(items, [it.prompt for it in items], tag="toy", first=ctx.position - len(b.items))
        rewards, correct, _ = ctx.reward(items, ro)
        return Groups(items, ro, rewards, correct, data={"note": "mine"}), {"toy/groups": float(len(items))}

    def loss_term(self, ctx):
        mine = (ctx.batch.group_kinds()[ctx.rows // ctx.batch.rewards.shape[1]] == ctx.kind).to(ctx.mask.dtype)  # (n,)
        mask = ctx.mask * mine[:, None]
        term = self.coef * (ctx.logp * mask).sum() / mask.sum().clamp(min=1)
        return term, {"toy/term": float(term.detach()), "toy/note_seen": float(ctx.data.values["note"] == "mine")}

    def after_step(self, ctx):
        ctx.state["steps"] = ctx.state.get("steps", 0) + 1
        return None, {"toy/after_step": float(ctx.step)}


def test_the_toy_part_is_registered_and_reachable_from_recipe_config_and_validation():
    assert PART_TYPES["toy"] is Toy and TOY.toy == Toy() and TOY.parts == Parts({"toy": Toy()})
    assert get_recipe("grpo").toy is None  # any registered part reads as None where a recipe lacks it
    assert [k for k, _ in TOY.hooked("extend")] == ["toy"] and TOY.rounds == [("toy", Toy())]
    assert "toy.coef" in valid_keys() and TOY.describe()["toy"] == {"scale": 2.0, "coef": 0.5}
    # the config section comes from the registration: turned on over grpo, changed, off again
    on = apply_overrides(get_recipe("grpo"), split_config({"toy": {"coef": "0.25"}})[1])
    assert on.toy == Toy(coef=0.25) and apply_overrides(on, split_config({"toy": None})[1]).toy is None
    with pytest.raises(UserError, match="unknown config key 'toy.coeff' \\(did you mean 'toy.coef'\\?\\)"):
        split_config({"toy": {"coeff": 1}})
    # its rule, read in its own section (scale), names the key
    assert problems(TrainConfig(), dataclasses.replace(TOY, toy=Toy(coef=-1.0))) == [
        "config key 'toy.coef' = -1.0 is out of range: must be toy.coef >= 0 with toy.scale > 0"
    ]
    check_run(TrainConfig(), TOY)
    with pytest.raises(TypeError, match="unknown keyword 'toyy'"):
        Recipe(name="x", toyy=Toy())


def test_every_hook_is_in_the_protocol_and_the_needs_are_named():
    assert set(HOOKS) == {
        "wrap_task",
        "setup_model",
        "setup_modules",
        "before_step",
        "draw",
        "generate",
        "extend",
        "score_batch",
        "shape_advantages",
        "loss_term",
        "after_step",
    }
    assert set(NEEDS) == {
        "reference",
        "pool",
        "lora",
        "in_process",
        "policy_in_loss",
        "hidden",
        "own_engine",
        "branch",
        "char_offsets",
        "extra_labels",
        "optimizer",
        "exclude_rows",
    }
    with pytest.raises(ValueError, match="unknown hook 'shape'"):
        TOY.hooked("shape")


def _maker(recipe):
    task = get_task("arithmetic")
    return BatchMaker(task, recipe, FakeEngine(task), budget=20, seed=0)


def test_the_toy_round_score_and_shaper_join_a_step():
    bm = _maker(dataclasses.replace(get_recipe("dr_grpo"), group_size=4, toy=Toy(scale=3.0)))  # r - mean(r)
    b = bm.make(6)
    wrong = [i for i, it in enumerate(b.items[:6]) if kind(it.prompt) != 0]
    assert b.kinds.tolist() == [0] * 6 + [1] * len(wrong) and b.metrics["toy/groups"] == len(wrong)
    assert b.parts["toy"].values == {"note": "mine"} and b.parts["toy"].rows["seen"].shape == (len(b.ro.texts),)
    assert b.metrics["toy/rows"] == float(len(b.ro.texts)) and b.metrics["toy/first_groups"] == 6.0
    r = b.rewards
    # first-round groups: (r - mean r) x 3; the round's groups keep the estimator's r - mean r
    assert torch.allclose(b.advantages.view(-1, 4)[:6], 3 * (r[:6] - r[:6].mean(-1, keepdim=True)))
    assert torch.allclose(b.advantages.view(-1, 4)[6:], r[6:] - r[6:].mean(-1, keepdim=True))
    assert bm.parts.state("toy") == {"extends": 1}


def test_two_second_rounds_each_see_the_first_round_and_keep_their_own_kind():
    recipe = dataclasses.replace(
        get_recipe("grpo"), group_size=4, correction=Correction(q0=1.0, p_max=1.0, rho=1.0), toy=Toy()
    )
    assert [k for k, _ in recipe.rounds] == ["correction", "toy"]  # registration order: kinds 1 and 2
    bm = _maker(recipe)
    b = bm.make(6)
    wrong = [i for i, it in enumerate(b.items[:6]) if kind(it.prompt) != 0]
    kinds = b.kinds.tolist()
    assert kinds[:6] == [0] * 6 and kinds.count(1) == len(wrong) and kinds.count(2) == len(wrong)
    # the toy round saw the first round only: its groups are the first round's wrong prompts, once each
    toy_items = [it for it, k in zip(b.items, kinds) if k == 2]
    assert [it.key for it in toy_items] == [b.items[i].key for i in wrong]
    assert (bm.parts.kind_of("correction"), bm.parts.kind_of("toy"), bm.parts.kind_of("nothing")) == (1, 2, -1)


def test_the_toy_part_trains_its_loss_term_and_its_state_is_checkpointed(tiny_dir, tmp_path):
    from reasonrl.models import load_model
    from reasonrl.loop.trainer import Trainer

    recipe = dataclasses.replace(
        get_recipe("grpo"),
        group_size=2,
        toy=Toy(),
        sampling=dataclasses.replace(get_recipe("grpo").sampling, max_new_tokens=12),
    )
    cfg = TrainConfig(
        model=str(tiny_dir),
        steps=2,
        prompts_per_step=2,
        eval_every=0,
        save_every=1,
        final_eval_problems=0,
        task_options={"max_digits": 1},
    )

    def trainer(steps):
        model, tok = load_model(tiny_dir)
        return Trainer(
            model, tok, get_task("arithmetic", max_digits=1), recipe, dataclasses.replace(cfg, steps=steps), tmp_path
        )

    tr = trainer(2)
    rows = [tr.train_step() for _ in range(2)]
    assert [r["toy/after_step"] for r in rows] == [1.0, 2.0] and all(r["toy/note_seen"] == 1.0 for r in rows)
    assert all(r["toy/term"] < 0 for r in rows if r.get("toy/groups"))  # coef x mean log-prob of its rows
    tr.save()
    assert tr.state()["parts"]["toy"] == {"extends": 2, "steps": 2}
    again = trainer(3)
    assert again.resume() == 2 and again.batches.parts.state("toy") == {"extends": 2, "steps": 2}
    again.train_step()
    assert again.batches.parts.state("toy") == {"extends": 3, "steps": 3}
    # a checkpoint holding a part this recipe lacks is refused, naming the part
    model, tok = load_model(tiny_dir)
    plain = Trainer(model, tok, get_task("arithmetic", max_digits=1), get_recipe("grpo"), cfg, tmp_path)
    with pytest.raises(UserError, match=r"state of part\(s\) \['toy'\] that recipe 'grpo' does not have"):
        plain.resume()


def test_a_batch_context_is_what_a_shaper_reads():
    adv = torch.tensor([[1.0, -1.0], [2.0, -2.0]])
    out, m = Toy(scale=0.5).shape_advantages(adv, batch_context(kinds=torch.tensor([0, 1])))
    assert out.tolist() == [[0.5, -0.5], [2.0, -2.0]] and m == {"toy/first_groups": 1.0}


@dataclasses.dataclass(frozen=True)
class ToyHead:
    """A part with a module of its own: a linear head on the policy's last hidden states (``needs``
    "hidden"), its own lr and clip, trained toward 1 by its loss term (a value head's shape)."""

    lr: float = 0.01

    needs: ClassVar[frozenset[str]] = frozenset({"hidden"})

    def setup_modules(self, ctx):
        gen = torch.Generator().manual_seed(ctx.seed)
        head = torch.nn.Linear(ctx.model.config.hidden_size, 1)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * 0.1)
        return {"head": PartModule(head, lr=self.lr, max_grad_norm=0.5)}, {
            "toy_head/params": float(head.weight.numel())
        }

    def loss_term(self, ctx):
        v = ctx.modules["head"](ctx.hidden).squeeze(-1)  # (n, T, H) -> (n, T)
        term = (((v - 1.0) ** 2) * ctx.mask).sum() / ctx.n_tokens
        return term, {"toy_head/hidden_dim": float(ctx.hidden.shape[-1]), "toy_head/fit_term": float(term.detach())}


def test_a_part_module_gets_its_own_group_clip_and_exact_checkpoint(tmp_path):
    from reasonrl.models import build_tiny
    from reasonrl.loop.trainer import Trainer

    grpo = get_recipe("grpo")
    recipe = dataclasses.replace(
        grpo, group_size=2, toy_head=ToyHead(), sampling=dataclasses.replace(grpo.sampling, max_new_tokens=6)
    )
    cfg = TrainConfig(
        steps=2, prompts_per_step=2, eval_every=0, save_every=0, final_eval_problems=0, task_options={"max_digits": 1}
    )

    def trainer():
        model, tok = build_tiny("tiny", seed=0)
        return Trainer(model, tok, get_task("arithmetic", max_digits=1), recipe, cfg, tmp_path)

    tr = trainer()
    names = [g["name"] for g in tr.opt.param_groups]
    assert names == ["policy", "toy_head.head"] and tr.opt.param_groups[1]["max_grad_norm"] == 0.5
    head = tr.modules["toy_head"]["head"].module
    before = head.weight.detach().clone()
    first = tr.train_step()
    # the policy's lr warms up (optim.warmup_steps=5), the module's stays its own constant lr
    assert tr.opt.param_groups[1]["lr"] == 0.01 and tr.opt.param_groups[0]["lr"] < grpo.optim.lr
    assert first["toy_head/hidden_dim"] == 128.0 and "grad_norm/toy_head.head" in first
    assert not torch.equal(head.weight, before)  # trained by its own loss term through the policy's hidden states
    tr.save()
    straight = tr.train_step()
    again = trainer()
    assert again.resume() == 1
    resumed = again.train_step()
    assert resumed["toy_head/fit_term"] == straight["toy_head/fit_term"]
    # setup_modules' metrics (the head's 128 x 1 weights) come with each process's first step only
    assert first["toy_head/params"] == resumed["toy_head/params"] == 128.0 and "toy_head/params" not in straight
    assert all(
        torch.equal(a, b)
        for a, b in zip(head.state_dict().values(), again.modules["toy_head"]["head"].module.state_dict().values())
    )
    assert all(torch.equal(a, b) for a, b in zip(tr.model.state_dict().values(), again.model.state_dict().values()))
    # the module lives in the checkpoint, never in the policy's own files
    ckpt = tmp_path / "checkpoints" / "step-000001"
    assert (ckpt / "modules" / "toy_head.head.safetensors").is_file()
    plain = Trainer(*build_tiny("tiny", seed=0), get_task("arithmetic", max_digits=1), grpo, cfg, tmp_path)
    with pytest.raises(UserError, match=r"holds the part modules \['toy_head.head'\] but this run has \[\]"):
        plain.resume()
