"""LoRA through peft (lora.r > 0) for any recipe: only the adapters train, the KL reference is the
same model with its adapters off, checkpoints hold the adapter and resume bit-exactly, and final/
holds the adapter plus a merged model that plain transformers loads."""

import dataclasses
import json

import pytest
import torch
import yaml

from reasonrl.cli import parse_options
from reasonrl.config.train import Lora, TrainConfig, dotted_to_nested, split_config
from reasonrl.errors import UserError
from reasonrl.models import build_tiny, load_model, score_completions
from reasonrl.models.lora import apply_lora
from reasonrl.models.steering import decoder_layer, steering_vector
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer

LORA = Lora(r=4, alpha=8.0)


def spread(adv, ctx):
    """Every row a distinct non-zero advantage, so every step moves the adapters."""
    return torch.linspace(-1.0, 1.0, adv.numel()).view_as(adv), {}  # a hook returns (value, metrics)


def _trainer(tiny_dir, run_dir, name="sage", steps=4, lora=LORA, log=None):
    model, tok = load_model(tiny_dir)
    recipe = dataclasses.replace(
        get_recipe(name), group_size=4, shapers=(spread,), optim=dataclasses.replace(get_recipe(name).optim, lr=1e-3)
    )
    cfg = TrainConfig(model=str(tiny_dir), steps=steps, prompts_per_step=2, eval_every=0, save_every=0, lora=lora)
    return Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir, log=log or (lambda m: None))


def _scores(model, b, temperature):
    with torch.no_grad():
        return score_completions(
            model,
            b.ro.prompt_ids,
            b.ro.prompt_mask,
            b.ro.completion_ids,
            b.ro.completion_mask,
            temperature=temperature,
            chunk_rows=64,
            entropies=False,
        )[0]


def test_adapter_init_depends_on_the_seed_alone_and_leaves_the_global_rng():
    models = [build_tiny("tiny")[0] for _ in range(4)]  # build_tiny seeds the global RNG itself: built first
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    a = apply_lora(models[0], LORA, seed=7)
    assert torch.equal(torch.get_rng_state(), rng)  # the caller's stream is untouched
    torch.manual_seed(999)  # whatever the global RNG holds, the same seed gives the same adapters
    b, c = apply_lora(models[1], LORA, seed=7), apply_lora(models[2], LORA, seed=8)
    key = next(k for k in a.state_dict() if "lora_A" in k)
    assert torch.equal(a.state_dict()[key], b.state_dict()[key])
    assert not torch.equal(a.state_dict()[key], c.state_dict()[key])
    assert apply_lora(a, LORA) is a  # already adapted: left as it is
    assert apply_lora(models[3], Lora()) is models[3]  # r = 0: full fine-tuning


def test_the_reference_is_the_base_model_with_adapters_off(tiny_dir, tmp_path):
    base, _ = load_model(tiny_dir)
    tr = _trainer(tiny_dir, tmp_path)
    assert tr.ref is not None and not tr.ref.has_weights  # no second copy of the weights
    t = tr.recipe.sampling.temperature or 1.0  # the reference is scored at the sampling temperature
    b = tr.batches.make(2)
    # the base model's log-probs, to float rounding: scoring prefills each distinct prompt once (a (2, P)
    # batch here, models.scoring.shared_prefix_logits), and on such a shape peft's wrapped layers with the
    # adapters off and the plain model round the last bits differently (1.4e-6 seen on log-probs near -9)
    same = lambda x, y: torch.allclose(x, y, atol=1e-5, rtol=0)  # noqa: E731
    assert same(b.ref_logp, _scores(base, b, t))  # before training: the base model's log-probs
    assert same(_scores(tr.model, b, t), b.ref_logp)  # peft starts B at 0: the adapted policy is the base
    tr.train_step(), tr.train_step()
    b = tr.batches.make(2)
    assert same(b.ref_logp, _scores(base, b, t))  # after 2 steps: still the base
    assert not torch.allclose(_scores(tr.model, b, t), b.ref_logp, atol=1e-6)  # while the adapted policy moved
    assert tr.model.training  # scoring the reference left the policy's mode alone


def test_lora_training_changes_only_adapter_weights(tiny_dir, tmp_path):
    before = {k: v.clone() for k, v in load_model(tiny_dir)[0].state_dict().items()}
    tr = _trainer(tiny_dir, tmp_path, name="grpo", steps=3)
    adapters0 = {k: v.detach().clone() for k, v in tr.model.named_parameters() if "lora_" in k}
    assert [p for p in tr.opt.param_groups[0]["params"]] == [p for k, p in tr.model.named_parameters() if "lora_" in k]
    tr.train()
    base = {
        k.replace(".base_layer", ""): v for k, v in tr.model.get_base_model().state_dict().items() if "lora_" not in k
    }
    assert base.keys() == before.keys()
    assert all(torch.equal(base[k], before[k]) for k in before)  # base weights bit-identical
    after = dict(tr.model.named_parameters())
    changed = {k for k, v in adapters0.items() if not torch.equal(after[k].detach(), v)}
    assert any("lora_A" in k for k in changed) and any("lora_B" in k for k in changed)
    assert all(p.grad is None for k, p in tr.model.named_parameters() if "lora_" not in k)  # frozen: never a gradient


def test_a_lora_resume_is_bit_exact(tiny_dir, tmp_path):
    straight, resumed = [], []
    _trainer(tiny_dir, tmp_path / "a", log=straight.append).train()
    tr = _trainer(tiny_dir, tmp_path / "b")
    resumed += [tr.train_step(), tr.train_step()]
    path = tr.save()
    assert (path / "adapter_model.safetensors").exists() and not (path / "model.safetensors").exists()
    assert not (tmp_path / "b" / "checkpoints" / "reference.pt").exists()  # the reference is the base itself
    saved = {k: v.detach().clone() for k, v in tr.model.named_parameters() if "lora_" in k}
    tr2 = _trainer(tiny_dir, tmp_path / "b", log=resumed.append)
    assert tr2.resume() == 2
    assert all(torch.equal(p, saved[k]) for k, p in tr2.model.named_parameters() if "lora_" in k)
    tr2.train()
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "tokens_per_s"))}  # noqa: E731
    assert len(straight) == 4 and [drop(m) for m in resumed] == [drop(m) for m in straight]


def test_final_holds_the_adapter_and_a_merged_model_plain_transformers_loads(tiny_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        steps=2,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
        lora=LORA,
    )
    recipe = dataclasses.replace(
        get_recipe("grpo"),
        group_size=4,
        shapers=(spread,),
        optim=dataclasses.replace(get_recipe("grpo").optim, lr=1e-3),
    )
    train_run(cfg, recipe)
    final = tmp_path / "run" / "final"
    assert (final / "adapter_model.safetensors").exists() and (final / "adapter_config.json").exists()
    assert (final / "merged" / "model.safetensors").exists() and (final / "merged" / "tokenizer_config.json").exists()
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert recorded["lora"] == {"r": 4, "alpha": 8.0, "dropout": 0.0, "targets": "all-linear"}
    assert split_config(recorded)[0].lora == LORA  # what --resume rebuilds
    merged = AutoModelForCausalLM.from_pretrained(final / "merged").eval()
    trained = PeftModel.from_pretrained(load_model(tiny_dir)[0], final).eval()
    base = load_model(tiny_dir)[0].eval()
    tok = AutoTokenizer.from_pretrained(final / "merged")
    ids = torch.tensor([tok("12+34=46")["input_ids"]])
    with torch.no_grad():
        got, want, orig = merged(input_ids=ids).logits, trained(input_ids=ids).logits, base(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, orig, atol=1e-5)  # the adapter is in the merged weights
    again, _ = load_model(final)  # --model runs/x/final of a LoRA run: its merged model
    assert all(torch.equal(v, merged.state_dict()[k]) for k, v in again.state_dict().items())


def test_lora_from_the_command_line_reaches_a_kl_recipe(tiny_dir, tmp_path):
    raw = dotted_to_nested(parse_options(["lora.r=8", "lora.targets=[q_proj,v_proj]", "lora.alpha=16"]))
    cfg, _ = split_config(raw)
    assert cfg.lora == Lora(r=8, alpha=16.0, targets=("q_proj", "v_proj"))
    with pytest.raises(UserError, match="did you mean 'lora.r'"):
        split_config(dotted_to_nested(parse_options(["lora.rank=8"])))
    with pytest.raises(UserError, match="'lora' is a section"):
        split_config({"lora": 8})
    logged = []
    tr = _trainer(tiny_dir, tmp_path, name="sage", steps=2, lora=cfg.lora, log=logged.append)
    assert tr.model.peft_config["default"].r == 8
    assert tr.model.peft_config["default"].target_modules == {"q_proj", "v_proj"}
    tr.train()
    assert len(logged) == 2
    for m in logged:
        assert {"loss/kl", "loss/kl_term", "sage/q_mean", "sage/frac_shaped"} <= set(m)


def test_beam_branching_works_on_a_lora_model(tiny_dir, tmp_path):
    # CodeThinker branches completions from prefixes (rollout.branch): the engine runs the peft model
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="codethinker",
        task="code",
        steps=1,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
        lora=LORA,
    )
    train_run(cfg, dataclasses.replace(get_recipe("codethinker"), group_size=4))
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert (row["beam/budget"], row["beam/branches"], row["beam/completions_per_prompt"]) == (4.0, 4.0, 4.0)


def test_vspo_steering_works_on_a_lora_model(tiny_dir, tmp_path):
    plain, tok = load_model(tiny_dir)
    tr = _trainer(tiny_dir, tmp_path, name="grpo", steps=1)
    assert decoder_layer(tr.model, 1) is tr.model.get_base_model().model.layers[1]
    pos, neg = ["1 2 3 4"], ["1234"]
    v_lora, c_lora = steering_vector(tr.model, tok, pos, neg, layer=1)
    v_plain, c_plain = steering_vector(plain, tok, pos, neg, layer=1)
    assert torch.equal(v_lora, v_plain) and c_lora == c_plain  # B = 0 at the start: the base's activations
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="vspo",
        task="arithmetic",
        task_options={"spaced_rate": 0.05},
        steps=1,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
        lora=LORA,
    )
    recipe = dataclasses.replace(get_recipe("vspo"), group_size=4)
    recipe = dataclasses.replace(recipe, steering=dataclasses.replace(recipe.steering, layer=1))
    train_run(cfg, recipe)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= row["reward/spaced/mean"] <= 1.0 and (tmp_path / "run" / "final" / "adapter_config.json").exists()
