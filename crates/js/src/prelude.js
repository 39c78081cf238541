// Settee's view-server helpers. Evaluated to a factory function that Rust calls with the
// object `require` paths start from (`{views: {lib: ...}}` for views, the whole design
// document for validate_doc_update) and a module compiler; its results are installed as
// globals. Each call has its own module cache. Nothing here leaks into the global scope.
(function (root, compileModule) {
  "use strict";

  // CouchDB's CommonJS (share/server/util.js), rewritten: paths resolve segment by segment
  // from the design document (`root`) or, for `.` and `..`, from the requiring module's
  // directory; errors are CouchDB's `["error", name, reason]` arrays.
  var cache = Object.create(null);
  var hasOwn = Object.prototype.hasOwnProperty;

  function invalid(reason) {
    throw ["error", "invalid_require_path", reason];
  }

  // `dir` is the node of the requiring module's directory ({current, parent, id}), or
  // undefined at top level.
  function resolve(names, dir) {
    var node = dir;
    for (var i = 0; i < names.length; i++) {
      var n = names[i];
      if (n === "..") {
        if (node === undefined) throw new TypeError("can't access property \"parent\", mod is undefined");
        if (!(node.parent && node.parent.parent)) {
          invalid("Object has no parent " + JSON.stringify(node.current));
        }
        node = { id: node.id.slice(0, node.id.lastIndexOf("/")), parent: node.parent.parent, current: node.parent.current };
        continue;
      }
      if (n === ".") {
        if (node === undefined) throw new TypeError("can't access property \"parent\", mod is undefined");
        if (!node.parent) invalid("Object has no parent " + JSON.stringify(node.current));
        node = { id: node.id, parent: node.parent, current: node.current };
        continue;
      }
      if (i === 0) node = { current: root };
      var next = node.current === null || node.current === undefined ? undefined : node.current[n];
      if (next === undefined) {
        invalid('Object has no property "' + n + '". ' + JSON.stringify(node.current));
      }
      node = { current: next, parent: node, id: node.id ? node.id + "/" + n : n };
    }
    if (typeof node.current !== "string") {
      invalid("Must require a JavaScript string, not: " + typeof node.current);
    }
    return { current: node.current, parent: node.parent, id: node.id, exports: {} };
  }

  function makeRequire(dir) {
    return function require(name) {
      var module = resolve(String(name).split("/"), dir);
      if (!hasOwn.call(cache, module.id)) {
        // A module being loaded is cached as an empty object first, so a circular require
        // gets that object, and a module that failed stays that object.
        cache[module.id] = {};
        try {
          var body = compileModule(module.current, module.id);
          body.call(globalThis, module, module.exports, makeRequire(module.parent));
        } catch (e) {
          // Out-of-memory and stack overflow must reach the host unchanged.
          if (e instanceof InternalError || e instanceof RangeError) throw e;
          throw ["error", "compilation_error", "Module require('" + name + "') raised error " + String(e)];
        }
        cache[module.id] = module.exports;
      }
      return cache[module.id];
    };
  }

  function sum(values) {
    var total = 0;
    for (var i in values) total += values[i];
    return total;
  }

  function isArray(value) {
    return Array.isArray(value);
  }

  return { require: makeRequire(undefined), sum: sum, isArray: isArray };
})
