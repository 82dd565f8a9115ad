"""`rlvr serve`: a Tinker-compatible training service on this machine, so code written against
the Tinker SDK (tinker-cookbook's recipes) trains LoRA adapters with rlvr's models and losses."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlvr.config import ConfigError

LOCAL_HOSTS = {"localhost"}
SETTINGS = ("distributed.", "rollout.vllm.")  # the config sections rlvr serve reads


def is_local(host: str) -> bool:
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_service(
    model: str,
    state_dir: Path,
    seed: int = 0,
    preset: str = "nano",
    distributed=None,
    engine: str = "hf",
    vllm=None,
    max_lora_rank: int = 64,
):
    """The Service for base model `model`: "tiny" (rlvr's embedded model, freshly initialised
    from `seed`), a local HF model directory, or a hub id; on Ray's actors when `distributed`
    (a DistributedConfig) names backend "ray", else all in this process. `engine` samples:
    "hf", or "vllm" with `vllm` (VLLMSettings; None: the defaults), which reserves room for
    adapters up to `max_lora_rank` (on Ray, each rollout worker runs its own)."""
    from rlvr.config import VLLMSettings
    from rlvr.models import tiny
    from rlvr.models.loading import load_model
    from rlvr.serve.adapters import AdapterHost
    from rlvr.serve.sampler import VLLMSampling
    from rlvr.serve.service import Service

    if engine not in ("hf", "vllm"):
        raise ConfigError(f"rlvr serve --engine {engine}: the engines are hf and vllm")
    sampling = (
        VLLMSampling(vllm or VLLMSettings(), max_lora_rank, seed) if engine == "vllm" else None
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    if model == "tiny":
        tokenizer = tiny.build_tokenizer()
        network = tiny.build_model(preset, tokenizer, seed)
        path = str(state_dir / "base")
        network.save_pretrained(path)  # Ray's actors and vLLM load the same weights from here
        tokenizer.save_pretrained(path)  # and the SDK the tokenizer
    else:
        network, tokenizer = load_model(model, key="rlvr serve --model")
        path = model
    host = AdapterHost(model, network, tokenizer)
    if distributed is not None and distributed.backend == "ray":
        from rlvr.serve.cluster import Cluster

        cluster = Cluster(distributed, host, path, sampling)
        return Service(host, state_dir, path, seed, cluster=cluster)
    local = sampling.engine(path, network, tokenizer) if sampling else None
    return Service(host, state_dir, path, seed, engine=local)


@contextmanager
def in_thread(service, api_key: str | None = None, max_request_mb: float = 64.0) -> Iterator[str]:
    """`service` on a free local port in a background thread (a notebook, a test, a benchmark);
    yields its base URL and stops it on exit, leaving only what it saved."""
    import uvicorn

    from rlvr.serve.app import build_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = build_app(service, api_key, max_request_mb)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"rlvr serve could not start on 127.0.0.1:{port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        service.close()


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="a Tinker-compatible training service (tinker SDK, cookbook)")
    p.add_argument("--model", default="tiny", help="base model: tiny, a model directory or hub id")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--api-key", default=os.environ.get("RLVR_SERVE_API_KEY"),
        help="key clients must send (TINKER_API_KEY); required to bind beyond localhost "
        "(default: $RLVR_SERVE_API_KEY)",
    )  # fmt: skip
    p.add_argument("--state-dir", default="serve_state", help="checkpoints are saved here")
    p.add_argument("--seed", type=int, default=0, help="the tiny model's init and sampling seed")
    p.add_argument("--max-request-mb", type=float, default=64, help="largest request accepted")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"],
                   help="what samples: rlvr's HF engine, or vLLM (the vllm extra)")  # fmt: skip
    p.add_argument("--max-lora-rank", type=int, default=64,
                   help="vllm: the largest LoRA rank it can sample (it reserves room for it)")  # fmt: skip
    p.add_argument(
        "overrides", nargs="*", metavar="SECTION.KEY=VALUE",
        help="distributed.* (where the work runs: distributed.backend=ray "
        "distributed.trainer_ranks=2 ...; default: this process) and rollout.vllm.* (the vllm "
        "engine's settings), as rlvr train takes them",
    )  # fmt: skip
    p.set_defaults(func=main)


def served_settings(overrides: list[str]):
    """rlvr's config with `overrides` of the settings rlvr serve takes (SETTINGS); ConfigError
    for any other key (the model comes from --model, the losses and optimizer from clients)."""
    from rlvr.config import load_config

    other = [o for o in overrides if not o.startswith(SETTINGS)]
    if other:
        raise ConfigError(
            f"rlvr serve takes {' and '.join(k + '*' for k in SETTINGS)} settings only; got "
            f"{other}. Fix: pick the model with --model; the losses and the optimizer are the "
            "clients' choice."
        )
    return load_config(None, overrides)


def main(args: argparse.Namespace) -> None:
    if not is_local(args.host) and not args.api_key:
        raise ConfigError(
            f"rlvr serve --host {args.host} would accept training requests from the network "
            "with no key; fix: pass --api-key KEY (clients set TINKER_API_KEY=KEY), or bind "
            "127.0.0.1"
        )
    if args.api_key and not args.api_key.startswith("tml-"):
        raise ConfigError("--api-key must start with 'tml-' (the Tinker SDK refuses other keys)")
    import uvicorn

    from rlvr.serve.app import build_app

    cfg = served_settings(args.overrides)
    service = build_service(args.model, Path(args.state_dir), args.seed,
                            distributed=cfg.distributed, engine=args.engine,
                            vllm=cfg.rollout.vllm, max_lora_rank=args.max_lora_rank)  # fmt: skip
    if service.cluster is not None:
        print("\n".join(service.cluster.describe()), flush=True)
    app = build_app(service, args.api_key, args.max_request_mb)
    print(f"rlvr serve: {args.model} at http://{args.host}:{args.port}; clients set "
          f"TINKER_BASE_URL=http://{args.host}:{args.port} and TINKER_API_KEY", flush=True)  # fmt: skip
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        service.close()
