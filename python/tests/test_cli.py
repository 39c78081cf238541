"""The command line: --json, --version, exit statuses."""

import subprocess
import sys

from conftest import server_env


def run(args, payload=b"", env=None):
    return subprocess.run([sys.executable, "-m", "settee_query_server"] + args, input=payload,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env or server_env(), timeout=30)


def test_json_flag_overrides_environment():
    payload = b'["add_fun","def f(doc):\\n    yield 1, toJSON({\'a\': [1]})"]\n["map_doc",{}]\n'
    for flag in ("stdlib", "auto"):
        done = run(["--json", flag], payload, env=server_env("orjson"))
        assert done.returncode == 0
        assert done.stdout == b'true\n[[[1,"{\\"a\\":[1]}"]]]\n'


def test_version_and_bad_flag():
    done = run(["--version"])
    assert done.returncode == 0 and b"settee-query-server" in done.stdout
    assert run(["--json", "yaml"]).returncode == 2


def test_bad_codec_in_environment_is_reported():
    done = run([], b'["reset"]\n', env=server_env("yaml"))
    assert done.returncode == 2
    assert b"unknown JSON codec" in done.stderr and b"Traceback" not in done.stderr
