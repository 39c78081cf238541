"""JSON codec: orjson when importable (or forced), the standard library otherwise.

Select with the environment variable ``SETTEE_QS_JSON`` (or ``--json``):
``auto`` (default: orjson if importable), ``orjson`` (required), ``stdlib``.

Both codecs produce the same bytes for ordinary data: compact separators,
UTF-8 (non-ASCII characters are not escaped), NaN/Infinity as ``null`` (as
JavaScript's JSON.stringify does). Known differences: floats that print in
exponent form (``1e+16`` by the stdlib, ``1e16`` by orjson) are the same number
spelled differently; integers beyond 64 bits *in the input* are read as floats
by orjson (as JavaScript reads them) and exactly by the stdlib (a parse_int
hook to align them costs the stdlib path 2.3x). Integers produced by user code
are written exactly by both.

Invariant: `dumps` returns bytes without a trailing newline, and raises
TypeError only for values no codec can represent (e.g. a dict keyed by tuples);
the fast path never silently changes data, it falls back to a slower encoder.
"""

import dataclasses
import datetime
import decimal
import enum
import json as _json
import math
import os
import uuid

__all__ = ["Codec", "get_codec"]


def _default(obj):
    """Encodes common Python values user code may emit that JSON lacks."""
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return obj.isoformat()
    if isinstance(obj, decimal.Decimal):
        return float(obj)
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode("utf-8", "replace")
    raise TypeError("Object of type %s is not JSON serializable" % type(obj).__name__)


def _sanitize(obj):
    """A copy of `obj` with non-finite floats replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    return obj


# Built once: json.dumps(**kwargs) would build an encoder per call.
_STD_ENCODER = _json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default)
# Last resort: ASCII output survives lone surrogates (which UTF-8 cannot carry).
_SAFE_ENCODER = _json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_default)
_STD_DECODER = _json.JSONDecoder()


def _std_dumps(obj, _encode=_STD_ENCODER.encode):
    try:
        return _encode(obj).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        # NaN/Infinity somewhere, or a lone surrogate: take the careful path.
        return _SAFE_ENCODER.encode(_sanitize(obj)).encode("ascii")


def _std_loads(data, _decode=_STD_DECODER.decode):
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8", "surrogatepass")
    return _decode(data)


class Codec:
    """``loads(bytes) -> obj`` and ``dumps(obj) -> bytes``, plus ``dumps_fast``.

    `dumps_fast` is the bare encoder for hot paths: it may raise on values
    `dumps` still handles (callers fall back to `dumps`), and never produces
    different bytes from `dumps` when it succeeds.
    """

    def __init__(self, name, loads, dumps, dumps_fast=None):
        self.name = name
        self.loads = loads
        self.dumps = dumps
        self.dumps_fast = dumps_fast or dumps

    def __repr__(self):
        return "Codec(%r)" % self.name


STDLIB = Codec("stdlib", _std_loads, _std_dumps)


def _orjson_codec():
    import orjson

    or_dumps = orjson.dumps
    or_loads = orjson.loads

    def dumps(obj):
        try:
            return or_dumps(obj, default=_default)
        except TypeError:
            # Non-string dict keys, integers beyond 64 bits, lone surrogates:
            # the stdlib encoder handles them (the same way for both codecs).
            return _std_dumps(obj)

    def loads(data):
        try:
            return or_loads(data)
        except ValueError:
            # orjson refuses NaN/Infinity literals that the stdlib accepts;
            # truly bad JSON raises ValueError from here too.
            return _std_loads(data)

    return Codec("orjson", loads, dumps, or_dumps)


def get_codec(name=None):
    """The codec named `name` (default: ``$SETTEE_QS_JSON`` or ``auto``)."""
    if name is None:
        name = os.environ.get("SETTEE_QS_JSON", "auto")
    name = (name or "auto").strip().lower()
    if name == "stdlib":
        return STDLIB
    if name == "orjson":
        return _orjson_codec()  # ImportError if missing: asked for explicitly
    if name == "auto":
        try:
            return _orjson_codec()
        except ImportError:
            return STDLIB
    raise ValueError("unknown JSON codec %r (use auto, orjson or stdlib)" % name)
