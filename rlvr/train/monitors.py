"""Monitors that act: rules over each step's metrics that warn, lower the learning rate, or
checkpoint and stop the run when a metric stays past a bound (train.monitors)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config import MonitorRule


@dataclass
class Firing:
    rule: MonitorRule
    value: float

    @property
    def message(self) -> str:
        r = self.rule
        side, bound = ("above", r.above) if r.above is not None else ("below", r.below)
        span = f" for {r.steps} steps" if r.steps > 1 else ""
        act = {"warn": "", "stop": "; stopping", "lower_lr": f"; learning rate x{r.factor:g}"}
        return (
            f"monitor {r.name}: {r.metric} {self.value:.4g} {side} {bound:g}{span}{act[r.action]}"
        )


class Monitors:
    """Counts, per rule, the consecutive steps its metric was past its bound; a rule fires once
    when its count reaches `steps`, and may fire again after the metric comes back."""

    def __init__(self, rules: list[MonitorRule]):
        self.rules = rules
        self.streaks = [0] * len(rules)

    def state_dict(self) -> dict:
        return {"streaks": list(self.streaks)}

    def load_state_dict(self, state: dict) -> None:
        self.streaks = list(state["streaks"])

    def observe(self, metrics: dict[str, float]) -> list[Firing]:
        fired = []
        for index, rule in enumerate(self.rules):
            value = metrics.get(rule.metric)
            if not isinstance(value, (int, float)):
                continue  # not logged this step (e.g. an eval metric between evals)
            past = value > rule.above if rule.above is not None else value < rule.below
            self.streaks[index] = self.streaks[index] + 1 if past else 0
            if self.streaks[index] == rule.steps:
                fired.append(Firing(rule, float(value)))
        return fired

    def act(self, metrics: dict[str, float], step: int, say, scale_lr) -> Firing | None:
        """Observe step `step`'s metrics: mark and announce each rule that fires, lower the
        learning rate (`scale_lr`) where one says so; the firing that stops the run, if any."""
        stop = None
        for firing in self.observe(metrics):
            metrics[f"monitor/{firing.rule.name}"] = 1.0
            say(f"[yellow]step {step}: {firing.message}")
            if firing.rule.action == "lower_lr":
                scale_lr(firing.rule.factor)
            if firing.rule.action == "stop":
                stop = firing
        return stop
