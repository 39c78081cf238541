//! The accept loop: each connection read through the request head gate (`gate.rs`), served
//! by hyper's HTTP/1 connection with mochiweb's limits rather than hyper's, and drained on
//! shutdown.
//!
//! Not `axum::serve`: that leaves hyper at its defaults, whose 100-header limit and
//! ~400 KB head buffer answer `431` to heads mochiweb takes (up to 999 header lines of up to
//! 8191 bytes each; the gate gives mochiweb's own refusal beyond that).

use crate::gate::GateListener;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use settee_wire::head::{MAX_HEADERS, MAX_HEADER_LINE, MAX_REQUEST_LINE};
use std::future::Future;
use std::pin::pin;
use tokio::sync::watch;
use tower::ServiceExt;

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting, lets every
/// connection finish its exchange in flight, and returns once all have closed.
pub async fn serve(mut listener: GateListener, app: Router, shutdown: impl Future<Output = ()>) {
    let mut http = http1::Builder::new();
    http.max_headers(MAX_HEADERS as usize)
        .max_buf_size(MAX_REQUEST_LINE + MAX_HEADERS as usize * MAX_HEADER_LINE);
    // Every connection holds a receiver; the sender's `closed` tells when all are gone.
    let (stop, stopping) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        // A response written as headers then body must not wait for the client's delayed
        // ACK (a 40 ms stall per streamed response otherwise).
        if let Err(e) = io.tcp().set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
        let app = app.clone();
        // As `into_make_service_with_connect_info`: the peer's address in each request.
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(addr));
            app.clone().oneshot(req)
        });
        let conn = http
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let mut conn = pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::trace!(error = %e, "connection");
                    }
                }
                _ = stopping.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(stopping);
    let _ = stop.send(true);
    stop.closed().await;
}
