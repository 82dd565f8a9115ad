"""The run page and the comparison page: self-contained HTML with the run's curves, evals,
config and samples coloured by advantage."""

import json
import re

from rlvr.analysis.page import compare_page, run_page, samples_html
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.train.trainer import Trainer


def test_a_finished_run_writes_its_page_and_the_cli_rewrites_and_compares(fast_overrides, tmp_path):
    for name, lr in (("a", "1e-4"), ("b", "1e-3")):
        Trainer(load_config(None, [*fast_overrides, "train.steps=2", f"train.lr={lr}",
                                   f"log.name={name}", "log.report=true"])).run()  # fmt: skip
    run = tmp_path / "runs" / "a"
    page = (run / "report.html").read_text()
    assert page == run_page(run)
    # opens from disk: nothing is fetched from anywhere
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert page.count("<svg") >= 5  # reward, eval, entropy, length, clip, phase times ...
    assert "training reward and accuracy" in page and "seconds per phase" in page
    assert "train:\n" in page and "lr: 0.0001" in page  # the config, escaped into a <pre>
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert page.count("<tr><td>") >= 8  # the last step's samples are in the browser ...
    for sample in samples[-8:]:
        policy = [t for t, a in sample["tokens"] if a is not None]
        assert "".join(policy).startswith(sample["response"][:5])  # ... token by token
    assert 'id="step-1"' in page and 'id="step-2"' in page
    assert "pass@2" in page and "base" in page  # the eval table
    main(["report", str(run), "--out", str(tmp_path / "again.html")])
    assert (tmp_path / "again.html").read_text() == page
    out = tmp_path / "both.html"
    main(["compare", str(run), str(tmp_path / "runs" / "b"), "--out", str(out)])
    both = out.read_text()
    assert both == compare_page([run, tmp_path / "runs" / "b"])
    assert "a: reward" in both and "b: reward" in both


def test_tokens_are_coloured_by_the_sign_and_size_of_their_advantage():
    sample = {
        "step": 3, "group": 0, "prompt": [{"role": "user", "content": "1+1=<"}],
        "response": "2", "reward": 1.0, "status": "ok", "advantage": 0.5,
        "tokens": [["2", 0.5], ["obs", None], ["<|end|>", -1.0]],
    }  # fmt: skip
    page = samples_html([sample])
    assert 'background:rgba(0,160,0,0.30)" title="+0.500">2<' in page  # half the largest |A|
    assert 'background:rgba(220,0,0,0.60)" title="-1.000">&lt;|end|&gt;<' in page
    assert "</span>obs<span " in page  # an observation is shown between spans, not coloured
    assert "1+1=&lt;" in page  # prompts are escaped
