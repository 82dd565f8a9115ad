"""The ground every section stands on: the error a bad config raises, the base of the
sections, and the helpers their messages share (what clashes, which key was meant)."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config problem found before any work starts; the message names the key and the fix."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def refuse_clashes(settings: dict[str, bool], feature: str, clash: str, off: str) -> None:
    """A ValueError naming every setting in `settings` that is on: `feature` cannot run beside
    them, as each `clash`es with it; the fix turns them off, or the feature (`off`)."""
    if on := [name for name, enabled in settings.items() if enabled]:
        raise ValueError(f"{feature}; {', '.join(on)} {clash}; fix: turn those off (or {off})")


def suggest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
