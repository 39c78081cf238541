"""Content negotiation for shows and lists: ``provides(key, fun)`` and ``registerType``.

A show or list function may call ``provides("html", fun)`` (any number of
times); after it returns, one provider is chosen and called with no
arguments: by the request's ``?format=key`` if given, else by the best match
of the request's Accept header against the registered MIME types, else the
first provider. Its MIME type becomes the response's Content-Type (unless the
function set one).
"""

from .errors import QueryServerError

DEFAULT_TYPES = [
    ("all", "*/*"),
    ("text", "text/plain; charset=utf-8", "txt"),
    ("html", "text/html; charset=utf-8"),
    ("xhtml", "application/xhtml+xml", "xhtml"),
    ("xml", "application/xml", "text/xml", "application/x-xml"),
    ("js", "text/javascript", "application/javascript", "application/x-javascript"),
    ("css", "text/css"),
    ("ics", "text/calendar"),
    ("csv", "text/csv"),
    ("rss", "application/rss+xml"),
    ("atom", "application/atom+xml"),
    ("yaml", "application/x-yaml", "text/yaml"),
    ("multipart_form", "multipart/form-data"),
    ("url_encoded_form", "application/x-www-form-urlencoded"),
    ("json", "application/json", "text/x-json"),
]


def _parse_range(text):
    """('type', 'subtype', {params}, q) of one media range."""
    parts = [p.strip() for p in text.split(";")]
    full = parts[0] or "*"
    if full == "*":
        full = "*/*"
    kind, _, sub = full.partition("/")
    params = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        params[k.strip().lower()] = v.strip()
    try:
        q = float(params.pop("q", "1"))
    except ValueError:
        q = 1.0
    q = q if 0 <= q <= 1 else 1.0
    return kind.strip().lower(), (sub.strip().lower() or "*"), params, q


def best_match(supported, accept):
    """The entry of `supported` that the Accept header `accept` prefers, or None.

    For each supported type the most specific matching range gives its
    quality (exact type +100, exact subtype +10, +1 per matching parameter);
    the highest quality wins, then the most specific, then the earliest.
    """
    ranges = [_parse_range(r) for r in accept.split(",") if r.strip()]
    best, best_key = None, None
    for pos, mime in enumerate(supported):
        kind, sub, params, _ = _parse_range(mime)
        fitness, quality = -1, 0.0
        for rkind, rsub, rparams, q in ranges:
            if rkind not in (kind, "*") or rsub not in (sub, "*"):
                continue
            if any(params.get(k) != v for k, v in rparams.items()):
                continue
            fit = (100 if rkind == kind else 0) + (10 if rsub == sub else 0) + len(rparams)
            if fit > fitness:
                fitness, quality = fit, q
        if fitness < 0 or quality <= 0:
            continue
        key = (quality, fitness, -pos)
        if best_key is None or key > best_key:
            best, best_key = mime, key
    return best


class Mime:
    def __init__(self):
        self.mimes_by_key = {}
        self.key_by_mime = {}
        for entry in DEFAULT_TYPES:
            self.register_type(*entry)
        self.reset()

    def reset(self):
        self.providers = []
        self.content_type = None

    @property
    def used(self):
        return bool(self.providers)

    def register_type(self, key, *mimes):
        self.mimes_by_key[key] = list(mimes)
        for m in mimes:
            self.key_by_mime[m] = key

    def provides(self, key, fun):
        self.providers.append((key, fun))

    def run(self, req):
        """Calls the chosen provider and returns what it returned."""
        req = req if isinstance(req, dict) else {}
        query = req.get("query") or {}
        headers = req.get("headers") or {}
        accept = headers.get("Accept") or headers.get("accept")
        key = None
        if isinstance(query, dict) and query.get("format"):
            key = query["format"]
            mimes = self.mimes_by_key.get(key)
            self.content_type = mimes[0] if mimes else None
        elif accept:
            supported = []
            for k, _ in self.providers:
                supported.extend(self.mimes_by_key.get(k, []))
            self.content_type = best_match(supported, accept)
            key = self.key_by_mime.get(self.content_type)
        else:
            key = self.providers[0][0]
            mimes = self.mimes_by_key.get(key)
            self.content_type = mimes[0] if mimes else None
        for k, fun in self.providers:
            if k == key:
                return fun()
        offered = ", ".join(", ".join(self.mimes_by_key.get(k, [])) or k
                            for k, _ in self.providers)
        raise QueryServerError(
            "not_acceptable",
            "Content-Type %s not supported, try one of: %s" % (accept or key, offered))

    def apply(self, resp):
        """Sets the negotiated Content-Type on `resp` unless it has one."""
        if self.content_type:
            headers = resp.setdefault("headers", {})
            if not any(h.lower() == "content-type" for h in headers):
                headers["Content-Type"] = self.content_type
        return resp
