"""The run page: one self-contained HTML file (inline SVG plots, no server, no network) with a
run's curves, config, evals and sampled replies coloured by advantage; or several runs overlaid."""

from __future__ import annotations

import fnmatch
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs happen on servers
import matplotlib.pyplot as plt  # noqa: E402

# (panel title, metric names or fnmatch patterns); a panel with none of them logged is left out
PANELS = [
    ("training reward and accuracy", ["reward", "accuracy"]),
    ("held-out eval", ["eval/accuracy", "eval/pass@*"]),
    ("KL", ["kl", "ppo_kl"]),
    ("entropy", ["entropy", "entropy/sequence"]),
    ("response length (tokens)", ["response_length", "eval/response_length"]),
    ("clipped and masked shares", ["clip_frac", "clip_frac_lower", "truncated"]),
    ("rollout vs training logprobs", ["mismatch/abs_diff_mean", "mismatch/abs_diff_max"]),
    ("monitors that fired (train.monitors)", ["monitor/*"]),
    ("debate", ["debate/fixed", "debate/kept", "debate/critic_accuracy", "debate/eval_*"]),
    ("seconds per phase", ["time/generate", "time/update", "time/old_logprobs",
                           "time/ref_logprobs", "time/eval", "time/step"]),
]  # fmt: skip
SAMPLED_STEPS = 40  # the sample browser shows at most this many steps, evenly spaced
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
.plots { display: flex; flex-wrap: wrap; gap: 8px; }
.plots svg { width: 440px; height: auto; border: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; }
.reply { font-family: monospace; white-space: pre-wrap; }
.step { display: none; } .step.shown { display: block; }
"""
SCRIPT = """
function showStep(value) {
  document.querySelectorAll('.step').forEach(e => e.classList.toggle('shown', e.id === value));
}
"""


def _series(records: list[dict], patterns: list[str]) -> dict[str, tuple[list, list]]:
    """{metric: (steps, values)} of every logged metric a pattern matches, in pattern order."""
    logged = sorted({k for r in records for k in r})
    names = [n for p in patterns for n in logged if fnmatch.fnmatchcase(n, p)]
    out = {}
    for name in dict.fromkeys(names):
        points = [(r["step"], r[name]) for r in records if isinstance(r.get(name), (int, float))]
        if points:
            out[name] = ([s for s, _ in points], [v for _, v in points])
    return out


def _svg(title: str, lines: dict[str, tuple[list, list]]) -> str:
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for label, (steps, values) in lines.items():
        ax.plot(steps, values, label=label, marker="." if len(steps) < 30 else None)
    ax.set(title=title, xlabel="step")
    ax.legend(fontsize=7)
    # fixed margins and text kept as text: tight_layout's extra draw and glyph outlines were
    # most of a short run's finishing time
    fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.15)
    buffer = io.StringIO()
    # no date and fixed element ids: the same run always gives the same page
    with plt.rc_context({"svg.hashsalt": "rlvr", "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prologue: the SVG sits inside HTML


def plots(runs: dict[str, list[dict]]) -> list[str]:
    """One inline SVG per panel with anything logged, each run's metrics overlaid."""
    out = []
    for title, patterns in PANELS:
        lines = {}
        for name, records in runs.items():
            for metric, points in _series(records, patterns).items():
                lines[metric if len(runs) == 1 else f"{name}: {metric}"] = points
        if lines:
            out.append(_svg(title, lines))
    return out


def _colour(advantage: float, scale: float) -> str:
    """Green for a positive advantage, red for a negative one, stronger with its size."""
    alpha = min(abs(advantage) / scale, 1.0) * 0.6 if scale > 0 else 0.0
    rgb = "0,160,0" if advantage > 0 else "220,0,0"
    return f"rgba({rgb},{alpha:.2f})"


def _text(text: str) -> str:
    """Escaped for HTML, with a carriage return written out: a raw one would not survive the
    newline translation of writing and reading the page as text."""
    return html.escape(text.replace("\r", "\\r"))


def _sample_html(sample: dict, scale: float) -> str:
    prompt = sample["prompt"][-1]["content"] if sample["prompt"] else ""
    tokens = sample.get("tokens")
    if tokens:
        reply = "".join(
            _text(t) if a is None  # an observation: not the policy's
            else f'<span style="background:{_colour(a, scale)}" title="{a:+.3f}">{_text(t)}</span>'
            for t, a in tokens
        )  # fmt: skip
    else:
        reply = _text(sample["response"])
    return (
        f"<tr><td>{sample['group']}</td><td class=reply>{_text(prompt)}</td>"
        f"<td class=reply>{reply}</td><td>{sample['reward']:.3f}</td>"
        f"<td>{sample['status']}</td><td>{sample['advantage']:+.3f}</td></tr>"
    )


def samples_html(samples: list[dict]) -> str:
    """The sample browser: a step picker and, per step, its logged samples; each reply's tokens
    are coloured by their advantage (hover for the value)."""
    if not samples:
        return "<p>No samples were logged (log.samples_per_step = 0).</p>"
    steps = sorted({s["step"] for s in samples})
    if len(steps) > SAMPLED_STEPS:
        every = (len(steps) - 1) / (SAMPLED_STEPS - 1)
        steps = sorted({steps[round(i * every)] for i in range(SAMPLED_STEPS)})
    # full colour at the largest |advantage| of any shown token (or sample, without tokens)
    values = [a for s in samples for _, a in s.get("tokens") or [] if a is not None]
    values = values or [s["advantage"] for s in samples]
    scale = max(map(abs, values), default=1.0) or 1.0
    options = "".join(f'<option value="step-{s}">step {s}</option>' for s in steps)
    head = "<tr><th>group</th><th>prompt</th><th>reply</th><th>reward</th><th>status</th>"
    head += "<th>advantage</th></tr>"
    blocks = []
    for index, step in enumerate(steps):
        rows = "".join(_sample_html(s, scale) for s in samples if s["step"] == step)
        shown = " shown" if index == len(steps) - 1 else ""
        blocks.append(
            f'<div class="step{shown}" id="step-{step}"><table>{head}{rows}</table></div>'
        )
    last = f"step-{steps[-1]}"
    picker = f'<select onchange="showStep(this.value)">{options}</select>'
    return picker.replace(f'value="{last}"', f'value="{last}" selected') + "".join(blocks)


def _evals_table(summaries: dict[str, dict]) -> str:
    rows = []
    for name, summary in summaries.items():
        base, final = summary.get("base_eval") or {}, summary.get("final_eval") or {}
        for key in final:
            if key.startswith("eval/") and isinstance(final[key], (int, float)):
                before = base.get(key)
                shown = "-" if before is None else f"{before:.3f}"
                rows.append(f"<tr><td>{html.escape(name)}</td><td>{key[5:]}</td>"
                            f"<td>{shown}</td><td>{final[key]:.3f}</td></tr>")  # fmt: skip
    if not rows:
        return ""
    return (
        "<table><tr><th>run</th><th>metric</th><th>base</th><th>final</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _page(title: str, body: str) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body>"
        f"<h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def run_page(run_dir: Path) -> str:
    """The page of one run directory: evals, curves, config and the sample browser."""
    run_dir = Path(run_dir)
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    records = _read_jsonl(run_dir / "metrics.jsonl")
    config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else ""
    body = _evals_table({run_dir.name: summary}) or "<p>The run has not finished yet.</p>"
    body += '<h2>Curves</h2><div class="plots">' + "".join(plots({run_dir.name: records}))
    body += "</div><h2>Samples</h2>" + samples_html(_read_jsonl(run_dir / "samples.jsonl"))
    body += f"<h2>Config</h2><pre>{html.escape(config)}</pre>"
    return _page(f"rlvr run {run_dir.name}", body)


def compare_page(run_dirs: list[Path]) -> str:
    """Several runs' curves overlaid, with their evals side by side."""
    names = [Path(d).name for d in run_dirs]
    if len(set(names)) < len(names):  # runs of the same name in different folders
        names = [str(d) for d in run_dirs]
    runs = {n: _read_jsonl(Path(d) / "metrics.jsonl") for n, d in zip(names, run_dirs)}
    summaries = {
        n: json.loads((Path(d) / "summary.json").read_text())
        for n, d in zip(names, run_dirs)
        if (Path(d) / "summary.json").is_file()
    }
    body = _evals_table(summaries) + '<div class="plots">' + "".join(plots(runs)) + "</div>"
    return _page("rlvr compare: " + ", ".join(names), body)
