"""Room in the embedded engine's KV cache: each decode step writes its token's keys and values
in place, where transformers' DynamicLayer copies the whole cache to concatenate them."""

from __future__ import annotations

import torch

try:  # newer transformers hold a cache as layer objects; older releases kept lists of tensors
    from transformers.cache_utils import DynamicLayer
except ImportError:
    DynamicLayer = None


if DynamicLayer is not None:

    class RoomyLayer(DynamicLayer):
        """A DynamicLayer whose `keys` and `values` are views of longer buffers
        ([batch, heads, capacity, head_dim]). The capacity doubles when a token does not fit,
        up to the most the decode can reach, so a reply of n tokens costs about log2(n) copies
        of the cache instead of n, and the buffers hold about twice the positions in use at
        most. It lives for one decode: the engine only appends to it and selects rows from it."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
            super().__init__()
            self.device, self.is_initialized = keys.device, True
            self.length = keys.shape[-2]
            self.limit = self.length + room  # the most positions the decode can reach
            self.key_room, self.value_room = keys, values
            self._grow(self.length + 1)
            self._expose()

        def _expose(self) -> None:
            self.keys = self.key_room[:, :, : self.length]
            self.values = self.value_room[:, :, : self.length]

        def _grow(self, needed: int) -> None:
            capacity = max(needed, min(2 * needed, self.limit))

            def moved(room: torch.Tensor) -> torch.Tensor:
                wider = room.new_empty(*room.shape[:2], capacity, room.shape[-1])
                wider[:, :, : self.length] = room[:, :, : self.length]
                return wider

            self.key_room, self.value_room = moved(self.key_room), moved(self.value_room)

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
        ) -> tuple[torch.Tensor, torch.Tensor]:
            start, end = self.length, self.length + key_states.shape[-2]
            if end > self.key_room.shape[-2]:
                self._grow(end)
            self.key_room[:, :, start:end] = key_states
            self.value_room[:, :, start:end] = value_states
            self.length = end
            self._expose()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            # the whole buffer in one gather: faster than gathering the used part into a new one
            self.key_room, self.value_room = self.key_room[indices], self.value_room[indices]
            self._expose()


def make_room(cache, room: int) -> None:
    """Give each plain DynamicLayer of a prefilled `cache` room to grow in place. Other kinds
    (sliding windows, quantised or linear-attention layers) and the caches of transformers
    releases without layer objects keep their own, slower but correct, concatenation."""
    if DynamicLayer is None:
        return
    layers = getattr(cache, "layers", [])
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.numel():
            layers[i] = RoomyLayer(layer.keys, layer.values, room)
