"""Every registered recipe runs two training steps end to end on the CPU (the tiny model, its task, in
process) and logs its own metrics: the default tier's one short end-to-end test per recipe. The
longer runs of each method (run folders, resumes, several ranks, the readings of its metrics) are
in its own test file, marked ``slow``."""
import copy
import dataclasses
import math

import pytest

from reasonrl.config.train import DataOpts, Lora, TrainConfig
from reasonrl.recipes import RECIPES, get_recipe
from reasonrl.rewards.base import reward_name
from reasonrl.tasks import get_task, take_items
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_run

from fakes import write_drafts

POLICY = ("loss/policy", "loss/clip_frac_low", "loss/clip_frac_high")
# recipe -> (task, task options, metric keys the recipe's own parts log at every step)
OWN = {
    "grpo": ("arithmetic", {}, POLICY), "dr_grpo": ("arithmetic", {}, POLICY), "gspo": ("arithmetic", {}, POLICY),
    "rloo": ("arithmetic", {}, POLICY), "reinforce_pp": ("arithmetic", {}, POLICY), "cispo": ("arithmetic", {}, POLICY),
    "dapo": ("arithmetic", {}, ("dynamic/groups_kept", "dynamic/rounds", "reward/overlong/soft_frac")),
    "edas": ("arithmetic", {}, ("dynamic/groups_kept", "reward/overlong/soft_frac")),
    "mu_grpo": ("arithmetic", {}, ("veto/frac_rows", "veto/frac_tokens", "stage/staleness", "stage/fresh")),
    "sage": ("arithmetic", {}, ("loss/kl", "loss/kl_term", "sage/q_mean", "sage/frac_shaped")),
    "corr_po": ("arithmetic", {}, ("corr/mean", "corr/frac_defined", "reward/corr_po/mean")),
    "nudgerl": ("arithmetic", {}, ("nudge/hinted_frac", "nudge/distill_term")),
    "cipo": ("arithmetic", {}, ("cipo/selected", "cipo/groups", "cipo/rho")),
    "stride": ("arithmetic", {}, ("stride/redirects", "stride/success_rate", "stride/unparsed")),
    "physics_r1": ("multipart", {}, ("reward/physics_match/mean", "reward/physics_match/part_acc", "dynamic/rounds")),
    "tempo": ("temporal", {}, ("reward/tempo/leak_rate", "reward/tempo/task_score", "reward/tempo/mean")),
    "sapo": ("recommend", {}, ("steps/reward_level0", "steps/token_coverage")),
    "sspo": ("diagnosis", {}, ("reward/sspo/format_rate", "reward/sspo/set_score", "reward/sspo/mean")),
    "codethinker": ("code", {}, ("beam/branches", "beam/budget", "reward/consistency/mean")),
    "vspo": ("arithmetic", {"spaced_rate": 0.05}, ("steer/alpha_max", "reward/spaced/mean")),
    "ssopd": ("arithmetic", {}, ("distill/pairs", "distill/frontier_weight", "distill/ssopd_term")),
    "egrsd": ("arithmetic", {}, ("egrsd/rows",)), "cl_egrsd": ("arithmetic", {}, ("egrsd/rows",)),
    "lze": ("arithmetic", {}, ("select/kept", "select/groups", "select/k")),
    "d2evo": ("arithmetic", {}, ("d2evo/anchors", "d2evo/pool_size", "d2evo/iteration")),
    "tgpo": ("arithmetic", {}, ("teacher/agree", "teacher/tgpo_coef")),
    "tgpo_adv": ("arithmetic", {}, ("teacher/agree", "teacher/tgpo_coef", "teacher/tgpo_prob")),
    "rkl_opd": ("arithmetic", {}, ("teacher/agree", "teacher/rkl")),
    "kdrl": ("arithmetic", {}, ("teacher/agree", "teacher/kdrl_kl")),
    "fest": ("arithmetic", {}, ("fest/demos", "fest/pairs", "fest/alpha", "fest/sup_term")),
    "drafts": ("arithmetic", {}, ("drafts/with_draft_frac", "drafts/mismatched_frac")),
    "vpd": ("arithmetic", {}, ("vpd/beta", "vpd/teacher_accuracy", "vpd/e_loss_term", "vpd/m_loss_term")),
    "su01": ("arithmetic", {}, ("su01/refine_buffer", "su01/replay_buffer", "su01/refine_groups")),
    "azr": ("azr", {}, ("azr/proposer_reward", "azr/buffer_deduction", "azr/buckets", "reward/azr_format/format_rate")),
    "evoenv": ("evoenv", {}, ("evoenv/generated", "evoenv/generator_reward", "evoenv/pool_size", "evoenv/retired_total")),
    "populora": ("azr", {}, ("populora/games", "populora/teacher_reward", "populora/buckets", "populora/pbt_replaced",
                             "populora/skill_t0")),
    "prompt_policy": ("arithmetic", {}, ("prompt_policy/worker_calls", "prompt_policy/best_reward",
                                         "prompt_policy/distill_term")),
    "ppo": ("arithmetic", {}, ("critic/value_loss_term", "critic/explained_var", "critic/vf_clip_frac",
                               "grad_norm/critic.value")),
    "grlo": ("explain", {"max_digits": 1}, ("critic/value_loss_term", "reward/rm/score", "reward/rm/mean")),
    "flowrl": ("arithmetic", {}, ("balance/loss_term", "balance/log_z_term", "balance/w_term", "balance/delta_std")),
    "disa": ("arithmetic", {}, ("balance/loss_term", "disa/missing", "disa/ess_mean", "disa/residual_prompt_abs")),
    "trafl": ("arithmetic", {}, ("balance/loss_term", "balance/log_z_term", "balance/logp_gap_term")),
    "diffu_grpo": ("arithmetic", {}, POLICY + ("loss/kl",)),
    # the arithmetic model writes no code: every turn gets the no-code error observation, episodes run to a cap
    "codeact": ("fhir", {"n_patients": 10}, POLICY + ("episode/turns_mean", "episode/finish_context",
                                                    "episode/trainable_frac", "env/codeact/malformed")),
    "codeact_judge": ("fhir", {"n_patients": 10}, ("episode/turns_mean", "judge/no_answer", "reward/judge/mean")),
}


def small(name: str, task, tmp_path) -> tuple:
    """(recipe, run-config changes) for a two-step run on ``task``: groups of 4, short completions, the
    smallest settings of each part that still exercise it."""
    r = get_recipe(name)
    changes = {"group_size": 1 if r.group_size == 1 else 4, "sampling": dataclasses.replace(r.sampling, max_new_tokens=24)}
    run = {}
    if r.hints is not None:  # G = n_hints * per_hint
        changes["hints"] = dataclasses.replace(r.hints, per_hint=2)
    if r.steering is not None:  # the test model has 2 layers
        changes["steering"] = dataclasses.replace(r.steering, layer=1)
    if r.d2evo is not None:
        changes["d2evo"] = dataclasses.replace(r.d2evo, estimate_samples=2, solver_samples=2, anchors_per_step=1)
    if r.fest is not None:
        changes["fest"] = dataclasses.replace(r.fest, n_demos=2, demos_per_step=2)
    if r.drafts is not None:
        path = write_drafts(tmp_path / "drafts.jsonl", take_items(task, "train", 8, seed=0), flags=True)
        changes["drafts"] = dataclasses.replace(r.drafts, file=str(path))
    if "pool" in r.needs:
        run["data"] = DataOpts(pool=8)
    if "lora" in r.needs:
        run["lora"] = Lora(r=4, alpha=8.0)
    if r.azr is not None:
        changes["azr"] = dataclasses.replace(r.azr, proposals=1, estimate_samples=2)
    if r.evoenv is not None:
        changes["evoenv"] = dataclasses.replace(r.evoenv, proposals=1, estimate_instances=2, estimate_samples=1,
                                                review_samples=1)
    if r.populora is not None:  # two of each, PBT at every step
        changes["populora"] = dataclasses.replace(r.populora, teachers=2, students=2, estimate_samples=2,
                                                  types="deduction", pbt_every=1, pbt_frac=0.5)
    if r.prompt_policy is not None:
        changes["prompt_policy"] = dataclasses.replace(r.prompt_policy, instances=2)
    if any(reward_name(fn) == "rm" for fn, _ in r.extra_rewards):  # an untrained reward model: the plumbing only
        from reasonrl.loop.rm_train import new_reward_model

        rm = new_reward_model("tiny:tiny", seed=0)
        rm.model.save_pretrained(tmp_path / "rm")
        rm.tok.save_pretrained(tmp_path / "rm")
        changes["extra_rewards"] = tuple((dataclasses.replace(fn, model=str(tmp_path / "rm")) if reward_name(fn) == "rm"
                                          else fn, w) for fn, w in r.extra_rewards)
    if any(reward_name(fn) == "judge" for fn, _ in r.extra_rewards):  # a judge function: exact match
        (tmp_path / "judge.py").write_text("def judge(prompts, questions, golds, answers, evidence):\n"
                                           "    return [a.strip() == g for a, g in zip(answers, golds)]\n")
        changes["extra_rewards"] = tuple((dataclasses.replace(fn, backend=f"{tmp_path / 'judge.py'}:judge")
                                          if reward_name(fn) == "judge" else fn, w) for fn, w in r.extra_rewards)
    if r.balance is not None and r.balance.log_z == "table":  # DISA's in-run table: 2 proposals per pool prompt
        changes["balance"] = dataclasses.replace(r.balance, proposals=2)
    return dataclasses.replace(r, **changes), run


def test_every_registered_recipe_has_a_row():
    assert set(OWN) == set(RECIPES)


@pytest.mark.parametrize("name", sorted(OWN))
def test_recipe_runs_two_steps_and_logs_its_own_metrics(name, request, tmp_path):
    task_name, options, keys = OWN[name]
    # one-digit sums: the tiny model gets some right, so groups vary and every part has rows to act on
    options = {"max_digits": 1, **options} if task_name == "arithmetic" else options
    base = get_task(task_name, **options)
    recipe, run = small(name, base, tmp_path)
    cfg = TrainConfig(recipe=name, task=task_name, task_options=options, steps=2, prompts_per_step=2, eval_every=0,
                      save_every=0, final_eval_problems=0, micro_batch_size=8, max_rows=64, **run)
    check_run(cfg, recipe)
    # the diffusion recipes' own model (run_defaults: the shipped masked-diffusion LM), else the warmed-up tiny one
    diffusion = dict(recipe.run_defaults).get("model") == "builtin:diffusion"
    start = request.getfixturevalue("sharp_mdlm" if diffusion else "sharp_tiny")
    model, tok = copy.deepcopy(start[0]).train(), start[1]
    task = recipe.wrap_task(base, tok, cfg.seed)
    trainer = Trainer(model, tok, task, recipe, cfg, tmp_path)
    rows = [trainer.train_step() for _ in range(2)]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert {"reward/mean", "accuracy", "lr", "nonfinite", "time/update"} <= set(r)
        assert set(keys) <= set(r), (r["step"], sorted(set(keys) - set(r)))
