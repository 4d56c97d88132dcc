//! A call of an endpoint's URL: the token checked when the endpoint is not public, then sent
//! to the healthy replica with the fewest requests outstanding (the first of equals after the
//! last one chosen, so equals take turns).
//!
//! The connection to the replica is made, or taken from those kept open, *before* the request
//! is given to it: a replica that refuses the connection (its container just died) is passed
//! over for a while and the request, whose body is still unread, goes to the next, whatever
//! its method. Only a request already sent to a replica that then fails is lost (answered
//! 502): that one was in flight there. Bodies are never collected: request and answer stream
//! through as their frames come, so a model's server-sent events or chunked tokens reach the
//! caller one by one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as _, Frame, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use uuid::Uuid;

use super::{Served, Serving, Upstream};
use crate::error::ApiError;

/// How long connecting to a replica may take before it is passed over.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);

/// Idle connections kept per replica at most.
const IDLE_PER_REPLICA: usize = 64;

/// Connections to replicas kept open between requests, by address.
#[derive(Default)]
pub struct Connections {
    idle: Mutex<HashMap<SocketAddr, Vec<SendRequest<Body>>>>,
    /// Which replica the last choice among equals fell on.
    turn: AtomicUsize,
}

impl Connections {
    /// An open connection to `address` ready for a request: one kept, else a new one.
    async fn take(&self, address: SocketAddr) -> std::io::Result<SendRequest<Body>> {
        loop {
            let kept = {
                let mut idle = super::lock(&self.idle);
                let list = idle.entry(address).or_default();
                list.retain(|s| !s.is_closed());
                let ready = list.iter().position(|s| s.is_ready());
                ready.map(|i| list.swap_remove(i))
            };
            match kept {
                Some(mut sender) => {
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                None => break,
            }
        }
        let stream = tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(address))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Forgets the kept connections to replicas not among `serving` (gone from every
    /// endpoint).
    pub(super) fn keep_only(&self, serving: &std::collections::HashSet<SocketAddr>) {
        super::lock(&self.idle).retain(|address, _| serving.contains(address));
    }

    /// Keeps `sender` for the next request to `address`, unless its connection closed.
    fn give_back(&self, address: SocketAddr, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = super::lock(&self.idle);
        let list = idle.entry(address).or_default();
        if list.len() < IDLE_PER_REPLICA {
            list.push(sender);
        }
    }
}

/// The healthy replicas of `served` in the order to try them: fewest outstanding first,
/// equals taking turns; those that refused a connection lately last.
fn order(serving: &Serving, served: &Served) -> Vec<Arc<Upstream>> {
    let start = serving.connections.turn.fetch_add(1, Ordering::Relaxed);
    let n = served.upstreams.len();
    let mut ordered: Vec<(bool, usize, usize, Arc<Upstream>)> = served
        .upstreams
        .iter()
        .enumerate()
        .map(|(i, u)| {
            (
                serving.passed_over(u.address),
                u.outstanding.load(Ordering::Relaxed),
                (i + n - start % n.max(1)) % n.max(1),
                u.clone(),
            )
        })
        .collect();
    ordered.sort_by_key(|(refused, outstanding, turn, _)| (*refused, *outstanding, *turn));
    ordered.into_iter().map(|(_, _, _, u)| u).collect()
}

/// Counts a request outstanding on a replica while it lives.
struct Outstanding(Arc<AtomicUsize>);

impl Outstanding {
    fn on(upstream: &Upstream) -> Outstanding {
        upstream.outstanding.fetch_add(1, Ordering::Relaxed);
        Outstanding(upstream.outstanding.clone())
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The bearer token of a request, if it has one.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn refused(status: StatusCode, code: &'static str, message: impl Into<String>) -> Response {
    ApiError::new(status, code, message).into_response()
}

/// An answer's body as it streams from a replica: when it ends, the connection is kept for
/// the next request; until then (or until the caller goes), the request is outstanding.
struct Answer {
    inner: hyper::body::Incoming,
    keep: Option<(Arc<Serving>, SocketAddr, SendRequest<Body>)>,
    _counted: Outstanding,
}

impl Answer {
    fn end(&mut self) {
        if let Some((serving, address, sender)) = self.keep.take() {
            serving.connections.give_back(address, sender);
        }
    }
}

impl Drop for Answer {
    /// A body read to its end gives its connection back even if nobody polled past it.
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.end();
        }
    }
}

impl hyper::body::Body for Answer {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        // The server stops polling a body that says it has ended, so the connection goes
        // back as soon as the last frame is read, not at a poll that may never come.
        if matches!(polled, Poll::Ready(None)) || this.inner.is_end_stream() {
            this.end();
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

/// Serves a call of endpoint `endpoint`'s URL whose path within it is `rest`.
pub async fn forward(
    serving: &Arc<Serving>,
    pool: &deadpool_postgres::Pool,
    endpoint: Uuid,
    rest: &str,
    mut request: Request,
) -> Response {
    let Some(served) = serving.served(endpoint) else {
        return refused(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no endpoint {endpoint}"),
        );
    };
    if !served.open_to_public {
        let admitted = match bearer(&request) {
            Some(token) => serving.token_admits(pool, endpoint, token).await,
            None => Ok(false),
        };
        match admitted {
            Ok(true) => {
                request.headers_mut().remove(header::AUTHORIZATION);
            }
            Ok(false) => {
                let mut answer = refused(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "this endpoint needs a token of its owner's: `Authorization: Bearer <token>` \
                     (`berth service token`)",
                );
                answer.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"berth\""),
                );
                return answer;
            }
            Err(e) => return e.into_response(),
        }
    }
    let started = tokio::time::Instant::now();
    served.requests.fetch_add(1, Ordering::Relaxed);
    let served = match served.upstreams.is_empty() {
        true => waited(serving, pool, served).await,
        false => served,
    };
    let answer = send(serving, &served, rest, request).await;
    let outcome = match answer.status() {
        s if s.is_server_error() => "5xx",
        s if s.is_client_error() => "4xx",
        _ => "ok",
    };
    metrics::counter!(crate::metrics::SERVING_REQUESTS, "endpoint" => served.name.clone(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(crate::metrics::SERVING_DURATION, "endpoint" => served.name.clone())
        .record(started.elapsed().as_secs_f64());
    answer
}

/// How long a call waits for a replica of an endpoint that has none serving yet (one scaled
/// to zero, which the call wakes, or one whose replicas are starting).
pub const WAKE_WITHIN: Duration = Duration::from_secs(60);

/// `served` once a replica of it serves: a call of an endpoint scaled to zero by its
/// autoscaling wakes it (`EndpointScaled`, `domain::serving::wake`), and a call of one whose
/// replicas are starting waits for them, at most [`WAKE_WITHIN`]. One degraded or stopped by
/// its owner is answered at once.
async fn waited(
    serving: &Arc<Serving>,
    pool: &deadpool_postgres::Pool,
    served: Arc<Served>,
) -> Arc<Served> {
    // A wake refused because the endpoint's stream moved meanwhile (another call woke it, or
    // its autoscaling wrote) is decided again on the endpoint as it is now: a lost race must
    // not leave it asleep.
    let mut tries = 0;
    loop {
        let Ok(Some(endpoint)) = super::one(pool, served.endpoint_id).await else {
            return served;
        };
        let Some(woken) = domain::serving::wake(&endpoint) else {
            if endpoint.replicas == 0 || endpoint.degraded().is_some() {
                return served;
            }
            break;
        };
        let event = domain::catalogue::Event::EndpointScaled(woken);
        match super::record(pool, &endpoint, vec![event], "serving").await {
            Ok(_) => break,
            Err(e) if tries < 5 => {
                tries += 1;
                tracing::debug!(error = %e.message, "a call's wake was refused; deciding again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "a call did not wake its endpoint");
                break;
            }
        }
    }
    let deadline = tokio::time::Instant::now() + WAKE_WITHIN;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match serving.served(served.endpoint_id) {
            Some(now) if !now.upstreams.is_empty() => return now,
            Some(_) => {}
            None => break,
        }
    }
    served
}

async fn send(serving: &Arc<Serving>, served: &Served, rest: &str, request: Request) -> Response {
    let candidates = order(serving, served);
    if candidates.is_empty() {
        let mut answer = refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_replica",
            format!(
                "endpoint `{}` has no healthy replica yet; try again shortly",
                served.name
            ),
        );
        answer
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return answer;
    }
    let (mut parts, body) = request.into_parts();
    let path_and_query = match parts.uri.query() {
        Some(query) => format!("/{rest}?{query}"),
        None => format!("/{rest}"),
    };
    parts.uri = match Uri::builder().path_and_query(path_and_query).build() {
        Ok(uri) => uri,
        Err(_) => return refused(StatusCode::BAD_REQUEST, "invalid", "a path that is no URI"),
    };
    crate::proxy::drop_hop_by_hop(&mut parts.headers);
    parts.version = axum::http::Version::HTTP_11;
    for upstream in candidates {
        let mut sender = match serving.connections.take(upstream.address).await {
            Ok(sender) => sender,
            Err(e) => {
                tracing::debug!(replica = %upstream.session_id, error = %e, "a replica refused a connection");
                serving.refused(upstream.address);
                continue;
            }
        };
        let mut parts = parts.clone();
        if let Ok(host) = HeaderValue::from_str(&upstream.address.to_string()) {
            parts.headers.insert(header::HOST, host);
        }
        let counted = Outstanding::on(&upstream);
        let request = Request::from_parts(parts, body);
        let answer = match sender.send_request(request).await {
            Ok(answer) => answer,
            Err(e) => {
                // Sent, and lost there: it was in flight on this replica.
                tracing::debug!(replica = %upstream.session_id, error = %e, "a replica failed a request");
                serving.refused(upstream.address);
                return refused(
                    StatusCode::BAD_GATEWAY,
                    "replica_failed",
                    format!("the replica serving this request failed: {e}"),
                );
            }
        };
        let (mut head, incoming) = answer.into_parts();
        crate::proxy::drop_hop_by_hop(&mut head.headers);
        let mut answer = Answer {
            inner: incoming,
            keep: Some((serving.clone(), upstream.address, sender)),
            _counted: counted,
        };
        if answer.inner.is_end_stream() {
            answer.end();
        }
        return Response::from_parts(head, Body::new(answer));
    }
    refused(
        StatusCode::BAD_GATEWAY,
        "no_replica",
        format!(
            "no replica of endpoint `{}` accepted a connection",
            served.name
        ),
    )
}
