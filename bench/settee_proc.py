"""What Settee's benchmark scripts share: starting a server on a data directory, and reading
its resource figures from /proc. Standard library only."""
import http.client, os, subprocess, time


def start(binary, data_dir, port):
    """Starts `settee serve` (admin:admin, log level warn); returns the process and the
    seconds until `/_up` answered."""
    proc = subprocess.Popen([binary, "serve", "--data-dir", data_dir, "--bind", f"127.0.0.1:{port}",
                             "--admin", "admin:admin"], stderr=subprocess.DEVNULL,
                            env={**os.environ, "SETTEE_LOG": "warn"})
    started = time.perf_counter()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"settee exited with status {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/_up")
            if c.getresponse().status == 200:
                return proc, time.perf_counter() - started
        except OSError:
            time.sleep(0.01)


def figures(pid):
    """The process's resident memory (MB), open file descriptors and threads."""
    status = open(f"/proc/{pid}/status").read()
    field = lambda name: int(next(l.split()[1] for l in status.splitlines() if l.startswith(name + ":")))
    return {"rss_mb": field("VmRSS") / 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": field("Threads")}
