"""reset, add_fun, add_lib, map_doc, reduce, rereduce, log lines, errors."""

import json

MAP_YIELD = "def fun(doc):\n    yield doc['_id'], doc.get('n')\n"
MAP_EMIT = "def map(doc):\n    for t in doc.get('tags', []):\n        emit(t, 1)\n"


def test_reset_and_add_fun(any_qs):
    assert any_qs.call("reset") is True
    assert any_qs.call("reset", {"reduce_limit": True, "timeout": 5000}) is True
    assert any_qs.call("add_fun", MAP_YIELD) is True


def test_map_yield_and_emit_and_multiple_functions(any_qs):
    any_qs.call("reset")
    any_qs.call("add_fun", MAP_YIELD)
    any_qs.call("add_fun", MAP_EMIT)
    any_qs.call("add_fun", "lambda doc: [(doc['_id'], None)] if doc.get('n') else []")
    answer = any_qs.call("map_doc", {"_id": "a", "n": 1, "tags": ["x", "y"]})
    assert answer == [[["a", 1]], [["x", 1], ["y", 1]], [["a", None]]]
    answer = any_qs.call("map_doc", {"_id": "b"})
    assert answer == [[["b", None]], [], []]


def test_reset_forgets_functions(qs):
    qs.call("add_fun", MAP_YIELD)
    qs.call("reset")
    assert qs.call("map_doc", {"_id": "a"}) == []
    qs.call("add_fun", MAP_EMIT)
    assert qs.call("map_doc", {"_id": "a", "tags": ["t"]}) == [[["t", 1]]]


def test_last_top_level_function_is_used(qs):
    src = ("import re\nPATTERN = re.compile('^a')\n"
           "def helper(x):\n    return x.upper()\n"
           "def fun(doc):\n    if PATTERN.match(doc['_id']):\n        yield helper(doc['_id']), None\n")
    assert qs.call("add_fun", src) is True
    assert qs.call("map_doc", {"_id": "abc"}) == [[["ABC", None]]]
    assert qs.call("map_doc", {"_id": "xyz"}) == [[]]


def test_indented_source_is_accepted(qs):
    assert qs.call("add_fun", "    def fun(doc):\n        yield 1, 2\n") is True
    assert qs.call("map_doc", {}) == [[[1, 2]]]


def test_compile_errors(qs):
    answer = qs.call("add_fun", "def fun(doc):\n  yield (\n")
    assert answer[:2] == ["error", "compilation_error"]
    answer = qs.call("add_fun", "x = 1")
    assert answer[:2] == ["error", "compilation_error"]
    answer = qs.call("add_fun", "raise ValueError('at load')\ndef f(doc): pass")
    assert answer[:2] == ["error", "compilation_error"]
    assert "at load" in answer[2]
    # server still fine
    assert qs.call("add_fun", MAP_YIELD) is True
    assert qs.call("map_doc", {"_id": "q", "n": 3}) == [[["q", 3]]]


def test_map_runtime_error_logs_and_continues(qs):
    qs.call("add_fun", "def f(doc):\n    yield doc['missing'], 1\n")
    qs.call("add_fun", MAP_YIELD)
    assert qs.call("map_doc", {"_id": "d1", "n": 2}) == [[], [["d1", 2]]]
    assert any("KeyError" in m and "d1" in m for m in qs.logs)
    assert qs.call("map_doc", {"_id": "d2", "missing": 5, "n": 1}) == [[[5, 1]], [["d2", 1]]]


def test_map_partial_emits_are_dropped_on_error(qs):
    qs.call("add_fun", "def f(doc):\n    emit('before', 1)\n    1/0\n")
    assert qs.call("map_doc", {"_id": "z"}) == [[]]
    assert any("ZeroDivisionError" in m for m in qs.logs)


def test_unencodable_emit_is_dropped_and_logged(qs):
    qs.call("add_fun", "def f(doc):\n    emit(doc['_id'], object())\n")
    qs.call("add_fun", MAP_YIELD)
    assert qs.call("map_doc", {"_id": "u", "n": 0}) == [[], [["u", 0]]]
    assert any("not JSON serializable" in m for m in qs.logs)


def test_python_values_are_encoded(qs):
    qs.call("add_fun", "import datetime\ndef f(doc):\n"
                       "    emit({1: 'int key'}, (1, 2))\n"
                       "    emit(float('nan'), {'s': {3}})\n"
                       "    emit(2 ** 70, datetime.date(2020, 1, 2))\n")
    assert qs.call("map_doc", {}) == [[[{"1": "int key"}, [1, 2]], [None, {"s": [3]}],
                                       [2 ** 70, "2020-01-02"]]]


def test_log_lines_come_before_the_answer(qs):
    qs.call("add_fun", "def f(doc):\n    log('seen ' + doc['_id'])\n    log({'a': 1})\n"
                       "    yield 1, 1\n")
    qs.write(["map_doc", {"_id": "L"}])
    assert json.loads(qs.read_line()) == ["log", "seen L"]
    assert json.loads(qs.read_line()) == ["log", '{"a":1}']
    assert json.loads(qs.read_line()) == [[[1, 1]]]


def test_print_does_not_corrupt_protocol(qs):
    qs.call("add_fun", "def f(doc):\n    print('noise')\n    yield 1, 1\n")
    assert qs.call("map_doc", {}) == [[[1, 1]]]
    assert "noise" in qs.stderr_text()


def test_reduce_user_functions(any_qs):
    three = "def red(keys, values, rereduce):\n    return sum(values)\n"
    two = "def red(keys, values):\n    return len(keys)\n"
    keys = "def red(keys, values, rereduce):\n    return [k[1] for k in keys]\n"
    kvs = [[["a", "id1"], 1], [["b", "id2"], 2], [["c", "id3"], 3]]
    assert any_qs.call("reduce", [three, two, keys], kvs) == [True, [6, 3, ["id1", "id2", "id3"]]]
    assert any_qs.call("rereduce", [three], [6, 4]) == [True, [10]]
    flag = "def red(keys, values, rereduce):\n    return [keys, rereduce]\n"
    assert any_qs.call("rereduce", [flag], [1]) == [True, [[None, True]]]


def test_reduce_builtins(any_qs):
    kvs = [[["a", "1"], 1], [["b", "2"], 2.5], [["c", "3"], 4]]
    assert any_qs.call("reduce", ["_sum", "_count", "_stats"], kvs) == [True, [
        7.5, 3, {"sum": 7.5, "count": 3, "min": 1, "max": 4, "sumsqr": 1 + 6.25 + 16}]]
    assert any_qs.call("rereduce", ["_sum", "_count"], [3, 4]) == [True, [7, 7]]
    stats = [{"sum": 1, "count": 1, "min": 1, "max": 1, "sumsqr": 1},
             {"sum": 5, "count": 2, "min": 2, "max": 3, "sumsqr": 13}]
    assert any_qs.call("rereduce", ["_stats"], stats) == [True, [
        {"sum": 6, "count": 3, "min": 1, "max": 3, "sumsqr": 14}]]
    arrays = [[["k", "1"], [1, 2]], [["k", "2"], [10, 20, 30]]]
    assert any_qs.call("reduce", ["_sum"], arrays) == [True, [[11, 22, 30]]]
    objects = [[["k", "1"], {"a": 1, "b": {"c": 2}}], [["k", "2"], {"a": 3, "d": 4}]]
    assert any_qs.call("reduce", ["_sum"], objects) == [True, [{"a": 4, "b": {"c": 2}, "d": 4}]]
    bad = any_qs.call("reduce", ["_sum"], [[["k", "1"], "text"]])
    assert bad[:2] == ["error", "invalid_value"]
    assert any_qs.call("reduce", ["_count"], []) == [True, [0]]


def test_reduce_runtime_error_gives_null_and_log(qs):
    bad = "def red(k, v, r):\n    return v[10]\n"
    assert qs.call("reduce", [bad, "_count"], [[["a", "b"], 1]]) == [True, [None, 1]]
    assert any("IndexError" in m for m in qs.logs)


def test_reduce_compile_error(qs):
    answer = qs.call("reduce", ["def red(:"], [[["a", "b"], 1]])
    assert answer[:2] == ["error", "compilation_error"]


def test_reduce_limit(qs):
    grow = "def red(keys, values, rereduce):\n    return values * 10\n"
    kvs = [[["k%d" % i, "id%d" % i], i] for i in range(30)]
    # no limit configured: fine
    qs.call("reset")
    assert qs.call("reduce", [grow], kvs)[0] is True
    qs.call("reset", {"reduce_limit": True})
    answer = qs.call("reduce", [grow], kvs)
    assert answer[:2] == ["error", "reduce_overflow_error"]
    assert "Reduce output must shrink more rapidly" in answer[2]
    # small outputs (<= 200 bytes) are never refused
    assert qs.call("reduce", ["def r(k, v, re):\n    return v\n"], kvs[:3]) == [True, [[0, 1, 2]]]
    # a shrinking reduce is fine
    assert qs.call("reduce", ["def r(k, v, re):\n    return sum(v)\n"], kvs) == [True, [435]]
    # "log" only logs
    qs.call("reset", {"reduce_limit": "log"})
    assert qs.call("reduce", [grow], kvs)[0] is True
    assert any("shrink" in m for m in qs.logs)
    # plain reset clears the config (as CouchDB's server does)
    qs.call("reset")
    assert qs.call("reduce", [grow], kvs)[0] is True


def test_add_lib_and_require(qs):
    lib = {
        "util": "def double(x):\n    return 2 * x\nexports.tag = 'util'\n",
        "deep": {"mod": "from_parent = require('../util')\n"
                        "def quadruple(x):\n    return from_parent.double(from_parent.double(x))\n"},
        "replaced": "module.exports = {'answer': 42}\n",
    }
    assert qs.call("add_lib", lib) is True
    src = ("def fun(doc):\n"
           "    util = require('views/lib/util')\n"
           "    deep = require('views/lib/deep/mod')\n"
           "    yield util.double(doc['n']), [deep.quadruple(doc['n']), util['tag'],\n"
           "        require('views/lib/replaced')['answer']]\n")
    assert qs.call("add_fun", src) is True
    assert qs.call("map_doc", {"n": 3}) == [[[6, [12, "util", 42]]]]
    qs.call("add_fun", "def f(doc):\n    require('views/lib/nope')\n")
    assert qs.call("map_doc", {"_id": "r", "n": 1})[1] == []
    assert any("invalid_require_path" in m or "no property" in m for m in qs.logs)


def test_unknown_command_and_bad_arguments(qs):
    assert qs.call("frobnicate", 1)[:2] == ["error", "unknown_command"]
    assert qs.call("map_doc")[0] == "error"
    assert qs.call("reset") is True


def test_bad_json_is_fatal(qs):
    assert qs.call("reset") is True
    qs.write_raw(b'["map_doc", {not json\n')
    answer = json.loads(qs.read_line())
    assert answer[:2] == ["error", "query_protocol_error"]
    assert qs.close() != 0


def test_exit_zero_at_end_of_input(qs):
    assert qs.call("reset") is True
    assert qs.close() == 0


def test_sys_exit_in_user_code_does_not_stop_the_server(qs):
    qs.call("add_fun", "import sys\ndef f(doc):\n    sys.exit(3)\n")
    assert qs.call("map_doc", {"_id": "e"}) == [[]]
    assert qs.call("reduce", ["import sys\ndef r(k, v):\n    sys.exit(1)\n"], [[[1, "a"], 1]]) == [
        True, [None]]
    assert qs.call("ddoc", "new", "_design/e", {"filters": {"f": "import sys\ndef f(d, r):\n    sys.exit()\n"}}) is True
    assert qs.call("ddoc", "_design/e", ["filters", "f"], [[{}], {}])[:2] == ["error", "SystemExit"]
    assert qs.call("reset") is True
