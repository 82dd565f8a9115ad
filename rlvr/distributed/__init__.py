"""Scale-out: data-parallel updates, Ray rollout workers and trainer ranks, asynchronous schedules."""
