//! A small closed-loop HTTP/1.1 load generator for benchmarks (`bench/render_fns.py`): N
//! threads, each on one keep-alive connection, sending requests built from a template for
//! S seconds and counting responses by status. Lighter on a shared 2-core machine than a
//! Python client, so more of the CPU goes to the server measured.
//!
//! `cargo run --release -p settee --example http_load -- ADDR SECONDS THREADS METHOD PATH [BODY]`
//! where `PATH` may contain `{t}` (thread number) and `{i}` (request number mod 1000), and
//! requests carry `Authorization: Basic admin:admin`. Prints one JSON line.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, seconds, threads, method, path, rest @ ..] = args.as_slice() else {
        eprintln!("usage: http_load ADDR SECONDS THREADS METHOD PATH [BODY]");
        std::process::exit(2);
    };
    let seconds: u64 = seconds.parse().expect("seconds");
    let threads: usize = threads.parse().expect("threads");
    let body = rest.first().cloned().unwrap_or_default();
    let end = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (addr, method, path, body) =
                (addr.clone(), method.clone(), path.clone(), body.clone());
            std::thread::spawn(move || run(&addr, t, &method, &path, &body, end))
        })
        .collect();
    let (mut ok, mut other) = (0u64, 0u64);
    for h in handles {
        let (o, b) = h.join().expect("thread");
        ok += o;
        other += b;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{{\"requests\":{},\"ok\":{ok},\"other\":{other},\"seconds\":{elapsed:.3},\"rate\":{:.0}}}",
        ok + other,
        (ok + other) as f64 / elapsed
    );
}

/// One connection's loop: (2xx responses, others).
fn run(addr: &str, t: usize, method: &str, path: &str, body: &str, end: Instant) -> (u64, u64) {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_nodelay(true).expect("nodelay");
    let (mut ok, mut other) = (0u64, 0u64);
    let mut buf = Vec::with_capacity(1 << 16);
    let mut i = 0usize;
    while Instant::now() < end {
        let p = path
            .replace("{t}", &t.to_string())
            .replace("{i}", &(i % 1000).to_string());
        let req = format!(
            "{method} {p} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWRtaW46YWRtaW4=\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(req.as_bytes()).expect("send");
        let status = read_response(&mut sock, &mut buf);
        if (200..300).contains(&status) {
            ok += 1;
        } else {
            other += 1;
        }
        i += 1;
    }
    (ok, other)
}

/// Reads one response with a `Content-Length` body; its status.
fn read_response(sock: &mut TcpStream, buf: &mut Vec<u8>) -> u16 {
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = sock.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status: u16 = head[9..12].parse().expect("status");
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let total = head_end + 4 + length;
    while buf.len() < total {
        let n = sock.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    buf.drain(..total);
    status
}
