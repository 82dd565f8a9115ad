"""What a group of trainers shares: the step every member can resume from."""

from rlvr.train.checkpoint import COMPLETE
from rlvr.train.group import common_step


def test_common_step_is_the_newest_every_member_saved(tmp_path):
    def saved(member, steps):
        for step in steps:
            (tmp_path / member / f"step-{step:06d}").mkdir(parents=True)
            (tmp_path / member / f"step-{step:06d}" / COMPLETE).touch()
        return tmp_path / member

    dirs = [saved("a", [2, 4]), saved("b", [2]), saved("c", [2, 4])]
    assert common_step(dirs) == 2
    assert common_step([saved("d", [4]), saved("e", [2])]) is None
