//! The agent's side of the bus. [`Link::ask`] sends a request to the recorder and waits for
//! the answer, asking again with capped, jittered backoff while nobody answers or the
//! control plane says it is unavailable, so an outage is a pause. [`Link::report`] first
//! keeps the report in an on-disk outbox (one file per report, synced before it is sent)
//! and removes it once recorded: an agent killed meanwhile sends it again, with the same id,
//! when it starts ([`Link::drain_outbox`]), and the recorder records it once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer};
use async_nats::{Client, RequestErrorKind};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::protocol::{Answer, Fact, LogChunk, Report, Request, UsageSample};
use crate::subjects::Subjects;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the agent is stopping")]
    Stopped,
    #[error("outbox `{path}`: {error}")]
    Outbox {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("NATS: {0}")]
    Bus(String),
}

/// TLS to NATS: a `tls://` URL, or any URL when a CA or a client certificate is given,
/// is encrypted; the server's certificate checked against `ca` (the system's roots when
/// none), and `cert` and `key` presented when the server asks for a client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// A PEM file of the CA that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// The client's certificate and key (PEM), both or neither.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl NatsTls {
    /// Whether any TLS setting is given: the connection is then TLS whatever the URL says.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// `options` with these settings.
    pub fn apply(
        &self,
        options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, LinkError> {
        let mut options = options;
        if let Some(ca) = &self.ca {
            options = options.add_root_certificates(ca.clone());
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                options = options.add_client_certificate(cert.clone(), key.clone());
            }
            (None, None) => {}
            _ => return Err(LinkError::Bus(
                "a NATS client certificate and its key go together: one is set without the other"
                    .into(),
            )),
        }
        Ok(if self.is_set() {
            options.require_tls(true)
        } else {
            options
        })
    }
}

/// Whether connections to NATS at `url` with `tls` would be plain and leave this host: berth
/// says so once at start. Pure.
pub fn plain_off_host(url: &str, tls: &NatsTls) -> bool {
    let Ok(address) = parse_address(url) else {
        return false;
    };
    let host = address.host().trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !address.tls_required() && !tls.is_set() && !loopback
}

/// Connects agent `agent_id` to NATS at `url`, with its credential (the nkey seed it got at
/// admission) when it has one, or else as the user the URL names (tests and benches run
/// agents as the control plane's user); replies on an inbox of its own (the only one it may
/// read), and waits for the server when it is not up yet, or does not know the credential
/// yet (an admission reaches the server's authorization moments after it is recorded).
pub async fn connect(url: &str, agent_id: &str, seed: Option<String>) -> Result<Client, LinkError> {
    Ok(connect_watched(url, agent_id, seed, &NatsTls::default())
        .await?
        .0)
}

/// How long NATS may refuse an agent's credential before the refusal is the answer: an
/// admission reaches the server's authorization moments after it is recorded, so a refusal at
/// first is a wait; one that lasts is a credential never admitted, or revoked.
pub const REFUSED_AT_MOST: Duration = Duration::from_secs(30);

/// Whether the server refuses a connection's credential, and since when, as the client's
/// events tell it: an authorization violation (at a login, or on a connection the server cuts
/// when its authorization no longer lets it in) starts a refusal; a connection ends it.
#[derive(Clone, Debug, Default)]
pub struct Refusal(std::sync::Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

impl Refusal {
    fn note(&self, event: &async_nats::Event) {
        use async_nats::{ClientError, Event, ServerError};
        let refused = match event {
            Event::Connected => false,
            Event::ServerError(ServerError::AuthorizationViolation) => true,
            // A reconnection the server refused: the client says so only in words.
            Event::ClientError(ClientError::Other(why)) => {
                why.contains("authorization violation") || why.contains("signing nonce")
            }
            _ => return,
        };
        let mut since = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if refused {
            since.get_or_insert_with(tokio::time::Instant::now);
        } else {
            *since = None;
        }
    }

    /// How long the credential has been refused without a connection in between.
    pub fn refused_for(&self) -> Option<Duration> {
        let since = self.0.lock().unwrap_or_else(|e| e.into_inner());
        since.map(|s| s.elapsed())
    }

    /// Returns once the credential has been refused for `at_most` without a break.
    pub async fn lasting(&self, at_most: Duration) {
        loop {
            match self.refused_for() {
                Some(for_) if for_ >= at_most => return,
                Some(for_) => tokio::time::sleep(at_most - for_).await,
                None => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}

/// [`connect`], and the [`Refusal`] that tells whether the server goes on refusing the
/// credential (an agent ends, saying so, rather than trying for ever).
pub async fn connect_watched(
    url: &str,
    agent_id: &str,
    seed: Option<String>,
    tls: &NatsTls,
) -> Result<(Client, Refusal), LinkError> {
    let refusal = Refusal::default();
    let (options, address) = match seed {
        Some(seed) => (
            tls.apply(async_nats::ConnectOptions::with_nkey(seed))?,
            parse_address(url)?,
        ),
        None => connect_options(url, tls)?,
    };
    let server = format!("{}:{}", address.host(), address.port());
    let noted = refusal.clone();
    let client = options
        .custom_inbox_prefix(crate::permissions::inbox_prefix(agent_id))
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            noted.note(&event);
            async {}
        })
        .connect(address)
        .await
        .map_err(|e| LinkError::Bus(format!("connect to NATS at {server}: {e}")))?;
    Ok((client, refusal))
}

/// The options to connect to NATS at `url` as the user and password the URL names
/// (`nats://control:secret@host:4222`), which the client does not read from a URL itself, and
/// the address to connect to, with `tls`.
pub fn connect_options(
    url: &str,
    tls: &NatsTls,
) -> Result<(async_nats::ConnectOptions, async_nats::ServerAddr), LinkError> {
    let address = parse_address(url)?;
    let options = match (address.username(), address.password()) {
        (Some(user), Some(password)) => {
            async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        }
        _ => async_nats::ConnectOptions::new(),
    };
    Ok((tls.apply(options)?, address))
}

/// Connects to NATS at `url` as the user the URL names, if any (see [`connect_options`]),
/// with TLS only when the URL says `tls://`.
pub async fn connect_as_url_says(url: &str) -> Result<Client, LinkError> {
    connect_as_url_says_with(url, &NatsTls::default()).await
}

/// [`connect_as_url_says`] with `tls`.
pub async fn connect_as_url_says_with(url: &str, tls: &NatsTls) -> Result<Client, LinkError> {
    let (options, address) = connect_options(url, tls)?;
    let server = format!("{}:{}", address.host(), address.port());
    connect_with(options, address)
        .await
        .map_err(|e| LinkError::Bus(format!("connect to NATS at {server}: {e}")))
}

/// How many times a refused login is tried again before the refusal is the answer.
const LOGIN_REFUSALS_BEFORE_ANSWER: u32 = 10;

/// Connects with `options` to `address` once it answers, trying a refused login again a few
/// times, 100 ms apart: a server reloading its authorization refuses logins for an instant
/// (nats-server swaps its accounts and then its users), so one refusal is not yet the answer.
/// A client that connects in the background (`retry_on_initial_connect`) tries again by
/// itself.
pub async fn connect_with(
    options: async_nats::ConnectOptions,
    address: async_nats::ServerAddr,
) -> Result<Client, async_nats::ConnectError> {
    use async_nats::ConnectErrorKind::{Authentication, AuthorizationViolation};
    let mut refused = 0;
    loop {
        match options.clone().connect(address.clone()).await {
            Err(e)
                if matches!(e.kind(), Authentication | AuthorizationViolation)
                    && refused < LOGIN_REFUSALS_BEFORE_ANSWER =>
            {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            connected => return connected,
        }
    }
}

/// The NATS address `url` names, without its user and password: what an agent is given
/// beside its own credential.
pub fn without_user(url: &str) -> Result<String, LinkError> {
    let mut address = parse_address(url)?.into_inner();
    let _ = address.set_username("");
    let _ = address.set_password(None);
    Ok(address.to_string().trim_end_matches('/').to_owned())
}

fn parse_address(url: &str) -> Result<async_nats::ServerAddr, LinkError> {
    url.parse()
        .map_err(|e| LinkError::Bus(format!("the NATS address is not a URL: {e}")))
}

/// An agent's connection to the control plane.
#[derive(Clone)]
pub struct Link {
    client: Client,
    js: jetstream::Context,
    agent_id: String,
    subjects: Subjects,
    outbox: PathBuf,
    /// How long one request waits for its answer before it is sent again.
    answer_within: Duration,
}

impl Link {
    /// A link for agent `agent_id` over `client`, keeping unanswered reports under `outbox`.
    pub fn new(
        client: Client,
        agent_id: &str,
        subjects: Subjects,
        outbox: &Path,
    ) -> Result<Link, LinkError> {
        std::fs::create_dir_all(outbox).map_err(|error| LinkError::Outbox {
            path: outbox.to_owned(),
            error,
        })?;
        Ok(Link {
            js: jetstream::new(client.clone()),
            client,
            agent_id: agent_id.to_owned(),
            subjects,
            outbox: outbox.to_owned(),
            answer_within: Duration::from_secs(10),
        })
    }

    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// Sends `request` to the recorder and returns its answer, asking again while nobody
    /// answers or the control plane is unavailable, until `stop`.
    pub async fn ask(
        &self,
        request: &Request,
        stop: &CancellationToken,
    ) -> Result<Answer, LinkError> {
        let subject = self.subjects.requests_of(&self.agent_id);
        let body: bytes::Bytes = serde_json::to_vec(request)
            .expect("requests always serialise")
            .into();
        let mut failures = 0u32;
        loop {
            let sent = tokio::time::timeout(
                self.answer_within,
                self.client.request(subject.clone(), body.clone()),
            );
            let why = tokio::select! {
                _ = stop.cancelled() => return Err(LinkError::Stopped),
                answered = sent => match answered {
                    Ok(Ok(message)) => match serde_json::from_slice::<Answer>(&message.payload) {
                        Ok(Answer::Unavailable { reason }) => reason,
                        Ok(answer) => {
                            if failures > 0 {
                                tracing::info!(agent = %self.agent_id, "the control plane answers again");
                            }
                            return Ok(answer);
                        }
                        Err(e) => format!("an answer that does not read: {e}"),
                    },
                    Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => "no recorder is listening".into(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no answer within {:?}", self.answer_within),
                },
            };
            if failures == 0 {
                tracing::warn!(agent = %self.agent_id, %why, "the control plane does not answer; asking again with backoff");
            }
            failures += 1;
            tokio::select! {
                _ = stop.cancelled() => return Err(LinkError::Stopped),
                _ = tokio::time::sleep(backoff(failures)) => {}
            }
        }
    }

    /// Reports `fact` about `session_id` under a new id, kept in the outbox until the
    /// recorder answers; returns the answer.
    pub async fn report(
        &self,
        session_id: Uuid,
        fact: Fact,
        stop: &CancellationToken,
    ) -> Result<Answer, LinkError> {
        let report = Report {
            report_id: Uuid::now_v7(),
            session_id,
            fact,
            traceparent: crate::trace::current_traceparent(),
        };
        self.keep(&report).await?;
        self.send_kept(report, stop).await
    }

    /// Sends the reports an earlier run of this agent kept and did not get answered, oldest
    /// first (their ids are time-ordered); how many.
    pub async fn drain_outbox(&self, stop: &CancellationToken) -> Result<usize, LinkError> {
        let mut kept = Vec::new();
        let entries = std::fs::read_dir(&self.outbox).map_err(|e| self.outbox_error(e))?;
        for entry in entries {
            let path = entry.map_err(|e| self.outbox_error(e))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = tokio::fs::read(&path)
                    .await
                    .map_err(|e| self.outbox_error(e))?;
                match serde_json::from_slice::<Report>(&text) {
                    Ok(report) => kept.push(report),
                    Err(e) => {
                        // A report cut short by a crash mid-write was never sent: drop it.
                        tracing::warn!(path = %path.display(), error = %e, "dropping an unreadable kept report");
                        let _ = tokio::fs::remove_file(&path).await;
                    }
                }
            }
        }
        kept.sort_by_key(|r| r.report_id);
        let count = kept.len();
        for report in kept {
            let (id, session) = (report.report_id, report.session_id);
            let answer = self.send_kept(report, stop).await?;
            tracing::info!(report = %id, %session, ?answer, "a kept report was sent");
        }
        Ok(count)
    }

    /// The durable consumer the control plane made for this agent's commands.
    pub async fn commands(&self) -> Result<PullConsumer, LinkError> {
        self.js
            .get_consumer_from_stream(
                self.subjects.consumer_of(&self.agent_id),
                self.subjects.commands_stream.clone(),
            )
            .await
            .map_err(|e| LinkError::Bus(format!("the agent's command consumer: {e}")))
    }

    /// Sends a piece of a kernel's output, and waits for the stream to have it.
    pub async fn send_log(&self, chunk: &LogChunk) -> Result<(), LinkError> {
        let subject = self
            .subjects
            .log(&self.agent_id, chunk.session_id, chunk.kernel);
        // The length is part of the id: an empty last chunk and the text that follows it at
        // the same offset (an inference session restarted) are two chunks, not a repeat.
        let id = format!(
            "{}.{}.{}.{}.{}",
            chunk.session_id.simple(),
            chunk.kernel,
            chunk.epoch.simple(),
            chunk.offset,
            chunk.text.len()
        );
        self.publish(
            subject,
            id,
            serde_json::to_vec(chunk).expect("chunks serialise"),
        )
        .await
    }

    /// Sends a usage sample, and waits for the stream to have it.
    pub async fn send_usage(&self, sample: &UsageSample) -> Result<(), LinkError> {
        let subject = self.subjects.usage(&self.agent_id, sample.session_id);
        let id = format!(
            "{}.{}",
            sample.session_id.simple(),
            sample.sampled_at.timestamp_micros()
        );
        self.publish(
            subject,
            id,
            serde_json::to_vec(sample).expect("samples serialise"),
        )
        .await
    }

    async fn publish(&self, subject: String, id: String, body: Vec<u8>) -> Result<(), LinkError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.as_str());
        let ack = self
            .js
            .publish_with_headers(subject, headers, body.into())
            .await
            .map_err(|e| LinkError::Bus(e.to_string()))?;
        ack.await.map_err(|e| LinkError::Bus(e.to_string()))?;
        Ok(())
    }

    async fn send_kept(
        &self,
        report: Report,
        stop: &CancellationToken,
    ) -> Result<Answer, LinkError> {
        let id = report.report_id;
        let answer = self.ask(&Request::Report(report), stop).await?;
        let path = self.kept_path(id);
        tokio::fs::remove_file(&path)
            .await
            .map_err(|e| self.outbox_error(e))?;
        Ok(answer)
    }

    /// Writes the report to the outbox, synced, before it is sent: written whole or not at
    /// all ([`write_whole`]).
    async fn keep(&self, report: &Report) -> Result<(), LinkError> {
        let path = self.kept_path(report.report_id);
        let body = serde_json::to_vec(report).expect("reports serialise");
        tokio::task::spawn_blocking(move || write_whole(&path, &body))
            .await
            .expect("the outbox write does not panic")
            .map_err(|e| self.outbox_error(e))
    }

    fn kept_path(&self, id: Uuid) -> PathBuf {
        self.outbox.join(format!("{id}.json"))
    }

    fn outbox_error(&self, error: std::io::Error) -> LinkError {
        LinkError::Outbox {
            path: self.outbox.clone(),
            error,
        }
    }
}

/// Writes `bytes` to `path` whole or not at all, synced: a file beside it (`.partial`),
/// renamed over it. How an agent keeps a report, and how the control plane writes a NATS
/// server's authorization, which the server may read again at any moment.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let partial = path.with_extension("partial");
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

/// How long to wait before the `failures`-th retry: doubling from 100 ms, capped at 5 s,
/// with up to a quarter of jitter so agents that lost the control plane together do not
/// come back together.
pub fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1 << failures.min(7).saturating_sub(1));
    let capped = base.min(Duration::from_secs(5));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    capped + capped / 4 * (nanos % 1000) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_connections_off_this_host_are_flagged() {
        let none = NatsTls::default();
        assert!(plain_off_host("nats://nats.example:4222", &none));
        assert!(plain_off_host("nats://u:p@10.1.2.3:4222", &none));
        assert!(!plain_off_host("nats://127.0.0.1:4222", &none));
        assert!(!plain_off_host("nats://localhost:4222", &none));
        assert!(!plain_off_host("tls://nats.example:4222", &none));
        let ca = NatsTls {
            ca: Some("/ca.pem".into()),
            ..NatsTls::default()
        };
        assert!(!plain_off_host("nats://nats.example:4222", &ca));
    }

    #[test]
    fn a_client_certificate_without_its_key_is_refused() {
        let half = NatsTls {
            cert: Some("/c.pem".into()),
            ..NatsTls::default()
        };
        assert!(half.apply(async_nats::ConnectOptions::new()).is_err());
    }

    #[test]
    fn backoff_grows_then_stays_capped_with_bounded_jitter() {
        let first = backoff(1);
        assert!(first >= Duration::from_millis(100) && first <= Duration::from_millis(125));
        assert!(backoff(3) >= Duration::from_millis(400));
        for n in [7, 50, u32::MAX] {
            let b = backoff(n);
            assert!(
                b >= Duration::from_secs(5) && b <= Duration::from_millis(6250),
                "{n}: {b:?}"
            );
        }
    }
}
