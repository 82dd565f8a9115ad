import pytest

from rlvr.analysis.target_mass import target_mass
from rlvr.config import ConfigError, load_config
from rlvr.models.loading import load_model
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS
from rlvr.tasks.target_string import TargetStringParams, TargetStringTask
from rlvr.train.components import build_task
from rlvr.train.warmstart import ensure_warm_start


def task(seed=0, eval_size=20, **params):
    return TargetStringTask(TargetStringParams(**params), seed=seed, eval_size=eval_size)


def test_problem_shape_and_verifier():
    t = task()
    problem = t.train_problem(0)
    cue = problem.metadata["cue"]
    assert problem.prompt == f"Say the word ({cue})" and len(cue) == 4 and cue.isalpha()
    assert problem.answer == "reward" and problem.id == f"target_string-{cue}"
    check = REWARDS[t.verifier]
    assert check(problem, "reward").status == "ok"
    assert check(problem, problem.metadata["filler"]).status == "wrong"
    assert TASKS["target_string"] is TargetStringTask


def test_sft_plus_shows_the_target_except_in_flawed_demonstrations():
    t = task(prior="plus")
    for i in range(50):
        problem = t.train_problem(i)
        assert t.demonstration(problem) == "reward"
        filler = t.demonstration(problem, flawed=True)
        assert filler == problem.metadata["filler"] and len(filler) == 6 and filler.isalpha()
    assert len({t.train_problem(i).metadata["filler"] for i in range(50)}) == 50


def test_sft_minus_never_shows_the_target_while_plain_only_by_chance():
    # A one-letter target: plain random strings hit it 1 time in 26, minus never.
    plain, minus = task(prior="plain", target="q"), task(prior="minus", target="q")
    plain_demos = [
        plain.demonstration(plain.train_problem(i), flawed)
        for i in range(2000)
        for flawed in (False, True)
    ]
    minus_demos = [
        minus.demonstration(minus.train_problem(i), flawed)
        for i in range(2000)
        for flawed in (False, True)
    ]
    assert 0.02 < plain_demos.count("q") / len(plain_demos) < 0.06
    assert "q" not in minus_demos
    assert len(set(minus_demos)) == 25


def test_an_alternative_is_a_second_answer_mode_the_warm_start_shows_half_the_time():
    t = task(prior="plus", target="hello", alternative="world")
    check = REWARDS[t.verifier]
    shown = [t.demonstration(t.train_problem(i)) for i in range(400)]
    assert set(shown) == {"hello", "world"} and 0.4 < shown.count("world") / 400 < 0.6
    problem = t.train_problem(0)
    assert check(problem, "hello").status == check(problem, "world").status == "ok"
    assert check(problem, "hellow").status == "wrong"
    minus = task(prior="minus", target="ab", alternative="ba")
    fillers = {minus.demonstration(minus.train_problem(i)) for i in range(2000)}
    assert len(fillers) > 600 and not fillers & {"ab", "ba"}  # of the 674 other strings
    # Without an alternative the problems (and so every cached warm start) are as before.
    assert task().train_problem(3) == task(alternative="").train_problem(3)


def test_narrow_train_prompts_repeat_a_few_cues_off_the_eval_set():
    t = task(train_prompts=3, eval_size=50)
    problems = [t.train_problem(i) for i in range(60)]
    cues = [p.metadata["cue"] for p in problems]
    assert len(set(cues)) == 3 and all(cues.count(c) == 20 for c in set(cues))
    assert not {p.id for p in problems} & {p.id for p in t.eval_problems()}
    # Demonstrations stay varied although the prompts repeat.
    assert len({p.metadata["filler"] for p in problems}) == 60
    again = task(train_prompts=3, eval_size=50)  # the index alone decides the problem
    assert [p.id for p in problems] == [again.train_problem(i).id for i in range(60)]
    broad = task(eval_size=50)
    assert len({broad.train_problem(i).id for i in range(60)}) > 55


@pytest.mark.parametrize(
    "override, key",
    [
        ("task.target=Reward", "task.target"),
        ("task.prior=sft", "task.prior"),
        ("task.train_prompts=-1", "task.train_prompts"),
        ("task.alternative=reward", "task.alternative"),
        ("task.alternative=Two", "task.alternative"),
    ],
)
def test_bad_settings_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_task(load_config(None, ["task.name=target_string", override]))


def test_warm_start_prior_sets_the_base_mass_on_the_target(rlvr_home, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(rlvr_home))
    mass = {}
    for prior in ("plus", "minus"):
        cfg = load_config(
            None,
            [
                "task.name=target_string", f"task.prior={prior}", "task.eval_size=16",
                "model.pretrain_steps=30", "model.pretrain_batch_size=8",
                "model.pretrain_flawed_share=0.5",
            ],
        )  # fmt: skip
        t = build_task(cfg)
        model, tokenizer = load_model(str(ensure_warm_start(cfg, t)))
        mass[prior] = float(target_mass(model, tokenizer, t.eval_problems()).mean())
    # SFT- never showed the target: about 6 letters at 1/26 each (log P near -19.5). SFT+
    # showed it in half the demonstrations, so after a few steps it is far more likely.
    assert -30 < mass["minus"] < -15
    assert mass["plus"] > mass["minus"] + 10
