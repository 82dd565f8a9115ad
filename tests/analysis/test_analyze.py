"""rlvr analyze: the pass@k curve, diversity, entropy and reference probability of a model,
checked against the samples it drew."""

import json

import pytest

from rlvr.analysis.analyze import diversity, pass_curve
from rlvr.analysis.passk import pass_at_k
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Trajectory


def test_pass_curve_by_hand():
    # two problems, 4 samples: 1 and 4 correct. pass@1 = (1/4 + 1) / 2; pass@2 = (1/2 + 1) / 2;
    # pass@4 = (1 + 1) / 2
    assert pass_curve([1, 4], 4) == {"pass@1": 0.625, "pass@2": 0.75, "pass@4": 1.0}
    assert list(pass_curve([0, 3], 6)) == ["pass@1", "pass@2", "pass@4", "pass@6"]
    assert pass_curve([0, 3], 6)["pass@6"] == pytest.approx(pass_at_k(6, 3, 6) / 2)


def test_diversity_by_hand():
    def sample(group, text):
        return Trajectory(Problem("p", "q"), group, 0, [1], [0], [0.0], [0.0], [1],
                          response_text=text)  # fmt: skip

    samples = [sample(0, "a 1"), sample(0, "b 1"), sample(1, "c 2"), sample(1, "c 2")]
    found = diversity(samples, lambda text: text.split()[-1])
    assert found == {
        "diversity/replies": (2 / 2 + 1 / 2) / 2,
        "diversity/answers": (1 / 2 + 1 / 2) / 2,
    }


def test_analyze_a_run_and_a_model_against_their_samples(fast_overrides, tmp_path, capsys):
    Trainer(load_config(None, [*fast_overrides, "train.steps=1", "log.name=an"])).run()
    run = tmp_path / "runs" / "an"
    plot = tmp_path / "curves.png"
    main(["analyze", str(run), str(run / "final"), "--task", "arithmetic", "task.eval_size=6",
          "--k", "8", "--problems", "6", "--plot", str(plot), "--ablate"])  # fmt: skip
    results = json.loads(capsys.readouterr().out)
    found = results[str(run)]
    counts = found["correct_counts"]
    assert len(counts) == 6 and all(0 <= c <= 8 for c in counts)
    assert found["pass@1"] == pytest.approx(sum(counts) / 48)
    assert found["pass@8"] == pytest.approx(sum(c > 0 for c in counts) / 6)
    curve = [found[f"pass@{j}"] for j in (1, 2, 4, 8)]
    assert curve == sorted(curve)
    assert 1 / 8 <= found["diversity/answers"] <= found["diversity/replies"] + 1e-9 <= 1 + 1e-9
    assert found["entropy/token"] > 0 and found["reference/logprob"] < 0
    assert results[str(run / "final")]["correct_counts"] == counts  # same model, same seeds
    probes = {k: v for k, v in found.items() if k.startswith("probe/")}
    assert not probes or (
        "probe/majority" in probes and all(0 <= v <= 1 for v in probes.values())
    )  # no probes when nearly every sample is wrong, as an untrained model's are
    assert plot.stat().st_size > 0
    # --ablate: greedy accuracy with each of the 4 decoder layers mean-ablated, as a drop
    greedy = found["ablation/greedy"]
    drops = [found[f"ablation/layer_{layer}"] for layer in range(1, 5)]
    assert all(greedy - 1 <= d <= greedy and d * 6 == pytest.approx(round(d * 6)) for d in drops)
    assert "ablation/layer_5" not in found and "ablation/depth_slope" in found
