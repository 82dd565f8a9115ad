"""Scale-out: backends behind two seams (base.py), picked from backends.BACKENDS: in-process
(local.py), or Ray rollout workers and trainer ranks; data-parallel and sharded updates."""
