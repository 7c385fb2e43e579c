"""Small run and compare folders for the report tests, written by reasonrl's own writers (config,
metrics tracker, events, per-item results, samples, compare.json) with made-up evaluation records:
no model is trained."""

import json
from dataclasses import replace
from pathlib import Path

import yaml

import reasonrl.compare as compare_mod
from reasonrl.loop.checkpoint import atomic_write_text
from reasonrl.config.train import TrainConfig, resolved_dict
from reasonrl.eval.runner import item_lines
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import log_event, sample_lines
from reasonrl.loop.tracking import make_tracker

N_ITEMS = 10
EVIL = "<script>alert('pwned')</script>"


def records(n_right: int, tag: str) -> list[dict]:
    """Greedy eval records of N_ITEMS problems, the first ``n_right`` correct; problem 9's completion
    carries a script tag (model output is untrusted)."""
    out = []
    for i in range(N_ITEMS):
        ok = i < n_right
        text = EVIL if i == N_ITEMS - 1 else f"{tag} thinks {i} + 1 = {i + 1 if ok else i}"
        out.append(
            {
                "problem": i,
                "key": f"item-{i}",
                "mode": "greedy",
                "prompt": f"What is {i} + 1?",
                "answer": str(i + 1),
                "completion": text,
                "extracted": str(i + 1 if ok else i),
                "score": 1.0 if ok else 0.0,
                "correct": ok,
                "length": 9,
                "finish": "eos",
            }
        )
    return out


def completion_row(step: int, sample: int) -> dict:
    """A completions.jsonl record (stepdata.completion_rows' keys): step 4's second row is model output
    carrying a script tag."""
    return {
        "step": step,
        "group": 0,
        "sample": sample,
        "kind": 0,
        "key": f"key-{step}-{sample}",
        "prompt": f"<|im_start|>user\nWhat is {step} + {sample}?<|im_end|>\n<|im_start|>assistant\n",
        "completion": EVIL if (step, sample) == (4, 1) else f"step {step} row {sample} says {step + sample}",
        "answer": str(step + sample),
        "reward": 0.75,
        "rewards": {"correct": 1.0, "overlong": -0.5},
        "correct": True,
        "advantage": 0.5 * sample,
        "length": 7,
        "finish": "eos",
    }


def write_run(
    run_dir: Path,
    recipe: str = "grpo",
    seed: int = 0,
    n_right: int = 6,
    before_right: int = 5,
    steps: int = 4,
    samples: bool = True,
    finished: bool = True,
    completions: bool = True,
) -> Path:
    """A run folder as reasonrl train leaves it; held-out pass@1 logged at steps 2 and 4 and in
    summary.json (before: before_right/10, after: n_right/10); two completions.jsonl rows per step."""
    cfg = replace(TrainConfig(recipe=recipe, steps=steps, seed=seed), out=str(run_dir))
    config = resolved_dict(cfg, get_recipe(recipe))
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    log_event(run_dir, "start", message="starting at step 1", first_step=1)
    tracker = make_tracker(["jsonl"], run_dir, config, run_dir.name, completions=completions)
    for step in range(1, steps + 1):
        tracker.log_completions([completion_row(step, 0), completion_row(step, 1)], step)
        row = {
            "reward/mean": 0.1 * step,
            "accuracy": 0.1 * step,
            "length/mean": 20.0 + step,
            "loss/approx_kl": 0.01 * step,
            "entropy/mean": 0.5,
            "tokens/generated": 100.0,
            "time/generate": 1.5,
            "time/update": 0.25,
        }
        if step % 2 == 0:
            row["eval/pass@1"] = before_right / N_ITEMS + (n_right - before_right) / N_ITEMS * step / steps
        tracker.log(row, step)
    tracker.close()
    if not finished:
        return run_dir
    recs = records(n_right, recipe)
    atomic_write_text(run_dir / "after_items.jsonl", item_lines(recs))
    if samples:
        atomic_write_text(run_dir / "samples.jsonl", sample_lines(recs))
    before = {"pass@1": before_right / N_ITEMS, "n_problems": N_ITEMS}
    after = {"pass@1": n_right / N_ITEMS, "n_problems": N_ITEMS}
    summary = {
        "recipe": recipe,
        "task": "arithmetic",
        "steps": steps,
        "train_seconds": 7.0,
        "nonfinite_total": 0,
        "before": before,
        "after": after,
        "world": 1,
    }
    atomic_write_text(run_dir / "summary.json", json.dumps(summary))
    log_event(run_dir, "trained", last_step=steps)
    return run_dir


# (recipe, seed) -> held-out items right after training: grpo 6/10 and 7/10, dr_grpo 3/10 twice
RIGHT = {("grpo", 0): 6, ("grpo", 1): 7, ("dr_grpo", 0): 3, ("dr_grpo", 1): 3}


def write_compare(out: Path, monkeypatch) -> Path:
    """A compare folder written by reasonrl.compare.compare itself, its runs made by write_run
    instead of training processes (run_one is replaced for the call)."""

    def fake_run_one(recipe, seed, out_dir, steps, task, extra, expected=None):
        run_dir = write_run(
            out_dir / f"{recipe}-seed{seed}", recipe, seed, RIGHT[(recipe, seed)], steps=steps, samples=recipe == "grpo"
        )  # dr_grpo: an older run without samples.jsonl
        return compare_mod.collect(recipe, seed, run_dir)

    monkeypatch.setattr(compare_mod, "run_one", fake_run_one)
    compare_mod.compare(["grpo", "dr_grpo"], seeds=2, steps=4, out=out)
    return out


def write_audit(folder: Path) -> Path:
    """An audit.json in the AUDIT_SCHEMA format (and its pairs file) under folder/audit/."""
    audit_dir = folder / "audit"
    audit_dir.mkdir(parents=True)
    audit = {
        "train": {"source": "train.jsonl", "n": 9000},
        "eval": {"source": "arithmetic", "n": 500},
        "stages": ["jaccard", "embed", "judge"],
        "thresholds": {"jaccard": 0.4, "embed": 0.85},
        "counts": {"jaccard": 0, "embed": 3, "judge": 1, "linked_train": 2, "kept_train": 8998},
        "seconds": {"jaccard": 1.2, "embed": 40.1, "judge": 3.0, "total": 44.5},
        "pairs_file": "pairs.jsonl",
        "cleaned_file": "train_clean.jsonl",
    }
    (audit_dir / "audit.json").write_text(json.dumps(audit))
    pairs = [
        {"stage": "embed", "train_id": "t-17", "eval_id": "e-4", "score": 0.91},
        {"stage": "judge", "train_id": "t-<b>99</b>", "eval_id": "e-8", "score": 1.0, "label": "paraphrase"},
    ]
    (audit_dir / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return audit_dir / "audit.json"
