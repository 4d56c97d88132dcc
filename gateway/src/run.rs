//! How the gateway runs: [`serve`] answers the API on a [`Listener`] and owns the work
//! behind it (the detail cache's subscription, the readiness checks, the app proxy's
//! followers), so nothing it starts outlives it. The listener is bound once, by whoever
//! starts the gateway (a port already taken is an error at start), and lent to each run:
//! when a run ends before the stop (and a supervisor runs it again), the socket is not let
//! go, so the port stays this gateway's and connections made meanwhile wait in its backlog.
//! With a certificate ([`Listener::with_tls`]), every connection is TLS (rustls), its
//! handshake done beside the others so a slow client holds none back.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;
use crate::throttle::Peer;

/// The gateway's bound socket, shared by the runs of [`serve`] (one at a time), and its TLS
/// when it has a certificate.
#[derive(Clone)]
pub struct Listener {
    socket: Arc<Mutex<Option<TcpListener>>>,
    tls: Option<TlsAcceptor>,
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Listener {
        Listener {
            socket: Arc::new(Mutex::new(Some(listener))),
            tls: None,
        }
    }
}

/// How long a client has to finish its TLS handshake before its connection is dropped.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

impl Listener {
    /// Serves HTTPS only, with `tls` ([`crate::tls::server_config`]).
    pub fn with_tls(mut self, tls: Arc<rustls::ServerConfig>) -> Listener {
        self.tls = Some(TlsAcceptor::from(tls));
        self
    }

    /// The socket, for one run that ends with `stop`; an error when another run holds it.
    fn lend(&self, stop: CancellationToken) -> std::io::Result<Lent> {
        let listener = self
            .socket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| std::io::Error::other("the gateway's socket is held by another run"))?;
        Ok(Lent {
            listener: Some(listener),
            home: self.socket.clone(),
            stop,
            tls: self.tls.clone(),
            handshakes: JoinSet::new(),
        })
    }
}

/// The socket as one run holds it. When the run drops it, it goes back to its [`Listener`]
/// for the next run, unless the gateway is stopping: then it is closed, as a listener given
/// to `axum::serve` is, so new connections are refused while the open ones finish.
struct Lent {
    listener: Option<TcpListener>,
    home: Arc<Mutex<Option<TcpListener>>>,
    stop: CancellationToken,
    tls: Option<TlsAcceptor>,
    /// TLS handshakes under way, each on its own task.
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

type Connection = Either<TcpStream, TlsStream<TcpStream>>;

impl axum::serve::Listener for Lent {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        let listener = self.listener.as_mut().expect("held until dropped");
        let Some(tls) = &self.tls else {
            // axum's own accept: a failed accept is logged and retried, never the end.
            let (stream, from) = axum::serve::Listener::accept(listener).await;
            // An answer's small writes (an event of the stream, a chunk) go out at once rather
            // than wait for the last one's acknowledgement (Nagle's algorithm), which a
            // client's delayed acknowledgement turns into tens of milliseconds.
            let _ = stream.set_nodelay(true);
            return (Either::Left(stream), from);
        };
        loop {
            tokio::select! {
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some((stream, from))) = done {
                        return (Either::Right(stream), from);
                    }
                }
                (stream, from) = axum::serve::Listener::accept(listener) => {
                    let _ = stream.set_nodelay(true);
                    let tls = tls.clone();
                    self.handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_WITHIN, tls.accept(stream)).await {
                            Ok(Ok(stream)) => Some((stream, from)),
                            Ok(Err(e)) => {
                                tracing::debug!(%from, error = %e, "a TLS handshake failed");
                                None
                            }
                            Err(_) => None,
                        }
                    });
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener
            .as_ref()
            .expect("held until dropped")
            .local_addr()
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if !self.stop.is_cancelled() {
            *self.home.lock().unwrap_or_else(|e| e.into_inner()) = self.listener.take();
        }
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Lent>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Lent>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// How long connections open at a stop may go on before they are cut.
pub const OPEN_CONNECTIONS_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves the API on `listener` until `stop`, with the work behind it on tasks of its own
/// that end with it.
pub async fn serve(
    listener: Listener,
    state: AppState,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let lent = listener.lend(stop.clone())?;
    // The work behind this run ends on the stop, or when the run ends before it.
    let behind = stop.child_token();
    let mut tasks = JoinSet::new();
    start_behind(&state, &mut tasks, &behind);
    // On the stop, the socket closes (no new connection) and the requests under way finish;
    // connections that stay open past the grace (event streams, followed logs, app
    // circuits) are cut, so a stop is bounded.
    // Each request knows its peer's address: for the rate limits (`crate::throttle`) and for
    // an app circuit routed by host, which admits by it.
    let state = state.stopping_with(stop.clone());
    let app = crate::router(state).into_make_service_with_connect_info::<Peer>();
    let graceful = axum::serve(lent, app).with_graceful_shutdown(stop.clone().cancelled_owned());
    let served = tokio::select! {
        served = std::future::IntoFuture::into_future(graceful) => served,
        _ = async {
            stop.cancelled().await;
            tokio::time::sleep(OPEN_CONNECTIONS_GRACE).await;
        } => {
            tracing::info!(grace = ?OPEN_CONNECTIONS_GRACE, "connections still open at the stop were cut");
            Ok(())
        }
    };
    behind.cancel();
    while tasks.join_next().await.is_some() {}
    served
}

/// Starts on `tasks`, each until `stop`: the detail cache's subscription to session events
/// and the key cache's to account events (with NATS), the serving table and controller (woken
/// by the endpoints' events, with NATS), the readiness checks (when the state asks for them),
/// and the app proxy's idle closer, session follower and activity reports (with a proxy; the
/// last two with NATS).
fn start_behind(state: &AppState, tasks: &mut JoinSet<()>, stop: &CancellationToken) {
    if let Some(client) = &state.nats {
        let subject = state.topology.category_subject("session");
        tasks.spawn(
            state
                .details
                .clone()
                .follow(client.clone(), subject, stop.clone()),
        );
        let accounts = [
            state.topology.category_subject("user"),
            state.topology.category_subject("console"),
        ];
        tasks.spawn(state.keys.clone().follow(
            client.clone(),
            accounts,
            state.agent_bus.keys_forget(),
            stop.clone(),
        ));
    }
    // Every gateway serves the endpoints' URLs; one at a time runs their replicas. Each of
    // the two is woken by the endpoints' events while it has no endpoint to look after.
    let endpoint_hint = |tasks: &mut JoinSet<()>| {
        let client = state.nats.clone()?;
        let hint = Arc::new(Notify::new());
        let subject = state.topology.category_subject(domain::serving::CATEGORY);
        let poke = events::hints::poke_on(client, subject, |_| true, hint.clone(), stop.clone());
        tasks.spawn(async move {
            if let Err(e) = poke.await {
                tracing::warn!(error = %e, "endpoints' events not heard; looking at their safety-net pace");
            }
        });
        Some(hint)
    };
    let (table_hint, controller_hint) = (endpoint_hint(tasks), endpoint_hint(tasks));
    tasks.spawn(
        state
            .serving
            .clone()
            .follow(state.pool.clone(), table_hint, stop.clone()),
    );
    tasks.spawn(crate::serving::controller::run(
        state.pool.clone(),
        controller_hint,
        stop.clone(),
    ));
    if state.watches_readiness {
        let watch = crate::ready::watch(
            state.readiness.clone(),
            state.pool.clone(),
            state.nats.clone(),
            stop.clone(),
        );
        tasks.spawn(watch);
    }
    if let Some(proxy) = &state.proxy {
        let busy = state
            .nats
            .clone()
            .map(|nats| (nats, state.agent_bus.circuits_busy()));
        tasks.spawn(proxy.clone().close_idle(busy, stop.clone()));
        if let Some(nats) = &state.nats {
            let sessions = state.topology.category_subject("session");
            let circuits = state.topology.category_subject("circuit");
            tasks.spawn(proxy.clone().follow_sessions(
                nats.clone(),
                sessions,
                circuits,
                stop.clone(),
            ));
            let activity = state.agent_bus.idle_activity();
            tasks.spawn(
                proxy
                    .clone()
                    .report_activity(nats.clone(), activity, stop.clone()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that ends before the stop gives the socket back to the next run, which accepts
    /// on the same port (a connection made meanwhile waits for it); a run that ends on the
    /// stop closes it, so the port refuses.
    #[tokio::test]
    async fn a_run_hands_the_socket_to_the_next_and_the_stop_closes_it() {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        let listener = Listener::from(socket);
        let stop = CancellationToken::new();

        let first = listener.lend(stop.clone()).unwrap();
        assert!(
            listener.lend(stop.clone()).is_err(),
            "one run at a time holds it"
        );
        drop(first);

        let waiting = TcpStream::connect(address).await.unwrap();
        let mut second = listener.lend(stop.clone()).unwrap();
        let (_, from) = axum::serve::Listener::accept(&mut second).await;
        assert_eq!(from, waiting.local_addr().unwrap());

        stop.cancel();
        drop(second);
        assert!(TcpStream::connect(address).await.is_err(), "closed on stop");
        assert!(listener.lend(stop).is_err());
    }
}
