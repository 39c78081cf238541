"""provides()/registerType(): content negotiation in shows and lists."""

from settee_query_server.mime import best_match

SHOW = ("def show(doc, req):\n"
        "    provides('html', lambda: '<b>%s</b>' % doc['_id'])\n"
        "    provides('json', lambda: {'json': {'id': doc['_id']}})\n")
LIST = ("def list(head, req):\n"
        "    def csv():\n"
        "        send('id\\n')\n"
        "        for row in rows():\n"
        "            send(row['id'] + '\\n')\n"
        "    provides('csv', csv)\n"
        "    provides('html', lambda: '<html/>')\n")
DDOC = {"shows": {"p": SHOW}, "lists": {"p": LIST},
        "validate_doc_update": "def v(n, o, u, s):\n    registerType('foo', 'application/x-foo')\n"}


def req(accept=None, fmt=None):
    r = {"headers": {}, "query": {}, "path": ["db", "_design", "d", "_show", "p"]}
    if accept:
        r["headers"]["Accept"] = accept
    if fmt:
        r["query"]["format"] = fmt
    return r


def test_show_provides(qs):
    assert qs.call("ddoc", "new", "_design/d", DDOC) is True
    doc = {"_id": "x"}
    call = lambda r: qs.call("ddoc", "_design/d", ["shows", "p"], [doc, r])
    assert call(req()) == ["resp", {"body": "<b>x</b>",
                                    "headers": {"Content-Type": "text/html; charset=utf-8"}}]
    assert call(req(accept="application/json")) == [
        "resp", {"json": {"id": "x"}, "body": "", "headers": {"Content-Type": "application/json"}}]
    assert call(req(fmt="json"))[1]["json"] == {"id": "x"}
    assert call(req(accept="text/html;q=0.5, application/json;q=0.9"))[1]["json"] == {"id": "x"}
    answer = call(req(accept="image/png"))
    assert answer[:2] == ["error", "not_acceptable"]


def test_list_provides(qs):
    assert qs.call("ddoc", "new", "_design/d", DDOC) is True
    qs.write(["ddoc", "_design/d", ["lists", "p"], [{}, req(fmt="csv")]])
    assert qs.read() == ["start", ["id\n"], {"headers": {"Content-Type": "text/csv"}}]
    qs.write(["list_row", {"id": "a"}])
    assert qs.read() == ["chunks", ["a\n"]]
    qs.write(["list_end"])
    assert qs.read() == ["end", []]
    qs.write(["ddoc", "_design/d", ["lists", "p"], [{}, req(accept="text/html")]])
    assert qs.read() == ["start", [], {"headers": {"Content-Type": "text/html; charset=utf-8"}}]
    qs.write(["list_end"])
    assert qs.read() == ["end", ["<html/>"]]


def test_best_match():
    supported = ["text/html; charset=utf-8", "application/json", "text/x-json"]
    assert best_match(supported, "application/json") == "application/json"
    assert best_match(supported, "*/*") == "text/html; charset=utf-8"
    assert best_match(supported, "text/*;q=0.3, application/json;q=0.2") == supported[0]
    assert best_match(supported, "image/png") is None
    assert best_match(supported, "application/json;q=0") is None
