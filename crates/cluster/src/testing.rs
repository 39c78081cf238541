//! A real etcd for tests: `n` members of Debian's `etcd` on loopback
//! ports in a temporary directory, each of which can be killed and restarted on its data.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    members: Vec<Member>,
    initial: String,
    _dir: tempfile::TempDir,
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: std::path::PathBuf,
    child: Option<Child>,
}

/// A port free now, below Linux's ephemeral range (32768 and up): a member restarted on
/// its port must find it free, and a port the kernel hands out for outgoing connections
/// (other tests make many) may be taken in between. Each process starts at its own place
/// in 20000–32767 and takes ports in turn, passing over those in use.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_768;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Etcd {
    /// Starts `n` members forming one etcd cluster and waits until each is healthy.
    pub fn start(n: usize) -> Etcd {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("e{i}"),
                client: free_port(),
                peer: free_port(),
                data: dir.path().join(format!("e{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            members,
            initial,
            _dir: dir,
        };
        for i in 0..n {
            etcd.spawn(i);
        }
        for i in 0..n {
            etcd.wait_healthy(i);
        }
        etcd
    }

    /// The client URLs of every member, killed ones included.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect()
    }

    /// The member that leads the etcd cluster now, as the running members report it
    /// (`/v3/maintenance/status`), if one does.
    pub fn leader(&self) -> Option<usize> {
        let status: Vec<Option<serde_json::Value>> = (self.members.iter())
            .map(|m| {
                m.child.as_ref()?;
                let answer = request(m.client, "POST /v3/maintenance/status", "{}")?;
                let body = answer.split_once("\r\n\r\n")?.1;
                serde_json::from_str(body).ok()
            })
            .collect();
        let leader = status.iter().flatten().find_map(|s| s["leader"].as_str())?;
        status.iter().position(|s| {
            s.as_ref()
                .is_some_and(|s| s["header"]["member_id"] == leader)
        })
    }

    /// `kill -9` of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data and waits until it is healthy.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_healthy(i);
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must be installed (Debian's etcd-server; `.ci/run` installs it)");
        self.members[i].child = Some(child);
    }

    fn wait_healthy(&mut self, i: usize) {
        let port = self.members[i].client;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.members[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok())
            {
                assert!(status.is_none(), "etcd member {i} exited: {status:?}");
            }
            if health(port).is_some_and(|b| b.contains("\"health\":\"true\"")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("etcd member {i} is not healthy after 30 s");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// `GET /health` of the member at `port`.
fn health(port: u16) -> Option<String> {
    request(port, "GET /health", "")
}

/// An HTTP/1.0 request (`line`: method and path) of the member at `port`: the whole answer.
fn request(port: u16, line: &str, body: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let head = format!(
        "{line} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
