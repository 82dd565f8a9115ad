"""Runs that are killed, interrupted or starved of disk, then resumed or restarted; and the
messages that tell a person what happened, where and what to do."""

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.rewards import REWARDS
from rlvr.train.checkpoint import checkpoint_step, complete_checkpoints
from rlvr.train.faults import TrainingInterrupted
from rlvr.train.rundir import RunDir, RunDirError
from rlvr.train.trainer import Trainer
from rlvr.types import Score

SMALL = [
    "rollout.batch_size=8",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "task.eval_size=4",
    "train.eval_k=1",
]


def records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def layout(run):
    """(step, is a training record, carries an eval) per metrics record, in file order."""
    return [(r["step"], "loss" in r, "eval/accuracy" in r) for r in records(run)]


def files(run):
    return {p: p.stat().st_mtime_ns for p in run.rglob("*")}


def parity(problem, response):
    return Score(float(len(response) % 2), "ok")  # varies within groups: every step moves


def test_a_save_cut_short_blocks_neither_a_fresh_start_nor_a_resume(fast_overrides, capsys):
    cfg = load_config(None, fast_overrides + SMALL + ["train.steps=2", "log.name=cut"])
    run = Trainer(cfg).run_dir.path
    # what a kill during the first save leaves: a temporary copy, and a renamed one unmarked
    (run / "checkpoints" / ".tmp-step-000001").mkdir(parents=True)
    (run / "checkpoints" / ".tmp-step-000001" / "model.safetensors").write_bytes(b"\0" * 100)
    (run / "checkpoints" / "step-000002").mkdir()
    capsys.readouterr()

    again = Trainer(cfg)  # the same name again: not "already holds checkpoints"
    err = capsys.readouterr().err
    assert f"{run} has no complete checkpoint (removed 2 cut short" in err
    assert "starting the run from scratch" in err
    assert list((run / "checkpoints").iterdir()) == []
    assert again.state["step"] == 0

    (run / "checkpoints" / ".tmp-step-000001").mkdir()
    resumed = Trainer(cfg, resume=run)  # --resume with nothing complete restarts, and says so
    assert "has no complete checkpoint" in capsys.readouterr().err
    resumed.run()
    assert layout(run) == [(0, False, True), (1, True, False), (2, True, False), (2, False, True)]

    # with a complete checkpoint, leftovers of a later cut-short save are ignored and removed
    (run / "checkpoints" / ".tmp-step-000003").mkdir()
    (run / "checkpoints" / "step-000004").mkdir()
    resumed = Trainer(load_config(None, fast_overrides + SMALL + ["train.steps=3"]), resume=run)
    assert resumed.state["step"] == 2
    assert f"resumed {run} at step 2 (removed 2 checkpoint(s) cut short)" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002"]


def test_finished_runs_resume_without_duplicate_records(fast_overrides, monkeypatch, capsys):
    base = fast_overrides + SMALL + ["train.eval_every=2", "log.name=done"]
    cfg = load_config(None, base + ["train.steps=2"])
    trainer = Trainer(cfg)
    run = trainer.run_dir.path

    def killed(self):  # a kill after the final checkpoint, before final/ and summary.json
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(Trainer, "finalize", killed)
        with pytest.raises(TrainingInterrupted):
            trainer.run()
    assert not (run / "summary.json").exists()

    Trainer(cfg, resume=run).run()  # completes final/ and the summary; no second final eval
    assert (run / "final" / "config.json").is_file() and (run / "summary.json").is_file()
    finished = [(0, False, True), (1, True, False), (2, True, False), (2, False, True)]
    assert layout(run) == finished

    before = files(run)
    capsys.readouterr()
    main(["train", "--resume", str(run)])  # finished: says so, loads nothing, writes nothing
    err = capsys.readouterr().err
    assert f"{run} already finished its 2 steps; its final model is {run / 'final'}" in err
    assert f"rlvr train --resume {run} train.steps=4" in err
    Trainer(cfg, resume=run).run()  # the same through the API
    assert files(run) == before

    # train.steps grew: the records become those of an uninterrupted 3-step run, whose eval at
    # step 2 (eval_every=2) sits in the step's record, and whose one final eval is at step 3
    Trainer(load_config(None, base + ["train.steps=3"]), resume=run).run()
    assert layout(run) == [
        (0, False, True),
        (1, True, False),
        (2, True, True),
        (3, True, False),
        (3, False, True),
    ]
    with pytest.raises(ConfigError, match=r"past train.steps=2; fix: .* set it to 3 or more"):
        Trainer(load_config(None, base + ["train.steps=2"]), resume=run)


def test_a_full_disk_at_a_save_keeps_the_last_good_checkpoint(fast_overrides, monkeypatch):
    cfg = load_config(None, fast_overrides + SMALL + ["train.steps=3", "train.save_every=1"])
    trainer = Trainer(cfg)
    run = trainer.run_dir.path
    real_save = torch.save

    def disk_fills_at_step_2(obj, path, *args, **kwargs):
        if obj["state"]["step"] == 2:
            with open(path, "wb") as handle:
                handle.write(b"\0" * 1000)  # part of the file went out before the disk filled
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills_at_step_2)
    with pytest.raises(RunDirError) as e:
        trainer.run()
    message = str(e.value)
    assert f"could not write checkpoint step-000002 to {run / 'checkpoints'}" in message
    assert "No space left on device" in message
    assert f"the last good checkpoint is {run / 'checkpoints' / 'step-000001'} (step 1)" in message
    assert f"`rlvr train --resume {run}` continues from it" in message
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001"]

    assert "MB free there" in message
    monkeypatch.setattr(torch, "save", real_save)  # space freed
    resumed = Trainer(cfg, resume=run)
    assert resumed.state["step"] == 1

    real_log = RunDir.log

    def log_until_step_3(self, record):
        if record["step"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_log(self, record)

    monkeypatch.setattr(RunDir, "log", log_until_step_3)  # the disk fills again, at a log line
    with pytest.raises(RunDirError) as e:
        resumed.run()
    assert str(e.value).startswith(f"could not write to {run} ([Errno 28] No space left on device;")
    assert f"the last good checkpoint is {run / 'checkpoints' / 'step-000002'} (step 2)" in str(
        e.value
    )
    monkeypatch.setattr(RunDir, "log", real_log)
    Trainer(cfg, resume=run).run()
    assert [s for s, train, _ in layout(run) if train] == [1, 2, 3]


def test_a_real_full_disk(fast_overrides, tmp_path):
    """A tmpfs (root only) with room for one checkpoint more than it holds, then for all."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(disk)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        overrides = (
            fast_overrides + SMALL + [f"log.run_dir={disk}", "log.name=full", "train.save_every=1"]
        )
        Trainer(load_config(None, overrides + ["train.steps=1"])).run()
        run = disk / "full"
        checkpoint = sum(f.stat().st_size for f in (run / "checkpoints").rglob("*"))
        used = shutil.disk_usage(disk).used
        room = f"size={(used + checkpoint // 2) // 4096 * 4096}"
        subprocess.run(["mount", "-o", f"remount,{room}", str(disk)], check=True)

        cfg = load_config(None, overrides + ["train.steps=3"])
        with pytest.raises(RunDirError) as e:
            Trainer(cfg, resume=run).run()
        assert "could not write checkpoint step-000002" in str(e.value)
        assert f"the last good checkpoint is {run / 'checkpoints' / 'step-000001'}" in str(e.value)
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001"]

        subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True)
        Trainer(cfg, resume=run).run()
        assert [s for s, train, _ in layout(run) if train] == [1, 2, 3]
        assert [s for s, train, evals in layout(run) if evals and not train] == [0, 3]
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_an_unwritable_run_directory_stops_before_any_work(fast_overrides, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as e:
        main(["train", *fast_overrides, f"log.run_dir={blocker / 'runs'}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"cannot write the run directory {blocker / 'runs'}" in err
    assert f"{blocker} is not writable (Not a directory)" in err
    assert "fix: set log.run_dir to a writable directory" in err


@pytest.fixture
def ctrl_c_enabled():
    """Ctrl-C as in a terminal. A shell starts background jobs (`pytest &`) with SIGINT
    ignored, and rlvr leaves an ignored or custom SIGINT alone, so these tests set it."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def sigint_by_default() -> None:
    """Popen preexec_fn: the child starts with SIGINT's default action, whatever ours is."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_saves_the_finished_step_and_resumes_bit_for_bit(
    fast_overrides, monkeypatch, tmp_path, ctrl_c_enabled
):
    monkeypatch.setitem(REWARDS, "parity", parity)
    base = fast_overrides + SMALL + ["train.steps=3", "task.rewards={parity: 1.0}"]
    straight = Trainer(load_config(None, base + ["log.name=straight"]))
    straight.run()

    stopped = Trainer(load_config(None, base + ["log.name=stopped"]))
    run = stopped.run_dir.path
    real_step, presses = Trainer.step, {2: 1, 3: 2}  # Ctrl-C once in step 2, twice in step 3

    def step_with_ctrl_c(self):
        for _ in range(presses.get(self.state["step"] + 1, 0)):
            signal.raise_signal(signal.SIGINT)
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", step_with_ctrl_c)
    with pytest.raises(TrainingInterrupted) as e:
        stopped.run()
    checkpoint = run / "checkpoints" / "step-000002"
    assert str(e.value) == (
        f"stopped after step 2; the last good checkpoint is {checkpoint} (step 2); "
        f"`rlvr train --resume {run}` continues from it"
    )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    resumed = Trainer(load_config(None, base + ["log.name=stopped"]), resume=run)
    with pytest.raises(TrainingInterrupted) as e:  # the second press stops mid-step
        resumed.run()
    assert str(e.value).startswith(
        f"interrupted after 2 whole steps; the last good checkpoint is {checkpoint}"
    )

    monkeypatch.setattr(Trainer, "step", real_step)
    resumed = Trainer(load_config(None, base + ["log.name=stopped"]), resume=run)
    resumed.run()
    for p, q in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(p, q)
    assert [s for s, train, _ in layout(run) if train] == [1, 2, 3]


def test_reward_failures_are_shown_once_and_kept_with_prompt_and_response(
    fast_overrides, monkeypatch, capsys
):
    calls, lock = [0], threading.Lock()

    def flaky(problem, response):
        with lock:
            calls[0] += 1
            kind = calls[0] % 8  # any 8 calls in a row (one step) meet each failure once
        if kind == 1:
            raise ValueError("bad verifier")
        if kind == 2:
            return math.nan
        if kind == 3:
            return "yes"
        if kind == 4:
            time.sleep(1.0)  # past task.reward_timeout
        return Score(1.0, "ok")

    monkeypatch.setitem(REWARDS, "flaky", flaky)
    cfg = load_config(
        None,
        fast_overrides
        + SMALL
        + ["train.steps=2", "task.rewards={flaky: 1.0}", "task.reward_timeout=0.3"],
    )
    trainer = Trainer(cfg)
    capsys.readouterr()
    trainer.run()
    err = capsys.readouterr().err
    path = trainer.run_dir.reward_errors
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] * 4 + [2] * 4
    expected = {
        ("crash", "flaky: ValueError: bad verifier"),
        ("crash", "flaky: reward returned float nan, not a Score or finite number"),
        ("crash", "flaky: reward returned str 'yes', not a Score or finite number"),
        ("timeout", "reward did not return within 0.3 s"),
    }
    assert {(r["status"], r["error"]) for r in rows} == expected
    for row in rows:
        assert row["prompt"] and isinstance(row["response"], str) and row["problem"]
    for status, error in expected:  # each distinct error once on the console, with the file
        assert err.count(f"reward {status} on problem") >= 1
        assert err.count(f": {error}\n") == 1, error
    assert f"(every failure, with prompt and response, is in {path})" in err


def test_a_killed_and_an_interrupted_command_resume(fast_overrides, tmp_path):
    """Real `rlvr train` processes: SIGKILL once a checkpoint exists, then Ctrl-C (SIGINT)."""
    run = tmp_path / "runs" / "killed"
    command = [sys.executable, "-c", "from rlvr.cli import main; main()", "train"]
    err = tmp_path / "stderr.txt"

    def start(*args):
        with open(err, "w") as handle:
            return subprocess.Popen([*command, *args], stderr=handle, preexec_fn=sigint_by_default)

    def wait_for(process, done):
        while process.poll() is None and not done():
            time.sleep(0.2)

    def trained_steps():
        return [r["step"] for r in records(run) if "loss" in r] if run.is_dir() else []

    train = fast_overrides + SMALL + ["train.steps=1000", "train.save_every=1", "log.name=killed"]
    process = start(*train)
    wait_for(process, lambda: (run / "checkpoints" / "step-000001" / "COMPLETE").is_file())
    process.kill()  # SIGKILL: mid-step, or mid-save of a later checkpoint
    assert process.wait() == -signal.SIGKILL
    last = checkpoint_step(complete_checkpoints(run / "checkpoints")[-1])

    process = start("--resume", str(run))
    wait_for(process, lambda: "resumed" in err.read_text() and last + 1 in trained_steps())
    process.send_signal(signal.SIGINT)
    assert process.wait() == 130
    message = err.read_text()
    assert "Ctrl-C: stopping after this step to save it; Ctrl-C again stops now" in message
    stopped = max(trained_steps())
    checkpoint = run / "checkpoints" / f"step-{stopped:06d}"
    assert (checkpoint / "COMPLETE").is_file()
    assert (
        f"rlvr: stopped after step {stopped}; the last good checkpoint is {checkpoint} "
        f"(step {stopped}); `rlvr train --resume {run}` continues from it"
    ) in message
    assert "Traceback" not in message

    main(["train", "--resume", str(run), f"train.steps={stopped + 1}"])
    assert trained_steps() == list(range(1, stopped + 2))
    assert [s for s, train, evals in layout(run) if evals and not train] == [0, stopped + 1]
