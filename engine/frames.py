"""Length-prefixed pickle frames over a private pipe to a worker process of this package.

One frame: an 8-byte big-endian length, then a pickle. Pickle is safe here: both ends are this
package, over a pipe nobody else holds (the parse worker, :mod:`engine.index.parse_worker`, and
the secrets scan worker, :mod:`engine.secret_worker`).
"""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

_LEN = struct.Struct(">Q")


def encode_frame(obj: Any) -> bytes:
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(blob)) + blob


def write_frame(out: IO[bytes], obj: Any) -> None:
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(blob)))
    out.write(blob)
    out.flush()


def read_frame(src: IO[bytes]) -> Any | None:
    """The next frame's object, or None at the end of input (or a frame cut short)."""
    head = src.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    n = _LEN.unpack(head)[0]
    blob = src.read(n)
    if len(blob) < n:
        return None
    return pickle.loads(blob)  # noqa: S301 - frames come from this package's own process
