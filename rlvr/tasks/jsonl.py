"""Problems from a local JSONL file: one JSON object per line with a prompt and a reference answer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
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
    paraphrase_field: str | None = Field(
        None,
        description="Field holding the prompt reworded (a string or chat messages), which "
        "task.paraphrase shows instead of the prompt.",
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
    if params.paraphrase_field:
        reworded = _field(row, params.paraphrase_field, where, "paraphrase_field", "a paraphrase")
        if not (isinstance(reworded, str) or _is_messages(reworded)):
            raise ValueError(
                f"{where}: field '{params.paraphrase_field}' must be a string or chat messages "
                '[{"role": ..., "content": ...}], like the prompt'
            )
        metadata["paraphrase"] = reworded
    row_id = f"{file.stem}-{number}"
    if params.id_field:
        row_id = str(_field(row, params.id_field, where, "id_field", "the row id"))
    return Problem(id=row_id, prompt=prompt, answer=answer, domain=file.stem, metadata=metadata)


def _lines(file: Path, digest) -> Iterator[tuple[int, str]]:
    """(number, text) of each line, read one at a time (a huge line is one line, not the whole
    file), with the raw bytes fed to `digest`."""
    with open(file, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            digest.update(raw)
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{file} line {number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                    f"{e.start + 1}); fix: save the file as UTF-8, e.g. from Latin-1 with "
                    f"`iconv -f latin1 -t utf-8 {file} > {file.with_suffix('.utf8.jsonl')}`"
                ) from None


def read_rows(path: str, params: JsonlParams, digest=None) -> list[tuple[str, Problem]]:
    """Every row as (where: '<path> line <n>', problem); errors name the file, the line and
    the fix. The file's bytes go to `digest` (a hashlib object) as they are read."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"JSONL task file not found: {path}")
    rows = []
    for number, line in _lines(file, digest or hashlib.sha256()):
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
        rows.append((where, _row_problem(row, where, file, number, params)))
    if not rows:
        raise ValueError(
            f"{path} holds no rows; each line must be a JSON object with a prompt and an answer"
        )
    return rows


def load_problems(path: str, params: JsonlParams) -> list[Problem]:
    """Read and validate every row; errors name the file, the line and the fix."""
    return [problem for _, problem in read_rows(path, params)]


def _prompt_key(problem: Problem) -> str:
    return json.dumps(problem.prompt, sort_keys=True)


class JsonlTask:
    """Prompts and reference answers from a local JSONL file (one JSON object per line)."""

    name = "jsonl"
    Params = JsonlParams

    def __init__(self, params: JsonlParams, seed: int, eval_size: int):
        self.seed, self.path, self.paraphrase_field = seed, params.path, params.paraphrase_field
        self.verifier = params.verifier
        self._digest = hashlib.sha256()
        rows = read_rows(params.path, params, self._digest)
        if params.eval_path:
            self._digest.update(b"\0eval\0")
            held_out = read_rows(params.eval_path, params, self._digest)
        else:
            rng = seeded_rng(seed, "split")
            rows = rng.sample(rows, len(rows))
            cut = max(1, round(params.eval_share * len(rows)))
            held_out, rows = rows[:cut], rows[cut:]
        # The same prompt in both files (or twice in one) must not leak into training.
        eval_keys = {_prompt_key(p) for _, p in held_out}
        self._set_rows(
            [r for r in rows if _prompt_key(r[1]) not in eval_keys], held_out[:eval_size]
        )

    def _set_rows(self, train: list[tuple[str, Problem]], held_out: list[tuple[str, Problem]]):
        if not train:
            raise ValueError(f"{self.path}: no training rows left after holding out the eval rows")
        self._train_rows, self._eval_rows = train, held_out
        self._train_order = EpochOrder([p for _, p in train], self.seed)

    def fingerprint(self) -> str:
        """Hash of the bytes of the file (and eval file) the rows were read from."""
        return self._digest.hexdigest()

    def fit_prompts(self, fit: Callable[[Problem, str], Problem | None]) -> None:
        """Pass every train and eval row through `fit` (see tasks/base.py), dropping the rows it
        drops."""

        def fit_row(problem: Problem, where: str) -> Problem | None:
            fitted = fit(problem, where)
            if fitted is None or "paraphrase" not in problem.metadata:
                return fitted
            # the reworded prompt (task.paraphrase) must fit as well; the row goes if it cannot
            shown = replace(problem, prompt=problem.metadata["paraphrase"])
            reworded = fit(shown, f"{where} ({self.paraphrase_field})")
            if reworded is None:
                return None
            return replace(fitted, metadata={**fitted.metadata, "paraphrase": reworded.prompt})

        def fitted(rows: list[tuple[str, Problem]], split: str) -> list[tuple[str, Problem]]:
            kept = [(where, fit_row(problem, where)) for where, problem in rows]
            kept = [(where, problem) for where, problem in kept if problem is not None]
            if rows and not kept:
                raise ValueError(
                    f"{self.path}: every {split} row's prompt is too long for the model; fix: "
                    "shorten the prompts or use a model with a longer context"
                )
            return kept

        self._set_rows(fitted(self._train_rows, "training"), fitted(self._eval_rows, "eval"))

    @property
    def train_size(self) -> int:
        """Training rows: a finite pool, which the tiny model's warm start holds some of out."""
        return len(self._train_rows)

    def train_problem(self, index: int) -> Problem:
        return self._train_order[index]

    def eval_problems(self) -> list[Problem]:
        return [problem for _, problem in self._eval_rows]

    def paraphrase(self, problem: Problem) -> Problem:
        if "paraphrase" not in problem.metadata:
            raise ValueError(
                f"{self.path}: task.paraphrase shows each row's reworded prompt, but "
                "task.paraphrase_field is not set; fix: name the column that holds them"
            )
        return replace(problem, prompt=problem.metadata["paraphrase"])

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
