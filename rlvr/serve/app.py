"""The HTTP face of `rlvr serve`: the Tinker SDK's routes (FastAPI), its API key check, request
size limit and long-poll futures, over a Service."""

from __future__ import annotations

import asyncio
import hmac
import uuid
from functools import partial

import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from tinker import types

from rlvr.serve.service import Service, UserError, model_id
from rlvr.serve.wire import read_forward_backward

POLL_SECONDS = 20.0  # a retrieve_future waits this long before it answers try_again
PROTOBUF = "application/x-protobuf"
OPEN_ROUTES = {"/api/v1/healthz"}
# what the SDK asks before anything else: no JWT exchange, no server-side custom losses, and
# forward_backward chunks sent one turn at a time
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "parallel_fwdbwd_chunks": False,
    "custom_loss_server_side": False,
    "sample_use_retrieve_futures": False,
    "use_pyqwest_transport": False,
}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "detail": message}, status_code=status)


async def _parse(request: Request, model: type[pydantic.BaseModel]):
    try:
        return model.model_validate(await request.json())
    except (pydantic.ValidationError, ValueError) as error:
        raise UserError(f"{request.url.path}: malformed request: {error}") from error


def _guard(app: FastAPI, api_key: str | None, max_request_bytes: int) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next):
        if api_key is not None and request.url.path not in OPEN_ROUTES:
            given = request.headers.get("x-api-key", "")
            if not hmac.compare_digest(given.encode(), api_key.encode()):
                return _error(401, "wrong or missing API key: set TINKER_API_KEY to the "
                                   "service's key (rlvr serve --api-key)")  # fmt: skip
        size = int(request.headers.get("content-length") or 0)
        if size > max_request_bytes:
            return _error(413, f"request of {size} bytes exceeds the service's limit of "
                               f"{max_request_bytes} (rlvr serve --max-request-mb)")  # fmt: skip
        try:
            return await call_next(request)
        except UserError as error:
            return _error(400, str(error))


def _session_routes(app: FastAPI, service: Service) -> None:
    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config():
        return CLIENT_CONFIG

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config():
        return {"refresh_interval_sec": 300}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        host = service.host
        model = {"model_name": host.name, "max_context_length": host.max_length}
        return {"supported_models": [{**model, "trainable": True, "sampleable": True}]}

    @app.post("/api/v1/create_session")
    async def create_session():
        return {"type": "create_session", "session_id": f"session-{uuid.uuid4().hex[:12]}"}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat():
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str):
        return {}  # a closing client stops its heartbeats; the session holds nothing here

    @app.post("/api/v1/telemetry")
    async def telemetry():
        return {"status": "accepted"}

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        req = await _parse(request, types.CreateSamplingSessionRequest)
        service.check_base(req.base_model if req.model_path is None else None)
        if req.model_path is not None:
            service.read(req.model_path)  # refuse a missing checkpoint now, not at the sample
        session = f"sampling-{uuid.uuid4().hex[:12]}"
        service.sampling_sessions[session] = req.model_path
        return {"type": "create_sampling_session", "sampling_session_id": session}

    @app.get("/api/v1/samplers/{session}")
    async def sampler(session: str):  # asked by a sampling client made from a path alone
        if session not in service.sampling_sessions:
            raise UserError(f"no sampling session {session!r}")
        path = service.sampling_sessions[session]
        return {"sampler_id": session, "base_model": service.host.name, "model_path": path}


def _model_routes(app: FastAPI, service: Service) -> None:
    @app.post("/api/v1/create_model")
    async def create_model(request: Request):
        req = await _parse(request, types.CreateModelRequest)
        lora = (req.lora_config or types.LoraConfig(rank=32)).model_dump()
        new = model_id(req.session_id, req.model_seq_id)
        return service.submit(partial(service.create_model, new, req.base_model, lora))

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        req = await _parse(request, types.GetInfoRequest)
        if req.model_id not in service.host.adapters:
            _unknown(req.model_id)
        host = service.host
        data = {"arch": host.model.config.model_type, "model_name": host.name,
                "tokenizer_id": service.tokenizer_id}  # fmt: skip
        return {"type": "get_info", "model_data": data, "model_id": req.model_id, "is_lora": True}

    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request):
        path = (await request.json()).get("tinker_path", "")
        state = service.read(path)
        lora = state["lora"]
        return {"base_model": state["base_model"], "is_lora": True, "lora_rank": lora["rank"],
                **{k: lora.get(k) for k in ("train_unembed", "train_mlp", "train_attn")}}  # fmt: skip


def _unknown(model_id: str):
    raise UserError(f"no training client {model_id!r} on this service (it restarted, or the id "
                    "is wrong); load a checkpoint with create_training_client_from_state")  # fmt: skip


def _training_routes(app: FastAPI, service: Service) -> None:
    def known(model_id: str | None) -> str:
        if model_id not in service.host.adapters:
            _unknown(model_id)
        return model_id

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        try:
            req = read_forward_backward(await request.body())
        except ValueError as error:
            raise UserError(f"forward_backward: {error}") from error
        known(req.model_id)
        return service.submit(partial(service.forward_backward, req), req.model_id, req.seq_id)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request):
        req = await _parse(request, types.OptimStepRequest)
        if not isinstance(req.optim_params, types.AdamParams):
            raise UserError(f"optimizer {req.optim_params.type!r}: rlvr serves Adam only")
        adam = req.optim_params.model_dump()
        job = partial(service.optim_step, known(req.model_id), adam)
        return service.submit(job, req.model_id, req.seq_id)

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request):
        req = await _parse(request, types.SaveWeightsRequest)
        job = partial(service.save_weights, known(req.model_id), req.path)
        return service.submit(job, req.model_id, req.seq_id)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(request: Request):
        req = await _parse(request, types.SaveWeightsForSamplerRequest)
        job = partial(service.save_for_sampler, known(req.model_id), req.path)
        return service.submit(job, req.model_id, req.seq_id)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request):
        req = await _parse(request, types.LoadWeightsRequest)
        base = req.base_model if req.model_id is None else None
        target = req.model_id or model_id(req.session_id, req.model_seq_id)
        job = partial(service.load_weights, target, req.path, req.optimizer, base)
        return service.submit(job, req.model_id, req.seq_id)


def _sampling_routes(app: FastAPI, service: Service) -> None:
    @app.post("/api/v1/asample")
    async def asample(request: Request):
        req = await _parse(request, types.SampleRequest)
        if req.topk_prompt_logprobs or req.topk_sample_logprobs or req.prompt_alt_tokens_k:
            raise UserError("top-k logprobs and alternative prompt tokens are not served by rlvr")
        if req.sampling_session_id is not None:
            if req.sampling_session_id not in service.sampling_sessions:
                raise UserError(f"no sampling session {req.sampling_session_id!r}")
            weights = service.sampling_sessions[req.sampling_session_id]
        else:
            service.check_base(req.base_model if req.model_path is None else None)
            weights = req.model_path
        prompt = [t for chunk in req.prompt.chunks for t in _chunk_tokens(chunk)]
        params = req.sampling_params.model_dump()
        scored = bool(req.prompt_logprobs)
        reply = service.sample(weights, prompt, req.num_samples, params, scored)
        ids = [f"{reply['request_id']}-{i}" for i in range(req.num_samples)]
        return {**reply, "sample_sequence_ids": ids}

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        req = await _parse(request, types.FutureRetrieveRequest)
        future = service.result(req.request_id)
        try:
            result = await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(future)), POLL_SECONDS
            )
        except asyncio.TimeoutError:
            return {"type": "try_again", "request_id": req.request_id, "queue_state": "active"}
        except (UserError, ValueError, KeyError) as error:
            result = {"error": str(error).strip("'\""), "category": "user"}
        except Exception as error:  # noqa: BLE001 -- a server fault, reported to the caller
            result = {"error": f"{type(error).__name__}: {error}", "category": "server"}
        service.handed_out(req.request_id)
        if isinstance(result, bytes):
            return Response(result, media_type=PROTOBUF)
        return result


def _chunk_tokens(chunk) -> list[int]:
    if getattr(chunk, "type", None) != "encoded_text":
        raise UserError(f"prompt chunk {getattr(chunk, 'type', chunk)!r}: rlvr serves tokens only")
    return list(chunk.tokens)


def _unserved(app: FastAPI) -> None:
    """Every other route of the Tinker API: a 404 that names it (the SDK retries a 5xx for
    minutes, so "not implemented" would hang the caller)."""

    @app.api_route("/api/v1/{route:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def unserved(route: str):
        return _error(404, f"rlvr serve does not serve /api/v1/{route}: it is a call of the "
                           "hosted Tinker service (docs/serve.md lists what rlvr serves)")  # fmt: skip


def build_app(service: Service, api_key: str | None = None, max_request_mb: float = 64) -> FastAPI:
    app = FastAPI(title="rlvr serve", docs_url=None, redoc_url=None)
    _guard(app, api_key, int(max_request_mb * 2**20))
    for add in (_session_routes, _model_routes, _training_routes, _sampling_routes):
        add(app, service)
    _unserved(app)  # last: the routes above match first
    return app
