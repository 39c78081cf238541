"""Design documents: ``["ddoc", "new", id, doc]`` and ``["ddoc", id, path, args]``.

Functions are compiled lazily at first use and cached with the design
document (a new version of the document drops the cache). Besides the usual
globals, design-document functions see ``ddoc`` (the design document, what
JavaScript functions reach as ``this``) and a ``require`` resolving paths in it.
"""

from .compiler import Modules, compile_function
from .errors import FatalError, QueryServerError, refusal_dict, refusal_of


class DesignDoc:
    __slots__ = ("id", "doc", "functions", "modules")

    def __init__(self, id, doc, env_factory):
        self.id = id
        self.doc = doc
        self.functions = {}
        self.modules = Modules(doc, env_factory)


class Design:
    def __init__(self, server):
        self.server = server
        self.ddocs = {}
        render = server.render
        self.dispatch = {
            "shows": render.show,
            "lists": render.list,
            "updates": render.update,
            "rewrites": render.rewrite,
            "filters": self.filter,
            "views": self.filter_view,
            "validate_doc_update": self.validate,
        }

    def command(self, *args):
        if not args:
            raise QueryServerError("query_protocol_error", "ddoc needs arguments")
        if args[0] == "new":
            if len(args) < 3 or not isinstance(args[2], dict):
                raise QueryServerError("query_protocol_error", "ddoc new needs an id and a document")
            self.ddocs[args[1]] = DesignDoc(args[1], args[2], self.server.environment)
            return True
        ddoc_id = args[0]
        entry = self.ddocs.get(ddoc_id)
        if entry is None:
            raise FatalError("query_protocol_error", "uncached design doc: %s" % (ddoc_id,))
        if len(args) < 2 or not isinstance(args[1], list) or not args[1]:
            raise QueryServerError("query_protocol_error", "ddoc command needs a function path")
        path = args[1]
        fun_args = args[2] if len(args) > 2 and isinstance(args[2], list) else []
        handler = self.dispatch.get(path[0])
        if handler is None:
            raise FatalError("unknown_command", "unknown ddoc command '%s'" % (path[0],))
        return handler(self.function(entry, path), entry, fun_args)

    def function(self, entry, path):
        key = tuple(path)
        fun = entry.functions.get(key)
        if fun is not None:
            return fun
        point = entry.doc
        for i, part in enumerate(path):
            point = point.get(part) if isinstance(point, dict) else None
            if not point:
                raise QueryServerError(
                    "not_found", "missing %s function %s on design doc %s" % (
                        path[0], path[i], entry.id))
        env = self.server.environment()
        env["ddoc"] = entry.doc
        env["require"] = entry.modules.require_from([])
        fun = compile_function(point, env, "<%s %s>" % (entry.id, ".".join(map(str, path))))
        entry.functions[key] = fun
        return fun

    # -- filters, views as filters, validation ------------------------------

    def filter(self, fun, entry, args):
        docs, req = (list(args) + [[], {}])[:2]
        return [True, [bool(fun(doc, req)) for doc in docs]]

    def filter_view(self, fun, entry, args):
        """A view's map function as a filter: true when it emits anything."""
        docs = args[0] if args else []
        target = self.server.views.target
        fn = fun.fn
        results = []
        for doc in docs:
            out = []
            target[0] = out
            produced = fn(doc)
            if not out and produced is not None:
                for _ in produced:
                    out.append(None)
                    break
            results.append(bool(out))
        return [True, results]

    def validate(self, fun, entry, args):
        try:
            result = fun(*(list(args) + [None] * 4)[:4])
        except FatalError:
            raise
        except QueryServerError:
            raise
        except Exception as exc:
            refusal = refusal_of(exc)
            if refusal is None:
                raise
            return refusal
        # Tolerated: returning {"forbidden": msg} instead of raising it.
        refusal = refusal_dict(result)
        return refusal if refusal is not None else 1
