"""The Tinker SDK's protobuf wire format, read and written with the SDK's own message classes:
forward_backward requests in, forward_backward outputs and samples out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
STOP_REASONS = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


@dataclass
class Datum:
    tokens: np.ndarray  # [N] int64, the model input
    inputs: dict[str, np.ndarray]  # loss_fn_inputs by name, each [N]


@dataclass
class ForwardBackward:
    model_id: str
    loss_fn: str
    config: dict[str, float]
    forward_only: bool
    data: list[Datum]
    seq_id: int  # the client's request order (from 1)


def _tokens(chunks) -> np.ndarray:
    parts = []
    for chunk in chunks:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise ValueError(f"model_input chunk {kind!r}: rlvr serves token chunks only")
        parts.append(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _tensor(name: str, msg) -> np.ndarray:
    if msg.HasField("sparse_csr"):
        raise ValueError(f"loss_fn_inputs[{name!r}] is sparse (2-D): rlvr serves 1-D inputs only")
    if msg.dtype not in DTYPES:
        raise ValueError(f"loss_fn_inputs[{name!r}] has dtype {msg.dtype}, not float32 or int64")
    array = np.frombuffer(msg.dense, dtype=DTYPES[msg.dtype])
    if len(msg.shape) > 1:
        raise ValueError(f"loss_fn_inputs[{name!r}] has shape {list(msg.shape)}; rlvr serves 1-D")
    return array.copy()


def read_forward_backward(body: bytes) -> ForwardBackward:
    """A ForwardBackwardRequest's fields; ValueError on what rlvr does not serve."""
    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(body)
    config = {k: v.number for k, v in msg.loss_fn_config_v2.items() if v.HasField("number")}
    texts = [k for k, v in msg.loss_fn_config_v2.items() if v.HasField("text")]
    if texts:
        raise ValueError(f"loss_fn_config {texts} are strings; rlvr's losses take numbers")
    config = config or dict(msg.loss_fn_config)
    data = [
        Datum(_tokens(d.model_input), {k: _tensor(k, v) for k, v in d.loss_fn_inputs.items()})
        for d in msg.data
    ]
    return ForwardBackward(msg.model_id, msg.loss_fn, config, msg.forward_only, data, msg.seq_id)


def _batched(arrays: list[np.ndarray], dtype) -> pb.BatchedTensor:
    """Per-datum 1-D arrays as one buffer with byte offsets."""
    arrays = [np.asarray(a, dtype=dtype) for a in arrays]
    offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
    pb_dtype = pb.DTYPE_FLOAT32 if dtype == np.float32 else pb.DTYPE_INT64
    data = b"".join(a.tobytes() for a in arrays)
    return pb.BatchedTensor(data=data, offsets=offsets.tobytes(), dtype=pb_dtype)


def write_forward_backward(outputs: dict[str, list[np.ndarray]], metrics: dict) -> bytes:
    """ForwardBackwardOutput: per-datum float32 outputs by name, and scalar metrics."""
    count = len(next(iter(outputs.values()))) if outputs else 0
    record = pb.ArrayRecord(
        type_tag="ArrayRecord",
        num_datums=count,
        fields={name: _batched(arrays, np.float32) for name, arrays in outputs.items()},
    )
    out = pb.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record], metrics=metrics
    )
    return out.SerializeToString()


def write_sample(sequences: list[dict], prompt_logprobs: list[float] | None) -> bytes:
    """SampleResponse: each sequence's tokens, logprobs and stop reason ("stop" or "length");
    NaN where a prompt token has no logprob (the first)."""
    out = pb.SampleResponse()
    for seq in sequences:
        out.sequences.add(
            stop_reason=STOP_REASONS[seq["stop_reason"]],
            tokens=np.asarray(seq["tokens"], dtype=np.int32).tobytes(),
            logprobs=np.asarray(seq["logprobs"], dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        out.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return out.SerializeToString()
