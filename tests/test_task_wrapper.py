"""TaskWrapper: the one base of the task wrappers (prompt limit, guidance, drafts, context mix, episodes)."""

import copy
import pickle

from reasonrl.data.draft_task import DraftTask, PlainShare
from reasonrl.parts.episodes import EpisodicTask
from reasonrl.rollout.agent import EpisodeOptions
from reasonrl.tasks import get_task
from reasonrl.tasks.base import TaskWrapper
from reasonrl.loop.warmstart import ContextMix


class Doubled(TaskWrapper):
    """A wrapper that changes only the verifier: everything else must be the wrapped task's."""

    def verify(self, completion, answer, meta):
        return 2 * self.task.verify(completion, answer, meta)


def test_a_wrapper_is_its_task_for_everything_it_does_not_change():
    task = get_task("arithmetic")
    w = Doubled(task)
    item = next(w.iter_items("test", 0))
    assert item == next(task.iter_items("test", 0)) and w.name == task.name
    assert w.config is task.config  # an attribute the base never names comes from the task
    assert w.verify(item.demo, item.answer, item.meta) == 2.0  # the override (the demonstration scores 1)
    assert w.extract_answer(item.demo) == "544" == item.answer  # the task's: 5+539


def test_wrappers_copy_and_pickle_without_recursing():
    # the old EpisodicTask forwarded every missing name, `task` included: deepcopy asked a bare
    # instance for __setstate__ and recursed until RecursionError
    task = get_task("arithmetic")
    for w in (
        EpisodicTask(task, EpisodeOptions()),
        ContextMix(task, rate=0.5),
        Doubled(Doubled(task)),
        PlainShare(DraftTask(task, None, "no_draft"), 0.5),
    ):
        for twin in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
            assert type(twin) is type(w) and twin.name == "arithmetic"
            assert next(twin.iter_items("test", 3)).key == next(w.iter_items("test", 3)).key


def test_plain_share_forwards_to_its_draft_task():
    drafts = DraftTask(get_task("arithmetic"), None, "no_draft")
    mixed = PlainShare(drafts, 0.5)
    assert mixed.template is drafts.template and mixed.modes == ("no_draft",)  # the draft task's, not the plain task's
    assert mixed.task is drafts.task
