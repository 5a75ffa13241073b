"""The narrow interface between a checker and a learner's function: plain data as length-prefixed JSON frames.

Only these cross it, in either direction: None, bool, int, float (NaN and infinities included), exact fractions
(``fractions.Fraction``), str, numpy arrays and scalars of a numeric or bool dtype (their raw bytes in base64, with
dtype and shape; ``longdouble`` values travel as float64, the precision a check compares with), tuples, lists, dicts
with string keys, and references to a callable that the other side holds (``{"__callable__": n}``). Nothing is pickled
and nothing else is accepted: :func:`decode` raises :class:`WireError` for anything it does not know, so a hostile
peer can send only data, never objects.
"""

from __future__ import annotations

import base64
import fractions
import json
import struct
import time

import numpy as np

MAX_FRAME = 256 * 2**20  # bytes in one message
MAX_DEPTH = 32  # nesting of tuples, lists and dicts
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64", "complex64", "complex128"})
_HEADER = struct.Struct(">I")


class WireError(ValueError):
    """A message is not plain data, or is malformed."""


class Unsupported(WireError):
    """A value of a kind the interface does not carry (an object, a function, an object-dtype array, ...)."""


def encode(value, callables: list | None = None, depth: int = 0):
    """``value`` as JSON-ready data; callables are appended to ``callables`` and sent as references."""
    if depth > MAX_DEPTH:
        raise Unsupported(f"data nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):  # np.float64 too (a float): it crosses as the float JSON makes of it
        return float(value) if np.isfinite(value) else {"__float__": repr(float(value))}
    if isinstance(value, fractions.Fraction):
        return {"__fraction__": [value.numerator, value.denominator]}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype.kind in "fc" and arr.dtype.name not in DTYPES and arr.dtype.itemsize > 8:  # longdouble
            arr = arr.astype(np.float64 if arr.dtype.kind == "f" else np.complex128)
            value = arr[()] if isinstance(value, np.generic) else arr
        if arr.dtype.name not in DTYPES:
            raise Unsupported(f"a numpy array of dtype {arr.dtype}")
        data = base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii")
        return {"__array__": data, "dtype": arr.dtype.name, "shape": list(arr.shape),
                "scalar": isinstance(value, np.generic)}
    if isinstance(value, (tuple, list)):
        items = [encode(v, callables, depth + 1) for v in value]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Unsupported("a dict whose keys are not all strings")
        return {"__dict__": {k: encode(v, callables, depth + 1) for k, v in value.items()}}
    if callable(value) and callables is not None:
        callables.append(value)
        return {"__callable__": len(callables) - 1}
    raise Unsupported(f"a {type(value).__name__}")


def decode(data, make_callable=None, depth: int = 0):
    """The value :func:`encode` made; ``make_callable(n)`` turns a callable reference into a local function."""
    if depth > MAX_DEPTH:
        raise WireError("data nested too deeply")
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode(v, make_callable, depth + 1) for v in data]
    if not isinstance(data, dict) or len(data) == 0:
        raise WireError(f"unexpected {type(data).__name__}")
    if "__float__" in data:
        text = data["__float__"]
        if text not in ("nan", "inf", "-inf"):
            raise WireError("bad float")
        return float(text)
    if "__fraction__" in data:
        pair = data["__fraction__"]
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, int) and not isinstance(n, bool)
                                                                  for n in pair) and pair[1] > 0):
            raise WireError("bad fraction")
        return fractions.Fraction(pair[0], pair[1])
    if "__array__" in data:
        dtype, shape = data.get("dtype"), data.get("shape")
        if dtype not in DTYPES or not isinstance(shape, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape) or len(shape) > 32:
            raise WireError("bad array header")
        raw = base64.b64decode(data["__array__"], validate=True) if isinstance(data["__array__"], str) else None
        if raw is None or len(raw) != int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize:
            raise WireError("array data does not match its shape")
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return arr[()] if data.get("scalar") is True else arr
    if "__tuple__" in data and isinstance(data["__tuple__"], list):
        return tuple(decode(v, make_callable, depth + 1) for v in data["__tuple__"])
    if "__dict__" in data and isinstance(data["__dict__"], dict):
        return {str(k): decode(v, make_callable, depth + 1) for k, v in data["__dict__"].items()}
    if "__callable__" in data and make_callable is not None and isinstance(data["__callable__"], int):
        return make_callable(data["__callable__"])
    raise WireError("unknown kind of value")


def send(sock, message: dict) -> None:
    """Send one message (a dict of JSON data)."""
    body = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise Unsupported(f"a message of {len(body):,} bytes (the limit is {MAX_FRAME:,})")
    sock.sendall(_HEADER.pack(len(body)) + body)


def _recv_exact(sock, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no complete message before the deadline")
            sock.settimeout(remaining)
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock, deadline: float | None = None) -> dict:
    """Receive one message, whole before ``deadline`` (``time.monotonic()``) if given, else TimeoutError;
    WireError if it is too large or not a JSON object."""
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > MAX_FRAME:
        raise WireError(f"a message of {size:,} bytes (the limit is {MAX_FRAME:,})")
    try:
        message = json.loads(_recv_exact(sock, size, deadline).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise WireError(f"not a JSON message ({type(exc).__name__})") from None
    if not isinstance(message, dict):
        raise WireError("a message must be a JSON object")
    return message
