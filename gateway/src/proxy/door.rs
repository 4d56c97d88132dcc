//! What one circuit's port serves: `/__berth/login?ticket=` (a ticket for a cookie bound to
//! this circuit), the cookie check of a private circuit, and everything else forwarded to
//! the app: HTTP streamed both ways, a WebSocket (or any upgrade) handed through unchanged
//! once the app answered 101, so subprotocols and close codes pass end to end. berth's own
//! cookies never reach the app.
//!
//! A raw TCP app's port relays bytes: each connection straight to the app when the circuit
//! is public; for a private one, after an HTTP upgrade at [`TUNNEL_PATH`] (`Upgrade: tcp`,
//! as Docker's attach speaks it) that carries the circuit's cookie.
//!
//! Bytes are counted on the client's connection, in each direction, as are the connections
//! open; a closed circuit cuts its connections.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{assets, Live, Proxy};
use crate::headers::cookies;

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
}

/// Serves `live` on `listener` until the circuit closes.
pub(super) async fn serve(proxy: Arc<Proxy>, live: Arc<Live>, listener: TcpListener) {
    let stop = live.stop.clone();
    let mut metered = Metered {
        listener,
        live: live.clone(),
    };
    if !live.opened.protocol.is_http() && live.opened.admission.public {
        loop {
            use axum::serve::Listener;
            let (client, _) = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = metered.accept() => accepted,
            };
            tokio::spawn(relay(client, live.upstream));
        }
    }
    let router = Router::new()
        .fallback(pass)
        .with_state(Door { proxy, live });
    let served = axum::serve(
        metered,
        router.into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(stop.cancelled_owned());
    if let Err(e) = served.await {
        tracing::warn!(error = %e, "a circuit's door failed");
    }
}

async fn pass(
    State(door): State<Door>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    mut request: Request,
) -> Response {
    let live = &door.live;
    if request.uri().path() == LOGIN_PATH {
        return login(&door, request.uri().query().unwrap_or_default()).await;
    }
    let cookie_name = live.cookie_name();
    if !live.opened.admission.public && !holds_cookie(&door, request.headers(), &cookie_name).await
    {
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
    forwarded_headers(request.headers_mut(), peer, upgrade);
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
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_side) = client_side {
            let app_side = hyper::upgrade::on(&mut answer);
            tokio::spawn(async move {
                let (Ok(client), Ok(app)) = tokio::join!(client_side, app_side) else {
                    return;
                };
                let (mut client, mut app) = (TokioIo::new(client), TokioIo::new(app));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut app).await;
            });
        }
        return answer.map(|_| Body::empty());
    }
    drop_hop_by_hop(answer.headers_mut());
    answer.map(Body::new)
}

/// Carries a client's bytes to a raw TCP app and back, until either side ends or the
/// circuit closes.
async fn relay<C>(client: C, upstream: SocketAddr)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    match TcpStream::connect(upstream).await {
        Ok(app) => pipe(client, app).await,
        Err(e) => tracing::debug!(error = %e, %upstream, "a raw TCP app does not answer"),
    }
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
    let cookie = format!(
        "{}={secret}; Path=/; HttpOnly; SameSite=Lax",
        live.cookie_name()
    );
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
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

/// Removes every `berth_*` cookie (this circuit's, other circuits', the console's): cookies
/// ignore ports, so a browser sends them all to every app on the host.
fn strip_berth_cookies(headers: &mut HeaderMap) {
    let kept: Vec<String> = cookies(headers)
        .filter(|(k, _)| !k.starts_with("berth_"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, value);
        }
    }
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

fn drop_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

/// The headers an app behind a proxy expects; an upgrade keeps its `Connection` and
/// `Upgrade`, which the app needs to answer 101.
fn forwarded_headers(headers: &mut HeaderMap, peer: SocketAddr, upgrade: bool) {
    let host = headers.get(header::HOST).cloned();
    if !upgrade {
        drop_hop_by_hop(headers);
    }
    if let Ok(value) = HeaderValue::from_str(&peer.ip().to_string()) {
        headers.insert("x-forwarded-for", value);
    }
    headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    if let Some(host) = host {
        headers.insert("x-forwarded-host", host);
    }
}

/// A small page a person reads, with its status.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
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

/// A client's address, as the circuit's listener accepted it.
#[derive(Debug, Clone, Copy)]
struct Peer(SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Metered>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Metered>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// The circuit's listener: refuses clients outside its allowed ranges, and hands axum
/// connections that count their bytes and end when the circuit closes.
struct Metered {
    listener: TcpListener,
    live: Arc<Live>,
}

impl axum::serve::Listener for Metered {
    type Io = MeteredStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was taken: wait
                    // a moment, as axum's own listener does.
                    tracing::debug!(error = %e, "a circuit could not accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if !self.live.opened.admission.admits_address(peer.ip()) {
                tracing::info!(%peer, circuit = %self.live.opened.circuit_id,
                    "a client outside the circuit's allowed addresses was refused");
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.live.connections.fetch_add(1, Ordering::Relaxed);
            let cut = Box::pin(self.live.stop.clone().cancelled_owned());
            let io = MeteredStream {
                inner: stream,
                live: self.live.clone(),
                cut,
            };
            return (io, peer);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// A client's connection: counts what it reads (into the app) and writes (out of it), and
/// fails once the circuit closes, which ends it even mid-WebSocket.
pub(super) struct MeteredStream {
    inner: TcpStream,
    live: Arc<Live>,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl MeteredStream {
    fn closed(&mut self, cx: &mut Context<'_>) -> bool {
        self.cut.as_mut().poll(cx).is_ready()
    }
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        self.live.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

fn aborted<T>() -> Poll<io::Result<T>> {
    Poll::Ready(Err(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the circuit closed",
    )))
}

impl AsyncRead for MeteredStream {
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
        if read > 0 {
            self.live.bytes_in.fetch_add(read as u64, Ordering::Relaxed);
            ::metrics::counter!(crate::metrics::PROXY_BYTES, "direction" => "in")
                .increment(read as u64);
        }
        polled
    }
}

impl AsyncWrite for MeteredStream {
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
            self.live.bytes_out.fetch_add(*n as u64, Ordering::Relaxed);
            ::metrics::counter!(crate::metrics::PROXY_BYTES, "direction" => "out")
                .increment(*n as u64);
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
            self.live.bytes_out.fetch_add(*n as u64, Ordering::Relaxed);
            ::metrics::counter!(crate::metrics::PROXY_BYTES, "direction" => "out")
                .increment(*n as u64);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn berth_cookies_never_reach_the_app() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("berth_app_x=1; _xsrf=abc; berth_console=k; theme=dark"),
        );
        strip_berth_cookies(&mut headers);
        assert_eq!(headers[header::COOKIE], "_xsrf=abc; theme=dark");
        let mut only_ours = HeaderMap::new();
        only_ours.insert(header::COOKIE, HeaderValue::from_static("berth_app_x=1"));
        strip_berth_cookies(&mut only_ours);
        assert!(!only_ours.contains_key(header::COOKIE));
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
