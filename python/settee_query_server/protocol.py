"""The command loop: one JSON array per input line, one JSON answer per line.

Invariants:
* every command line gets exactly one answer line, possibly preceded by
  ``["log", msg]`` lines (and, for lists, by ``start``/``chunks`` lines that
  CouchDB reads between its ``list_row`` lines);
* an exception from user code or a malformed command is answered with
  ``["error", name, reason]`` and the loop carries on; only a FatalError
  (input that is not JSON, an uncached design document, a broken list
  exchange) ends the process, with a non-zero exit status;
* answers are buffered; `stream.LineReader` flushes them before it blocks.
"""

import builtins
import json as _stdjson

from .codec import get_codec
from .design import Design
from .errors import FatalError, Forbidden, QueryServerError, Unauthorized, describe
from .render import Render
from .stream import LineReader, Output
from .views import Views, user_line

_MAP_PREFIX = b'["map_doc",'


class Server:
    def __init__(self, in_fd, out_fd, codec=None):
        self.codec = codec or get_codec()
        self.loads = self.codec.loads
        self.dumps = self.codec.dumps
        self.output = Output(out_fd)
        self.reader = LineReader(in_fd, self.output.flush)
        self.query_config = {}
        self.line_length = 0
        self.views = Views(self)
        self.render = Render(self)
        self.design = Design(self)
        self._base_env = self._make_env()
        self.handlers = {
            "reset": self.reset,
            "add_lib": self.views.add_lib,
            "add_fun": self.views.add_fun,
            "map_doc": self.views.map_doc,
            "reduce": self.views.reduce,
            "rereduce": self.views.rereduce,
            "ddoc": self.design.command,
        }

    # -- environment of user code -----------------------------------------

    def _make_env(self):
        render = self.render
        codec = self.codec

        def toJSON(value):
            return codec.dumps(value).decode("utf-8")

        return {
            "__builtins__": builtins,
            "emit": self.views.make_emit(),
            "log": self.log,
            "json": _stdjson,
            "toJSON": toJSON,
            "Forbidden": Forbidden,
            "Unauthorized": Unauthorized,
            "QueryServerError": QueryServerError,
            "start": render.start,
            "send": render.send,
            "get_row": render.get_row,
            "getRow": render.get_row,
            "rows": render.rows,
            "provides": render.mime.provides,
            "registerType": render.mime.register_type,
            "register_type": render.mime.register_type,
        }

    def environment(self):
        """A fresh globals dict for one compiled function or module."""
        return dict(self._base_env)

    # -- output ----------------------------------------------------------------

    def respond(self, answer):
        """Buffers one answer line; `answer` is a JSON-able value or pre-encoded bytes."""
        if not isinstance(answer, bytes):
            try:
                answer = self.dumps(answer)
            except Exception as exc:
                answer = self.dumps(["error", "json_encode_error",
                                     "answer could not be encoded: %s" % describe(exc)])
        self.output.write(answer)

    def log(self, message):
        if not isinstance(message, str):
            try:
                message = self.dumps(message).decode("utf-8")
            except Exception:
                message = repr(message)
        self.respond(["log", message])

    # -- commands ----------------------------------------------------------

    def reset(self, config=None):
        self.views.reset()
        self.query_config = config if isinstance(config, dict) else {}
        return True

    def run(self):
        """Serves until end of input; returns the exit status."""
        reader = self.reader
        loads = self.loads
        output = self.output
        pending = output.pending  # Output.flush empties this very list
        max_pending = output.max_pending
        map_doc = self.views.map_doc
        prefix = _MAP_PREFIX
        try:
            while True:
                it = reader.it
                for line in it:
                    # Fast path: most lines are map_doc; no dispatch, no arg list.
                    if line.startswith(prefix):
                        try:
                            doc = loads(line)[1]
                        except Exception:
                            pass  # let the general path report it
                        else:
                            try:
                                pending.append(map_doc(doc))
                            except QueryServerError as exc:
                                if self._error(exc):
                                    return 1
                            if len(pending) >= max_pending:
                                output.flush()
                            continue
                    if not line or line.isspace():
                        continue
                    if self._command(line):
                        return 1
                # `it` is used up. A list function may already have read past
                # it (then reader.it is a newer batch); otherwise read more.
                if reader.it is it and not reader.fill():
                    return 0
        except KeyboardInterrupt:
            return 0
        except BrokenPipeError:
            return 0
        finally:
            try:
                output.flush()
            except OSError:
                pass

    def _command(self, line):
        """Handles one non-fast-path line; True when the process must stop."""
        try:
            cmd = self.loads(line)
        except Exception as exc:
            return self._error(FatalError(
                "query_protocol_error", "invalid JSON input: %s" % describe(exc)))
        if not isinstance(cmd, list) or not cmd or not isinstance(cmd[0], str):
            return self._error(QueryServerError(
                "query_protocol_error", "a command is a JSON array starting with its name"))
        self.line_length = len(line.rstrip(b"\r"))
        handler = self.handlers.get(cmd[0])
        if handler is None:
            # CouchDB's JavaScript server quits here; our state is intact, so we
            # answer the error and keep serving.
            return self._error(QueryServerError(
                "unknown_command", "unknown command '%s'" % cmd[0]))
        try:
            self.respond(handler(*cmd[1:]))
        except QueryServerError as exc:
            return self._error(exc)
        except (KeyboardInterrupt, BrokenPipeError):
            raise
        except (Exception, SystemExit) as exc:
            # Any other exception (user code in a filter or validation, wrong
            # argument counts): name it after its class, like JavaScript's e.name.
            self.respond(["error", type(exc).__name__, describe(exc) + user_line(exc)])
        return False

    def _error(self, exc):
        self.respond(["error", exc.name, exc.reason])
        if isinstance(exc, FatalError):
            self.output.flush()
            return True
        return False
