"""Settee's Python query server (Apache CouchDB 3.x query-server protocol).

Run it as ``settee-query-server`` or ``python3 -m settee_query_server``.
"""

from .errors import FatalError, Forbidden, QueryServerError, Unauthorized

__version__ = "0.1.0"
__all__ = ["Forbidden", "Unauthorized", "QueryServerError", "FatalError", "__version__"]
