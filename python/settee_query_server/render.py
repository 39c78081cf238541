"""Shows, lists, updates and rewrites (the functions that answer HTTP requests).

List functions see the globals ``start(resp)``, ``send(chunk)``, ``get_row()``
(alias ``getRow``) and ``rows()`` (an iterator over get_row), mirroring
CouchDB's JavaScript API: ``def fun(head, req)`` sends chunks and returns the
last chunk (or None).

Protocol of a list (answers on the left, CouchDB's lines on the right):
    ["start", chunks, resp]     <- first get_row()      then  ["list_row", row]
    ["chunks", chunks]          <- each later get_row() then  ["list_row", row]
    ...                                                 or    ["list_end"]
    ["end", chunks]             <- when the function returns
"""

import base64

from .errors import FatalError, QueryServerError, describe, refusal_of
from .mime import Mime
from .views import user_line


def _text(chunk):
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, (bytes, bytearray)):
        return bytes(chunk).decode("utf-8", "replace")
    return str(chunk)


def wrap_response(resp, what):
    """A response object from what a show/update function returned."""
    if isinstance(resp, (str, bytes, bytearray)):
        resp = {"body": resp}
    if not isinstance(resp, dict):
        raise QueryServerError("render_error", "undefined response from %s function" % what)
    body = resp.get("body")
    if isinstance(body, (bytes, bytearray)):
        # Python convenience: binary bodies travel as base64, as CouchDB expects.
        resp = dict(resp)
        del resp["body"]
        resp["base64"] = base64.b64encode(bytes(body)).decode("ascii")
    elif isinstance(resp.get("base64"), (bytes, bytearray)):
        resp = dict(resp)
        resp["base64"] = base64.b64encode(bytes(resp["base64"])).decode("ascii")
    return resp


class Render:
    def __init__(self, server):
        self.server = server
        self.mime = Mime()
        self._reset()

    def _reset(self):
        self.chunks = []
        self.start_resp = {}
        self.new_header = False
        self.got_row = False
        self.last_row = False

    # -- globals given to user code ---------------------------------------

    def start(self, resp=None):
        self.start_resp = resp or {}
        self.new_header = True

    def send(self, chunk):
        self.chunks.append(_text(chunk))

    def get_row(self):
        if self.last_row:
            return None
        if not self.got_row:
            self.got_row = True
            self._send_start()
        else:
            self._blow("chunks")
        server = self.server
        line = server.reader.readline()  # flushes our answers before blocking
        if line is None:
            raise FatalError("list_error", "input ended inside a list function")
        msg = server.loads(line)
        kind = msg[0] if isinstance(msg, list) and msg else None
        if kind == "list_end":
            self.last_row = True
            return None
        if kind != "list_row":
            raise FatalError("list_error", "not a row '%s'" % (kind,))
        return msg[1]

    def rows(self):
        while True:
            row = self.get_row()
            if row is None:
                return
            yield row

    # -- answers --------------------------------------------------------------

    def _send_start(self):
        resp = dict(self.start_resp or {})
        resp["headers"] = dict(resp.get("headers") or {})
        self.mime.apply(resp)
        self.server.respond(["start", self.chunks, resp])
        self.chunks = []
        self.start_resp = {}
        self.new_header = False

    def _blow(self, label):
        if self.new_header:
            answer = [label, self.chunks, self.start_resp]
            self.new_header = False
        else:
            answer = [label, self.chunks]
        self.chunks = []
        if label == "end":
            return answer
        self.server.respond(answer)

    def _render_error(self, exc, what):
        if isinstance(exc, QueryServerError):
            raise exc
        message = "%s function raised error: %s%s" % (what, describe(exc), user_line(exc))
        self.server.log(message)
        raise QueryServerError("render_error", message) from None

    # -- commands -----------------------------------------------------------

    def show(self, fun, ddoc, args):
        doc, req = (list(args) + [None, {}])[:2]
        try:
            self._reset()
            self.mime.reset()
            resp = fun(doc, req)
            resp = wrap_response({} if resp is None else resp, "show")
            if self.mime.used:
                provided = self.mime.run(req)
                provided = wrap_response({} if provided is None else provided, "show")
                resp = dict(resp)
                for k, v in provided.items():
                    if k != "body":
                        resp.setdefault(k, v)
                resp["body"] = (_text(resp.get("body") or "") + "".join(self.chunks)
                                + _text(provided.get("body") or ""))
                self.chunks = []
                self.mime.apply(resp)
            if self.chunks:
                # list-style show: start()/send() were used
                resp = dict(resp)
                headers = dict((self.start_resp or {}).get("headers") or {})
                headers.update(resp.get("headers") or {})
                resp["headers"] = headers
                if "code" in (self.start_resp or {}) and "code" not in resp:
                    resp["code"] = self.start_resp["code"]
                resp["body"] = "".join(self.chunks) + _text(resp.get("body") or "")
                self._reset()
            return ["resp", resp]
        except FatalError:
            raise
        except Exception as exc:
            path = req.get("path") if isinstance(req, dict) else None
            if doc is None and isinstance(path, list) and len(path) > 5:
                raise QueryServerError("not_found", "document not found") from None
            self._render_error(exc, "show")

    def update(self, fun, ddoc, args):
        doc, req = (list(args) + [None, {}])[:2]
        try:
            if isinstance(req, dict) and req.get("method") == "GET":
                raise QueryServerError("method_not_allowed",
                                       "Update functions do not allow GET")
            result = fun(doc, req)
            if not isinstance(result, (list, tuple)) or len(result) != 2:
                raise QueryServerError(
                    "render_error",
                    "update function must return [doc, response], got %s" % type(result).__name__)
            new_doc, resp = result
            return ["up", new_doc, wrap_response(resp, "update")]
        except FatalError:
            raise
        except Exception as exc:
            self._render_error(exc, "update")

    def list(self, fun, ddoc, args):
        head, req = (list(args) + [None, {}])[:2]
        try:
            self._reset()
            self.mime.reset()
            tail = fun(head, req)
            if self.mime.used:
                tail = self.mime.run(req)
            if not self.got_row:
                self.get_row()
            if tail is not None:
                self.chunks.append(_text(tail))
            return self._blow("end")
        except FatalError:
            raise
        except Exception as exc:
            self._render_error(exc, "list")
        finally:
            self._reset()
            self.mime.reset()

    def rewrite(self, fun, ddoc, args):
        req = args[0] if args else {}
        try:
            result = fun(req)
        except FatalError:
            raise
        except Exception as exc:
            refusal = refusal_of(exc)
            if refusal is not None:
                return refusal
            self._render_error(exc, "rewrite")
        if result is None:
            return ["no_dispatch_rule"]
        if isinstance(result, str):
            result = {"path": result}
        return ["ok", result]
