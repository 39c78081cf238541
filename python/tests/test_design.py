"""["ddoc", ...]: shows, lists, updates, filters, views as filters, validation, rewrites."""

import base64
import json

DDOC_ID = "_design/app"

DDOC = {
    "_id": DDOC_ID,
    "lib": {"fmt": "def greet(name):\n    return 'Hello, %s' % name\n"},
    "shows": {
        "text": "def show(doc, req):\n    return 'id=' + doc['_id']\n",
        "dict": ("def show(doc, req):\n"
                 "    return {'code': 201, 'headers': {'X-A': 'b'}, 'json': {'q': req['query']}}\n"),
        "b64": "def show(doc, req):\n    return {'base64': base64_text}\nbase64_text = 'aGk='\n",
        "bytes": "def show(doc, req):\n    return {'body': b'\\x00\\x01'}\n",
        "lib": "def show(doc, req):\n    return require('lib/fmt').greet(doc['name'])\n",
        "ddoc": "def show(doc, req):\n    return ddoc['_id']\n",
        "nodoc": "def show(doc, req):\n    return 'none' if doc is None else doc['_id']\n",
        "boom": "def show(doc, req):\n    return doc['nope']\n",
        "chunky": "def show(doc, req):\n    start({'headers': {'X-S': '1'}})\n"
                  "    send('a')\n    send('b')\n    return 'c'\n",
    },
    "lists": {
        "rows": ("def list(head, req):\n"
                 "    start({'headers': {'Content-Type': 'text/plain'}})\n"
                 "    send('head %d;' % head['total_rows'])\n"
                 "    while True:\n"
                 "        row = get_row()\n"
                 "        if row is None:\n"
                 "            break\n"
                 "        send('row %s;' % row['key'])\n"
                 "    return 'tail'\n"),
        "iter": ("def list(head, req):\n"
                 "    return ','.join(str(r['value']) for r in rows())\n"),
        "noread": "def list(head, req):\n    send('only')\n",
        "boom": "def list(head, req):\n    get_row()\n    raise RuntimeError('list broke')\n",
    },
    "updates": {
        "bump": ("def update(doc, req):\n"
                 "    if doc is None:\n"
                 "        if 'id' in req and req['id']:\n"
                 "            return [{'_id': req['id'], 'n': 0}, 'created']\n"
                 "        return [None, {'code': 400, 'body': 'no id'}]\n"
                 "    doc['n'] += 1\n"
                 "    return [doc, {'json': {'n': doc['n']}}]\n"),
        "bad": "def update(doc, req):\n    return 42\n",
    },
    "filters": {
        "even": "def filter(doc, req):\n    return doc.get('n', 1) % 2 == 0\n",
        "param": "def filter(doc, req):\n    return doc.get('type') == req['query'].get('type')\n",
        "one_arg": "def filter(doc):\n    return 'keep' in doc\n",
        "boom": "def filter(doc, req):\n    return doc['x'] > 1\n",
    },
    "views": {
        "by_type": {"map": "def map(doc):\n    if 'type' in doc:\n        emit(doc['type'], 1)\n"},
        "yielding": {"map": "def map(doc):\n    if doc.get('n'):\n        yield doc['n'], None\n"},
    },
    "validate_doc_update": (
        "def validate(newdoc, olddoc, userctx, secobj):\n"
        "    if newdoc.get('forbid'):\n"
        "        raise Forbidden('forbidden: ' + newdoc['_id'])\n"
        "    if not userctx.get('name'):\n"
        "        raise Unauthorized('log in first')\n"
        "    if newdoc.get('dict'):\n"
        "        raise Exception({'forbidden': 'dict style'})\n"
        "    if newdoc.get('crash'):\n"
        "        raise ValueError('bad value')\n"
        "    if newdoc.get('returned'):\n"
        "        return {'forbidden': 'returned'}\n"),
    "rewrites": ("def rewrite(req):\n"
                 "    if req['path'][-1] == 'secret':\n"
                 "        raise Forbidden('no')\n"
                 "    if req['path'][-1] == 'none':\n"
                 "        return None\n"
                 "    return {'path': '_show/text/' + req['path'][-1]}\n"),
}

REQ = {"method": "GET", "path": ["db", "_design", "app", "_show", "text"], "query": {"a": "1"},
       "headers": {}}


def setup(qs):
    assert qs.call("ddoc", "new", DDOC_ID, DDOC) is True


def ddoc(qs, path, args):
    return qs.call("ddoc", DDOC_ID, path, args)


def test_shows(any_qs):
    setup(any_qs)
    doc = {"_id": "d1", "name": "Ann"}
    assert ddoc(any_qs, ["shows", "text"], [doc, REQ]) == ["resp", {"body": "id=d1"}]
    assert ddoc(any_qs, ["shows", "dict"], [doc, REQ]) == [
        "resp", {"code": 201, "headers": {"X-A": "b"}, "json": {"q": {"a": "1"}}}]
    assert ddoc(any_qs, ["shows", "b64"], [doc, REQ]) == ["resp", {"base64": "aGk="}]
    assert ddoc(any_qs, ["shows", "bytes"], [doc, REQ]) == [
        "resp", {"base64": base64.b64encode(b"\x00\x01").decode()}]
    assert ddoc(any_qs, ["shows", "lib"], [doc, REQ]) == ["resp", {"body": "Hello, Ann"}]
    assert ddoc(any_qs, ["shows", "ddoc"], [doc, REQ]) == ["resp", {"body": DDOC_ID}]
    assert ddoc(any_qs, ["shows", "nodoc"], [None, REQ]) == ["resp", {"body": "none"}]
    assert ddoc(any_qs, ["shows", "chunky"], [doc, REQ]) == [
        "resp", {"headers": {"X-S": "1"}, "body": "abc"}]


def test_show_errors(qs):
    setup(qs)
    answer = ddoc(qs, ["shows", "boom"], [{"_id": "x"}, REQ])
    assert answer[:2] == ["error", "render_error"]
    assert "KeyError" in answer[2]
    # null doc with a document path: not_found, as CouchDB does
    doc_req = dict(REQ, path=["db", "_design", "app", "_show", "boom", "missing-doc"])
    assert ddoc(qs, ["shows", "boom"], [None, doc_req]) == [
        "error", "not_found", "document not found"]
    assert ddoc(qs, ["shows", "absent"], [None, REQ])[:2] == ["error", "not_found"]
    # still serving
    assert ddoc(qs, ["shows", "text"], [{"_id": "ok"}, REQ]) == ["resp", {"body": "id=ok"}]


def test_list_with_rows(any_qs):
    setup(any_qs)
    any_qs.write(["ddoc", DDOC_ID, ["lists", "rows"], [{"total_rows": 2, "offset": 0}, REQ]])
    assert any_qs.read() == ["start", ["head 2;"], {"headers": {"Content-Type": "text/plain"}}]
    any_qs.write(["list_row", {"key": "a", "value": 1}])
    assert any_qs.read() == ["chunks", ["row a;"]]
    any_qs.write(["list_row", {"key": "b", "value": 2}])
    assert any_qs.read() == ["chunks", ["row b;"]]
    any_qs.write(["list_end"])
    assert any_qs.read() == ["end", ["tail"]]
    # a second list call starts from a clean state
    any_qs.write(["ddoc", DDOC_ID, ["lists", "iter"], [{"total_rows": 2}, REQ]])
    assert any_qs.read() == ["start", [], {"headers": {}}]
    any_qs.write(["list_row", {"key": "a", "value": 1}])
    assert any_qs.read() == ["chunks", []]
    any_qs.write(["list_row", {"key": "b", "value": 2}])
    assert any_qs.read() == ["chunks", []]
    any_qs.write(["list_end"])
    assert any_qs.read() == ["end", ["1,2"]]


def test_list_without_reading_rows(qs):
    setup(qs)
    qs.write(["ddoc", DDOC_ID, ["lists", "noread"], [{}, REQ]])
    assert qs.read() == ["start", ["only"], {"headers": {}}]
    qs.write(["list_end"])
    assert qs.read() == ["end", []]


def test_list_error(qs):
    setup(qs)
    qs.write(["ddoc", DDOC_ID, ["lists", "boom"], [{}, REQ]])
    assert qs.read() == ["start", [], {"headers": {}}]
    qs.write(["list_row", {"key": 1}])
    answer = qs.read()
    assert answer[:2] == ["error", "render_error"] and "list broke" in answer[2]
    assert qs.call("reset") is True


def test_list_protocol_break_is_fatal(qs):
    setup(qs)
    qs.write(["ddoc", DDOC_ID, ["lists", "rows"], [{"total_rows": 0}, REQ]])
    assert qs.read()[0] == "start"
    qs.write(["map_doc", {}])
    assert qs.read()[:2] == ["error", "list_error"]
    assert qs.close() != 0


def test_updates(any_qs):
    setup(any_qs)
    post = dict(REQ, method="POST", id="new-id")
    assert ddoc(any_qs, ["updates", "bump"], [None, post]) == [
        "up", {"_id": "new-id", "n": 0}, {"body": "created"}]
    assert ddoc(any_qs, ["updates", "bump"], [{"_id": "x", "n": 4}, post]) == [
        "up", {"_id": "x", "n": 5}, {"json": {"n": 5}}]
    assert ddoc(any_qs, ["updates", "bump"], [None, dict(post, id=None)]) == [
        "up", None, {"code": 400, "body": "no id"}]
    assert ddoc(any_qs, ["updates", "bump"], [None, REQ])[:2] == ["error", "method_not_allowed"]
    assert ddoc(any_qs, ["updates", "bad"], [None, post])[:2] == ["error", "render_error"]


def test_filters(any_qs):
    setup(any_qs)
    docs = [{"n": 1}, {"n": 2, "keep": 1}, {"n": 4, "type": "t"}, {"type": "t"}]
    assert ddoc(any_qs, ["filters", "even"], [docs, REQ]) == [True, [False, True, True, False]]
    req = dict(REQ, query={"type": "t"})
    assert ddoc(any_qs, ["filters", "param"], [docs, req]) == [True, [False, False, True, True]]
    assert ddoc(any_qs, ["filters", "one_arg"], [docs, REQ]) == [True, [False, True, False, False]]
    answer = ddoc(any_qs, ["filters", "boom"], [docs, REQ])
    assert answer[:2] == ["error", "KeyError"]
    assert ddoc(any_qs, ["filters", "even"], [[{"n": 0}], REQ]) == [True, [True]]


def test_views_as_filters(any_qs):
    setup(any_qs)
    docs = [{"type": "a"}, {"n": 3}, {}]
    assert ddoc(any_qs, ["views", "by_type", "map"], [docs]) == [True, [True, False, False]]
    assert ddoc(any_qs, ["views", "yielding", "map"], [docs]) == [True, [False, True, False]]


def test_validate(any_qs):
    setup(any_qs)
    user = {"name": "bob", "roles": []}
    path = ["validate_doc_update"]
    assert ddoc(any_qs, path, [{"_id": "ok"}, None, user, {}]) == 1
    assert ddoc(any_qs, path, [{"_id": "f", "forbid": 1}, None, user, {}]) == {
        "forbidden": "forbidden: f"}
    assert ddoc(any_qs, path, [{"_id": "u"}, None, {"name": None}, {}]) == {
        "unauthorized": "log in first"}
    assert ddoc(any_qs, path, [{"_id": "d", "dict": 1}, None, user, {}]) == {
        "forbidden": "dict style"}
    assert ddoc(any_qs, path, [{"_id": "r", "returned": 1}, None, user, {}]) == {
        "forbidden": "returned"}
    answer = ddoc(any_qs, path, [{"_id": "c", "crash": 1}, None, user, {}])
    assert answer[:2] == ["error", "ValueError"]
    assert answer[2].startswith("ValueError: bad value (line 9 of <_design/app validate_doc_update>")
    assert ddoc(any_qs, path, [{"_id": "ok2"}, {"_id": "ok2"}, user, {}]) == 1


def test_validate_with_fewer_parameters(qs):
    src = "def v(newdoc, olddoc):\n    if olddoc is not None:\n        raise Forbidden('no edits')\n"
    assert qs.call("ddoc", "new", "_design/v", {"validate_doc_update": src}) is True
    assert qs.call("ddoc", "_design/v", ["validate_doc_update"], [{}, None, {}, {}]) == 1
    assert qs.call("ddoc", "_design/v", ["validate_doc_update"], [{}, {}, {}, {}]) == {
        "forbidden": "no edits"}


def test_rewrites(qs):
    setup(qs)
    req = {"path": ["db", "_design", "app", "_rewrite", "page"], "method": "GET"}
    assert ddoc(qs, ["rewrites"], [req]) == ["ok", {"path": "_show/text/page"}]
    assert ddoc(qs, ["rewrites"], [dict(req, path=["secret"])]) == {"forbidden": "no"}
    assert ddoc(qs, ["rewrites"], [dict(req, path=["none"])]) == ["no_dispatch_rule"]


def test_ddoc_new_replaces_and_caches(qs):
    setup(qs)
    doc = {"_id": "d"}
    assert ddoc(qs, ["shows", "text"], [doc, REQ]) == ["resp", {"body": "id=d"}]
    changed = dict(DDOC, shows={"text": "def s(doc, req):\n    return 'v2'\n"})
    assert qs.call("ddoc", "new", DDOC_ID, changed) is True
    assert ddoc(qs, ["shows", "text"], [doc, REQ]) == ["resp", {"body": "v2"}]


def test_ddoc_compile_error(qs):
    assert qs.call("ddoc", "new", "_design/bad", {"shows": {"s": "def s(:"}}) is True
    answer = qs.call("ddoc", "_design/bad", ["shows", "s"], [None, REQ])
    assert answer[:2] == ["error", "compilation_error"]


def test_uncached_ddoc_is_fatal(qs):
    qs.write(["ddoc", "_design/unknown", ["shows", "x"], [None, {}]])
    assert json.loads(qs.read_line()) == [
        "error", "query_protocol_error", "uncached design doc: _design/unknown"]
    assert qs.close() != 0
