"""Pipelining, codec equivalence, and agreement with couchpy."""

import json
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import Session, server_env

MAP = ("def fun(doc):\n"
       "    if 'metadata' in doc and 'createdAt' in doc['metadata']:\n"
       "        year, month, _ = doc['metadata']['createdAt'].split('-')\n"
       "        yield [year, month], doc['score']\n")


def docs(n):
    return [{"_id": "d%04d" % i, "score": i % 97,
             "metadata": {"createdAt": "20%02d-%02d-01" % (10 + i % 12, 1 + i % 12)}}
            if i % 5 else {"_id": "d%04d" % i} for i in range(n)]


def test_pipelined_input(qs):
    assert qs.call("add_fun", MAP) is True
    batch = b"".join(json.dumps(["map_doc", d]).encode() + b"\n" for d in docs(1000))
    qs.write_raw(batch)  # all 1000 lines before reading any answer
    answers = [json.loads(qs.read_line()) for _ in range(1000)]
    for doc, answer in zip(docs(1000), answers):
        if "metadata" in doc:
            year, month, _ = doc["metadata"]["createdAt"].split("-")
            assert answer == [[[[year, month], doc["score"]]]]
        else:
            assert answer == [[]]
    # and a single exchange right after still answers without more input
    assert qs.call("reset") is True


def test_pipelined_mixed_commands_keep_order(qs):
    lines = []
    expected = []
    for i in range(300):
        lines.append(["add_fun", "def f(doc):\n    yield doc['i'], %d\n" % i] if i == 0
                     else ["map_doc", {"i": i}] if i % 3 else
                     ["rereduce", ["_sum"], [i, 1]])
        expected.append(True if i == 0 else [[[i, 0]]] if i % 3 else [True, [i + 1]])
    payload = b"".join(json.dumps(l).encode() + b"\n" for l in lines)
    writer = threading.Thread(target=qs.write_raw, args=(payload,))
    writer.start()
    got = [qs.read() for _ in lines]
    writer.join()
    assert got == expected


def test_large_pipelined_stream_does_not_deadlock(qs):
    # More output than a pipe holds, fed from a thread: answers must keep flowing.
    assert qs.call("add_fun", "def f(doc):\n    yield doc['_id'], 'x' * 200\n") is True
    n = 5000
    payload = b"".join(json.dumps(["map_doc", {"_id": i}]).encode() + b"\n" for i in range(n))
    writer = threading.Thread(target=qs.write_raw, args=(payload,))
    writer.start()
    for i in range(n):
        assert qs.read() == [[[i, "x" * 200]]]
    writer.join()


SCRIPT = [
    ["reset", {"reduce_limit": True}],
    ["add_fun", "def f(doc):\n    emit(doc.get('k'), doc)\n    yield [doc.get('n'), 1.5], None\n"],
    ["map_doc", {"_id": "u", "k": "h\u00e9llo \u2603 \U0001F600", "n": 12345678901234567890,
                 "ctl": "tab\there\nnl \u0001 \"q\" \\", "f": [0.1, -2.5, 1.0, 3.14159, 123456.789],
                 "nested": {"a": [None, True, False, {}], "b": []}}],
    ["map_doc", {"_id": "big", "k": 2 ** 63 + 5, "n": -0.0}],
    ["add_fun", "def h(doc):\n    yield 2 ** 80, -(2 ** 70)\n"],
    ["reduce", ["_sum", "_count", "_stats"], [[["a", "1"], 1], [["b", "2"], 2.25]]],
    ["ddoc", "new", "_design/x", {"shows": {"s": "def s(doc, req):\n"
                                                  "    return {'json': doc, 'headers': {'\u00e9': 'v'}}\n"}}],
    ["ddoc", "_design/x", ["shows", "s"], [{"\u00fc": "\u2603", "nan": None}, {}]],
    ["add_fun", "def g(doc):\n    emit(float('nan'), {1: float('inf')})\n"],
    ["map_doc", {"_id": "n"}],
]


def run_script(codec):
    payload = b"".join(json.dumps(c).encode() + b"\n" for c in SCRIPT)
    s = Session(codec)
    out, _ = s.proc.communicate(payload, timeout=30)
    return out


def test_orjson_and_stdlib_give_identical_bytes():
    pytest.importorskip("orjson")
    a = run_script("orjson")
    b = run_script("stdlib")
    assert a.count(b"\n") == len(SCRIPT)
    assert a == b


def test_exponent_floats_differ_only_in_spelling():
    pytest.importorskip("orjson")
    cmd = [["add_fun", "def f(doc):\n    yield doc['x'], 1e-7\n"], ["map_doc", {"x": [1e300, 1e16]}]]
    payload = b"".join(json.dumps(c).encode() + b"\n" for c in cmd)
    outs = [Session(c).proc.communicate(payload, timeout=30)[0] for c in ("orjson", "stdlib")]
    decoded = [[json.loads(l) for l in o.splitlines()] for o in outs]
    assert decoded[0] == decoded[1] == [True, [[[[1e300, 1e16], 1e-7]]]]


@pytest.mark.skipif(shutil.which("couchpy") is None, reason="couchpy not installed")
def test_matches_couchpy():
    maps = [
        MAP,
        "def fun(doc):\n    for i, tag in enumerate(doc.get('tags', [])):\n"
        "        yield tag, {'i': i, 'id': doc['_id']}\n",
    ]
    reduces = [
        "def fun(keys, values, rereduce):\n    return sum(values)\n",
        "def fun(keys, values):\n    return max(values)\n",
    ]
    sample = docs(50)
    for i, d in enumerate(sample):
        d["tags"] = ["t%d" % (i % 3), "u"] if i % 2 else []
    commands = [["reset"]] + [["add_fun", m] for m in maps]
    commands += [["map_doc", d] for d in sample]
    kvs = [[[["y", str(i)], "d%d" % i], i * 3 % 17] for i in range(40)]
    for r in reduces:
        commands.append(["reduce", [r], kvs])
        commands.append(["rereduce", [r], [5, 9, 2]])
    payload = b"".join(json.dumps(c).encode() + b"\n" for c in commands)

    def run(cmd):
        out = subprocess.run(cmd, input=payload, stdout=subprocess.PIPE, check=True,
                             timeout=60, env=server_env()).stdout
        return [json.loads(line) for line in out.splitlines()]

    ours = run([sys.executable, "-m", "settee_query_server"])
    theirs = run(["couchpy"])
    assert len(ours) == len(commands)
    assert ours == theirs


def test_single_exchange_is_answered_without_more_input():
    import os
    import select
    s = Session()
    try:
        fd = s.proc.stdout.fileno()
        for cmd in (["reset"], ["add_fun", MAP], ["map_doc", {"_id": "one"}]):
            s.write(cmd)  # stdin stays open: the server must answer now, not at EOF
            ready, _, _ = select.select([fd], [], [], 10)
            assert ready, "no answer to %r within 10 s" % (cmd[0],)
            data = os.read(fd, 65536)
            assert data.endswith(b"\n") and data.count(b"\n") == 1, data
    finally:
        s.close()
