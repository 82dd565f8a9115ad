"""`python -m rlvr.config > docs/config.md` writes the config reference."""

from rlvr.algos.advantages import ADVANTAGES
from rlvr.algos.losses import LOSSES
from rlvr.config.reference import config_reference
from rlvr.methods import METHODS
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS

print(config_reference(TASKS, REWARDS, METHODS, ADVANTAGES, LOSSES))
