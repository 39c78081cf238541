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
    """Reads ``\n``-terminated lines from `fd`; calls `before_block` before any read.

    `it` is an iterator over the lines read so far and not yet taken; the main
    loop iterates it directly (no call per line) and nested readers (a list
    function's get_row) take from the same iterator with `readline`, so both
    see one sequence. `fill` replaces `it` with the next batch of lines.
    """

    def __init__(self, fd, before_block, read_size=READ_SIZE):
        self.fd = fd
        self.before_block = before_block
        self.read_size = read_size
        self.it = iter(())
        self.rest = b""
        self.eof = False

    def readline(self):
        """The next line without its newline, or None at end of input."""
        line = next(self.it, None)
        while line is None:
            if not self.fill():
                return None
            line = next(self.it, None)
        return line

    def fill(self):
        """Reads the next batch of lines into `it`; False at end of input."""
        if self.eof:
            return False
        # About to (possibly) block: everything answered so far must be out.
        self.before_block()
        pieces = [self.rest] if self.rest else []
        read, fd, size = os.read, self.fd, self.read_size
        while True:
            chunk = read(fd, size)
            if not chunk:
                # A final line without newline still counts.
                self.eof = True
                last = b"".join(pieces)
                self.rest = b""
                if not last.strip():
                    return False
                self.it = iter((last,))
                return True
            pieces.append(chunk)
            if b"\n" in chunk:
                break
        lines = b"".join(pieces).split(b"\n")
        self.rest = lines.pop()
        self.it = iter(lines)
        return True
