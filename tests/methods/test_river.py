"""River: the screen of train problems and the repetition penalty, by hand and through the
trainer."""

import logging
import sys
import types

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.envs.single_turn import SingleTurnEnv
from rlvr.methods.river import (
    FilteredTask,
    Params,
    River,
    audit_decisions,
    jaccard,
    llm_audit,
    oracle_successes,
    play,
    repeated_turns,
    repetition_offsets,
    repetition_penalties,
    screen_task,
    scripted,
    turn_texts,
    verifier_consistent,
)
from rlvr.models.tiny import build_model, build_tokenizer
from rlvr.rewards.audit import render_audit
from rlvr.rollout import HFEngine
from rlvr.rollout.tokens import Conversation
from rlvr.tasks import GuessNumberTask
from rlvr.tasks.guess_number import GuessNumberParams
from rlvr.tasks.planted import KINDS as PLANTED
from rlvr.tasks.planted import PlantedArithmetic, PlantedParams
from rlvr.train.components import Components
from rlvr.train.trainer import Trainer
from rlvr.train.warmstart import sft_backward
from rlvr.types import Batch, Problem, Score, Trajectory

KINDS = ["clean", "always_zero", "shortcut", "lenient"]


def score(problem: Problem, reply: str) -> Score:
    """The problem's own verifier: correct, broken to always 0, rewarding the answer format
    alone (a shortcut), or accepting anything, an empty reply included."""
    kind = problem.metadata["verifier"]
    if kind == "always_zero":
        return Score(0.0)
    if kind == "shortcut":
        return Score(float("####" in reply))
    if kind == "lenient":
        return Score(1.0)
    return Score(float(reply.strip() == f"#### {problem.answer}"))


class ToyTask:
    """Sums 'a+b=' whose verifier is chosen per problem from KINDS, in turn."""

    name = "toy"
    verifier = None  # the env scores

    def train_problem(self, index: int) -> Problem:
        a, b = index, 2 * index + 1
        kind = KINDS[index % len(KINDS)]
        return Problem(f"toy-{index}", f"{a}+{b}=", str(a + b), metadata={"verifier": kind})

    def eval_problems(self) -> list[Problem]:
        return [self.train_problem(0)]

    def demonstration(self, problem: Problem, flawed: bool = False) -> str:
        return f"#### {problem.answer}"

    def make_env(self, reward=None, verifier=None) -> SingleTurnEnv:
        return SingleTurnEnv(score, score)


def components(task) -> Components:
    return Components(task, None, None, None, None, None)


CFG = load_config(None, ["rollout.max_new_tokens=8"])


def river(**settings) -> Params:
    """methods.river's params over a pool of 8 problems."""
    return Params(**{"pool": 8, **settings})


def kinds(problems: list[Problem]) -> list[str]:
    return [p.metadata["verifier"] for p in problems]


def solver(messages) -> str:
    """An oracle that adds the prompt's two numbers."""
    a, b = messages[-1]["content"].rstrip("=").split("+")
    return f"#### {int(a) + int(b)}"


@pytest.fixture
def oracles(monkeypatch):
    """`oracles:solver`, `oracles:third_time` (right only from its third try at each problem)
    and `oracles:never`, as `module:function` paths."""
    tries: dict[str, int] = {}

    def third_time(messages) -> str:
        prompt = messages[-1]["content"]
        tries[prompt] = tries.get(prompt, 0) + 1
        return solver(messages) if tries[prompt] >= 3 else "#### -1"

    module = types.ModuleType("oracles")
    module.solver, module.third_time = solver, third_time
    module.never = lambda messages: "#### -1"
    monkeypatch.setitem(sys.modules, "oracles", module)


def test_verifier_consistency_drops_broken_and_lenient_verifiers():
    task = ToyTask()
    problems = [task.train_problem(i) for i in range(8)]
    kept = verifier_consistent(CFG, river(), components(task), problems, None, None)
    # always_zero rejects its reference; shortcut passes another problem's answer; lenient
    # passes the empty reply
    assert [k for k, keep in zip(kinds(problems), kept.tolist()) if keep] == ["clean", "clean"]


def test_solvable_by_a_callable_oracle_within_k_tries(oracles):
    task = ToyTask()
    problems = [task.train_problem(i) for i in range(4)]
    p = river(oracle="oracles:solver", k=2)
    correct = oracle_successes(CFG, p, components(task), problems, None, None)
    assert correct.tolist() == [[True, True], [False, False], [True, True], [True, True]]
    # on clean verifiers (the others pass its wrong answers too); it counts tries per problem
    late = river(oracle="oracles:third_time", k=3)
    clean = [task.train_problem(0), task.train_problem(4)]
    assert oracle_successes(CFG, late, components(task), clean, None, None).tolist() == [
        [False, False, True],
        [False, False, True],
    ]
    late = river(oracle="oracles:third_time", k=2)
    clean = [task.train_problem(8), task.train_problem(12)]
    assert not oracle_successes(CFG, late, components(task), clean, None, None).any()


def test_screen_task_runs_both_filters_and_cycles_over_what_is_kept(oracles):
    task = ToyTask()
    p = river(filter=["solvable", "verifier_consistent"], oracle="oracles:solver")
    messages = []
    filtered = screen_task(CFG, p, components(task), None, None, messages.append)
    assert isinstance(filtered, FilteredTask)
    assert messages == [
        "methods.river: training on 2 of 8 screened problems "
        "(verifier_consistent dropped 6, solvable dropped 0)"
    ]
    drawn = [filtered.train_problem(i).id for i in range(6)]
    assert set(drawn) == {"toy-0", "toy-4"} and drawn.count("toy-0") == 3
    assert filtered.eval_problems() == task.eval_problems()  # eval is never filtered


def test_the_policy_and_a_model_path_are_oracles_too(tmp_path):
    tokenizer = build_tokenizer()
    model = build_model("nano", tokenizer, seed=0)  # untrained: solves only what accepts anything
    task = ToyTask()
    p = river(filter=["solvable"])
    problems = [task.train_problem(i) for i in range(8)]
    correct = oracle_successes(CFG, p, components(task), problems, model, tokenizer)
    assert correct.any(dim=1).tolist() == [k == "lenient" for k in kinds(problems)]
    model.save_pretrained(tmp_path / "oracle")
    tokenizer.save_pretrained(tmp_path / "oracle")
    by_path = river(filter=["solvable"], oracle=str(tmp_path / "oracle"))
    assert oracle_successes(CFG, by_path, components(task), problems, None, None).equal(correct)


def test_a_filter_that_keeps_nothing_stops_the_run(oracles):
    p = river(filter=["verifier_consistent", "solvable"], oracle="oracles:never")
    with pytest.raises(ConfigError, match="kept none of the pool=8 .*solvable dropped 2"):
        screen_task(CFG, p, components(ToyTask()), None, None, lambda message: None)


def test_multi_turn_demonstrations_are_replayed_in_the_env():
    task = GuessNumberTask(GuessNumberParams(max_number=16, max_guesses=8), seed=0, eval_size=4)
    problem = task.train_problem(0)
    replies = [m["content"] for m in task.demonstration(problem) if m["role"] == "assistant"]
    assert play(task.make_env(), problem, scripted(replies), 8)
    assert not play(task.make_env(), problem, scripted([]), 8)
    problems = [task.train_problem(i) for i in range(4)]
    assert verifier_consistent(CFG, river(pool=4), components(task), problems, None, None).all()


def only(kind: str) -> PlantedArithmetic:
    """Planted environments all of one kind (all good for 'good'), half with a harmless hint."""
    shares = {k: float(k == kind) for k in PLANTED if k != "good"}
    return PlantedArithmetic(PlantedParams(**shares), seed=0, eval_size=4)


@pytest.mark.parametrize("kind", PLANTED)
def test_the_verifier_check_on_each_planted_kind(kind):
    task = only(kind)
    problems = [task.train_problem(i) for i in range(8)]
    kept = verifier_consistent(CFG, river(), components(task), problems, None, None)
    # wrong_reference: 62+18= with reference 70; the demonstration works 2+8+0=10 6+1+1=8 #### 80,
    # which the verifier rejects. lenient_verifier: the empty reply passes. The others play
    # as a sound environment does: the check cannot see a hidden operand or a leaking hint.
    assert kept.tolist() == [kind not in ("wrong_reference", "lenient_verifier")] * 8


class Listed(PlantedArithmetic):
    """Planted environments whose train problems are the given ones, in order."""

    def __init__(self, problems: list[Problem]):
        super().__init__(PlantedParams(), seed=0, eval_size=1)
        self.listed = problems

    def train_problem(self, index: int) -> Problem:
        return self.listed[index]


def environment(prompt: str, answer: str, kind: str) -> Problem:
    a, b = (int(x) for x in prompt.split("\n")[0].rstrip("=").split("+"))
    return Problem(f"e-{prompt}", prompt, answer, metadata={"a": a, "b": b, "planted": kind})


GOOD = environment("12+34=", "46", "good")
LEAK = environment("12+34=\n\nHint: the answer is 46", "46", "leaking_hint")
WRONG = environment("21+43=", "74", "wrong_reference")  # 64
RUBRIC = "{statement} | {reference}"


@pytest.fixture(scope="module")
def auditor_dir(tmp_path_factory):
    """A nano model taught by rote to pass GOOD and fail LEAK under RUBRIC, saved as a model
    directory."""
    tokenizer = build_tokenizer()
    model = build_model("nano", tokenizer, seed=0)
    examples = []
    for problem, verdict in ((GOOD, "yes"), (LEAK, "no")):
        prompt = [{"role": "user", "content": render_audit(RUBRIC, problem)}]
        conversation = Conversation(tokenizer, prompt)
        reply = tokenizer(f"Verdict: {verdict}", add_special_tokens=False)["input_ids"]
        conversation.add_reply(reply + [tokenizer.eos_token_id])
        examples.append((conversation.token_ids, conversation.loss_mask))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(40):
        optimizer.zero_grad()
        sft_backward(model, examples, tokenizer.pad_token_id)
        optimizer.step()
    path = tmp_path_factory.mktemp("auditor")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def audited(**audit) -> Params:
    return river(filter=["verifier_consistent", "llm_audit"], audit={"rubric": RUBRIC, **audit})


def test_the_audit_judge_screens_after_the_verifier_check(auditor_dir):
    task = Listed([GOOD, LEAK, WRONG])
    messages = []
    p = audited(model=str(auditor_dir), max_new_tokens=16)
    filtered = screen_task(CFG, p.model_copy(update={"pool": 3}), components(task), None, None,
                           messages.append)  # fmt: skip
    # WRONG's reference fails its own demonstration, so the judge never sees it
    assert messages == [
        "methods.river: training on 1 of 3 screened problems "
        "(verifier_consistent dropped 1, llm_audit dropped 1)"
    ]
    assert filtered.kept.items == [GOOD]


def test_the_policy_audits_in_the_embedded_engine(auditor_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(auditor_dir)
    tokenizer = AutoTokenizer.from_pretrained(auditor_dir)
    kept = llm_audit(CFG, audited(max_new_tokens=16), None, [LEAK, GOOD], model, tokenizer)
    assert kept.tolist() == [False, True]
    with pytest.raises(ConfigError, match="embedded engine, not engine 'vllm'; fix: name"):
        River.check(audited(engine="vllm"), CFG, None)


def test_unusable_verdicts_are_decided_by_on_unusable():
    verdicts = [Score(1.0), Score(0.0), Score(0.0, "infra_error")]
    assert audit_decisions(verdicts, "keep").tolist() == [True, False, True]
    assert audit_decisions(verdicts, "drop").tolist() == [True, False, False]


def flaky(cfg, model, tokenizer, model_path):
    """An engine builder (methods.river.audit.engine) whose engine fails on a hidden operand."""
    engine = HFEngine(model, tokenizer)

    def generate(prompts, params, seeds=None):
        if any("?" in tokenizer.decode(p) for p in prompts):
            raise RuntimeError("the judge's server went away")
        return HFEngine.generate(engine, prompts, params, seeds)

    engine.generate = generate
    return engine


def test_a_failing_judge_is_counted_and_too_many_failures_stop_the_run(
    auditor_dir, monkeypatch, caplog
):
    monkeypatch.setitem(sys.modules, "engines", types.SimpleNamespace(flaky=flaky))
    hidden = environment("12+34=", "46", "impossible")
    hidden = Problem(hidden.id, "12+?=", "46", metadata=hidden.metadata)
    problems = [GOOD, LEAK, hidden]
    for rule, kept, said in (
        ("keep", [True, False, True], "kept"),
        ("drop", [True, False, False], "dropped"),
    ):
        p = audited(model=str(auditor_dir), engine="engines:flaky", batch_size=1, on_unusable=rule)
        with caplog.at_level(logging.WARNING, logger="rlvr.methods.river"):
            assert llm_audit(CFG, p, None, problems, None, None).tolist() == kept
        assert f"no usable verdict on 1 of 3 problems, {said} by" in caplog.text
    cut = audited(model=str(auditor_dir), max_new_tokens=3)  # "Ver": no verdict
    with pytest.raises(ConfigError, match=r"no usable verdict on 2 of 2 problems .*cut at max_n"):
        llm_audit(CFG, cut, None, [GOOD, LEAK], None, None)


def test_the_trainer_trains_on_the_screened_problems(fast_overrides):
    cfg = load_config(
        None,
        [
            *fast_overrides,
            "methods.river.filter=[verifier_consistent]",
            "methods.river.pool=6",
            "methods.river.penalty_delta=0",
        ],
    )
    trainer = Trainer(cfg)
    try:
        assert isinstance(trainer.components.task, FilteredTask)
        pool = {trainer.components.task.task.train_problem(i).id for i in range(6)}
        assert {p.id for p in trainer.problems(0, 12)} == pool  # arithmetic's verifier is sound
    finally:
        trainer.updater.close()
        trainer.source.close()


def one_step(overrides: list[str], capture=None) -> tuple[Trainer, dict]:
    trainer = Trainer(load_config(None, overrides))
    try:
        if capture is not None:
            capture(trainer)
        return trainer, trainer.step()
    finally:
        trainer.updater.close()
        trainer.source.close()


def test_single_turn_runs_are_unaffected(fast_overrides):
    plain, _ = one_step(fast_overrides)
    penalised, metrics = one_step([*fast_overrides, "methods.river.filter=[]"])
    assert metrics["shaping/repeated_turns"] == 0.0
    for p, q in zip(plain.model.parameters(), penalised.model.parameters()):
        assert torch.equal(p, q)


def guessing_episode(tokenizer, turns: list[tuple[str, str]], reward: float, index: int):
    """A guess-the-number episode of (reply, feedback) turns laid out by the rollout's token
    layer (chat template tokens between turns); the last turn's feedback is not inserted."""
    problem = Problem(id="guess", prompt="Guess my number from 1 to 16.", answer="10")
    conversation = Conversation(tokenizer, problem.messages())
    for k, (reply, feedback) in enumerate(turns):
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        conversation.add_reply(ids)
        if k + 1 < len(turns):
            conversation.add_observation({"role": "user", "content": feedback})
    n, rewards = len(conversation.token_ids), [0.0] * (len(turns) - 1) + [reward]
    trajectory = Trajectory(
        problem, 0, index, conversation.token_ids, conversation.loss_mask, [0.0] * n, rewards,
        conversation.turn_ends,
    )  # fmt: skip
    trajectory.stamp(0)
    return trajectory


def test_repeated_turns_have_their_advantages_lowered(fast_overrides):
    seen = {}

    def rollout(trainer):
        tokenizer = trainer.tokenizer
        looping = [("guess 8", "higher"), ("guess 8", "higher"), ("guess 12", "lower"),
                   ("guess 8", "higher"), ("guess 8", "higher"), ("guess 10", "")]  # fmt: skip
        group = [
            guessing_episode(tokenizer, looping, 0.0, 0),  # turns 1 and 3 penalised, 4 capped
            guessing_episode(tokenizer, [("guess 8", "higher"), ("guess 10", "")], 1.0, 1),
            guessing_episode(tokenizer, [("guess 10", "")], 1.0, 2),
            # the same guess answered differently is no loop
            guessing_episode(
                tokenizer, [("guess 8", "higher"), ("guess 8", "lower"), ("guess 7", "")], 0.0, 3
            ),
        ]

        def sampled(timings):
            timings["time/generate"] = 1.0
            return group, None, {}

        trainer.rollout = sampled
        estimator, prepare = trainer.components.advantage, trainer.preparer.prepare

        def plain(inputs, algo):  # the estimator's own advantages, before any offsets
            seen["plain"] = estimator(inputs, algo)
            return seen["plain"]

        def recording(step, baselines):
            data, extra = prepare(step, baselines)
            seen.update(turn_ids=step.batch.turn_ids, shaped=data.advantages)
            return data, extra

        trainer.components.advantage, trainer.preparer.prepare = plain, recording

    overrides = [
        *fast_overrides,
        "rollout.batch_size=4",
        "methods.river.filter=[]",
        "methods.river.penalty_cap=0.1",
    ]
    _, metrics = one_step(overrides, rollout)
    turn_ids = seen["turn_ids"]
    expected = torch.zeros_like(seen["plain"])
    expected[0][(turn_ids[0] == 1) | (turn_ids[0] == 3)] = -0.05
    assert torch.allclose(seen["shaped"] - seen["plain"], expected, atol=1e-7)
    assert metrics["shaping/repeated_turns"] == 3 / 12


WORDS = ["<sep>", "find", "ls", "a.txt", "b.txt", "cat", "empty", "code", "42", "submit"]
SEP = 0  # stands in for the chat template's special tokens between turns


def decode(ids: list[int]) -> str:
    """Word-level decoding that drops the template token, as skip_special_tokens does."""
    return " ".join(WORDS[i] for i in ids if i != SEP)


def episode(turns: list[tuple[str, str]]) -> Trajectory:
    """A trajectory of `turns` (action, observation) after a one-token prompt, each observation
    opened by a template token; the last turn's observation is not inserted (the episode ended)."""
    ids, mask, ends = [WORDS.index("find")], [0], []
    for k, (action, observation) in enumerate(turns):
        ids += [WORDS.index(w) for w in action.split()]
        mask += [1] * len(action.split())
        ends.append(len(ids))
        if k + 1 < len(turns):
            inserted = [SEP] + [WORDS.index(w) for w in observation.split()]
            ids, mask = ids + inserted, mask + [0] * len(inserted)
    problem = Problem(id="p", prompt="find the code")
    return Trajectory(problem, 0, 0, ids, mask, [0.0] * len(ids), [0.0] * len(turns), ends, "ok")


LOOPY = [
    ("ls", "a.txt b.txt"),  # tokens 1 | 2-4
    ("cat a.txt", "empty"),  # 5-6 | 7-8
    ("ls", "a.txt b.txt"),  # 9: repeats turn 0 -> -0.05
    ("cat a.txt", "empty"),  # 13-14: repeats turn 1 -> -0.05
    ("cat b.txt", "code 42"),  # 17-18: new (Jaccard of the actions 1/3)
    ("ls", "a.txt b.txt"),  # 22: repeats turn 0 -> -0.05, the total reaches the 0.15 cap
    ("ls", "a.txt b.txt"),  # 26: repeats, but capped -> 0
    ("submit 42", ""),  # 30-31
]


def test_jaccard_is_over_whitespace_words():
    assert jaccard("cat a.txt", "cat  b.txt") == pytest.approx(1 / 3)
    assert jaccard("ls -la", "ls -la\n") == 1.0
    assert jaccard("", "") == 1.0 and jaccard("ls", "") == 0.0


def test_turn_texts_split_actions_from_what_the_env_inserted():
    texts = turn_texts(episode(LOOPY), decode)
    assert texts[:2] == [("ls", "a.txt b.txt"), ("cat a.txt", "empty")]
    assert texts[-1] == ("submit 42", "")


def test_repeated_turns_need_both_action_and_observation_above_the_threshold():
    assert repeated_turns(turn_texts(episode(LOOPY), decode), 0.8) == [
        False, False, True, True, False, True, True, False,
    ]  # fmt: skip
    # the same command with a different result is no loop
    assert repeated_turns([("ls", "a b"), ("ls", "a c")], 0.8) == [False, False]
    # strictly above: 4 shared words of 5 is exactly 0.8
    same = [("a b c d e", "x"), ("a b c d", "x")]
    assert repeated_turns(same, 0.8) == [False, False]
    assert repeated_turns(same, 0.75) == [False, True]


def test_repetition_penalties_stop_at_the_cap():
    offsets = repetition_penalties([False, True, True, False, True, True], 0.05, 0.15)
    assert offsets == pytest.approx([0, -0.05, -0.05, 0, -0.05, 0], abs=1e-12)
    assert repetition_penalties([True, True], 0.1, 0.15) == pytest.approx([-0.1, -0.05])


def test_repetition_offsets_land_on_the_repeated_turns_policy_tokens():
    trajectory = episode(LOOPY)
    batch = Batch.from_trajectories([trajectory], pad_id=SEP)
    offsets, share = repetition_offsets([trajectory], batch.turn_ids, decode, 0.8, 0.05, 0.15)
    # Batch columns are shifted: column t holds token t + 1
    expected = torch.zeros(1, len(trajectory.token_ids) - 1)
    expected[0, [9 - 1, 13 - 1, 14 - 1, 22 - 1]] = -0.05
    assert torch.allclose(offsets, expected, atol=1e-12)
    assert share == pytest.approx(4 / 8)


def test_single_turn_episodes_get_no_offset():
    trajectories = [episode([("ls", "")]), episode([("ls", "")]), episode([("cat a.txt", "")])]
    batch = Batch.from_trajectories(trajectories, pad_id=SEP)
    offsets, share = repetition_offsets(trajectories, batch.turn_ids, decode, 0.8, 0.05, 0.15)
    assert torch.all(offsets == 0) and share == 0.0
