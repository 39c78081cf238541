"""Turning function source text into Python callables, and `require`.

Accepted source forms (all compiled with `exec` in a fresh namespace):

* one or more top-level statements defining functions: the **last top-level
  function definition** is the function (imports, constants and helper
  functions defined before it are fine). couchpy demanded exactly one
  top-level name; every source it accepts is accepted here.
* a single expression evaluating to a callable, e.g. ``lambda doc: ...``.

Every compiled function gets its own globals (a copy of the server's
environment: emit, log, require, ...) so functions cannot clobber each other.
"""

import ast
import textwrap
import types

from .errors import QueryServerError, describe

CO_VARARGS = 0x04
_EXPR_NAME = "__settee_fun__"


class Compiled:
    """A user function and how many positional arguments it accepts.

    JavaScript functions ignore extra arguments; Python ones raise. So callers
    pass at most `nargs` arguments (e.g. a ``def validate(new, old)`` is called
    with two of the four validate arguments).
    """

    __slots__ = ("fn", "nargs", "source")

    def __init__(self, fn, source):
        self.fn = fn
        self.source = source
        self.nargs = positional_arity(fn)

    def __call__(self, *args):
        nargs = self.nargs
        if nargs < len(args):
            args = args[:nargs]
        return self.fn(*args)


def positional_arity(fn):
    """How many positional arguments `fn` takes (a large number for ``*args``)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        call = getattr(type(fn), "__call__", None)
        code = getattr(call, "__code__", None)
        if code is None:
            return 1 << 16
        bound = 1  # `self` of a callable object
    else:
        bound = 1 if isinstance(fn, types.MethodType) else 0
    if code.co_flags & CO_VARARGS:
        return 1 << 16
    return max(code.co_argcount - bound, 0)


def normalize_source(source):
    """Source text ready for `ast.parse`: no BOM, CRLF or common indentation."""
    if not isinstance(source, str):
        raise QueryServerError(
            "compilation_error",
            "function source must be a string, not %s" % type(source).__name__)
    source = source.lstrip("\ufeff").replace("\r\n", "\n")
    # Design documents often hold sources indented as in the editor they came from.
    return textwrap.dedent(source).strip("\n") + "\n"


def compile_function(source, env, filename="<function>"):
    """Compiles `source` (see the module doc) with globals `env`; returns a `Compiled`.

    Raises QueryServerError("compilation_error", ...) for anything that does not
    yield a callable, including exceptions raised while executing the source.
    """
    text = normalize_source(source)
    try:
        tree = ast.parse(text, filename, "exec")
    except SyntaxError as exc:
        raise QueryServerError("compilation_error", "%s (line %s) in: %s" % (
            describe(exc), exc.lineno, text.rstrip())) from None
    name = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
    if name is None:
        last = tree.body[-1] if tree.body else None
        if not isinstance(last, ast.Expr):
            raise QueryServerError(
                "compilation_error",
                "source must define a function (def fun(doc): ...) or be an "
                "expression giving one (lambda doc: ...): %s" % text.rstrip())
        assign = ast.Assign(targets=[ast.Name(id=_EXPR_NAME, ctx=ast.Store())],
                            value=last.value)
        tree.body[-1] = ast.copy_location(assign, last)
        ast.fix_missing_locations(tree)
        name = _EXPR_NAME
    try:
        exec(compile(tree, filename, "exec"), env)
    except QueryServerError:
        raise
    except Exception as exc:
        raise QueryServerError("compilation_error", "%s while running: %s" % (
            describe(exc), text.rstrip())) from None
    fn = env.get(name)
    if not callable(fn):
        raise QueryServerError(
            "compilation_error", "expression does not give a function: %s" % text.rstrip())
    return Compiled(fn, text)


class LibModule(types.ModuleType):
    """What `require` returns (unless the module replaced ``module.exports``).

    Its attributes are the module's top-level names; ``exports.x = 1`` sets
    one too (``exports`` is the module itself); ``m["x"]`` works like ``m.x``
    for code written in the JavaScript habit.
    """

    def __getitem__(self, key):
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None


class ModuleInfo:
    """The ``module`` global of a required module (CommonJS-like)."""

    def __init__(self, id, exports):
        self.id = id
        self.exports = exports


class Modules:
    """`require` for one root object (a design document, or ``{"views": {"lib": lib}}``).

    A module is a string somewhere under the root holding Python source.
    ``require("views/lib/util")`` resolves from the root; inside a module,
    paths starting with ``./`` or ``../`` resolve from the module's folder.
    Each module runs once per root (cached by id, inserted before it runs so
    circular requires terminate).
    """

    def __init__(self, root, env_factory):
        self.root = root
        self.env_factory = env_factory
        self.cache = {}

    def require_from(self, folder):
        """A `require` function resolving relative paths from `folder` (a list)."""
        def require(name):
            return self.load(name, folder)
        return require

    def resolve(self, name, folder):
        if not isinstance(name, str) or not name:
            raise QueryServerError("invalid_require_path", "require needs a path string")
        parts = name.split("/")
        path = list(folder) if parts[0] in (".", "..") else []
        for part in parts:
            if part == "." or part == "":
                continue
            if part == "..":
                if not path:
                    raise QueryServerError(
                        "invalid_require_path", "path %r goes above the root" % name)
                path.pop()
            else:
                path.append(part)
        point = self.root
        for i, part in enumerate(path):
            if not isinstance(point, dict) or part not in point:
                raise QueryServerError(
                    "invalid_require_path",
                    'Object has no property "%s" (resolving %r at %s)' % (
                        part, name, "/".join(path[:i]) or "the root"))
            point = point[part]
        if not isinstance(point, str):
            raise QueryServerError(
                "invalid_require_path",
                "Must require a Python source string, not %s (%r)" % (
                    type(point).__name__, name))
        return path, point

    def load(self, name, folder=()):
        path, source = self.resolve(name, folder)
        id = "/".join(path)
        cached = self.cache.get(id)
        if cached is not None:
            return cached
        module = LibModule(id)
        info = ModuleInfo(id, module)
        self.cache[id] = module
        env = module.__dict__
        env.update(self.env_factory())
        env["__name__"] = id
        env["exports"] = module
        env["module"] = info
        env["require"] = self.require_from(path[:-1])
        try:
            code = compile(normalize_source(source), "<module %s>" % id, "exec")
            exec(code, env)
        except QueryServerError:
            del self.cache[id]
            raise
        except Exception as exc:
            del self.cache[id]
            raise QueryServerError(
                "compilation_error",
                "Module require('%s') raised error %s" % (name, describe(exc))) from None
        self.cache[id] = info.exports
        return info.exports
