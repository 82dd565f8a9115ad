"""The bundled document collection: short encyclopedia entries about invented towns, whose facts
a model can only know by searching. Generated from a fixed seed, so every run sees the same set."""

from __future__ import annotations

import random
from dataclasses import dataclass

# Names may echo real places, but every fact is invented: only searching can find them.
_PREFIXES = (
    "Var", "Quel", "Ost", "Brin", "Kel", "Thorn", "Mar", "Dun", "Ash", "Wyn",
    "Esk", "Hal", "Lor", "Fen", "Gris", "Tam", "Orv", "Sel", "Brag", "Cal",
)  # fmt: skip
_SUFFIXES = ("holt", "mere", "wick", "ford", "by", "stead", "ton", "dale")
RIVERS = ("Osk", "Lune", "Brae", "Tarn", "Vell", "Ysk", "Morrow", "Quill", "Sabe", "Ferro")
SIZE = 80


@dataclass(frozen=True)
class Town:
    name: str
    river: str
    founded: int
    population: int

    @property
    def text(self) -> str:
        return (
            f"Town on the river {self.river}. Founded {self.founded}. Population {self.population}."
        )


def _towns() -> list[Town]:
    # A str seed is hashed with SHA-512, so the draws are the same on every platform and run.
    rng = random.Random("rlvr-encyclopedia")
    names = rng.sample([p + s for p in _PREFIXES for s in _SUFFIXES], SIZE)
    return [
        Town(name, rng.choice(RIVERS), rng.randint(1100, 1899), rng.randint(800, 99_000))
        for name in sorted(names)
    ]


TOWNS: list[Town] = _towns()
# title -> text, the form the search tool indexes
DOCUMENTS: dict[str, str] = {town.name: town.text for town in TOWNS}
