"""Exceptions that carry protocol meaning.

`QueryServerError` becomes the answer ``["error", name, reason]`` and the server
keeps running; `FatalError` is written the same way and then the process exits
non-zero (CouchDB restarts it), which is what CouchDB's own servers do when the
protocol itself is broken. `Forbidden` and `Unauthorized` are raised by user
validation (and rewrite) functions.
"""


class QueryServerError(Exception):
    """An error answered as ``["error", name, reason]``; the server carries on."""

    def __init__(self, name, reason):
        Exception.__init__(self, name, reason)
        self.name = name
        self.reason = reason


class FatalError(QueryServerError):
    """A protocol-level failure: answered like an error, then the process exits."""


class _Refusal(Exception):
    """Base of the two refusals a validate_doc_update function may raise."""

    key = None

    @property
    def message(self):
        # One argument is the message as is (it may be any JSON value, as in
        # JavaScript's ``throw({forbidden: ...})``); several are shown as text.
        if len(self.args) == 1:
            return self.args[0]
        return str(self) if self.args else ""


class Forbidden(_Refusal):
    """``raise Forbidden("msg")`` → ``{"forbidden": "msg"}`` (HTTP 403)."""

    key = "forbidden"


class Unauthorized(_Refusal):
    """``raise Unauthorized("msg")`` → ``{"unauthorized": "msg"}`` (HTTP 401)."""

    key = "unauthorized"


def refusal_of(exc):
    """The ``{"forbidden"|"unauthorized": msg}`` object an exception stands for, or None.

    Besides our own classes, accept couchpy/JavaScript-era habits: an exception
    whose single argument is a one-key dict such as ``{'forbidden': 'msg'}``.
    """
    if isinstance(exc, _Refusal):
        return {exc.key: exc.message}
    args = getattr(exc, "args", ())
    if len(args) == 1:
        return refusal_dict(args[0])
    return None


def refusal_dict(value):
    """`value` itself if it is ``{"forbidden": m}`` or ``{"unauthorized": m}``, else None."""
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        if key in ("forbidden", "unauthorized"):
            return value
    return None


def describe(exc):
    """A one-line ``Type: message`` text for an exception (for logs and reasons)."""
    text = str(exc)
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name
