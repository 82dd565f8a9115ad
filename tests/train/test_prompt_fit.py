import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.models.tiny import CONTEXT, build_model, build_tokenizer
from rlvr.rollout.tokens import encode_prompt
from rlvr.train.components import build_components
from rlvr.train.prompt_fit import fit_prompts
from rlvr.train.trainer import Trainer


def jsonl_rows(path, long_prompts):
    """A JSONL file of short rows with `long_prompts` (line number -> prompt) among them."""
    lines = [
        json.dumps({"prompt": f"What is {i}+{i}?", "answer": str(2 * i)}) for i in range(1, 21)
    ]
    for number, prompt in long_prompts.items():
        lines.insert(number - 1, json.dumps({"prompt": prompt, "answer": "1"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def jsonl_config(path, *overrides):
    return load_config(None, ["task.name=jsonl", f"task.path={path}", *overrides])


def test_a_prompt_longer_than_the_context_stops_the_run_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    path = jsonl_rows(tmp_path / "data.jsonl", {3: "1+1? " * 100})  # + BOS, role and end tokens
    cfg = jsonl_config(path, f"log.run_dir={tmp_path / 'runs'}", "log.quiet=true")
    with pytest.raises(ConfigError) as error:
        Trainer(cfg)
    assert str(error.value) == (
        f"task 'jsonl': {path} line 3: the prompt is too long (504 tokens): 'tiny' holds 512 "
        "tokens and rollout.max_new_tokens = 48 of them are kept for the reply, leaving 464 for "
        "the prompt. Fix: shorten or remove the row, set task.long_prompts=skip (drop such "
        "rows) or task.long_prompts=truncate (cut them to fit), or lower rollout.max_new_tokens"
    )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "home").exists()  # no warm start


def test_a_huge_prompt_is_refused_by_its_length_without_tokenising_it(tmp_path):
    path = jsonl_rows(tmp_path / "data.jsonl", {5: "x" * 5_000_000})
    cfg = jsonl_config(path)
    with pytest.raises(
        ConfigError, match=f"{path} line 5: the prompt is too long \\(5000000 characters\\)"
    ):
        fit_prompts(cfg, build_components(cfg).task, "tiny")


def test_skip_drops_long_rows_and_says_how_many(tmp_path):
    path = jsonl_rows(tmp_path / "data.jsonl", {2: "y" * 500, 7: "z" * 2000})
    cfg = jsonl_config(path, "task.long_prompts=skip", "task.eval_share=0.2")
    task, said = build_components(cfg).task, []
    fit_prompts(cfg, task, "tiny", said.append)
    assert said == [
        "task.long_prompts=skip: 2 of 22 prompts did not fit and were skipped; 'tiny' holds 512 "
        "tokens and rollout.max_new_tokens = 48 of them are kept for the reply, leaving 464 for "
        "the prompt"
    ]
    problems = [task.train_problem(i) for i in range(100)] + task.eval_problems()
    assert {p.prompt for p in problems} == {f"What is {i}+{i}?" for i in range(1, 21)}


def test_truncate_keeps_the_end_of_the_prompt_and_fits_it_exactly(tmp_path):
    question = " Now: what is 2+2? End with #### answer."
    long = "background " * 300 + question
    path = jsonl_rows(tmp_path / "data.jsonl", {4: long})
    cfg = jsonl_config(path, "task.long_prompts=truncate", "rollout.max_new_tokens=100")
    task, said = build_components(cfg).task, []
    fit_prompts(cfg, task, "tiny", said.append)
    assert said[0].startswith(
        "task.long_prompts=truncate: 1 of 21 prompts did not fit and were truncated;"
    )
    problems = [task.train_problem(i) for i in range(100)] + task.eval_problems()
    cut = next(p for p in problems if p.prompt.endswith(question))
    assert len(cut.prompt) < len(long) and long.endswith(cut.prompt)
    assert len(encode_prompt(build_tokenizer(), cut.messages())) == CONTEXT - 100


def test_reply_budget_that_leaves_no_room_for_a_prompt_is_a_config_error(tmp_path):
    cfg = jsonl_config(jsonl_rows(tmp_path / "data.jsonl", {}), "rollout.max_new_tokens=512")
    with pytest.raises(
        ConfigError,
        match=r"rollout.max_new_tokens = 512 leaves no room for a "
        r"prompt: 'tiny' holds 512 tokens. Fix: rollout.max_new_tokens=256",
    ):
        fit_prompts(cfg, build_components(cfg).task, "tiny")


def test_truncate_cuts_the_longest_message_and_skips_what_cannot_be_cut_to_fit(tmp_path):
    system = {"role": "system", "content": "Answer briefly."}
    long_user = {"role": "user", "content": "w" * 900 + " What is 3+3?"}
    two_long = [{"role": "system", "content": "s" * 600}, {"role": "user", "content": "u" * 600}]
    path = jsonl_rows(tmp_path / "data.jsonl", {2: [system, long_user], 9: two_long})
    cfg = jsonl_config(path, "task.long_prompts=truncate", "task.eval_share=0.2")
    task, said = build_components(cfg).task, []
    fit_prompts(cfg, task, "tiny", said.append)
    assert said[0].startswith(
        "task.long_prompts=truncate: 2 of 22 prompts did not fit: 1 truncated, 1 skipped (no "
        "room left to cut); 'tiny' holds 512 tokens"
    )
    problems = [task.train_problem(i) for i in range(100)] + task.eval_problems()
    cut = next(p for p in problems if isinstance(p.prompt, list))
    assert cut.prompt[0] == system and cut.prompt[1]["content"].endswith("w What is 3+3?")
    assert len(encode_prompt(build_tokenizer(), cut.prompt)) == CONTEXT - 48
    assert not any(p.prompt == two_long for p in problems)


def test_a_model_directory_is_checked_against_its_own_context(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.model_max_length = 128  # shorter than the model's 512 positions: this one counts
    build_model("nano", tokenizer).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    path = jsonl_rows(tmp_path / "data.jsonl", {6: "q" * 100})
    cfg = jsonl_config(path)
    with pytest.raises(
        ConfigError,
        match=f"{path} line 6: the prompt is too long \\(104 tokens\\): "
        f"'{tmp_path / 'model'}' holds 128 tokens",
    ):
        fit_prompts(cfg, build_components(cfg).task, str(tmp_path / "model"))
