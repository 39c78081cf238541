"""Command-line entry point: ``settee-query-server [--json auto|orjson|stdlib]``."""

import argparse
import os
import sys

from . import __version__
from .codec import get_codec
from .protocol import Server


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="settee-query-server",
        description="Python query server speaking CouchDB's query-server protocol "
                    "on stdin/stdout.")
    parser.add_argument("--json", default=None, choices=["auto", "orjson", "stdlib"],
                        help="JSON codec (default: $SETTEE_QS_JSON or auto)")
    parser.add_argument("--version", action="version", version="%(prog)s " + __version__)
    args = parser.parse_args(argv)
    try:
        codec = get_codec(args.json)
    except ImportError:
        parser.exit(2, "settee-query-server: orjson was asked for but is not installed "
                       "(pip install orjson, or use --json auto)\n")
    except ValueError as exc:  # SETTEE_QS_JSON names no codec
        parser.exit(2, "settee-query-server: %s\n" % exc)

    # Answers go to a private copy of stdout; fd 1 and sys.stdout now point at
    # stderr so a stray print() in user code cannot corrupt the protocol.
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server = Server(0, out_fd, codec)
    status = server.run()
    sys.exit(status)


if __name__ == "__main__":
    main()
