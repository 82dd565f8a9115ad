"""Experiment trackers fed from the metrics stream, read back from what each real library wrote
(each test skips, saying why, where its tracker is not installed)."""

import glob
import importlib.util
import json
import time

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.train.loggers import check_installed, local_mlflow_uri, mlflow_name, numeric
from rlvr.train.trainer import Trainer


def test_only_numbers_reach_a_tracker_and_mlflow_names_lose_their_at_sign():
    assert numeric({"step": 3, "reward": 1, "eval/pass@4": 0.5, "note": "x"}) == {
        "reward": 1.0, "eval/pass@4": 0.5,
    }  # fmt: skip
    assert mlflow_name("eval/pass@4") == "eval/pass_at_4"
    assert mlflow_name("time/generate") == "time/generate"


def test_a_missing_tracker_is_refused_with_its_install_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name)
    )
    with pytest.raises(
        ConfigError, match=r"wandb is not installed; fix: pip install .*'\.\[wandb\]'"
    ):
        check_installed(load_config(None, ['log.report_to=["wandb"]']))


def wandb_history(path: str, timeout: float = 60.0) -> list[dict]:
    """The history rows of an offline run's .wandb file, once it holds the run's exit record:
    run.finish() can return before wandb's service has written the log out (under load the
    last steps were seen to arrive seconds later; the process's exit waits for them)."""
    deadline = time.monotonic() + timeout
    rows, finished = wandb_log(path)
    while not finished and time.monotonic() < deadline:
        time.sleep(0.2)
        rows, finished = wandb_log(path)
    return rows


def wandb_log(path: str) -> tuple[list[dict], bool]:
    """The history rows of a .wandb file, a LevelDB-format log (7-byte file header; 32 KiB
    blocks of records, each a 7-byte header of checksum, length and fragment type) of wandb's
    own Record protobufs, and whether it has reached the run's exit record."""
    from wandb.proto import wandb_internal_pb2

    data, rows, pending, block = open(path, "rb").read(), [], b"", 32768
    position, finished = 7, False
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        if position + 7 + length > len(data):  # a record still being written
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last fragment of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            finished |= record.WhichOneof("record_type") == "exit"
            if record.WhichOneof("record_type") == "history":
                rows.append({
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                })  # fmt: skip
    return rows, finished


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize("tracker", ["tensorboard", "wandb", "mlflow", "trackio"])
def test_each_tracker_receives_every_step(tracker, fast_overrides, tmp_path, monkeypatch):
    if not installed(tracker):
        pytest.skip(
            f"{tracker} is not installed (pip install -c constraints.txt -e '.[{tracker}]')"
        )
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    name = f"{tracker}-{tmp_path.name}"[-60:]
    cfg = load_config(None, [*fast_overrides, "train.steps=2", f"log.name={name}",
                             f'log.report_to=["{tracker}"]', "log.project=rlvr-test"])  # fmt: skip
    Trainer(cfg).run()
    run = tmp_path / "runs" / name
    steps = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").open()) if "loss" in r}
    final = json.loads((run / "summary.json").read_text())["final_eval"]
    if tracker == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run / "tensorboard"))
        events.Reload()
        got = {e.step: e.value for e in events.Scalars("reward")}
        pass_at_2 = events.Scalars("eval/pass@2")[-1].value
    elif tracker == "wandb":
        (path,) = glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb"))
        history = wandb_history(path)
        got = {h["_step"]: h["reward"] for h in history if "reward" in h}
        pass_at_2 = [h["eval/pass@2"] for h in history if "eval/pass@2" in h][-1]
    elif tracker == "mlflow":
        import mlflow

        client = mlflow.MlflowClient(local_mlflow_uri(run))
        (found,) = client.search_runs(
            [client.get_experiment_by_name("rlvr-test").experiment_id],
            f"attributes.run_name = '{name}'",
        )
        history = client.get_metric_history(found.info.run_id, "reward")
        got = {m.step: m.value for m in history}
        pass_at_2 = client.get_metric_history(found.info.run_id, "eval/pass_at_2")[-1].value
    else:
        from trackio import SQLiteStorage

        logs = SQLiteStorage.get_logs("rlvr-test", name)
        got = {r["step"]: r["reward"] for r in logs if "reward" in r}
        pass_at_2 = [r["eval/pass@2"] for r in logs if "eval/pass@2" in r][-1]
    expected = {s: r["reward"] for s, r in steps.items() if s in got}
    assert expected and got == pytest.approx(expected, abs=1e-6)
    assert pass_at_2 == pytest.approx(final["eval/pass@2"], abs=1e-6)
