//! The listener hyper is served from: every accepted connection is read through the
//! request head gate ([`settee_wire::head::Gate`]), so request targets CouchDB takes reach
//! the router instead of hyper's bare 400, and mochiweb's line-limit refusals are given
//! as CouchDB gives them.
//!
//! A refusal must follow the answers to the requests before it. hyper reads ahead while it
//! answers (to notice a closed connection), but only into an empty read buffer, and
//! parses a new head only once the previous exchange is over. So with a refusal the
//! adapter hands hyper the bytes before the refused line and one byte of a request line
//! ([`PLACEHOLDER`]): hyper's buffer is never empty again, and the next time it asks for
//! bytes it is idle, parsing that head. Then the refusal is written, the socket shut, and
//! hyper sees the end of the connection (an incomplete head, which it does not answer).

use settee_wire::head::{Gate, Refusal};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A TCP listener whose connections are [`Gated`].
pub struct GateListener(pub TcpListener);

impl axum::serve::Listener for GateListener {
    type Io = Gated;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Gated, SocketAddr) {
        let (tcp, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (Gated::new(tcp), addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A client connection as hyper reads it: the client's bytes through the gate. Writes go
/// to the socket unchanged.
pub struct Gated {
    tcp: TcpStream,
    gate: Gate,
    /// Gate output not yet handed to hyper (`out[at..]`).
    out: Vec<u8>,
    at: usize,
    state: State,
}

enum State {
    Open,
    /// The client closed its side (or the socket failed): hyper sees the end.
    Ended,
    /// A refusal's bytes still to write (`bytes[written..]`), then the socket is shut.
    Refusing {
        bytes: Vec<u8>,
        written: usize,
    },
    /// The refusal was written and the socket shut: hyper sees the end.
    Refused,
}

/// What hyper gets of a refused line: the start of a method, so that it waits for more.
const PLACEHOLDER: u8 = b'G';

/// Bytes read from the socket at a time.
const READ_SIZE: usize = 16 * 1024;

impl Gated {
    fn new(tcp: TcpStream) -> Gated {
        Gated {
            tcp,
            gate: Gate::new(),
            out: Vec::new(),
            at: 0,
            state: State::Open,
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Writes a refusal's bytes and shuts the socket's sending side.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let State::Refusing { bytes, written } = &mut self.state {
            if *written < bytes.len() {
                match ready!(Pin::new(&mut self.tcp).poll_write(cx, &bytes[*written..])) {
                    Ok(n) if n > 0 => *written += n,
                    _ => self.state = State::Refused,
                }
            } else {
                let _ = ready!(Pin::new(&mut self.tcp).poll_shutdown(cx));
                self.state = State::Refused;
            }
        }
        Poll::Ready(())
    }
}

fn refusal_bytes(refusal: Refusal) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    refusal.response(&settee_core::dates::rfc1123(now))
}

impl AsyncRead for Gated {
    /// Hands hyper the gate's output; reads the socket only when all of it was taken. A
    /// refusal is written when hyper asks for more after the placeholder (see the module
    /// docs), then hyper sees the end of the connection.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.at);
                buf.put_slice(&this.out[this.at..this.at + n]);
                this.at += n;
                return Poll::Ready(Ok(()));
            }
            this.out.clear();
            this.at = 0;
            match this.state {
                State::Ended | State::Refused => return Poll::Ready(Ok(())),
                State::Refusing { .. } => {
                    ready!(this.poll_refuse(cx));
                    return Poll::Ready(Ok(()));
                }
                State::Open => {}
            }
            let mut raw = [0u8; READ_SIZE];
            let mut read = ReadBuf::new(&mut raw);
            if let Err(e) = ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut read)) {
                this.state = State::Ended;
                return Poll::Ready(Err(e));
            }
            if read.filled().is_empty() {
                this.state = State::Ended;
                return Poll::Ready(Ok(()));
            }
            if let Some(refusal) = this.gate.feed(read.filled(), &mut this.out) {
                this.out.push(PLACEHOLDER);
                this.state = State::Refusing {
                    bytes: refusal_bytes(refusal),
                    written: 0,
                };
            }
        }
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
