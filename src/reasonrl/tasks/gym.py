"""``rg:<name>``: any reasoning-gym dataset as a task, scored by the dataset's own ``score_answer``.

reasoning-gym generates problems from a seed; we draw them in chunks of ``chunk`` per seed and
assign each to a split by the hash of its question text, so train and held-out never share a
question whatever the seeds. The model answers inside ``<answer>...</answer>`` (the convention
reasoning-gym's own tooling extracts), which the prompt asks for.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Iterator

from ..errors import UserError
from ..rewards.answers import extract_final_number
from ..rewards.answers import extract_tag as extract_tag_named
from .base import Item, check_split, in_test_split, stable_seed

extract_tag = extract_tag_named("answer")
INSTRUCTION = "\nPut the final answer in <answer></answer>.\n"
_OWN_OPTIONS = {"test_fraction", "chunk", "instruction", "answer"}
ANSWER_READERS = {"tag": extract_tag, "final_number": extract_final_number}  # the `answer` option


def rg_dataset_names() -> list[str]:
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def rg_config_fields(name: str) -> dict[str, Any]:
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        near = difflib.get_close_matches(name, list(DATASETS), n=1)
        hint = f" (did you mean 'rg:{near[0]}'?)" if near else ""
        raise UserError(
            f"unknown reasoning-gym dataset {name!r}{hint}; `reasonrl tasks` lists the {len(DATASETS)} valid names"
        )
    cfg = DATASETS[name][1]
    return {f.name: f.default for f in dataclasses.fields(cfg) if f.name not in ("seed", "size")}


class ReasoningGymTask:
    def __init__(
        self,
        dataset: str,
        *,
        test_fraction: float = 0.1,
        chunk: int = 1000,
        instruction: str = INSTRUCTION,
        answer: str = "tag",
        **config: Any,
    ):
        valid = rg_config_fields(dataset)
        bad = sorted(set(config) - set(valid))
        if bad:
            raise UserError(f"unknown option(s) {bad} for rg:{dataset}; valid: {sorted(valid) + sorted(_OWN_OPTIONS)}")
        if answer not in ANSWER_READERS:
            raise UserError(f"rg:{dataset}: answer={answer!r} is not one of {', '.join(ANSWER_READERS)}")
        self.name, self.dataset, self.config = f"rg:{dataset}", dataset, config
        self.answer = answer  # the reader's name, not the function: the task pickles (Ray workers)
        self.test_fraction, self.chunk, self.instruction = test_fraction, chunk, instruction
        try:
            self._scorer = self._make(seed=0, size=1)
        except (AssertionError, ValueError, TypeError) as err:  # reasoning-gym checks its config with asserts
            raise UserError(
                f"rg:{dataset}: reasoning-gym rejects the options {config}: {err or type(err).__name__}"
            ) from err

    def _make(self, seed: int, size: int):
        import reasoning_gym

        return reasoning_gym.create_dataset(self.dataset, seed=seed, size=size, **self.config)

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        want_test = split == "test"
        for block in range(10**9):
            ds = self._make(seed=stable_seed(seed, split, block), size=self.chunk)
            for i in range(self.chunk):
                entry = ds[i]
                if in_test_split(entry["question"], self.test_fraction) == want_test:
                    yield self._item(entry)

    def _item(self, entry: dict) -> Item:
        answer = str(entry["answer"])
        return Item(
            key=entry["question"],
            prompt=entry["question"] + self.instruction,
            answer=answer,
            meta={"rg_entry": entry},
            demo=f"<answer>{answer}</answer>",
        )

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        got = ANSWER_READERS[self.answer](completion)
        if got is None:
            return 0.0
        entry = meta.get("rg_entry") or {"answer": answer, "metadata": {}}
        return float(self._scorer.score_answer(got, entry))

    def extract_answer(self, completion: str) -> str | None:
        got = ANSWER_READERS[self.answer](completion)
        return None if got is None else " ".join(got.split())
