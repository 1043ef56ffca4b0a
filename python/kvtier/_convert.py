"""Zero-copy views of caller memory for the extension module.

The extension reads and writes memory through the Python buffer protocol. numpy arrays, bytes,
bytearray and memoryview have it; torch tensors do not, so a CPU tensor is viewed as a numpy array
sharing its storage (``Tensor.numpy()``). Dtypes numpy lacks (bfloat16, float8) are first
reinterpreted as an integer dtype of the same width, which keeps shape and strides. Nothing here
copies; a tensor on another device is refused rather than silently moved.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import InvalidArgumentError

_INT_OF_WIDTH = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage")


def as_buffer(obj: Any, *, written: bool = False) -> Any:
    """``obj`` itself when it has the buffer protocol, else a numpy view of a CPU torch tensor.
    ``written``: the buffer is a destination (a get), which must be the tensor's own memory."""
    if not _is_torch_tensor(obj):
        return obj
    import torch

    if obj.device.type != "cpu":
        raise InvalidArgumentError(
            f"a tensor on {obj.device} cannot be read by the host path; copy it to the CPU first")
    t = obj.detach()
    if t.is_conj() or t.is_neg():
        # Resolving makes a new tensor: right for bytes to store, but a get would fill the copy
        # and leave the caller's tensor as it was.
        if written:
            raise InvalidArgumentError(
                "a conjugate or negative view cannot be filled in place; pass a plain tensor "
                "(.resolve_conj() / .resolve_neg() first) and apply the view afterwards")
        t = t.resolve_conj().resolve_neg()
    try:
        return t.numpy()
    except TypeError:  # bfloat16, float8, ...: same bytes as an integer type of the same width
        width = t.element_size()
        return t.view(getattr(torch, _INT_OF_WIDTH[width])).numpy()


def as_buffers(obj: Any, *, written: bool = False) -> Any:
    """as_buffer() of one object, or of each element of a list or tuple."""
    if isinstance(obj, (list, tuple)):
        return [as_buffer(o, written=written) for o in obj]
    return as_buffer(obj, written=written)


def tokens_array(tokens: Any) -> np.ndarray:
    """Token ids as a contiguous uint32 array (copied only when not already uint32)."""
    if _is_torch_tensor(tokens):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise InvalidArgumentError(f"tokens: expected a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.dtype == np.uint32:
        return np.ascontiguousarray(arr)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"tokens: expected integer token ids, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > 0xFFFFFFFF:
        raise InvalidArgumentError(f"tokens: ids must fit an unsigned 32-bit integer, got [{lo}, {hi}]")
    return arr.astype(np.uint32)


def byte_list(items: Sequence[Any] | None) -> list | None:
    if items is None:
        return None
    return [bytes(x, "utf-8") if isinstance(x, str) else x for x in items]
