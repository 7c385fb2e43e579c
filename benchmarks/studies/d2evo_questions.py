"""What the shipped tiny reasoner writes as D2Evo's Questioner, before any training: for the first
``--anchors`` train problems, G questions each from the d2evo role prompt, read with both parse modes
(``prefix``: the longest leading expression; ``line``: the whole first line), then the Solver's
``--n`` answers to each well-formed question, judged by the majority vote and by the computed answer.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/studies/d2evo_questions.py \
        --out benchmarks/results/d2evo/questions.json

Prints one row per parse mode: parsed fraction, then over the parsed questions the valid fraction
(majority share >= 0.3), the mean majority share, the mean true pass rate, how often the majority
label is the true answer, the accepted fraction (valid, p_hat in [0.2, 0.8], not a pool problem, not
held out), the mean R_Q, and the number of distinct questions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from reasonrl.data.d2evo import accepted, judge, ngram_similarity, questioner_rewards
from reasonrl.models.loading import base_model_path
from reasonrl.parts.d2evo import DEFAULT_TEMPLATE, role_prompt
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.seeds import stable_seed
from reasonrl.tasks import ArithmeticTask, is_correct, take_items


def judge_questions(engine, task, anchors, texts, G, n, mode, sampling):
    qs = [task.generated_item(t, mode) for t in texts]
    parsed = [i for i, q in enumerate(qs) if q is not None]
    if not parsed:
        return {"parsed_frac": 0.0}
    seeds = [stable_seed(1, "solve", i) for i in parsed]
    ro = engine.generate([qs[i].prompt for i in parsed], n, sampling, seeds=seeds)
    verdicts, gold = [], []
    for j, i in enumerate(parsed):
        outs = ro.texts[j * n : (j + 1) * n]
        answers = [task.extract_answer(t) for t in outs]
        correct = [is_correct(task.verify(t, qs[i].answer, {})) for t in outs]
        verdicts.append(judge(answers, correct, qs[i].answer))
        gold.append(sum(correct) / n)
    valid = torch.tensor([v.valid for v in verdicts])
    p_hat = torch.tensor([v.p_hat for v in verdicts])
    sim = torch.tensor([ngram_similarity(qs[i].key, anchors[i // G].key) for i in parsed])
    pool = {a.key for a in anchors}
    fresh = torch.tensor([qs[i].key not in pool and not qs[i].meta["held_out"] for i in parsed])
    r_q = questioner_rewards(valid, p_hat, sim)
    truth = [v.label_true for v in verdicts if v.valid]
    return {
        "parsed_frac": len(parsed) / len(texts),
        "valid_frac_of_parsed": float(valid.float().mean()),
        "majority_share_mean": float(p_hat.mean()),
        "true_pass_rate_mean": sum(gold) / len(gold),
        "label_true_frac_of_valid": sum(truth) / max(len(truth), 1),
        "accepted_frac_of_parsed": float((accepted(valid, p_hat) & fresh).float().mean()),
        "r_q_mean_all": float((r_q.sum() - (len(texts) - len(parsed))) / len(texts)),
        "distinct_questions": len({qs[i].key for i in parsed}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_model_path(), dtype=torch.float32)
    engine = HFEngine(model, AutoTokenizer.from_pretrained(base_model_path()))
    task = ArithmeticTask()
    anchors = take_items(task, "train", args.anchors, 0)
    sampling = SamplingParams(temperature=0.8, max_new_tokens=task.max_new_tokens)  # the d2evo recipe's sampling
    prompts = [role_prompt(DEFAULT_TEMPLATE, a.prompt, a.answer) for a in anchors]
    ro = engine.generate(prompts, args.G, sampling, seeds=[stable_seed(0, "q", i) for i in range(len(prompts))])
    rows = {
        mode: judge_questions(engine, task, anchors, ro.texts, args.G, args.n, mode, sampling)
        for mode in ("prefix", "line")
    }
    print(f"{'mode':7} " + " ".join(f"{k[:14]:>14}" for k in rows["prefix"]))
    for mode, r in rows.items():
        print(f"{mode:7} " + " ".join(f"{r.get(k, float('nan')):>14.3f}" for k in rows["prefix"]))
    print("examples:", [t.split(chr(10))[0][:24] for t in ro.texts[:8]])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"settings": vars(args) | {"out": str(args.out)}, "modes": rows, "examples": ro.texts[:8]}, indent=2
            )
        )


if __name__ == "__main__":
    main()
