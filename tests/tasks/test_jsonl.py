import json
from dataclasses import replace

import pytest
from pydantic import ValidationError

from rlvr.tasks import TASKS
from rlvr.tasks.jsonl import JsonlParams, JsonlTask, load_problems


def write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def rows(n):
    return [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(n)]


def task(path, seed=0, eval_size=100, **params):
    return JsonlTask(JsonlParams(path=str(path), **params), seed=seed, eval_size=eval_size)


def test_holds_out_eval_rows_and_never_trains_on_them(tmp_path):
    t = task(write(tmp_path / "data.jsonl", rows(50)), eval_share=0.2)
    eval_prompts = {p.prompt for p in t.eval_problems()}
    assert len(eval_prompts) == 10
    train = [t.train_problem(i) for i in range(200)]
    assert len({p.prompt for p in train}) == 40 and not {p.prompt for p in train} & eval_prompts
    assert t.verifier == "math" and TASKS["jsonl"] is JsonlTask


def test_each_epoch_visits_every_row_once_in_a_fresh_seeded_order(tmp_path):
    path = write(tmp_path / "data.jsonl", rows(30))
    t, same, other = task(path), task(path), task(path, seed=1)
    epochs = [[t.train_problem(e * 27 + i).id for i in range(27)] for e in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) and epochs[0] != epochs[1]
    assert len(set(epochs[0])) == 27
    assert [same.train_problem(i).id for i in range(54)] == epochs[0] + epochs[1]
    assert [other.train_problem(i).id for i in range(27)] != epochs[0]
    assert t.train_problem(5) == t.train_problem(5)  # random access, not a cursor


def test_eval_file_and_field_names(tmp_path):
    train = write(
        tmp_path / "train.jsonl",
        [
            {
                "q": [{"role": "user", "content": "1+1?"}],
                "a": 2,
                "sol": "1+1=2 #### 2",
                "key": "r1",
            },
            {"q": "2+2?", "a": 4, "sol": "#### 4", "key": "r2"},
            "",
            {"q": "3+3?", "a": 6, "sol": "#### 6", "key": "r3"},  # also in the eval file
        ],
    )
    evals = write(tmp_path / "eval.jsonl", [{"q": "3+3?", "a": 6, "sol": "#### 6", "key": "e1"}])
    fields = dict(prompt_field="q", answer_field="a", solution_field="sol", id_field="key")
    t = task(train, eval_path=str(evals), verifier="numeric", **fields)
    assert [p.id for p in t.eval_problems()] == ["e1"]
    train_ids = {t.train_problem(i).id for i in range(10)}
    assert train_ids == {"r1", "r2"}
    first = next(t.train_problem(i) for i in range(10) if t.train_problem(i).id == "r1")
    assert first.messages() == [{"role": "user", "content": "1+1?"}] and first.answer == "2"
    assert t.demonstration(first) == "1+1=2 #### 2"
    assert t.verifier == "numeric"


def test_demonstration_without_a_solution_field_is_the_bare_answer(tmp_path):
    t = task(write(tmp_path / "d.jsonl", rows(10)))
    problem = t.train_problem(0)
    assert t.demonstration(problem) == f"#### {problem.answer}"


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"prompt": "hi", "answer": ', "data.jsonl line 3: not valid JSON"),
        ('["hi", "2"]', "data.jsonl line 3: expected a JSON object, got list"),
        (
            '{"question": "hi", "solution": "2"}',
            "data.jsonl line 3: missing field 'prompt' (fields present: question, solution); "
            "set task.prompt_field",
        ),
        (
            '{"prompt": "hi"}',
            "line 3: missing field 'answer' (fields present: prompt); set task.answer_field",
        ),
        ('{"prompt": "  ", "answer": "2"}', "line 3: field 'prompt' is empty"),
        ('{"prompt": "hi", "answer": null}', "line 3: field 'answer' is empty"),
        ('{"prompt": "hi", "answer": [1]}', "line 3: field 'answer' must be a string or a number"),
        (
            '{"prompt": [{"text": "hi"}], "answer": "1"}',
            "line 3: field 'prompt' must be a string or",
        ),
    ],
)
def test_bad_rows_name_the_file_line_and_fix(tmp_path, bad_line, message):
    path = write(tmp_path / "data.jsonl", [rows(1)[0], "", bad_line, rows(2)[1]])
    with pytest.raises(ValueError) as error:
        task(path)
    assert message in str(error.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        task(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="holds no rows"):
        task(write(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(ValueError, match="no training rows"):
        task(write(tmp_path / "one.jsonl", rows(1)))


def test_params_are_validated(tmp_path):
    with pytest.raises(ValidationError):
        JsonlParams()  # path is required
    with pytest.raises(ValidationError):
        JsonlParams(path="x.jsonl", prompt_feild="q")
    assert all(f.description for f in JsonlParams.model_fields.values())


def test_metadata_fields_reach_the_verifier_and_answer_may_be_absent(tmp_path):
    rows = [
        {"prompt": "Write add(a, b).", "tests": ["assert add(1, 2) == 3"], "solution": "def add"},
        {"prompt": "Write sub(a, b).", "tests": ["assert sub(3, 1) == 2"], "solution": "def sub"},
    ]
    path = tmp_path / "code.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    params = JsonlParams(
        path=str(path), answer_field=None, metadata_fields=["tests"], solution_field="solution"
    )
    problems = load_problems(str(path), params)
    assert [p.metadata["tests"] for p in problems] == [r["tests"] for r in rows]
    assert all(p.answer is None for p in problems)
    missing = JsonlParams(path=str(path), answer_field=None, metadata_fields=["constraints"])
    with pytest.raises(ValueError, match="line 1: missing field 'constraints'"):
        load_problems(str(path), missing)


def test_a_line_that_is_not_utf8_names_the_file_line_and_fix(tmp_path):
    path = tmp_path / "latin.jsonl"
    good = json.dumps(rows(1)[0]).encode()
    path.write_bytes(good + b"\n" + '{"prompt": "caf\u00e9?", "answer": "1"}'.encode("latin-1"))
    with pytest.raises(ValueError) as error:
        task(path)
    message = str(error.value)
    assert f"{path} line 2: not UTF-8 text (byte 0xe9 at column 16)" in message
    assert "fix: save the file as UTF-8" in message and "iconv -f latin1 -t utf-8" in message


def test_fingerprint_follows_the_files_contents(tmp_path):
    path = write(tmp_path / "data.jsonl", rows(10))
    before = task(path).fingerprint()
    assert task(path).fingerprint() == before
    write(path, rows(10)[::-1])  # same path, other rows
    assert task(path).fingerprint() != before
    evals = write(tmp_path / "eval.jsonl", rows(12)[10:])
    with_eval = task(write(path, rows(10)), eval_path=str(evals)).fingerprint()
    write(evals, rows(13)[10:])
    assert task(path, eval_path=str(evals)).fingerprint() != with_eval


def test_fit_prompts_drops_or_replaces_rows_and_passes_their_file_and_line(tmp_path):
    long = {"prompt": "x" * 50, "answer": "0"}
    path = write(tmp_path / "data.jsonl", rows(8)[:4] + [long] + rows(8)[4:])
    t = task(path, eval_share=0.25)
    seen = {}

    def fit(problem, where):
        seen[where] = problem.prompt
        if problem.prompt == long["prompt"]:
            return None
        return replace(problem, prompt=problem.prompt.upper())

    t.fit_prompts(fit)
    assert seen[f"{path} line 5"] == long["prompt"] and len(seen) == 9
    prompts = [t.train_problem(i).prompt for i in range(30)] + [p.prompt for p in t.eval_problems()]
    assert long["prompt"] not in prompts and all(p.startswith("WHAT IS") for p in prompts)
    with pytest.raises(ValueError, match="every training row's prompt is too long"):
        t.fit_prompts(lambda problem, where: None)


def test_fit_prompts_fits_each_rows_rewording_too(tmp_path):
    data = [{"q": f"{i}+{i}=", "alt": "y" * (50 if i == 2 else 5), "answer": str(2 * i)}
            for i in range(6)]  # fmt: skip
    path = write(tmp_path / "data.jsonl", data)
    t = task(path, eval_share=0.2, prompt_field="q", paraphrase_field="alt")
    seen = []

    def fit(problem, where):
        seen.append(where)
        return None if len(problem.prompt) > 20 else replace(problem, prompt=problem.prompt + "!")

    t.fit_prompts(fit)
    assert f"{path} line 3 (alt)" in seen and len(seen) == 12
    problems = [t.train_problem(i) for i in range(20)] + t.eval_problems()
    assert "4" not in {p.answer for p in problems}  # row 3's rewording does not fit: dropped
    assert {p.metadata["paraphrase"] for p in problems} == {"yyyyy!"}
