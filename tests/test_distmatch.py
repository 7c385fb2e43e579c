"""FlowRL and DISA in the loop (reasonrl.parts.balance): the log Z head as a side module (its own AdamW group, no
gradient but through the loss, outside what the engines see, restored bit-exactly), the trajectory-balance term
invariant to micro-batching inside the trainer, DISA's table (estimated in the run, read from `reasonrl disa
estimate`, missing prompts named), and TraFL's coupled masks. The 3-step runs of every recipe are marked slow."""

import copy
import dataclasses
import json
import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from helpers import batch_context, loss_context, text_rollouts
from reasonrl.config.train import DataOpts, TrainConfig
from reasonrl.data.partition import ZRow, ZTable, read_table, write_table
from reasonrl.data.selector import prompt_hash
from reasonrl.errors import UserError
from reasonrl.parts import TrajectoryBalance
from reasonrl.recipes import get_recipe
from reasonrl.tasks import Item, get_task, take_items
from reasonrl.loop.trainer import Trainer

TASK = {"max_digits": 1}


def trainer_for(name, model_tok, tmp_path, steps=3, micro=8, seed=0, pool=0, save_every=0, **changes):
    recipe = get_recipe(name)
    recipe = dataclasses.replace(
        recipe, group_size=4, sampling=dataclasses.replace(recipe.sampling, max_new_tokens=24), **changes
    )
    cfg = TrainConfig(
        recipe=name,
        task="arithmetic",
        task_options=TASK,
        steps=steps,
        prompts_per_step=2,
        eval_every=0,
        save_every=save_every,
        final_eval_problems=0,
        micro_batch_size=micro,
        max_rows=64,
        seed=seed,
        data=DataOpts(pool=pool),
    )
    model, tok = copy.deepcopy(model_tok[0]).train(), model_tok[1]
    return Trainer(model, tok, get_task("arithmetic", **TASK), recipe, cfg, tmp_path)


def head_of(tr) -> torch.nn.Module:
    """The trainer's log Z head: the balance part's module (setup_modules)."""
    return tr.modules["balance"]["log_z"].module


def head_state(tr) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in head_of(tr).state_dict().items()}


def test_the_log_z_head_is_a_part_module_in_its_own_adamw_group(sharp_tiny, tmp_path):
    tr = trainer_for("flowrl", sharp_tiny, tmp_path)
    head = head_of(tr)
    names = {n for n, _ in tr.model.named_parameters()}
    # the engines and Ray pushes read named_parameters / state_dict: the head is in neither
    assert not any("log_z" in n or "net." in n for n in names) and not any("net." in k for k in tr.model.state_dict())
    assert tr.engine.model is tr.model and not set(map(id, head.parameters())) & set(
        map(id, tr.engine.model.parameters())
    )
    assert not set(map(id, head.parameters())) & set(map(id, tr.ref.frozen.parameters()))  # nor the reference copy
    groups = {g["name"]: g for g in tr.opt.param_groups}
    assert groups["policy"]["initial_lr"] == pytest.approx(5e-5) and groups["balance.log_z"][
        "initial_lr"
    ] == pytest.approx(1e-3)
    assert {id(p) for p in groups["balance.log_z"]["params"]} == {id(p) for p in head.parameters()}
    # FlowRL's head: (Linear, GELU, LayerNorm, Dropout 0.1) x 2, Linear -> 1 on the hidden size
    assert [type(m).__name__ for m in head.net] == ["Linear", "GELU", "LayerNorm", "Dropout"] * 2 + ["Linear"]
    assert head.net[0].in_features == tr.model.config.hidden_size and head.net[-1].out_features == 1


def test_the_head_gets_gradient_only_through_the_loss(sharp_tiny, tmp_path):
    tr = trainer_for("flowrl", sharp_tiny, tmp_path)
    head = head_of(tr)
    calls = []
    head.register_forward_hook(lambda *_: calls.append(1))
    before = {k: v.clone() for k, v in head.state_dict().items()}
    batch = tr.batches.make(2)  # rollouts, rewards, reference scores: the head is not run, nothing reaches it
    assert not calls and all(p.grad is None for p in head.parameters())
    m = tr.update(batch)
    assert calls and all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in head.parameters())
    assert any(not torch.equal(before[k], v) for k, v in head.state_dict().items())
    assert math.isfinite(m["balance/loss_term"]) and "balance/log_z_term" in m and "balance/w_term" in m


def test_the_head_and_its_adam_state_are_restored_bit_exactly_on_resume(sharp_tiny, tmp_path):
    a = trainer_for("flowrl", sharp_tiny, tmp_path, steps=1, save_every=1)
    a.train()  # one step, its checkpoint (and the reference beside it)
    b = trainer_for("flowrl", sharp_tiny, tmp_path, steps=1)
    assert not all(torch.equal(x, y) for x, y in zip(head_state(a).values(), head_state(b).values()))
    assert b.resume() == 1
    for k, v in head_state(a).items():
        assert torch.equal(v, head_state(b)[k]), k
    head_a, head_b = head_of(a), head_of(b)
    for pa, pb in zip(head_a.parameters(), head_b.parameters()):
        sa, sb = a.opt.state[pa], b.opt.state[pb]
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])


def test_trajectory_balance_step_is_invariant_to_micro_batching_in_the_trainer(sharp_tiny, tmp_path):
    # the head without dropout (its draws follow the split otherwise): micro-batches of 8 rows or of 3
    one = trainer_for("flowrl", sharp_tiny, tmp_path / "a", micro=8, balance=TrajectoryBalance(z_dropout=0.0))
    three = trainer_for("flowrl", sharp_tiny, tmp_path / "b", micro=3, balance=TrajectoryBalance(z_dropout=0.0))
    batch = one.batches.make(2)
    rows = torch.arange(len(batch.ro.texts))
    m1, m3 = one._optimizer_step(batch, rows), three._optimizer_step(batch, rows)
    assert m3["loss/total"] == pytest.approx(m1["loss/total"], rel=1e-5)
    assert m3["balance/loss_term"] == pytest.approx(m1["balance/loss_term"], rel=1e-5)
    for pa, pb in zip(head_of(one).parameters(), head_of(three).parameters()):
        assert torch.allclose(pa, pb, atol=1e-6)
    for (n, pa), (_, pb) in zip(one.model.named_parameters(), three.model.named_parameters()):
        assert torch.allclose(pa, pb, atol=1e-6), n


def test_disa_estimates_its_table_before_the_first_update_and_reads_it(sharp_tiny, tmp_path):
    tr = trainer_for(
        "disa", sharp_tiny, tmp_path, pool=4, balance=TrajectoryBalance(log_z="table", reward="raw", proposals=2)
    )
    m = tr.train_step()
    table = ZTable.from_state(tr.batches.parts.state("balance")["table"])
    assert len(table.rows) == 4 and table.header["beta"] == 15.0
    # the proposal is the initial policy = the reference: every importance weight is 1, so ESS = N = 2
    assert all(r.ess == pytest.approx(2.0, abs=1e-3) and r.n == 2 for r in table.rows.values())
    assert m["disa/missing"] == 0.0 and math.isfinite(m["balance/loss_term"])
    assert m["disa/residual_prompts"] >= 1


def test_disa_estimate_writes_tables_of_the_recipes_beta():
    """`reasonrl disa estimate` without --beta must write a table `reasonrl train --recipe disa balance.table=...`
    accepts (the run refuses another beta): the run's settings are the recipe's, 1 for disa (measured against the
    spec's 15); the shortcut options only override them."""
    import inspect

    from reasonrl.commands.disa import estimate_cmd

    params = inspect.signature(estimate_cmd).parameters
    assert all(params[k].default.default is None for k in ("beta", "temperature", "length_norm", "pool", "proposals"))
    assert get_recipe("disa").balance.beta == 1.0 and get_recipe("disa").sampling.temperature == 0.8
    assert get_recipe("flowrl").balance.beta == 15.0  # FlowRL keeps its code's value


def _batch(items, G=2):
    texts = ["1+1+0=2\nA:2"] * (len(items) * G)
    ro = text_rollouts([it.prompt for it in items], texts, G)
    return ro, torch.ones(len(items), G)


def test_prompts_missing_from_the_table_are_named_or_skipped(tmp_path):
    items = [Item(key=f"k{i}", prompt=f"{i}+1=?\n", answer=str(i + 1)) for i in range(7)]
    path = write_table(
        tmp_path / "z.jsonl",
        {"beta": 15.0, "length_norm": True},
        [ZRow("k0", prompt_hash(items[0].prompt), 0.5, 2.0, 1.5, 0.5, 2)],
    )
    table = read_table(path)
    ro, rewards = _batch(items)
    ref = SimpleNamespace(score_completions=lambda *a, **k: (torch.zeros(ro.completion_ids.shape), None))
    part = TrajectoryBalance(log_z="table", reward="raw", table=str(path))
    excluded = []  # the rows the part takes out of the loss (its declared exclude_rows)
    ctx = batch_context(
        items=items,
        rollouts=ro,
        rewards=rewards,
        reference=lambda: nullcontext(ref),
        micro=64,
        exclude_rows=excluded.append,
        state={"table": table.state(), "table_summary": {"ess_mean": 2.0, "ess_min": 2.0, "ess_tilted_mean": 1.5}},
    )
    with pytest.raises(
        UserError,
        match=r"6 prompt\(s\) of this batch are missing from the DISA table .*z.jsonl: "
        r"'k1', 'k2', 'k3', 'k4', 'k5' and 1 more",
    ):
        part.score_batch(ctx)
    _, m = dataclasses.replace(part, missing="skip").score_batch(ctx)
    # k0 (group 0, rows 0-1) is in the table; the 6 others' rows 2..13 (G = 2) leave the loss
    assert m["disa/missing"] == 6.0 and torch.cat(excluded).tolist() == list(range(2, 14)) and ro.train_mask is None
    assert ctx.data.rows["log_z"].tolist() == [0.5, 0.5] + [0.0] * 12


def test_a_table_of_another_beta_or_prompt_text_is_refused(tmp_path):
    item = Item(key="k0", prompt="1+1=?\n", answer="2")
    path = write_table(
        tmp_path / "z.jsonl",
        {"beta": 10.0, "length_norm": True},
        [ZRow("k0", prompt_hash("other text"), 0.5, 2.0, 1.5, 0.5, 2)],
    )
    with pytest.raises(UserError, match="beta=10.0 in the table, 15.0 here"):
        read_table(path).check(15.0, True, 1.0)
    with pytest.raises(UserError, match="prompt key 'k0' was estimated on another prompt text"):
        read_table(path).lookup([item])
    (tmp_path / "bad.jsonl").write_text('{"disa_table": 1}\n{"key": "k0"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: not a table row"):
        read_table(tmp_path / "bad.jsonl")


def test_a_table_of_another_sampling_temperature_is_refused(tmp_path):
    # lbar_ref and lbar_mu inside log Z_hat are log-probs at the table's temperature, the residual's at the run's:
    # a table estimated at T = 0.8 is another function at T = 1.0 (issue 41), refused at the check and before the
    # run loads anything (the balance.table rule reads the header)
    path = write_table(tmp_path / "z.jsonl", {"beta": 1.0, "length_norm": True, "temperature": 0.8}, [])
    read_table(path).check(1.0, True, 0.8)  # the table's own settings pass
    with pytest.raises(UserError, match=r"temperature=0.8 in the table, 1.0 here"):
        read_table(path).check(1.0, True, 1.0)
    from reasonrl.config.train import apply_overrides
    from reasonrl.config.validate import check_run

    recipe = apply_overrides(get_recipe("disa"), {"balance": {"table": str(path)}})
    cfg = TrainConfig(recipe="disa", task="arithmetic", data=DataOpts(pool=4))
    check_run(cfg, recipe)  # the disa recipe samples at 0.8, the table's
    hot = dataclasses.replace(recipe, sampling=dataclasses.replace(recipe.sampling, temperature=1.0))
    with pytest.raises(UserError, match=r"balance.table.*temperature=0.8 in the table, 1.0 here"):
        check_run(cfg, hot)


class SpyDiffusion:
    """Scores the canvas as a fixed value per position and records the masks it was given."""

    config = SimpleNamespace(canvas=6, is_masked_diffusion=True)

    def __init__(self, value):
        self.value, self.seen = value, []

    def masked_token_logp(self, p_ids, p_mask, c_ids, c_mask, masks, temperature):
        self.seen.append(masks.clone())
        return torch.full(masks.shape, self.value, requires_grad=True)


def test_trafl_policy_and_reference_score_under_identical_masks():
    items = [Item(key=f"k{i}", prompt=f"{i}+1=?\n", answer="2") for i in range(2)]
    ro, rewards = _batch(items)  # 4 rows of 11 tokens: more than the spy's canvas of 6 is not needed here
    ro.completion_ids, ro.completion_mask = ro.completion_ids[:, :6], ro.completion_mask[:, :6]
    ref, policy = SpyDiffusion(-1.0), SpyDiffusion(-0.5)
    part = TrajectoryBalance(surrogate="elbo", weight="one", log_z="table", mc=2)
    ctx = batch_context(
        items=items,
        rollouts=ro,
        rewards=rewards,
        reference=lambda: nullcontext(ref),
        micro=3,
        policy=policy,
        state={
            "table": ZTable.of({}, [ZRow(it.key, prompt_hash(it.prompt), 0.0, 1, 1, 1, 1) for it in items]).state(),
            "table_summary": {"ess_mean": 1, "ess_min": 1, "ess_tilted_mean": 1},
        },
    )
    part.score_batch(ctx)
    masks = torch.cat(ref.seen)  # (4, K=2, 6): the reference in micro-chunks of 3 rows
    assert masks.shape == (4, 2, 6) and torch.equal(masks, ctx.data.rows["elbo_mask"])
    batch = SimpleNamespace(ro=ro, rewards=rewards, advantages=torch.zeros(4), items=items)
    rows = torch.tensor([3, 1])
    loss, m = part.loss_term(
        loss_context(
            logp=torch.zeros(2, 6),
            mask=torch.ones(2, 6),
            batch=batch,
            rows=rows,
            model=policy,
            n_seqs=4,
            data=ctx.data,
            state=ctx.state,
        )
    )
    assert torch.equal(policy.seen[0], masks[rows])  # the policy's masks for rows 3 and 1 are the reference's
    assert math.isfinite(float(loss.detach())) and "balance/logp_gap_term" in m


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flowrl", "disa"])
def test_three_step_runs_resume_exactly(name, sharp_tiny, tmp_path):
    pool = 4 if name == "disa" else 0
    # the log Z head's dropout draws from the global RNG, which `reasonrl train` seeds once per process
    # (run.py) and a checkpoint restores; here both runs share one process, so each starts from seed 0
    whole = trainer_for(name, sharp_tiny, tmp_path / "whole", pool=pool)
    torch.manual_seed(0)
    rows = [whole.train_step() for _ in range(3)]
    assert all(math.isfinite(r["balance/loss_term"]) for r in rows)
    cut = trainer_for(name, sharp_tiny, tmp_path / "cut", pool=pool, steps=1, save_every=1)
    torch.manual_seed(0)
    cut.train()
    again = trainer_for(name, sharp_tiny, tmp_path / "cut", pool=pool)
    assert again.resume() == 1
    again.train()
    for k, v in whole.model.state_dict().items():
        assert torch.equal(v, again.model.state_dict()[k]), k
    for k, v in whole.modules.get("balance", {}).items():  # the log Z head, where the recipe has one
        assert all(
            torch.equal(x, again.modules["balance"][k].module.state_dict()[n]) for n, x in v.module.state_dict().items()
        ), k


def _estimate_cli(*args):
    from typer.testing import CliRunner

    from reasonrl.cli import app

    res = CliRunner().invoke(app, ["disa", "estimate", *map(str, args)])
    assert res.exit_code == 0, res.output
    return res


def test_disa_estimate_command_writes_a_table_the_recipe_reads(tiny_dir, tmp_path):
    out = tmp_path / "z.jsonl"
    res = _estimate_cli(
        "--out", out, "--reference", tiny_dir, "--pool", 3, "--proposals", 2, "--task-opt", "max_digits=1", "--json"
    )
    summary = json.loads(res.stdout[res.stdout.index("{") :])
    assert summary["prompts"] == 3.0 and summary["ess_min"] == pytest.approx(2.0, abs=1e-3)  # weights all 1: ESS = N
    table = read_table(out)
    assert table.header["beta"] == get_recipe("disa").balance.beta == 1.0 and table.header["proposals"] == 2
    assert table.header["temperature"] == 0.8  # the recipe's sampling temperature: what the run checks
    pool = take_items(get_task("arithmetic", **TASK), "train", 3, seed=0)
    assert set(table.rows) == {it.key for it in pool}
    # the proposal is the reference: every importance weight is 1, so ESS = N
    assert all(r.ess == pytest.approx(2.0, abs=1e-3) for r in table.rows.values())


def test_disa_estimate_refuses_bad_input_before_loading(tmp_path, capsys):
    from reasonrl import cli

    for args, said in (
        (["--recipe", "grpo"], "recipe 'grpo' reads no log Z table"),
        (["--beta", "0"], "'balance.beta' = 0.0"),
        (["--reference", tmp_path / "nothing"], "nothing"),
    ):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["disa", "estimate", "--out", str(tmp_path / "z.jsonl"), *map(str, args)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and said in err and err.count("\n") == 1, (args, err)
    assert not (tmp_path / "z.jsonl").exists()


def test_disa_estimate_scores_with_the_recipes_reward(tiny_dir, tmp_path):
    """The table is the run's: its rewards are the recipe's (here the task's 0/1 times task_reward_weight=0.5),
    not task.verify's (issue 41). The proposal is the reference, so every importance weight is 1 and, with beta 1
    and N = 2 proposals of which k are right, log Z_hat = ln((k e^0.5 + (2 - k)) / 2):
    k = 0: ln(1) = 0; k = 1: ln((1.648721 + 1) / 2) = ln(1.324361) = 0.280929; k = 2: 0.5 (reward_mean 0.5 k / 2)."""
    out = tmp_path / "z.jsonl"
    _estimate_cli(
        "--out",
        out,
        "--reference",
        tiny_dir,
        "--pool",
        6,
        "--proposals",
        2,
        "--task-opt",
        "max_digits=1",
        "task_reward_weight=0.5",
    )
    rows = list(read_table(out).rows.values())
    hand = {0.0: 0.0, 0.25: 0.280929, 0.5: 0.5}
    assert {r.reward_mean for r in rows} <= set(hand) and any(r.reward_mean > 0 for r in rows)
    for r in rows:
        assert r.log_z == pytest.approx(hand[r.reward_mean], abs=2e-3), r


def test_disa_estimate_renders_the_runs_prompts_within_its_budget(chat_model_dir, tmp_path, monkeypatch):
    """A chat model's proposals are sampled from its templated prompts (the run's formatter) within the run's
    budget (sampling.max_new_tokens), as the run's own offline stage samples them (issue 41: plain prompts and the
    task's default budget)."""
    from reasonrl.rollout.hf import HFEngine

    seen, generate = [], HFEngine.generate

    def spy(self, prompts, n, sampling, **kw):
        seen.append(([str(p) for p in prompts], sampling.max_new_tokens, n))
        return generate(self, prompts, n, sampling, **kw)

    monkeypatch.setattr(HFEngine, "generate", spy)
    out = tmp_path / "z.jsonl"
    _estimate_cli(
        "--out",
        out,
        "--reference",
        chat_model_dir,
        "--pool",
        2,
        "--proposals",
        2,
        "--task-opt",
        "max_digits=1",
        "sampling.max_new_tokens=5",
    )
    ((prompts, budget, n),) = seen
    assert budget == 5 and n == 2 and len(prompts) == 2
    assert all(p.startswith("<|im_start|>") and p.endswith("<|im_start|>assistant\n") for p in prompts), prompts
    assert len(read_table(out).rows) == 2


def test_disa_estimate_is_the_runs_own_offline_stage(sharp_tiny, tiny_dir, tmp_path):
    """With the reference as the proposal, the command's table is the table the disa run estimates before its first
    update: the same pool, proposal seeds, reward and scores, row for row."""
    from reasonrl.commands.disa import estimate_table

    part = TrajectoryBalance(log_z="table", reward="raw", beta=1.0, proposals=2)
    tr = trainer_for("disa", sharp_tiny, tmp_path / "run", pool=4, balance=part)
    part.before_step(tr.batches.round_context("balance", None))
    in_run = ZTable.from_state(tr.batches.parts.state("balance")["table"])
    cfg = dataclasses.replace(tr.cfg, model=str(tiny_dir))
    header, rows = estimate_table(cfg, tr.recipe)
    assert header["beta"] == 1.0 and header["temperature"] == 0.8 and header["reference"] == str(tiny_dir)
    assert [r.key for r in rows] == list(in_run.rows) and any(r.reward_mean > 0 for r in rows)
    for r in rows:  # the same samples: the same rewards; the scores to float noise (the run's model is in train mode)
        mine = in_run.rows[r.key]
        assert (r.prompt_hash, r.reward_mean, r.n) == (mine.prompt_hash, mine.reward_mean, mine.n), r
        assert (r.log_z, r.ess, r.ess_tilted) == pytest.approx((mine.log_z, mine.ess, mine.ess_tilted), abs=1e-5), r
