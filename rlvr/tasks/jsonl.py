"""Problems from a local JSONL file: one JSON object per line with a prompt and a reference answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlvr.tasks.base import EpochOrder, seeded_rng
from rlvr.types import Problem


class JsonlParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="JSONL file of rows; eval rows are held out of it unless eval_path is set."
    )
    eval_path: str | None = Field(
        None, description="Separate JSONL file of eval rows; else eval_share of `path` is held out."
    )
    eval_share: float = Field(
        0.1, gt=0, lt=1, description="Share of rows held out for eval when eval_path is unset."
    )
    prompt_field: str = Field(
        "prompt", description="Field holding the prompt: a string or chat messages."
    )
    answer_field: str | None = Field(
        "answer",
        description="Field holding the reference answer; empty or null for verifiers that need none "
        "(code, ifeval).",
    )
    solution_field: str | None = Field(
        None, description="Field holding a worked solution, used as the demonstration."
    )
    metadata_fields: list[str] = Field(
        default_factory=list,
        description="Fields copied into the problem's metadata for its verifier, e.g. "
        "['tests'] for the code reward or ['constraints'] for ifeval.",
    )
    id_field: str | None = Field(
        None, description="Field holding a row id; else '<file stem>-<line>'."
    )
    verifier: str = Field(
        "math", description="Reward (`rlvr list rewards`) that decides correctness."
    )


def _is_messages(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt
    )


def _field(row: dict, name: str, where: str, key: str, purpose: str) -> Any:
    if name not in row:
        raise ValueError(
            f"{where}: missing field '{name}' (fields present: {', '.join(row) or 'none'}); "
            f"set task.{key} to the field that holds {purpose}"
        )
    value = row[name]
    if value is None or value == [] or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{where}: field '{name}' is empty; every row needs {purpose}")
    return value


def _row_problem(row: Any, where: str, file: Path, number: int, params: JsonlParams) -> Problem:
    if not isinstance(row, dict):
        raise ValueError(
            f"{where}: expected a JSON object, got {type(row).__name__}; "
            'each line must hold one object like {"prompt": ..., "answer": ...}'
        )
    prompt = _field(row, params.prompt_field, where, "prompt_field", "the prompt")
    if not (isinstance(prompt, str) or _is_messages(prompt)):
        raise ValueError(
            f"{where}: field '{params.prompt_field}' must be a string "
            'or a list of {"role": ..., "content": ...} messages'
        )
    answer = None
    if params.answer_field:
        answer = _field(row, params.answer_field, where, "answer_field", "the reference answer")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ValueError(
                f"{where}: field '{params.answer_field}' must be a string or a number, "
                f"got {type(answer).__name__}"
            )
        answer = str(answer)
    metadata = {
        name: _field(row, name, where, "metadata_fields", f"the '{name}' the verifier reads")
        for name in params.metadata_fields
    }
    if params.solution_field:
        solution = _field(row, params.solution_field, where, "solution_field", "a worked solution")
        metadata["solution"] = str(solution)
    row_id = f"{file.stem}-{number}"
    if params.id_field:
        row_id = str(_field(row, params.id_field, where, "id_field", "the row id"))
    return Problem(id=row_id, prompt=prompt, answer=answer, domain=file.stem, metadata=metadata)


def load_problems(path: str, params: JsonlParams) -> list[Problem]:
    """Read and validate every row; errors name the file, the line and the fix."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"JSONL task file not found: {path}")
    problems = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{where}: not valid JSON ({e.msg}, column {e.colno}); "
                "each line must hold one JSON object"
            ) from None
        problems.append(_row_problem(row, where, file, number, params))
    if not problems:
        raise ValueError(
            f"{path} holds no rows; each line must be a JSON object with a prompt and an answer"
        )
    return problems


def _prompt_key(problem: Problem) -> str:
    return json.dumps(problem.prompt, sort_keys=True)


class JsonlTask:
    """Prompts and reference answers from a local JSONL file (one JSON object per line)."""

    name = "jsonl"
    Params = JsonlParams

    def __init__(self, params: JsonlParams, seed: int, eval_size: int):
        self.seed = seed
        self.verifier = params.verifier
        rows = load_problems(params.path, params)
        if params.eval_path:
            held_out = load_problems(params.eval_path, params)
        else:
            rng = seeded_rng(seed, "split")
            rows = rng.sample(rows, len(rows))
            cut = max(1, round(params.eval_share * len(rows)))
            held_out, rows = rows[:cut], rows[cut:]
        self._eval = held_out[:eval_size]
        # The same prompt in both files (or twice in one) must not leak into training.
        eval_keys = {_prompt_key(p) for p in held_out}
        self._train = [p for p in rows if _prompt_key(p) not in eval_keys]
        if not self._train:
            raise ValueError(
                f"{params.path}: no training rows left after holding out the eval rows"
            )
        self._train_order = EpochOrder(self._train, seed)

    def train_problem(self, index: int) -> Problem:
        return self._train_order[index]

    def eval_problems(self) -> list[Problem]:
        return list(self._eval)

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        # A file holds no systematic mistake to imitate, so flawed demonstrations are correct ones.
        if "solution" in problem.metadata:
            return problem.metadata["solution"]
        if problem.answer is None:
            raise ValueError(
                f"problem {problem.id} has neither a solution nor an answer to warm-start the tiny "
                "model on; set task.solution_field (or task.answer_field)"
            )
        return f"#### {problem.answer}"
