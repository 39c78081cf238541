import json
import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def server_env(codec="auto"):
    env = dict(os.environ, SETTEE_QS_JSON=codec)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Session:
    """One query server subprocess; `call` writes a command and reads its answer."""

    def __init__(self, codec="auto"):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "settee_query_server"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=server_env(codec))
        self.logs = []

    def write(self, cmd):
        self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.proc.stdin.flush()

    def write_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self):
        """The next answer line that is not a log line (logs go to self.logs)."""
        while True:
            line = self.proc.stdout.readline()
            assert line, "server closed its output; stderr: %s" % self.stderr_text()
            answer = json.loads(line)
            if isinstance(answer, list) and answer and answer[0] == "log":
                self.logs.append(answer[1])
                continue
            return answer

    def read_line(self):
        return self.proc.stdout.readline()

    def call(self, *cmd):
        self.write(list(cmd))
        return self.read()

    def stderr_text(self):
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        return self.proc.stderr.read().decode(errors="replace")

    def close(self):
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode


@pytest.fixture
def qs():
    s = Session()
    yield s
    if s.proc.poll() is None:
        s.close()


@pytest.fixture(params=["orjson", "stdlib"])
def any_qs(request):
    if request.param == "orjson":
        pytest.importorskip("orjson")
    s = Session(request.param)
    yield s
    if s.proc.poll() is None:
        s.close()
