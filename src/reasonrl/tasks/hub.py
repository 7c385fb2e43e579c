"""Datasets from the Hugging Face Hub: ``--task hf:<repo>[:<config>]`` (a local dataset folder too).

Rows come from ``datasets.load_dataset(repo, config)``, which caches what it downloads and reads the
cache offline (``HF_HUB_OFFLINE=1`` skips the network at once); a dataset it can reach neither way
is one UserError line. Options: ``split`` (train rows, default ``train``), ``test_split`` (held-out
rows; ``auto``: the ``test`` split when there is one, else a hash fraction of ``split``), and every
file-task option (:class:`~reasonrl.tasks.files.FileTask`: columns, reward, extract, ...).

``preset`` fills those options for the usual RLVR layouts, each verified with math-verify:

- ``gsm8k``: ``question`` / ``answer`` with the reference after ``####``;
- ``math``: ``problem`` / ``solution`` with the reference in the solution's last ``\\boxed{}``;
- ``dapo``: ``prompt`` (chat messages) / ``reward_model.ground_truth`` (DAPO-Math-17k, verl's layout).

``auto`` (the default) picks the preset whose columns the dataset has (none: the file-task
defaults); options given explicitly win over the preset's.
"""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from .files import FileTask
from .rows import RowSpec

# the R1 / Qwen2.5-Math instruction: math-verify then finds the answer in the box
BOXED = "\nPlease reason step by step, and put your final answer within \\boxed{}."
PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "gsm8k": {
        "prompt_column": "question",
        "answer_column": "answer",
        "answer_format": "gsm8k",
        "reward": "math_verify",
        "extract": "boxed",
        "prompt_suffix": BOXED,
    },
    "math": {
        "prompt_column": "problem",
        "answer_column": "solution",
        "answer_format": "boxed",
        "reward": "math_verify",
        "extract": "boxed",
        "prompt_suffix": BOXED,
    },
    "dapo": {
        "prompt_column": "prompt",
        "answer_column": "reward_model.ground_truth",
        "reward": "math_verify",
        "extract": "answer_line",
    },
}
ROW_OPTIONS = ("prompt_column", "answer_column", "demo_column", "answer_format", "prompt_suffix")


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``owner/name[:config]`` (or a local folder) -> (repo, config)."""
    repo, sep, config = spec.rpartition(":")
    if not sep or "/" in config or not repo:
        return spec, None
    return repo, config


def guess_preset(row: dict[str, Any]) -> str:
    """The preset whose columns ``row`` has (``none`` when none fits)."""
    if "reward_model" in row and "prompt" in row:
        return "dapo"
    if {"question", "answer"} <= set(row) and "####" in str(row["answer"]):
        return "gsm8k"
    if {"problem", "solution"} <= set(row):
        return "math"
    return "none"


def load_splits(spec: str, repo: str, config: str | None) -> Any:
    """The dataset's splits (a ``DatasetDict``), from the Hub, its cache or a local folder."""
    import datasets

    try:
        return datasets.load_dataset(repo, config)
    except ConnectionError as err:
        raise UserError(
            f"task 'hf:{spec}': the dataset is not in the local cache and the Hub cannot be reached "
            f"({err}); connect once to download it, or use a local copy (hf:/path/to/folder)"
        ) from err
    except (FileNotFoundError, ValueError) as err:  # no such repo or folder; an unknown config (the names are listed)
        raise UserError(
            f"task 'hf:{spec}': {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err


class HubTask(FileTask):
    """A file task whose rows come from ``datasets.load_dataset`` (see the module docs)."""

    def __init__(
        self,
        spec: str,
        *,
        split: str = "train",
        test_split: str | None = "auto",
        preset: str = "auto",
        test_fraction: float = 0.1,
        reward: str | None = None,
        extract: str | None = None,
        **options: Any,
    ):
        if preset not in (*PRESETS, "auto"):
            raise UserError(f"task 'hf:{spec}': unknown preset {preset!r}; valid: auto, {', '.join(PRESETS)}")
        repo, config = parse_spec(spec)
        data = load_splits(spec, repo, config)
        test_split = ("test" if "test" in data and split != "test" else None) if test_split == "auto" else test_split
        for s in (split, test_split):
            if s is not None and s not in data:
                raise UserError(f"task 'hf:{spec}': no split {s!r}; the dataset has {sorted(data)}")
        train = data[split].to_list()
        self.preset = guess_preset(train[0] if train else {}) if preset == "auto" else preset
        given = {"reward": reward, "extract": extract, **options}
        opts = {**PRESETS[self.preset], **{k: v for k, v in given.items() if v is not None}}
        rows = RowSpec(**{k: opts.pop(k) for k in ROW_OPTIONS if k in opts})
        self._setup(
            f"hf:{spec}",
            f"hf:{spec}",
            rows,
            opts.pop("reward", "exact_match"),
            opts.pop("extract", "answer_tag"),
            test_fraction,
            opts,
        )
        self._rows = {
            "train": self.items_of(train, f"hf:{spec} [{split}]"),
            "test": None
            if test_split is None
            else self.items_of(data[test_split].to_list(), f"hf:{spec} [{test_split}]"),
        }
