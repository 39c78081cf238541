// Settee's render environment for show, list and update functions: CouchDB's `Mime`,
// `Mimeparse` and `Render` (share/server/render.js, mimeparse.js), rewritten. Evaluated to a
// factory that Rust calls with `respond(message)` (a list's intermediate answers) and
// `readRow()` (the next view row, or null at the end); it returns the globals functions see
// (`provides`, `registerType`, `start`, `send`, `getRow`) and the three runners Rust calls.
// What the runners return, and what they throw, are the query-server protocol's answers.
(function (respond, readRow, log, loadInfo) {
  "use strict";

  // ---- Content negotiation ----

  var mimesByKey = {};
  var keysByMime = {};

  function registerType(key) {
    var mimes = Array.prototype.slice.call(arguments, 1);
    mimesByKey[key] = mimes;
    mimes.forEach(function (mime) { keysByMime[mime] = key; });
  }

  [
    ["all", "*/*"],
    ["text", "text/plain; charset=utf-8", "txt"],
    ["html", "text/html; charset=utf-8"],
    ["xhtml", "application/xhtml+xml", "xhtml"],
    ["xml", "application/xml", "text/xml", "application/x-xml"],
    ["js", "text/javascript", "application/javascript", "application/x-javascript"],
    ["css", "text/css"],
    ["ics", "text/calendar"],
    ["csv", "text/csv"],
    ["rss", "application/rss+xml"],
    ["atom", "application/atom+xml"],
    ["yaml", "application/x-yaml", "text/yaml"],
    ["multipart_form", "multipart/form-data"],
    ["url_encoded_form", "application/x-www-form-urlencoded"],
    ["json", "application/json", "text/x-json"]
  ].forEach(function (t) { registerType.apply(null, t); });

  function trim(s) {
    return s.replace(/^\s+/, "").replace(/\s+$/, "");
  }

  // "type/subtype; a=b" -> [type, subtype, {a: "b"}]; a bare "*" is "*/*".
  function parseMime(text) {
    var parts = text.split(";"), params = {};
    for (var i = 0; i < parts.length; i++) {
      var kv = parts[i].split("=");
      if (kv.length == 2) params[trim(kv[0])] = trim(kv[1]);
    }
    var full = trim(parts[0]);
    if (full == "*") full = "*/*";
    var halves = full.split("/");
    return [halves[0], halves[1], params];
  }

  // A media range always has a usable q (0..1, else 1).
  function parseRange(text) {
    var parsed = parseMime(text), params = parsed[2];
    if (!params.q) {
      params.q = "1";
    } else {
      var q = parseFloat(params.q);
      if (isNaN(q) || q > 1 || q < 0) params.q = "1";
    }
    return parsed;
  }

  // [fitness, q] of `mime` against the best-fitting range of `ranges`.
  function fitness(mime, ranges) {
    var best = -1, bestQ = 0, target = parseRange(mime);
    ranges.forEach(function (range) {
      var typeOk = range[0] == target[0] || range[0] == "*" || target[0] == "*";
      var subOk = range[1] == target[1] || range[1] == "*" || target[1] == "*";
      if (!(typeOk && subOk)) return;
      var fit = (range[0] == target[0] ? 100 : 0) + (range[1] == target[1] ? 10 : 0);
      for (var p in target[2]) {
        if (p != "q" && range[2][p] && range[2][p] == target[2][p]) fit += 1;
      }
      if (fit > best) {
        best = fit;
        bestQ = range[2].q;
      }
    });
    return [best, parseFloat(bestQ)];
  }

  // The supported type the Accept header likes best, or "" when it likes none. The
  // candidates are ordered as CouchDB orders them: by the default (textual) array sort.
  function bestMatch(supported, accept) {
    var ranges = accept.split(",").map(parseRange);
    var weighted = supported.map(function (mime, i) {
      return [fitness(mime, ranges), i, mime];
    });
    weighted.sort();
    var top = weighted[weighted.length - 1];
    return top[0][1] ? top[2] : "";
  }

  var providers = [];
  var providesUsed = false;
  var responseType = null;

  function provides(type, fun) {
    providesUsed = true;
    providers.push([type, fun]);
  }

  function resetProvides() {
    providesUsed = false;
    providers = [];
    responseType = null;
  }

  function runProvides(req, ddoc) {
    var key = null, chosen, accept = req.headers["Accept"];
    if (req.query && req.query.format) {
      key = req.query.format;
      responseType = mimesByKey[key][0];
    } else if (accept) {
      var supported = [];
      // As CouchDB: the list is reversed in place, so the last provider of a key wins.
      providers.reverse().forEach(function (p) {
        if (mimesByKey[p[0]]) supported = supported.concat(mimesByKey[p[0]]);
      });
      responseType = bestMatch(supported, accept);
      key = keysByMime[responseType];
    } else {
      key = providers[0][0];
      responseType = mimesByKey[key][0];
    }
    if (key) {
      for (var i = 0; i < providers.length && !chosen; i++) {
        if (providers[i][0] == key) chosen = providers[i][1];
      }
    }
    if (chosen) return chosen.call(ddoc);
    var types = providers.map(function (p) {
      return mimesByKey[p[0]].join(", ") || p[0];
    });
    throw ["error", "not_acceptable",
      "Content-Type " + (accept || key) + " not supported, try one of: " + types.join(", ")];
  }

  // ---- Responses and chunks ----

  var chunks = [];
  var startResp = {};
  var newHeader = false;
  var gotRow = false;
  var lastRow = false;

  function resetList() {
    chunks = [];
    startResp = {};
    newHeader = false;
    gotRow = false;
    lastRow = false;
  }

  function start(resp) {
    startResp = resp || {};
    newHeader = true;
  }

  function send(chunk) {
    chunks.push(chunk.toString());
  }

  function withContentType(resp, type) {
    resp.headers = resp.headers || {};
    if (type) resp.headers["Content-Type"] = resp.headers["Content-Type"] || type;
    return resp;
  }

  // The chunks sent so far as a `label` message, with the headers of a pending start().
  function takeChunks(label) {
    var message = newHeader ? [label, chunks, startResp] : [label, chunks];
    newHeader = false;
    chunks = [];
    return message;
  }

  function getRow() {
    if (lastRow) return null;
    if (!gotRow) {
      gotRow = true;
      var head = withContentType(startResp || {}, responseType);
      respond(["start", chunks, head]);
      chunks = [];
      startResp = {};
      newHeader = false;
    } else {
      respond(takeChunks("chunks"));
    }
    var row = readRow();
    if (row === null) {
      lastRow = true;
      return null;
    }
    return row;
  }

  function wrap(resp) {
    return typeof resp == "string" ? { body: resp } : resp;
  }

  function kindOf(value) {
    if (value === null) return "null";
    if (Array.isArray(value)) return "array";
    return typeof value;
  }

  // Errors the dispatch loop reports as they are; anything else is a render_error.
  function renderError(e) {
    if (e instanceof InternalError) throw e;
    if ((e.error && e.reason) || e[0] == "error" || e[0] == "fatal") throw e;
    var message = "function raised error: " + e.toString() + " \nstacktrace: " + e.stack;
    log(message);
    throw ["error", "render_error", message];
  }

  function show(fun, ddoc, doc, req) {
    try {
      resetList();
      resetProvides();
      var resp = wrap(fun.call(ddoc, doc, req) || {});
      if (chunks.length > 0) {
        // CouchDB copies start()'s object member by member into the headers.
        resp.headers = resp.headers || {};
        for (var name in startResp) resp.headers[name] = startResp[name];
        resp.body = chunks.join("") + (resp.body || "");
        resetList();
      }
      if (providesUsed) {
        var provided = wrap(runProvides(req, ddoc) || {});
        resp.body = (resp.body || "") + chunks.join("");
        resp.body += provided.body || "";
        resp = withContentType(resp, responseType);
        resetList();
      }
      var kind = kindOf(resp);
      if (kind != "object" && kind != "string") {
        throw ["error", "render_error", "undefined response from show function"];
      }
      return ["resp", wrap(resp)];
    } catch (e) {
      if (doc === null && req.path.length > 5) {
        throw ["error", "not_found", "document not found"];
      }
      renderError(e);
    }
  }

  function update(fun, ddoc, doc, req) {
    try {
      if (req.method == "GET") {
        throw ["error", "method_not_allowed", "Update functions do not allow GET"];
      }
      var result = fun.call(ddoc, doc, req);
      var resp = result[1];
      var kind = kindOf(resp);
      if (kind != "object" && kind != "string") {
        throw ["error", "render_error", "undefined response from update function"];
      }
      return ["up", result[0], wrap(resp)];
    } catch (e) {
      renderError(e);
    }
  }

  function list(fun, ddoc, head, req) {
    try {
      resetProvides();
      resetList();
      var tail = fun.call(ddoc, head, req);
      if (providesUsed) tail = runProvides(req, ddoc);
      if (!gotRow) getRow();
      if (typeof tail != "undefined") chunks.push(tail);
      return takeChunks("end");
    } catch (e) {
      renderError(e);
    }
  }

  // A rewrite function's answer, as CouchDB's server gives it: `["ok", {path, query,
  // method, headers, body}]` (a string is the path) or `["ok", {code, headers, body}]`,
  // `["no_dispatch_rule"]` for a falsy result, and a thrown `{forbidden}` or
  // `{unauthorized}` object as the answer itself (a refusal).
  function rewrite(fun, ddoc, req) {
    var result;
    try {
      result = fun.call(ddoc, req);
    } catch (e) {
      if (e && typeof e == "object" && !Array.isArray(e) &&
          (e.forbidden !== undefined || e.unauthorized !== undefined)) {
        return e.forbidden !== undefined ? { forbidden: e.forbidden }
                                         : { unauthorized: e.unauthorized };
      }
      renderError(e);
    }
    if (!result) return ["no_dispatch_rule"];
    if (typeof result == "string") result = { path: result };
    return ["ok", result];
  }

  // `req.info`, read from the host the first time a function reads it.
  function deferInfo(req) {
    function settle(value) {
      Object.defineProperty(req, "info", {
        value: value, writable: true, enumerable: true, configurable: true
      });
      return value;
    }
    Object.defineProperty(req, "info", {
      get: function () { return settle(loadInfo()); },
      set: settle,
      enumerable: true,
      configurable: true
    });
  }

  return {
    deferInfo: deferInfo,
    globals: {
      provides: provides,
      registerType: registerType,
      start: start,
      send: send,
      getRow: getRow
    },
    show: show,
    update: update,
    list: list,
    rewrite: rewrite
  };
})
