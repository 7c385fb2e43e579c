"""keep_groups (the selector's cut of a batch) slices every per-row and per-group field, the per-row
data of the parts' channels (the teacher's scores) and the extra label set included, so a selector
composes with teacher methods; a channel's other values (FEST's pairs) stay as they are."""

import torch

from reasonrl.loop.batch import Batch, keep_groups
from reasonrl.parts.protocol import Channel
from reasonrl.rollout import Rollouts


def _batch() -> Batch:
    # B = 3 groups of G = 2 rows, T = 2 tokens; row r carries the value r everywhere, so a kept row's
    # value names where it came from
    R, T = 6, 2
    rows = torch.arange(R, dtype=torch.float)[:, None].expand(R, T)  # (R, T): row r is [r, r]
    ro = Rollouts(
        prompts=[f"p{r // 2}" for r in range(R)],
        texts=[f"c{r}" for r in range(R)],
        prompt_ids=torch.zeros(R, 1, dtype=torch.long),
        prompt_mask=torch.ones(R, 1, dtype=torch.long),
        completion_ids=rows.long(),
        completion_mask=torch.ones(R, T, dtype=torch.long),
        logprobs=rows.clone(),
        finish_reasons=["eos"] * R,
    )
    return Batch(
        items=["a", "b", "c"],
        ro=ro,
        rewards=torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]),
        correct=torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]),
        advantages=torch.arange(R, dtype=torch.float),
        loss_mask=torch.ones(R, T),
        extra_labels=rows.long() + 20,
        parts={
            "teacher": Channel(rows={"argmax": rows.long() + 10, "logprobs": -rows}),
            "fest": Channel(values={"pairs": "pairs"}),
        },
    )


def test_keep_groups_slices_channel_rows_and_keeps_channel_values():
    out = keep_groups(_batch(), [0, 2], G=2)  # groups 0 and 2: rows 0, 1, 4, 5
    assert out.items == ["a", "c"]
    assert out.advantages.tolist() == [0.0, 1.0, 4.0, 5.0]
    teacher = out.parts["teacher"].rows
    assert teacher["argmax"][:, 0].tolist() == [10, 11, 14, 15]  # 10 + row
    assert teacher["logprobs"][:, 1].tolist() == [-0.0, -1.0, -4.0, -5.0]
    assert out.extra_labels[:, 0].tolist() == [20, 21, 24, 25]  # 20 + row
    assert out.ro.texts == ["c0", "c1", "c4", "c5"]
    assert out.rewards.tolist() == [[0.0, 1.0], [0.0, 0.0]]
    assert out.parts["fest"].values == {"pairs": "pairs"} and out.parts["fest"].rows == {}


def test_keep_groups_without_teacher_fields_leaves_them_empty():
    b = _batch()
    b.parts, b.extra_labels = {}, None
    out = keep_groups(b, [1], G=2)
    assert out.parts == {} and out.extra_labels is None
    assert out.correct.tolist() == [[1.0, 1.0]]
