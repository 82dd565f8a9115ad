"""Parason's grammar: the thread tree, critical path and structure shares of hand-written traces,
and the dispatch of parallel regions to blind sibling threads."""

import pytest

from rlvr.models.tiny import build_tokenizer
from rlvr.rollout.engine import Completion, SamplingParams
from rlvr.rollout.parallel import (
    DispatchingEngine,
    TraceError,
    blind_threads,
    characters,
    counter_for,
    generate_parallel,
    parse_trace,
    trace_stats,
)
from rlvr.tasks.thread_tags import TAG_TOKENS

TOKENIZER = build_tokenizer(TAG_TOKENS)  # each tag one token, every other character one token

FLAT = (
    "ab<Parallel><Outlines><Subtask>x</Subtask><Trial>y</Trial></Outlines>"
    "<Thread>1234</Thread><Thread>12</Thread></Parallel>cd"
)
NESTED = (
    "<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines>"
    "<Thread>x<Parallel><Outlines><Trial>c</Trial><Trial>d</Trial></Outlines>"
    "<Thread>12345</Thread><Thread>1</Thread></Parallel></Thread>"
    "<Thread>123</Thread></Parallel>"
)


def stats(text):
    return trace_stats(text, counter_for(TOKENIZER, text))


def test_a_flat_region_costs_its_outlines_and_its_longest_thread():
    s = stats(FLAT)
    # ab 2 | <P> <O> 2 | <S>x</S> 3 | <T>y</T> 3 | </O> 1 | thread 6 | thread 4 | </P> 1 | cd 2
    assert s.total_tokens == 24
    assert s.critical_path_tokens == 20  # all but the shorter thread
    assert s.acceleration == pytest.approx(24 / 20)
    assert (s.subtask_ratio, s.trial_ratio, s.parallel_ratio) == (6 / 24, 4 / 24, 10 / 24)
    assert s.regions == 1 and s.well_formed
    tree = parse_trace(FLAT)
    assert [t.kind for t in tree.regions[0].threads] == ["subtask", "trial"]
    assert FLAT[slice(*tree.regions[0].threads[1].span)] == "<Thread>12</Thread>"


def test_a_nested_region_shortens_the_path_of_its_thread():
    s = stats(NESTED)
    # outer head 9; thread 1 = 1 + 1 + inner head 9 + 7 + 3 + </P> 1 + </Thread> 1 = 23, whose
    # own path drops the inner shorter thread (3): 20; thread 2 = 5; </P> 1
    assert s.total_tokens == 9 + 23 + 5 + 1
    assert s.critical_path_tokens == 9 + 20 + 1
    assert s.regions == 2
    # thread 1's own tokens are its subtask's (23 - 10 nested); the nested trials are 7 + 3
    assert s.subtask_ratio == pytest.approx((13 + 5) / 38)
    assert s.trial_ratio == pytest.approx(10 / 38)
    assert s.parallel_ratio == pytest.approx(28 / 38)


def test_a_sequential_trace_is_its_own_critical_path():
    s = trace_stats("3*4=12 5*6=30 #### 42")
    assert s.total_tokens == s.critical_path_tokens == 21 and s.acceleration == 1.0
    assert s.parallel_ratio == 0.0 and s.regions == 0 and s.well_formed


def test_characters_are_the_default_count():
    assert trace_stats(FLAT).total_tokens == len(FLAT)
    assert trace_stats(FLAT).critical_path_tokens == len(FLAT) - len("<Thread>12</Thread>")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("<Parallel><Outlines><Subtask>a</Subtask><Subtask>b</Subtask></Outlines>"
         "<Thread>1</Thread></Parallel>", "expected <Thread>"),
        ("<Parallel><Outlines><Subtask>a</Subtask></Outlines>"
         "<Thread>1</Thread><Thread>2</Thread></Parallel>", "more <Thread> blocks than the 1"),
        ("<Parallel><Outlines></Outlines><Thread>1</Thread></Parallel>", "without a <Subtask>"),
        ("<Parallel><Outlines><Subtask>a</Subtask></Outlines>so<Thread>1</Thread></Parallel>",
         "text 'so'"),
        ("<Parallel><Outlines><Subtask>a</Subtask></Outlines><Thread>1", "unclosed <Thread>"),
        ("done</Thread>", "</Thread> outside its block"),
    ],
)  # fmt: skip
def test_a_broken_trace_names_the_fault_and_counts_as_sequential(text, why):
    with pytest.raises(TraceError, match=why):
        parse_trace(text)
    s = trace_stats(text, characters)
    assert not s.well_formed and s.acceleration == 1.0 and s.critical_path_tokens == len(text)


class ScriptedPolicy:
    """An Engine that writes one region of two outlines of `kind`, a thread per dispatched
    opening, then the conclusion; it records every context it was asked to continue."""

    def __init__(self, kind: str = "Subtask"):
        self.contexts, self.kind = [], kind

    def generate(self, prompts, params, seeds=None):
        outs = []
        for ids in prompts:
            text = TOKENIZER.decode(ids, skip_special_tokens=True)
            self.contexts.append(text)
            if text.endswith(("<Thread>1:", "<Thread>2:")):
                reply, reason = f" work{text[-2]}</Thread>", "stop"
            elif "<Parallel>" not in text:
                k = self.kind
                reply = f"go <Parallel><Outlines><{k}>1: a</{k}><{k}>2: b</{k}></Outlines>"
                reason = "stop"
            else:
                reply, reason = "</Parallel> #### 3", "eos"
            reply_ids = TOKENIZER(reply, add_special_tokens=False)["input_ids"]
            if len(reply_ids) > params.max_new_tokens:
                reply_ids, reason = reply_ids[: params.max_new_tokens], "length"
            # each call's logprobs are its number, negated: where a token came from stays visible
            logprob = -float(len(self.contexts))
            outs.append(Completion(reply_ids, [logprob] * len(reply_ids), reason))
        return outs


def test_blind_threads_pair_each_later_sibling_with_the_text_before_its_region():
    head = "ab<Parallel><Outlines><Subtask>x</Subtask><Trial>y</Trial></Outlines>"
    assert blind_threads(FLAT) == [(head, "<Thread>12</Thread>")]
    # top-level regions only: the nested one is written with its thread
    outer = NESTED[: NESTED.index("<Thread>")]
    assert blind_threads(NESTED) == [(outer, "<Thread>123</Thread>")]
    assert blind_threads(FLAT + FLAT) == [(head, "<Thread>12</Thread>"),
                                          (FLAT + head, "<Thread>12</Thread>")]  # fmt: skip
    assert blind_threads("no regions") == [] == blind_threads(FLAT.replace("</Parallel>", ""))


def test_dispatch_runs_each_thread_blind_to_its_siblings():
    engine = ScriptedPolicy()
    prompt = TOKENIZER("q=", add_special_tokens=False)["input_ids"]
    (episode,) = generate_parallel(engine, [prompt], TOKENIZER, SamplingParams(200), seeds=[7])
    assert episode.text == (
        "go <Parallel><Outlines><Subtask>1: a</Subtask><Subtask>2: b</Subtask></Outlines>"
        "<Thread>1: work1</Thread><Thread>2: work2</Thread></Parallel> #### 3"
    )
    assert episode.finish_reason == "eos" and episode.threads == 2
    second = next(c for c in engine.contexts if c.endswith("<Thread>2:"))
    assert "work1" not in second  # the sibling's work is not in its context
    assert stats(episode.text).well_formed


def test_trials_are_dispatched_as_blind_siblings_and_cost_only_the_longest():
    """<Trial> threads (speculative attempts) run as <Subtask> threads do, the form the paper's
    release gives both: each dispatched blind to the others, all joined before the main path
    goes on, so the critical path counts only the longest and the trial ratio all of them."""
    engine = ScriptedPolicy("Trial")
    prompt = TOKENIZER("q=", add_special_tokens=False)["input_ids"]
    (episode,) = generate_parallel(engine, [prompt], TOKENIZER, SamplingParams(200), seeds=[7])
    head = "go <Parallel><Outlines><Trial>1: a</Trial><Trial>2: b</Trial></Outlines>"
    assert episode.text == (
        head + "<Thread>1: work1</Thread><Thread>2: work2</Thread></Parallel> #### 3"
    )
    assert episode.threads == 2 and episode.finish_reason == "eos"
    second = next(c for c in engine.contexts if c.endswith("<Thread>2:"))
    assert second == "q=" + head + "<Thread>2:"  # blind to trial 1
    (row,) = episode.rows  # trial 2 trains on that context, as its own sequence
    context = len(row.token_ids) - sum(row.loss_mask)
    assert TOKENIZER.decode(row.token_ids[context:]) == " work2</Thread>"
    s = stats(episode.text)
    # "go " 3 | <P><O> 2 | two outlines of 1 + 4 + 1 | </O> 1 | two threads of 1 + 8 + 1 |
    # </P> 1 | " #### 3" 7: 46 tokens; the path skips one thread (10); trials hold 20
    assert (s.total_tokens, s.critical_path_tokens) == (46, 36)
    assert (s.trial_ratio, s.subtask_ratio, s.parallel_ratio) == (20 / 46, 0.0, 20 / 46)
    assert s.acceleration == pytest.approx(46 / 36)


def test_dispatch_trains_each_token_on_the_context_it_was_sampled_from():
    engine = ScriptedPolicy()
    prompt = TOKENIZER("q=", add_special_tokens=False)["input_ids"]
    (episode,) = generate_parallel(engine, [prompt], TOKENIZER, SamplingParams(200), seeds=[7])
    decode = lambda ids: TOKENIZER.decode(ids, skip_special_tokens=True)  # noqa: E731
    ids, trained = episode.token_ids, episode.trained
    assert len(trained) == len(episode.logprobs) == len(ids)
    head = "go <Parallel><Outlines><Subtask>1: a</Subtask><Subtask>2: b</Subtask></Outlines>"
    # the main path and the first thread, which saw exactly the trace before it
    assert decode([t for t, m in zip(ids, trained) if m]) == (
        head + " work1</Thread></Parallel> #### 3"
    )
    # the dispatcher's openings, and the second thread, which did not see the first
    assert (
        decode([t for t, m in zip(ids, trained) if not m]) == "<Thread>1:<Thread>2: work2</Thread>"
    )
    (row,) = episode.rows
    context = len(row.token_ids) - sum(row.loss_mask)
    assert decode(row.token_ids[:context]) == "q=" + head + "<Thread>2:"
    assert decode(row.token_ids[context:]) == " work2</Thread>" and all(row.loss_mask[context:])
    # calls: 1 main, 2 and 3 the threads, 4 the conclusion; logprobs stay with their tokens
    assert set(row.behaviour_logprobs[context:]) == {-3.0} and not any(
        row.behaviour_logprobs[:context]
    )
    by_call = {lp for lp, m in zip(episode.logprobs, trained) if m}
    assert by_call == {-1.0, -2.0, -4.0}


def test_the_dispatching_engine_returns_the_trace_its_mask_and_its_thread_rows():
    prompt = TOKENIZER("q=", add_special_tokens=False)["input_ids"]
    dispatching = DispatchingEngine(ScriptedPolicy(), TOKENIZER)
    (completion,) = dispatching.generate([prompt], SamplingParams(200), seeds=[7])
    (episode,) = generate_parallel(ScriptedPolicy(), [prompt], TOKENIZER, SamplingParams(200), [7])
    assert completion.token_ids == episode.token_ids and completion.text == episode.text
    assert completion.trained == episode.trained and completion.side_rows == episode.rows
    assert completion.finish_reason == "eos"
    # a reply without a region dispatches nothing: all of it trains, and no rows come with it
    after = TOKENIZER("q=<Parallel>", add_special_tokens=False)["input_ids"]  # writes the end
    (completion,) = dispatching.generate([after], SamplingParams(200, 0.0))
    assert completion.text == "</Parallel> #### 3"
    assert completion.side_rows == [] and all(completion.trained)


@pytest.mark.parametrize(
    ("budget", "ending"),
    [
        # the opening takes 18 tokens; 12 left give each thread 6: its opening (3), 2 of work
        # and the closing the dispatcher adds (1); none remain for the conclusion
        (30, "</Outlines><Thread>1: w</Thread><Thread>2: w</Thread>"),
        (20, "</Outlines>"),  # 2 left: no room for two threads, so none is dispatched
    ],
)
def test_dispatch_keeps_the_whole_reply_within_the_budget(budget, ending):
    engine = ScriptedPolicy()
    prompt = TOKENIZER("q=", add_special_tokens=False)["input_ids"]
    (episode,) = generate_parallel(engine, [prompt], TOKENIZER, SamplingParams(budget), seeds=[7])
    assert episode.finish_reason == "length" and episode.text.endswith(ending)
    assert len(episode.token_ids) <= budget
