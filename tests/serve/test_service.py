"""The service's bookkeeping: a training client's requests run in seq_id order however they
arrive, and results already handed out are kept only in a bounded recent set."""

import threading

import pytest

from rlvr.models import tiny
from rlvr.serve import service as service_module
from rlvr.serve.adapters import AdapterHost
from rlvr.serve.service import Service, UserError


@pytest.fixture
def service(tmp_path):
    tokenizer = tiny.build_tokenizer()
    host = AdapterHost("tiny", tiny.build_model("nano", tokenizer, 0), tokenizer)
    made = Service(host, tmp_path, "unused")
    yield made
    made.worker.shutdown(wait=True)


def test_requests_run_in_seq_id_order_whatever_order_they_arrive_in(service):
    ran, lock = [], threading.Lock()

    def job(tag):
        def run():
            with lock:
                ran.append(tag)
            return tag

        return run

    ids = {seq: service.submit(job(seq), "client", seq)["request_id"] for seq in (3, 2, 4)}
    assert not any(service.result(i).done() for i in ids.values())  # 1 has not arrived
    ids[1] = service.submit(job(1), "client", 1)["request_id"]
    other = service.submit(job("other"), "another", 1)["request_id"]  # its own order
    assert [service.result(ids[s]).result(timeout=30) for s in (1, 2, 3, 4)] == [1, 2, 3, 4]
    assert service.result(other).result(timeout=30) == "other"
    assert [t for t in ran if t != "other"] == [1, 2, 3, 4]


def test_handed_out_results_are_kept_only_recently(service, monkeypatch):
    monkeypatch.setattr(service_module, "KEPT_DELIVERED", 2)
    ids = [service.submit(lambda i=i: i)["request_id"] for i in range(4)]
    for i in ids:
        service.result(i).result(timeout=30)
    for i in ids[:3]:
        service.handed_out(i)
    with pytest.raises(UserError, match="no request"):
        service.result(ids[0])  # the oldest handed-out result is gone
    assert service.result(ids[1]).result() == 1  # a recent one can be asked for again
    assert service.result(ids[3]).result() == 3  # never handed out: kept
