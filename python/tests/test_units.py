"""Direct tests of pure parts: built-in reduces, the compiler, require paths, codecs, streams."""

import os
import threading

import pytest

from settee_query_server.codec import STDLIB, get_codec
from settee_query_server.compiler import Modules, compile_function, positional_arity
from settee_query_server.errors import Forbidden, QueryServerError, refusal_of
from settee_query_server.stream import LineReader, Output
from settee_query_server.views import builtin_reduce


def test_builtin_sum_shapes():
    assert builtin_reduce("_sum", None, [1, 2, 3], False) == 6
    assert builtin_reduce("_sum", None, [[1, 2], 3], False) == [4, 2]
    assert builtin_reduce("_sum", None, [{"a": {"b": 1}}, {"a": {"b": 2, "c": 1}}], True) == {
        "a": {"b": 3, "c": 1}}
    with pytest.raises(QueryServerError):
        builtin_reduce("_sum", None, [True], False)
    with pytest.raises(QueryServerError):
        builtin_reduce("_approx_count_distinct", None, [1], False)


def test_builtin_stats_arrays():
    got = builtin_reduce("_stats", None, [[1, 2], [3, 4]], False)
    assert got == [{"sum": 4, "count": 2, "min": 1, "max": 3, "sumsqr": 10},
                   {"sum": 6, "count": 2, "min": 2, "max": 4, "sumsqr": 20}]
    assert builtin_reduce("_count", None, [1, 2, 3], False) == 3
    assert builtin_reduce("_count", None, [3, 4], True) == 7


def test_compile_forms():
    env = {}
    fun = compile_function("lambda a, b: a + b", env)
    assert fun(1, 2, 99) == 3 and fun.nargs == 2
    fun = compile_function("def one(x):\n    return x\ndef two(*a):\n    return a\n", {})
    assert fun(1, 2) == (1, 2)
    with pytest.raises(QueryServerError) as err:
        compile_function("def f(:", {})
    assert err.value.name == "compilation_error"
    with pytest.raises(QueryServerError):
        compile_function(42, {})


def test_positional_arity():
    assert positional_arity(lambda: 0) == 0
    assert positional_arity(lambda a, b=1: 0) == 2

    class C:
        def __call__(self, a):
            return a
    assert positional_arity(C()) == 1


def test_require_paths():
    root = {"lib": {"a": "from_b = require('./b')\nvalue = from_b.value + 1\n",
                    "b": "value = 1\n", "sub": {"c": "up = require('../b').value\n"},
                    "cycle1": "other = require('./cycle2')\nname = 'one'\n",
                    "cycle2": "other = require('./cycle1')\nname = 'two'\n",
                    "notstr": 5}}
    mods = Modules(root, dict)
    assert mods.load("lib/a").value == 2
    assert mods.load("lib/sub/c").up == 1
    assert mods.load("lib/a") is mods.load("lib/a")  # cached
    assert mods.load("lib/cycle1").other.name == "two"
    for bad in ("lib/missing", "lib/notstr", "../x", ""):
        with pytest.raises(QueryServerError) as err:
            mods.load(bad)
        assert err.value.name == "invalid_require_path"
    broken = Modules({"m": "raise RuntimeError('x')"}, dict)
    with pytest.raises(QueryServerError) as err:
        broken.load("m")
    assert err.value.name == "compilation_error"


def test_refusals():
    assert refusal_of(Forbidden("no")) == {"forbidden": "no"}
    assert refusal_of(Forbidden({"k": 1})) == {"forbidden": {"k": 1}}
    assert refusal_of(Exception({"unauthorized": "who"})) == {"unauthorized": "who"}
    assert refusal_of(ValueError("x")) is None


def test_codecs_agree():
    values = [{"a": "\u00e9\u2603\n\t\"", "b": [1, 2.5, None, True], "c": {}},
              {1: float("nan"), "x": (1, 2)}, 2 ** 70, "\ud800"]
    codecs = [STDLIB]
    try:
        codecs.append(get_codec("orjson"))
    except ImportError:
        pass
    for value in values:
        outs = {c.dumps(value) for c in codecs}
        assert len(outs) == 1, (value, outs)
        for c in codecs:
            c.loads(next(iter(outs)))
    with pytest.raises(ValueError):
        get_codec("nope")


def test_line_reader_and_output():
    r, w = os.pipe()
    flushed = []
    reader = LineReader(r, lambda: flushed.append(1), read_size=7)

    def feed():
        os.write(w, b'["a"]\n["long line here"]\n\n["c"]')
        os.close(w)
    t = threading.Thread(target=feed)
    t.start()
    got = []
    while True:
        line = reader.readline()
        if line is None:
            break
        got.append(line)
    t.join()
    os.close(r)
    assert got == [b'["a"]', b'["long line here"]', b"", b'["c"]']
    assert flushed  # flushed before blocking

    r, w = os.pipe()
    out = Output(w, max_pending=2)
    out.write(b"1")  # held back: below max_pending
    out.write(b"2")  # reaches max_pending: both written at once
    assert os.read(r, 100) == b"1\n2\n"
    out.write(b"3")
    out.flush()
    assert os.read(r, 100) == b"3\n"
    os.close(r)
    os.close(w)
