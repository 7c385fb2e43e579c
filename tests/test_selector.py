"""The Selector stage in the loop: the lze recipe end to end (its own metrics), the finite pool,
stages and dynamic sampling with a selector, checkpoint state and the bad inputs of issue #14."""

import dataclasses
import json

import pytest
import torch

from reasonrl.config.train import DataOpts, TrainConfig
from reasonrl.data.lze import LZE
from reasonrl.errors import UserError
from reasonrl.models import load_model
from reasonrl.parts import GroupFilter, Stages
from reasonrl.recipes import RECIPES, get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer

SMALL = dict(prompts_per_step=4, eval_every=0, final_eval_problems=0, save_every=0)


def _recipe(name="lze", **changes):
    return dataclasses.replace(get_recipe(name), group_size=4, **changes)


def _trainer(tiny_dir, run_dir, recipe=None, pool=4, task_options=None, **cfg):
    model, tok = load_model(tiny_dir)
    cfg = TrainConfig(model=str(tiny_dir), data=DataOpts(pool=pool), **{**SMALL, **cfg})
    return Trainer(model, tok, get_task("arithmetic", **(task_options or {})), recipe or _recipe(), cfg, run_dir)


def test_lze_is_a_listed_recipe_with_the_scripts_settings():
    r = RECIPES["lze"]
    assert isinstance(r.selector, LZE) and r.selector.selection_ratio == 0.4 and r.advantage.scale == "none"
    assert r.selector.warmup_transition_epochs == 0 and r.selector.min_selection_ratio == 0.3  # spec defaults kept


@pytest.mark.slow
def test_lze_three_steps_end_to_end_logs_its_selection(tiny_dir, tmp_path):
    # pool 4 = prompts_per_step: every step is one epoch (0, 1, 2) over the same 4 prompts
    cfg = TrainConfig(
        model=str(tiny_dir), out=str(tmp_path / "run"), recipe="lze", steps=3, data=DataOpts(pool=4), **SMALL
    )
    train_run(cfg, _recipe())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["select/epoch"] for r in rows] == [0.0, 1.0, 2.0]
    assert all(r["select/known"] == 4 and r["select/groups"] + r["select/skipped"] >= 4 for r in rows)
    first = rows[0]  # epoch 0 records only: every group with a non-zero advantage is kept
    assert first["select/kept"] == first["select/groups"] - first["select/dropped_zero_adv"]
    for r in rows[1:]:  # k = max(floor(0.4 n), floor(0.3 n), 1) of the active groups, fewer if zero-advantage
        n = r["select/groups"]
        assert r["select/k"] == max(int(0.4 * n), int(0.3 * n), 1) and r["select/kept"] <= min(
            r["select/k"], r["select/active"]
        )
    n_params = sum(p.numel() for p in load_model(tiny_dir)[0].parameters())
    for r in rows:  # the FLOPs estimate: 6 x params x the dropped groups' prompt + completion tokens
        assert r["select/kept_frac"] == pytest.approx(r["select/kept"] / r["select/groups"])
        assert r["select/update_flops_saved"] == 6 * n_params * r["select/update_tokens_saved"]
    totals = [r["select/total/update_flops_saved"] for r in rows]
    assert totals == pytest.approx(torch.tensor([r["select/update_flops_saved"] for r in rows]).cumsum(0).tolist())
    assert any(r["select/kept"] < r["select/groups"] for r in rows)  # the selector did drop something
    assert "select/energy_q50" in rows[0]


def test_flops_use_the_policy_parameter_count(tiny_dir, tmp_path):
    tr = _trainer(tiny_dir, tmp_path)
    b = tr.batches.make(4)
    n_params = sum(p.numel() for p in tr.model.parameters())
    m = b.metrics
    assert m["select/update_flops_saved"] == 6 * n_params * m["select/update_tokens_saved"]
    # the kept batch holds only the kept groups, rows and per-row tensors alike
    assert len(b.items) == m["select/kept"] and len(b.ro.texts) == 4 * len(b.items) == len(b.advantages)


def test_without_a_selector_nothing_changes(tiny_dir, tmp_path):
    tr = _trainer(tiny_dir, tmp_path, recipe=_recipe("grpo"), pool=0)
    b = tr.batches.make(4)
    assert tr.batches.selector is None and b.scores is None and not any(k.startswith("select/") for k in b.metrics)
    stream = get_task("arithmetic").iter_items("train", 0)  # the task's own stream, in its order
    assert [it.key for it in b.items] == [next(stream).key for _ in range(4)]
    assert tr.state()["parts"] == {}


def test_a_selector_needs_a_pool(tiny_dir, tmp_path):
    with pytest.raises(UserError, match=r"recipe 'lze'.*set data.pool=N"):
        _trainer(tiny_dir, tmp_path, pool=0)


@pytest.mark.parametrize("part", ["stages", "group_filter"])
def test_a_selector_works_with_stages_and_dynamic_sampling(tiny_dir, tmp_path, part):
    extra = {"stages": Stages(count=1)} if part == "stages" else {"group_filter": GroupFilter(max_rounds=2)}
    logged = []
    tr = _trainer(tiny_dir, tmp_path, recipe=_recipe(**extra), steps=2)
    tr.log = logged.append
    tr.train()
    assert logged[0]["select/known"] >= 4  # every generated group was observed (filtered ones too)
    if part == "stages":  # one buffer of 2 x 4 prompts = two epochs of the pool, selected once
        assert logged[0]["select/groups"] + logged[0]["select/skipped"] == 8 and "select/groups" not in logged[1]
    else:
        assert logged[0]["dynamic/prompts_generated"] >= logged[0]["select/groups"]


@pytest.mark.slow
def test_selector_state_is_checkpointed_and_restored(tiny_dir, tmp_path):
    tr = _trainer(tiny_dir, tmp_path, steps=2)
    for _ in range(2):
        tr.train_step()
    tr.save()
    again = _trainer(tiny_dir, tmp_path, steps=3)
    assert again.resume() == 2 and again.resume_info == {"selector_prompts": 4}
    assert again.batches.selector.state_dict().keys() == tr.batches.selector.state_dict().keys()
    assert again.batches.selector.prompts == tr.batches.selector.prompts
    assert torch.equal(again.batches.selector.gen.get_state(), tr.batches.selector.gen.get_state())


@pytest.mark.slow
def test_a_selector_state_from_another_dataset_is_refused(tiny_dir, tmp_path):
    tr = _trainer(tiny_dir, tmp_path, steps=1)
    tr.train_step()
    tr.save()
    other = _trainer(tiny_dir, tmp_path, steps=2, task_options={"max_digits": 1})  # other problems, same folder
    with pytest.raises(UserError, match=r"selector state holds \d+ prompt key\(s\) this run's pool does not"):
        other.resume()
    grpo = _trainer(tiny_dir, tmp_path, recipe=_recipe("grpo"), steps=2)
    with pytest.raises(
        UserError, match=r"holds the state of part\(s\) \['selector'\] that recipe 'grpo' does not have"
    ):
        grpo.resume()
