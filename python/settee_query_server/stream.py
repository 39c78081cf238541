"""Line input and batched output on raw file descriptors.

The flushing rule is the point of this module: answers are buffered and
written only (a) right before the reader would block waiting for input, or
(b) when many answers are pending. A pipelined client therefore gets its
answers in large writes, while a client doing one request/answer exchange at
a time never waits: whenever we are about to block we have flushed.
"""

import os

# How much to ask the kernel for at once (a pipe holds 64 KiB by default).
READ_SIZE = 1 << 18
# Answers kept before writing even though more input is waiting.
MAX_PENDING = 1024


class Output:
    """Collects answers (bytes without newline) and writes them in batches."""

    def __init__(self, fd, max_pending=MAX_PENDING):
        self.fd = fd
        self.max_pending = max_pending
        self.pending = []

    def write(self, data):
        pending = self.pending
        pending.append(data)
        if len(pending) >= self.max_pending:
            self.flush()

    def flush(self):
        pending = self.pending
        if not pending:
            return
        pending.append(b"")  # so the join ends with a newline
        data = memoryview(b"\n".join(pending))
        pending.clear()
        fd = self.fd
        while data:
            written = os.write(fd, data)
            data = data[written:]


class LineReader:
    """Reads ``\\n``-terminated lines from `fd`; calls `before_block` before any read.

    `readline` returns a line without its newline, or None at end of input (a
    final unterminated line is still returned).
    """

    def __init__(self, fd, before_block, read_size=READ_SIZE):
        self.fd = fd
        self.before_block = before_block
        self.read_size = read_size
        self.lines = []
        self.pos = 0
        self.rest = b""
        self.eof = False

    def readline(self):
        pos = self.pos
        lines = self.lines
        if pos < len(lines):
            self.pos = pos + 1
            return lines[pos]
        return self._fill()

    def _fill(self):
        if self.eof:
            return None
        # About to (possibly) block: everything answered so far must be out.
        self.before_block()
        pieces = [self.rest] if self.rest else []
        read, fd, size = os.read, self.fd, self.read_size
        while True:
            chunk = read(fd, size)
            if not chunk:
                self.eof = True
                last = b"".join(pieces)
                self.rest = b""
                self.lines, self.pos = [], 0
                return last if last.strip() else None
            pieces.append(chunk)
            if b"\n" in chunk:
                break
        lines = b"".join(pieces).split(b"\n")
        self.rest = lines.pop()
        self.lines = lines
        self.pos = 1
        return lines[0]
