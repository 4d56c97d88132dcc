//! What one circuit serves, on its own port of the pool or (the subdomain mode) on the
//! gateway's listener for requests whose `Host` names it: `/__berth/login?ticket=` (a ticket
//! for a cookie bound to this circuit), the cookie check of a private circuit, and everything
//! else forwarded to the app: HTTP streamed both ways, a WebSocket (or any upgrade) handed
//! through unchanged once the app answered 101, so subprotocols and close codes pass end to
//! end. berth's own cookies never reach the app, and an app's answer never sets one of them.
//! With TLS, a circuit's port serves HTTPS with the gateway's certificate.
//!
//! A raw TCP app's port relays bytes: each connection straight to the app when the circuit
//! is public; for a private one, after an HTTP upgrade at [`TUNNEL_PATH`] (`Upgrade: tcp`,
//! as Docker's attach speaks it) that carries the circuit's cookie. A public relay never
//! carries HTTP: cookies ignore ports, so a browser visiting the port would hand the app
//! every cookie of the host. A connection whose first bytes are an HTTP request line (or
//! whose app answers first with an HTTP status line) is closed before a byte of it passes.
//!
//! Bytes are counted on the client's connection, in each direction, as are the connections
//! open (for a request routed by host, its bodies, and the request as a connection while it
//! lasts); a closed circuit cuts its connections.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use cookie::SameSite;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{assets, Live, Proxy};
use crate::headers::{cookies, drop_berth_set_cookies, strip_berth_cookies};

/// The path a ticket is redeemed at, on the circuit's own port.
pub const LOGIN_PATH: &str = "/__berth/login";

/// Where a private raw TCP circuit is entered: an upgrade to [`TUNNEL_PROTOCOL`] with the
/// circuit's cookie, after which the connection carries the app's bytes.
pub const TUNNEL_PATH: &str = "/__berth/tunnel";

/// The protocol a tunnel upgrades to.
pub const TUNNEL_PROTOCOL: &str = "tcp";

/// The terminal's page, served by the gateway at the root of a terminal circuit: ttyd's
/// protocol on `/ws`, drawn by xterm.js; its scripts and styles are the gateway's own,
/// embedded at build time, under `/__berth/`.
const TERMINAL_PAGE: &str = include_str!("terminal.html");

pub(super) type Upstream = Client<HttpConnector, Body>;

pub(super) fn upstream_client() -> Upstream {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

#[derive(Clone)]
struct Door {
    proxy: Arc<Proxy>,
    live: Arc<Live>,
    /// Whether the client's connection is the circuit's own (a port of the pool), metered
    /// as a whole; not for a request the gateway's listener routed by host, which is
    /// metered by its bodies.
    own_connection: bool,
}

/// How long a client has to finish its TLS handshake on a circuit's port.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// Serves `live` on `listener` until the circuit closes: each connection admitted by its
/// address, relayed raw (a public raw TCP circuit) or spoken to as HTTP (over TLS when the
/// gateway has a certificate).
pub(super) async fn serve(proxy: Arc<Proxy>, live: Arc<Live>, listener: TcpListener) {
    let stop = live.stop.clone();
    let raw = !live.opened.protocol.is_http() && live.opened.admission.public;
    let tls = match raw {
        true => None,
        false => proxy
            .config
            .tls
            .clone()
            .map(tokio_rustls::TlsAcceptor::from),
    };
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was taken: wait
                    // a moment, as axum's own listener does.
                    tracing::debug!(error = %e, "a circuit could not accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if !live.opened.admission.admits_address(peer.ip()) {
            tracing::info!(%peer, circuit = %live.opened.circuit_id,
                "a client outside the circuit's allowed addresses was refused");
            continue;
        }
        let _ = stream.set_nodelay(true);
        let client = Metered::new(stream, live.clone());
        if raw {
            tokio::spawn(relay(client, live.upstream));
            continue;
        }
        let door = Door {
            proxy: proxy.clone(),
            live: live.clone(),
            own_connection: true,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(door, peer, client).await,
                Some(tls) => match tokio::time::timeout(HANDSHAKE_WITHIN, tls.accept(client)).await
                {
                    Ok(Ok(client)) => serve_connection(door, peer, client).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "a TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "a TLS handshake took too long"),
                },
            }
        });
    }
}

/// Speaks HTTP/1.1 (with upgrades) on one client's connection to a circuit's port.
async fn serve_connection<T>(door: Door, peer: SocketAddr, io: T)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let door = door.clone();
        async move { Ok::<_, Infallible>(pass(&door, peer, request.map(Body::new)).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    if let Err(e) = served.await {
        tracing::debug!(%peer, error = %e, "a circuit's connection ended");
    }
}

/// A request the gateway's listener took for `live` by its `Host` (the subdomain mode):
/// refused outside the circuit's allowed addresses, counted by its bodies (and as a
/// connection while it and its answer last), then served as on a port of its own.
pub(super) async fn pass_by_host(
    proxy: Arc<Proxy>,
    live: Arc<Live>,
    peer: SocketAddr,
    request: Request,
) -> Response {
    if !live.opened.admission.admits_address(peer.ip()) {
        tracing::info!(%peer, circuit = %live.opened.circuit_id,
            "a client outside the circuit's allowed addresses was refused");
        return page(
            StatusCode::FORBIDDEN,
            "Not from your address",
            "This app is open to some client addresses only, and yours is not one of them.",
        );
    }
    let held = Held::new(live.clone());
    let request = request.map(|b| Body::new(MeteredBody::new(b, live.clone(), true, None)));
    let door = Door {
        proxy,
        live: live.clone(),
        own_connection: false,
    };
    let answer = pass(&door, peer, request).await;
    answer.map(|b| Body::new(MeteredBody::new(b, live, false, Some(held))))
}

async fn pass(door: &Door, peer: SocketAddr, mut request: Request) -> Response {
    let live = &door.live;
    if request.uri().path() == LOGIN_PATH {
        return login(door, request.uri().query().unwrap_or_default()).await;
    }
    let cookie_name = door.proxy.cookies().name(&live.cookie_name());
    if !live.opened.admission.public && !holds_cookie(door, request.headers(), &cookie_name).await {
        return page(
            StatusCode::UNAUTHORIZED,
            "Not signed in to this app",
            "This app is open to its session's owner only. Open it again from berth \
             (berth session app open) to get a new link.",
        );
    }
    let upgrade = is_upgrade(request.headers());
    if !live.opened.protocol.is_http() {
        return tunnel(live, request).await;
    }
    if live.opened.protocol == domain::apps::AppProtocol::Pty && !upgrade {
        match request.uri().path() {
            "/" => {
                return (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-store"),
                    ],
                    TERMINAL_PAGE,
                )
                    .into_response()
            }
            path => {
                if let Some((kind, bytes)) = path
                    .strip_prefix("/__berth/")
                    .and_then(assets::terminal_asset)
                {
                    return ([(header::CONTENT_TYPE, kind)], bytes).into_response();
                }
            }
        }
    }
    strip_berth_cookies(request.headers_mut());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut request));
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let Ok(uri) = format!("http://{}{path}", live.upstream).parse() else {
        return page(
            StatusCode::BAD_REQUEST,
            "Bad request",
            "The path is not valid.",
        );
    };
    *request.uri_mut() = uri;
    let secure = door.proxy.config.tls.is_some();
    forwarded_headers(request.headers_mut(), peer, upgrade, secure);
    if let Some(token) = &live.token {
        if !request.headers().contains_key(header::AUTHORIZATION) {
            if let Ok(value) = HeaderValue::from_str(&format!("token {token}")) {
                request.headers_mut().insert(header::AUTHORIZATION, value);
            }
        }
    }
    let mut answer = match door.proxy.client.request(request).await {
        Ok(answer) => answer,
        Err(_) if live.opened.protocol == domain::apps::AppProtocol::Pty => {
            return page(
                StatusCode::BAD_GATEWAY,
                "The terminal does not answer",
                "The session's agent does not serve its terminal now (it may be starting \
                 again). Reload in a moment.",
            );
        }
        Err(_) => {
            let port = live.opened.container_port;
            return page(
                StatusCode::BAD_GATEWAY,
                "Nothing answers yet",
                &format!(
                    "No server listens on port {port} inside the session yet. Start one \
                     there (for example `python3 -m http.server {port}`) and reload."
                ),
            );
        }
    };
    drop_berth_set_cookies(answer.headers_mut());
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_side) = client_side {
            let app_side = hyper::upgrade::on(&mut answer);
            // A connection routed by host is counted from here on as the circuit's own.
            let metered = (!door.own_connection).then(|| live.clone());
            tokio::spawn(async move {
                let (Ok(client), Ok(app)) = tokio::join!(client_side, app_side) else {
                    return;
                };
                let (client, mut app) = (TokioIo::new(client), TokioIo::new(app));
                let _ = match metered {
                    Some(live) => {
                        let mut client = Metered::new(client, live);
                        tokio::io::copy_bidirectional(&mut client, &mut app).await
                    }
                    None => {
                        let mut client = client;
                        tokio::io::copy_bidirectional(&mut client, &mut app).await
                    }
                };
            });
        }
        return answer.map(|_| Body::empty());
    }
    drop_hop_by_hop(answer.headers_mut());
    answer.map(Body::new)
}

/// Carries a client's bytes to a public raw TCP app and back, until either side ends or the
/// circuit closes; a connection that turns out to speak HTTP either way is closed before any
/// of it passes ([`carry`]).
async fn relay<C>(client: C, upstream: SocketAddr)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let app = match TcpStream::connect(upstream).await {
        Ok(app) => app,
        Err(e) => {
            tracing::debug!(error = %e, %upstream, "a raw TCP app does not answer");
            return;
        }
    };
    let _ = app.set_nodelay(true);
    let (client_reads, client_writes) = tokio::io::split(client);
    let (app_reads, app_writes) = app.into_split();
    let inward = carry(client_reads, app_writes, sniff_request_line);
    let outward = carry(app_reads, client_writes, sniff_status_line);
    tokio::pin!(inward, outward);
    let (mut inward_done, mut outward_done) = (false, false);
    while !(inward_done && outward_done) {
        let carried = tokio::select! {
            carried = &mut inward, if !inward_done => {
                inward_done = true;
                carried
            }
            carried = &mut outward, if !outward_done => {
                outward_done = true;
                carried
            }
        };
        match carried {
            Ok(()) => {}
            Err(Cut::Http) => {
                tracing::info!(%upstream, "HTTP on a public raw TCP circuit: closed, nothing relayed");
                return;
            }
            Err(Cut::Io) => return,
        }
    }
}

/// Why a raw relay stopped before both sides ended.
#[derive(Debug, PartialEq, Eq)]
enum Cut {
    /// One side spoke HTTP.
    Http,
    /// A side failed.
    Io,
}

/// The most bytes held back while they might still begin an HTTP request or status line;
/// a first message longer than this that still might is taken for HTTP.
const SNIFF_LIMIT: usize = 8 * 1024;

/// Carries `from` into `to` until `from` ends, holding the first bytes back until `sniff`
/// tells they are not HTTP: then they and the rest pass; HTTP passes nothing.
async fn carry<R, W>(mut from: R, mut to: W, sniff: fn(&[u8]) -> Sniffed) -> Result<(), Cut>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut buffer = vec![0u8; 4096];
    loop {
        let read = from.read(&mut buffer).await.map_err(|_| Cut::Io)?;
        if read == 0 {
            // Ended before it could be told: whatever came is not passed on.
            let _ = to.shutdown().await;
            return Ok(());
        }
        head.extend_from_slice(&buffer[..read]);
        match sniff(&head) {
            Sniffed::Http => return Err(Cut::Http),
            Sniffed::Undecided if head.len() >= SNIFF_LIMIT => return Err(Cut::Http),
            Sniffed::Undecided => continue,
            Sniffed::Other => break,
        }
    }
    to.write_all(&head).await.map_err(|_| Cut::Io)?;
    tokio::io::copy(&mut from, &mut to)
        .await
        .map_err(|_| Cut::Io)?;
    let _ = to.shutdown().await;
    Ok(())
}

/// What the first bytes of a connection are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sniffed {
    /// An HTTP request line or status line.
    Http,
    /// Anything else.
    Other,
    /// Not known before more bytes come.
    Undecided,
}

/// The longest method an HTTP request line is taken to have.
const METHOD_MAX: usize = 32;

/// Whether `bytes` begin an HTTP request line: a method (token characters), a space, a
/// target (visible characters), a space, `HTTP/`.
pub(super) fn sniff_request_line(bytes: &[u8]) -> Sniffed {
    let method = bytes.iter().take_while(|b| is_token(**b)).count();
    if method > METHOD_MAX {
        return Sniffed::Other;
    }
    let Some(&after) = bytes.get(method) else {
        return Sniffed::Undecided;
    };
    if method == 0 || after != b' ' {
        return Sniffed::Other;
    }
    let rest = &bytes[method + 1..];
    let target = rest
        .iter()
        .take_while(|b| **b > b' ' && **b != 0x7f)
        .count();
    let Some(&after) = rest.get(target) else {
        return Sniffed::Undecided;
    };
    if target == 0 || after != b' ' {
        return Sniffed::Other;
    }
    begins_with(&rest[target + 1..], b"HTTP/")
}

/// Whether `bytes` begin an HTTP status line (`HTTP/`).
pub(super) fn sniff_status_line(bytes: &[u8]) -> Sniffed {
    begins_with(bytes, b"HTTP/")
}

/// Whether `bytes` begin with `prefix` (letters in any case), or might once more come.
fn begins_with(bytes: &[u8], prefix: &[u8]) -> Sniffed {
    let n = bytes.len().min(prefix.len());
    if !bytes[..n].eq_ignore_ascii_case(&prefix[..n]) {
        Sniffed::Other
    } else if n == prefix.len() {
        Sniffed::Http
    } else {
        Sniffed::Undecided
    }
}

/// A token character of HTTP (RFC 9110 `tchar`), what a method is made of.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Carries bytes both ways between a client and a raw TCP app until either side ends.
async fn pipe<C>(mut client: C, mut app: TcpStream)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let _ = app.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut app).await;
}

/// A private raw TCP circuit past its cookie check: an upgrade to a tunnel at
/// [`TUNNEL_PATH`] is answered 101 once the app accepts a connection, and then carries its
/// bytes; anything else is told how to get in.
async fn tunnel(live: &Live, mut request: Request) -> Response {
    let wants_tunnel = request.uri().path() == TUNNEL_PATH
        && is_upgrade(request.headers())
        && request
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case(TUNNEL_PROTOCOL));
    if !wants_tunnel {
        return page(
            StatusCode::UPGRADE_REQUIRED,
            "A raw TCP app",
            &format!(
                "App `{app}` speaks raw TCP, not HTTP. Reach it through a tunnel: \
                 `berth session app tunnel SESSION {app}` listens on your machine and carries \
                 each connection here.",
                app = live.opened.app
            ),
        );
    }
    let app = match TcpStream::connect(live.upstream).await {
        Ok(app) => app,
        Err(_) => {
            return page(
                StatusCode::BAD_GATEWAY,
                "Nothing answers yet",
                &format!(
                    "No server listens on port {} inside the session yet; start app `{}`.",
                    live.opened.container_port, live.opened.app
                ),
            )
        }
    };
    let client_side = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        if let Ok(client) = client_side.await {
            pipe(TokioIo::new(client), app).await;
        }
    });
    (
        StatusCode::SWITCHING_PROTOCOLS,
        [
            (header::CONNECTION, "upgrade"),
            (header::UPGRADE, TUNNEL_PROTOCOL),
        ],
    )
        .into_response()
}

/// Trades a ticket (minted by any gateway) for the circuit's cookie, then sends the browser
/// to the app's root.
async fn login(door: &Door, query: &str) -> Response {
    let ticket = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "ticket")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let live = &door.live;
    let redeemed = door.proxy.redeem(&ticket, live.opened.circuit_id).await;
    if let Err(e) = &redeemed {
        tracing::warn!(error = %e, "a ticket could not be redeemed");
        return unavailable();
    }
    if redeemed.ok() != Some(true) {
        return page(
            StatusCode::UNAUTHORIZED,
            "This link was used already",
            "A link to an app works once, within a minute. Open the app again from berth \
             for a new one.",
        );
    }
    let secret = match door.proxy.issue_cookie(live).await {
        Ok(secret) => secret,
        Err(e) => {
            tracing::warn!(error = %e, "a cookie could not be kept");
            return unavailable();
        }
    };
    // Host-only and `Path=/`: on a circuit's own host (the subdomain mode) it goes to that
    // circuit alone; on a port it goes to every port of the host, where the proxy strips it.
    let cookie = door
        .proxy
        .cookies()
        .set(&live.cookie_name(), &secret, SameSite::Lax, None);
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Whether the request carries a cookie handed out for this circuit (by any gateway).
async fn holds_cookie(door: &Door, headers: &HeaderMap, name: &str) -> bool {
    for (_, value) in cookies(headers).filter(|(k, _)| *k == name) {
        if door.proxy.cookie_valid(&door.live, value).await {
            return true;
        }
    }
    false
}

/// The page for a pass that could not be checked (the database did not answer).
fn unavailable() -> Response {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again in a moment",
        "berth could not check this link now. Reload in a moment.",
    )
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

const HOP_BY_HOP: [header::HeaderName; 6] = [
    header::CONNECTION,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub(crate) fn drop_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

/// The headers an app behind a proxy expects; an upgrade keeps its `Connection` and
/// `Upgrade`, which the app needs to answer 101.
fn forwarded_headers(headers: &mut HeaderMap, peer: SocketAddr, upgrade: bool, secure: bool) {
    let host = headers.get(header::HOST).cloned();
    if !upgrade {
        drop_hop_by_hop(headers);
    }
    if let Ok(value) = HeaderValue::from_str(&peer.ip().to_string()) {
        headers.insert("x-forwarded-for", value);
    }
    let proto = if secure { "https" } else { "http" };
    headers.insert("x-forwarded-proto", HeaderValue::from_static(proto));
    if let Some(host) = host {
        headers.insert("x-forwarded-host", host);
    }
}

/// A small page a person reads, with its status.
pub(super) fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p><p><small>berth app proxy</small></p></body></html>"
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// A client connection of a circuit's while it lasts: counted among the circuit's open
/// connections (which keep it from closing as idle).
struct Held(Arc<Live>);

impl Held {
    fn new(live: Arc<Live>) -> Held {
        live.connections.fetch_add(1, Ordering::Relaxed);
        Held(live)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Live {
    /// Counts `n` bytes from a client into the app (`inward`) or out of it.
    fn count(&self, n: usize, inward: bool) {
        if n == 0 {
            return;
        }
        let (total, direction) = match inward {
            true => (&self.bytes_in, "in"),
            false => (&self.bytes_out, "out"),
        };
        total.fetch_add(n as u64, Ordering::Relaxed);
        ::metrics::counter!(crate::metrics::PROXY_BYTES, "direction" => direction)
            .increment(n as u64);
    }
}

fn closing(live: &Live) -> Pin<Box<WaitForCancellationFutureOwned>> {
    Box::pin(live.stop.clone().cancelled_owned())
}

/// A client's connection: counts what it reads (into the app) and writes (out of it), is
/// one of the circuit's open connections, and fails once the circuit closes, which ends it
/// even mid-WebSocket.
pub(super) struct Metered<T> {
    inner: T,
    held: Held,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<T> Metered<T> {
    fn new(inner: T, live: Arc<Live>) -> Metered<T> {
        Metered {
            inner,
            cut: closing(&live),
            held: Held::new(live),
        }
    }

    fn closed(&mut self, cx: &mut Context<'_>) -> bool {
        self.cut.as_mut().poll(cx).is_ready()
    }
}

fn aborted<T>() -> Poll<io::Result<T>> {
    Poll::Ready(Err(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the circuit closed",
    )))
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.closed(cx) {
            return aborted();
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.held.0.count(read, true);
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.closed(cx) {
            return aborted();
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.held.0.count(*n, false);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.closed(cx) {
            return aborted();
        }
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &polled {
            self.held.0.count(*n, false);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A body of a request routed by host (`inward`) or of its answer: counts its bytes, and
/// fails once the circuit closes; the answer's holds the request as an open connection
/// until it is sent.
struct MeteredBody {
    inner: Body,
    live: Arc<Live>,
    inward: bool,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    _held: Option<Held>,
}

impl MeteredBody {
    fn new(inner: Body, live: Arc<Live>, inward: bool, held: Option<Held>) -> MeteredBody {
        MeteredBody {
            inner,
            cut: closing(&live),
            live,
            inward,
            _held: held,
        }
    }
}

impl HttpBody for MeteredBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.cut.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the circuit closed",
            )))));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.live.count(data.len(), self.inward);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_request_line_is_told_from_other_protocols_first_bytes() {
        use Sniffed::*;
        for http in [
            &b"GET / HTTP/1.1\r\nHost: gw:10201\r\nCookie: berth_console=k\r\n\r\n"[..],
            b"POST /x?y=1 HTTP/1.0\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"get /lower http/1.1\r\n",
            b"OPTIONS * HTTP/",
        ] {
            assert_eq!(
                sniff_request_line(http),
                Http,
                "{}",
                String::from_utf8_lossy(http)
            );
        }
        for other in [
            &b"SSH-2.0-OpenSSH_9.6\r\n"[..],
            b"RFB 003.008\n",
            b"\x16\x03\x01\x02\x00",
            b"\x00\x00",
            b" GET / HTTP/1.1",
            b"GET  / HTTP/1.1",
            b"GET / FTP/1.1",
            b"GET /\r\n",
            b"QUIT\r\n",
        ] {
            assert_eq!(
                sniff_request_line(other),
                Other,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        for begun in [
            &b""[..],
            b"G",
            b"GET",
            b"GET ",
            b"GET /index",
            b"GET / ",
            b"GET / HT",
        ] {
            assert_eq!(
                sniff_request_line(begun),
                Undecided,
                "{}",
                String::from_utf8_lossy(begun)
            );
        }
        let long_method = [b'A'; METHOD_MAX + 1];
        assert_eq!(sniff_request_line(&long_method), Other);
        assert_eq!(sniff_status_line(b"HTTP/1.1 200 OK\r\n"), Http);
        assert_eq!(sniff_status_line(b"HTT"), Undecided);
        assert_eq!(sniff_status_line(b"SSH-2.0-dropbear\r\n"), Other);
    }

    /// The relay's first bytes are held until told: HTTP passes nothing, anything else all.
    #[tokio::test]
    async fn a_relay_passes_nothing_of_http_and_everything_else() {
        let (mut client, proxy_side) = tokio::io::duplex(1024);
        let (app_side, mut app) = tokio::io::duplex(1024);
        client
            .write_all(b"GET / HTTP/1.1\r\nCookie: berth_console=k\r\n\r\n")
            .await
            .unwrap();
        let carried = carry(proxy_side, app_side, sniff_request_line).await;
        assert_eq!(carried, Err(Cut::Http));
        let mut got = Vec::new();
        app.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty(), "the app got {got:?}");

        let (mut client, proxy_side) = tokio::io::duplex(1024);
        let (app_side, mut app) = tokio::io::duplex(1024);
        client.write_all(b"SSH-").await.unwrap();
        client.write_all(b"2.0-client\r\nrest").await.unwrap();
        drop(client);
        carry(proxy_side, app_side, sniff_request_line)
            .await
            .unwrap();
        let mut got = Vec::new();
        app.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"SSH-2.0-client\r\nrest");
    }

    #[test]
    fn an_upgrade_is_told_by_its_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade(&headers));
        headers.remove(header::CONNECTION);
        assert!(!is_upgrade(&headers));
    }
}
