import pytest

from rlvr.config import ConfigError, load_config
from rlvr.models.tiny import build_tokenizer
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS
from rlvr.tasks.graph_walk import GraphWalkParams, GraphWalkTask, steps_followed, successors
from rlvr.train.components import build_task
from rlvr.types import Problem


def task(seed=0, eval_size=20, **params):
    return GraphWalkTask(GraphWalkParams(**params), seed=seed, eval_size=eval_size)


def walked(problem):
    vertex = problem.metadata["start"]
    for _ in range(problem.metadata["hops"]):
        vertex = successors(problem)[vertex]
    return vertex


def test_the_answer_is_where_the_listed_edges_lead():
    t = task(vertices=7, hops=4)
    for problem in [*t.eval_problems(), *map(t.train_problem, range(50))]:
        edges = problem.metadata["edges"].split()
        assert [e[0] for e in edges] == sorted(e[2] for e in edges) == list("abcdefg")
        assert problem.prompt.startswith(problem.metadata["edges"] + "\n")
        assert problem.answer == walked(problem) != problem.metadata["start"]
    assert TASKS["graph_walk"] is GraphWalkTask


def test_the_graph_is_one_cycle_through_every_vertex():
    problem = task(vertices=9, hops=2).train_problem(3)
    edge, seen, vertex = successors(problem), set(), "a"
    while vertex not in seen:
        seen.add(vertex)
        vertex = edge[vertex]
    assert vertex == "a" and len(seen) == 9


def test_eval_is_all_long_and_training_mixes_in_the_short_share():
    t = task(hops=3, short_share=0.25, eval_size=30)
    assert {p.metadata["hops"] for p in t.eval_problems()} == {3}
    hops = [t.train_problem(i).metadata["hops"] for i in range(800)]
    assert set(hops) == {1, 3} and 0.2 < hops.count(1) / len(hops) < 0.3
    assert t.train_problem(5).domain == f"graph_walk_{hops[5]}hop"
    assert {task(short_share=0).train_problem(i).metadata["hops"] for i in range(200)} == {3}
    assert {task(short_share=1).train_problem(i).metadata["hops"] for i in range(200)} == {1}


def test_the_verifier_reads_only_the_marked_answer():
    t = task(hops=3)
    problem = t.eval_problems()[0]
    check = REWARDS[t.verifier]
    assert check(problem, f"x y #### {problem.answer}").status == "ok"
    assert check(problem, f"{problem.answer}").status == "wrong"  # no marker
    wrong = next(v for v in "abcdef" if v != problem.answer)
    assert check(problem, f"#### {wrong}").status == "wrong"


def test_steps_followed_scores_each_hop_against_the_edges():
    problem = Problem(
        id="p", prompt="", answer="d", domain="graph_walk_3hop",
        metadata={"edges": "a>b b>c c>d d>a", "start": "a", "hops": 3},
    )  # fmt: skip
    assert steps_followed(problem, "b c #### d") == 1.0
    assert steps_followed(problem, "b d #### a") == pytest.approx(2 / 3)  # a>b yes, b>d no, d>a yes
    assert steps_followed(problem, "c d #### a") == pytest.approx(2 / 3)
    assert steps_followed(problem, "#### d") == 0.0  # the right answer, no walk: not 3 hops
    assert steps_followed(problem, "b c d") == 1.0  # a walk without its marker is still a walk
    assert steps_followed(problem, "b c d #### a") == 0.0


def test_demonstrations_have_the_walks_shape_but_not_its_content():
    t = task(vertices=8, hops=4)
    problems = [t.train_problem(i) for i in range(300)]
    demos = [t.demonstration(p) for p in problems]
    long = [(p, d) for p, d in zip(problems, demos) if p.metadata["hops"] == 4]
    assert all(len(d.split("####")[0].split()) == 3 for _, d in long)
    assert all(d.startswith("#### ") for p, d in zip(problems, demos) if p.metadata["hops"] == 1)
    followed = sum(steps_followed(p, d) for p, d in long) / len(long)
    assert followed < 0.3  # chance is 1 in 8 a hop
    assert t.demonstration(problems[0], flawed=True) == demos[0]


def test_too_many_hops_for_the_graph_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="hops=6 must be below task.vertices=6"):
        task(vertices=6, hops=6)
    with pytest.raises(ConfigError, match="short_share"):
        build_task(load_config(None, ["task.name=graph_walk", "task.short_share=1.5"]))


def test_the_tokens_layout_makes_each_edge_one_token_and_grades_one_character():
    t = task(vertices=5, hops=3, layout="tokens", short_share=0.5)
    assert t.verifier == "exact_at" and len(t.added_tokens) == 5 * 4
    tokenizer = build_tokenizer(t.added_tokens)
    for problem in map(t.train_problem, range(40)):
        hops, start = problem.metadata["hops"], problem.metadata["start"]
        assert problem.metadata["answer_at"] == hops
        edges = problem.metadata["edges"].split()
        pieces = tokenizer.tokenize(problem.metadata["edges"])
        assert [p for p in pieces if p != " "] == edges  # one token an edge
        walk = [start]
        for _ in range(3):
            walk.append(successors(problem)[walk[-1]])
        reply = "".join(walk[1:])  # the whole 3-step walk: a one-hop instance grades its first
        assert REWARDS[t.verifier](problem, reply).status == "ok"
        assert REWARDS[t.verifier](problem, start + reply).status == "wrong"  # one place late
        assert steps_followed(problem, reply) == 1.0
        demo = t.demonstration(problem)
        assert len(demo) == hops and " " not in demo
    assert task(layout="text").added_tokens == [] and task(layout="text").verifier == "exact"


def test_steps_followed_reads_the_first_hops_characters_in_the_tokens_layout():
    problem = Problem(
        id="p", prompt="", answer="d", domain="graph_walk_3hop",
        metadata={"edges": "a>b b>c c>d d>a", "start": "a", "hops": 3, "answer_at": 3},
    )  # fmt: skip
    assert steps_followed(problem, "bcd") == 1.0
    assert steps_followed(problem, "bcdxyz") == 1.0  # what follows the walk is not read
    assert steps_followed(problem, "bda") == pytest.approx(2 / 3)  # a>b, d>a
    assert steps_followed(problem, "cda") == pytest.approx(2 / 3)  # the first hop is from the start
    assert steps_followed(problem, "bc") == 0.0  # too short to be a walk of 3 hops
