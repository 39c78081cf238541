"""What bench/seed002_builds.py and bench/incremental_query.py share: seedbench
indexing-002's map functions (JavaScript and Python, as seedbench sends them) and a JSON
request helper for a server with admin adm:pass. Standard library only."""
import http.client, base64, json

MAP = """function(doc) {
    if (doc.metadata && doc.metadata.createdAt) {
        var parts = doc.metadata.createdAt.split("-"),
            year = parts[0],
            month = parts[1];
        emit([year, month], doc.score);
    }
}"""
MAP_PY = """def map(doc):
    if 'metadata' in doc and 'createdAt' in doc['metadata']:
        created_at = doc['metadata']['createdAt']
        year, month, _ = created_at.split('-')
        yield [year, month], doc['score']
"""


def connect(port):
    """A `req(method, path, body=None) -> (status, bytes)` on one kept-alive connection."""
    auth = "Basic " + base64.b64encode(b"adm:pass").decode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def req(m, p, b=None):
        c.request(m, p, json.dumps(b) if b is not None else None,
                  {"Authorization": auth, "Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    return req
