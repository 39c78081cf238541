"""Map and reduce: ``add_fun``, ``add_lib``, ``map_doc``, ``reduce``, ``rereduce``.

A map function may `yield (key, value)` pairs (couchpy style), call the global
``emit(key, value)`` (CouchDB JavaScript style), return an iterable of pairs,
or mix these; pairs are collected in the order produced.

As in CouchDB's JavaScript server, an exception in a map function is logged
(``["log", ...]``) and the document counts as emitting nothing for that
function; an exception in a reduce function is logged and its reduction is
``null``.
"""

import traceback

from .compiler import Modules, compile_function
from .errors import FatalError, QueryServerError, describe

# Compiled reduce functions kept by source text (CouchDB sends the source with
# every reduce call); cleared when it grows past this.
REDUCE_CACHE_SIZE = 256


def user_line(exc):
    """' (line N of <file>)' for the innermost frame of user code in `exc`'s traceback."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith("<"):
            return " (line %s of %s)" % (frame.lineno, frame.filename)
    return ""


class Views:
    def __init__(self, server):
        self.server = server
        self.funs = []
        self.lib = None
        self.lib_modules = None
        self.reduce_cache = {}
        self.dumps_fast = server.codec.dumps_fast
        # Where the global emit() appends: the current function's output list.
        # (A one-element list is the cheapest mutable cell to swap per call.)
        self.target = [[]]

    # -- the emit() given to user code -------------------------------------

    def make_emit(self):
        target = self.target

        def emit(key, value=None):
            target[0].append((key, value))
        return emit

    # -- commands ------------------------------------------------------------

    def reset(self):
        self.funs = []
        self.lib = None
        self.lib_modules = None
        self.reduce_cache.clear()

    def add_lib(self, lib):
        self.lib = lib
        self.lib_modules = None
        return True

    def _lib_env(self):
        if self.lib_modules is None:
            # As in CouchDB: map functions see the lib as views.lib of a
            # design document holding nothing else.
            self.lib_modules = Modules({"views": {"lib": self.lib or {}}},
                                       self.server.environment)
        env = self.server.environment()
        env["require"] = self.lib_modules.require_from([])
        return env

    def add_fun(self, source):
        fun = compile_function(source, self._lib_env(),
                               "<map function %d>" % len(self.funs))
        self.funs.append(fun.fn)
        return True

    def map_doc(self, doc):
        """The encoded answer to ``["map_doc", doc]``: one list of pairs per function."""
        results = []
        target = self.target
        for fn in self.funs:
            out = []
            target[0] = out
            try:
                produced = fn(doc)
                if produced is not None:
                    for key, value in produced:
                        out.append((key, value))
            except FatalError:
                raise
            except (Exception, SystemExit) as exc:  # sys.exit() in user code too
                self._map_failed(exc, doc)
                out = []
            results.append(out)
        try:
            return self.dumps_fast(results)
        except Exception:
            return self._encode_each(results, doc)

    def _map_failed(self, exc, doc):
        doc_id = doc.get("_id") if isinstance(doc, dict) else None
        reason = exc.reason if isinstance(exc, QueryServerError) else describe(exc)
        self.server.log("function raised exception %s%s with doc._id %s" % (
            reason, user_line(exc), doc_id))

    def _encode_each(self, results, doc):
        # Some function emitted a value JSON cannot carry: that function's
        # output is dropped (logged), as if it had raised.
        dumps = self.server.dumps
        parts = []
        for out in results:
            try:
                parts.append(dumps(out))
            except Exception as exc:
                self._map_failed(exc, doc)
                parts.append(b"[]")
        return b"[" + b",".join(parts) + b"]"

    def reduce(self, sources, kvs):
        keys = [kv[0] for kv in kvs]
        values = [kv[1] for kv in kvs]
        return self._run(sources, keys, values, False)

    def rereduce(self, sources, values):
        return self._run(sources, None, values, True)

    # -- reduce machinery -----------------------------------------------------

    def _reduce_fun(self, source):
        fun = self.reduce_cache.get(source)
        if fun is None:
            if len(self.reduce_cache) >= REDUCE_CACHE_SIZE:
                self.reduce_cache.clear()
            fun = compile_function(source, self.server.environment(), "<reduce function>")
            self.reduce_cache[source] = fun
        return fun

    def _run(self, sources, keys, values, rereduce):
        if isinstance(sources, str):
            sources = [sources]
        reductions = []
        for source in sources:
            if isinstance(source, str) and source.startswith("_"):
                reductions.append(builtin_reduce(source, keys, values, rereduce))
                continue
            fun = self._reduce_fun(source)
            try:
                if fun.nargs >= 3:
                    reductions.append(fun.fn(keys, values, rereduce))
                else:
                    # couchpy accepts def fun(keys, values): and so do we.
                    reductions.append(fun.fn(keys, values))
            except FatalError:
                raise
            except (Exception, SystemExit) as exc:
                reason = exc.reason if isinstance(exc, QueryServerError) else describe(exc)
                self.server.log("function raised exception %s%s" % (reason, user_line(exc)))
                reductions.append(None)
        line = self.server.dumps(reductions)
        self._check_limit(line)
        return b"[true," + line + b"]"

    def _check_limit(self, line):
        """CouchDB's reduce_limit: output over 200 bytes and over half the input line.

        Lengths are in bytes of the JSON texts (CouchDB's JavaScript server
        counts UTF-16 units; the same for ASCII). ``reduce_limit: "log"`` only
        logs (the setting CouchDB's Erlang side honours for built-ins).
        """
        limit = self.server.query_config.get("reduce_limit")
        size = len(line)
        if not limit or size <= 200 or size * 2 <= self.server.line_length:
            return
        preview = line[:100].decode("utf-8", "replace")
        message = ("Reduce output must shrink more rapidly: Current output: '%s'... "
                   "(first 100 of %d bytes)" % (preview, size))
        if limit == "log":
            self.server.log(message)
            return
        raise QueryServerError("reduce_overflow_error", message)


# -- built-in reduce functions (CouchDB computes these itself; tolerated here) --

def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _sum_error(value):
    return QueryServerError(
        "invalid_value",
        "The _sum function requires that map values be numbers, arrays of numbers, "
        "or objects of those, not '%s'" % (value,))


def _sum_two(acc, value):
    """CouchDB's _sum of two values: numbers add, arrays add by position, objects by key."""
    if _is_number(value):
        if _is_number(acc):
            return acc + value
        if isinstance(acc, list):
            return _sum_lists(acc, [value])
    elif isinstance(value, list):
        if isinstance(acc, list):
            return _sum_lists(acc, value)
        if _is_number(acc):
            return _sum_lists([acc], value)
    elif isinstance(value, dict):
        if acc == 0 and _is_number(acc):
            return dict(value)
        if isinstance(acc, dict):
            merged = dict(acc)
            for k, v in value.items():
                merged[k] = _sum_two(merged[k], v) if k in merged else v
            return merged
    raise _sum_error(value)


def _sum_lists(a, b):
    out = []
    for i in range(max(len(a), len(b))):
        if i >= len(a):
            x = b[i]
        elif i >= len(b):
            x = a[i]
        else:
            x, y = a[i], b[i]
            if not (_is_number(x) and _is_number(y)):
                raise _sum_error(y if _is_number(x) else x)
            x = x + y
        out.append(x)
    return out


def _builtin_sum(values):
    acc = 0
    for v in values:
        acc = _sum_two(acc, v)
    return acc


_STAT_KEYS = ("sum", "count", "min", "max", "sumsqr")


def _stats_of(value):
    if _is_number(value):
        return {"sum": value, "count": 1, "min": value, "max": value, "sumsqr": value * value}
    if isinstance(value, dict) and all(k in value for k in _STAT_KEYS):
        return {k: value[k] for k in _STAT_KEYS}  # pre-aggregated
    if isinstance(value, list):
        return [_stats_of(v) for v in value]
    raise QueryServerError(
        "invalid_value",
        "The _stats function requires that map values be numbers or arrays of "
        "numbers, not '%s'" % (value,))


def _stats_merge(a, b):
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)):
            raise QueryServerError("invalid_value", "_stats cannot mix arrays and numbers")
        longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
        return [_stats_merge(x, y) for x, y in zip(longer, shorter)] + longer[len(shorter):]
    return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"],
            "min": min(a["min"], b["min"]), "max": max(a["max"], b["max"]),
            "sumsqr": a["sumsqr"] + b["sumsqr"]}


def _builtin_stats(values):
    acc = None
    for v in values:
        s = _stats_of(v)
        acc = s if acc is None else _stats_merge(acc, s)
    if acc is None:
        return {"sum": 0, "count": 0, "min": 0, "max": 0, "sumsqr": 0}
    return acc


def builtin_reduce(name, keys, values, rereduce):
    if name.startswith("_sum"):
        return _builtin_sum(values)
    if name.startswith("_count"):
        return _builtin_sum(values) if rereduce else len(values)
    if name.startswith("_stats"):
        return _builtin_stats(values)
    raise QueryServerError("unknown_builtin_reduce",
                           "builtin reduce %r is not supported by this query server" % name)
