// Settee's view-server helpers. Evaluated to a factory function that Rust calls with the
// object `require` paths start from (`{views: {lib: ...}}` for views, the whole design
// document for validate_doc_update) and a module compiler; its results are installed as
// globals. Each call has its own module cache. Nothing here leaks into the global scope.
(function (root, compileModule) {
  "use strict";

  var cache = Object.create(null);
  var hasOwn = Object.prototype.hasOwnProperty;

  function fail(path, why) {
    throw new Error("require('" + path + "') failed: " + why);
  }

  // Normalises `path` to segments from the design document root; `dir` is the segments of
  // the requiring module's directory (null at top level, where only absolute paths work).
  function segmentsOf(path, dir) {
    var parts = String(path).split("/");
    var relative = parts[0] === "." || parts[0] === "..";
    if (relative && dir === null) fail(path, "relative path outside a module");
    var segments = relative ? dir.slice() : [];
    for (var i = 0; i < parts.length; i++) {
      if (parts[i] === ".") continue;
      if (parts[i] !== "..") { segments.push(parts[i]); continue; }
      if (segments.length === 0) fail(path, "path leaves the design document");
      segments.pop();
    }
    return segments;
  }

  function lookup(path, segments) {
    var node = root;
    for (var i = 0; i < segments.length; i++) {
      var here = segments.slice(0, i).join("/") || "the design document";
      if (node === null || typeof node !== "object" || !hasOwn.call(node, segments[i])) {
        fail(path, 'no property "' + segments[i] + '" in ' + here);
      }
      node = node[segments[i]];
    }
    if (typeof node !== "string") fail(path, "must name a JavaScript string, not " + typeof node);
    return node;
  }

  function load(path, segments) {
    var source = lookup(path, segments);
    var id = segments.join("/");
    var module = { id: id, exports: {} };
    cache[id] = module; // a circular require sees the partial exports, as in Node
    try {
      var body = compileModule(source, id);
      body.call(globalThis, module, module.exports, makeRequire(segments.slice(0, -1)));
    } catch (e) {
      delete cache[id];
      // Out-of-memory and stack overflow must reach the host unchanged.
      if (e instanceof InternalError || e instanceof RangeError) throw e;
      throw new Error("require('" + path + "') raised error " + String(e));
    }
    return module;
  }

  function makeRequire(dir) {
    return function require(path) {
      var segments = segmentsOf(path, dir);
      var id = segments.join("/");
      var module = id in cache ? cache[id] : load(path, segments);
      return module.exports;
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

  return { require: makeRequire(null), sum: sum, isArray: isArray };
})
