//! Webhooks: each new notice of a user who set one is POSTed to it as JSON, with the notice's
//! id (its event's id) as `Idempotency-Key`, until it answers 2xx; a failure is tried again
//! after 1 s, 2 s, 4 s ... (capped at 5 min), at most `MAX_ATTEMPTS` times, then given up and
//! logged. Deliveries are rows (`notification.deliveries`) written in the transaction that
//! keeps the notice, so a restart loses none. A batch is claimed with a short lease in one
//! short statement and sent outside any transaction (a slow receiver never holds the log's
//! readers back); a crash mid-send leaves the lease to expire and the notice is sent again,
//! which the key lets the receiver drop.
//!
//! Fenced and signed ([`Sender`]): a delivery goes only to addresses the operator's policy
//! admits (`BERTH_WEBHOOK_ALLOW`, [`events::outbound::WebhookPolicy`]). A host name is
//! resolved here, its refused addresses dropped, and the connection made to an address that
//! was checked (reqwest dials what the resolver returns, so a second lookup cannot rebind the
//! name); an address written in the URL is checked before sending. No proxy from the
//! environment is used, and no redirect is followed: a 3xx is a failed delivery. Each
//! delivery is signed as Standard Webhooks says ([`sign`]) with its owner's secret, kept in
//! `notification.webhook_secrets` (never in an event).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use deadpool_postgres::Pool;
use events::outbound::WebhookPolicy;
use hmac::{Hmac, Mac};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use sha2::Sha256;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::db;

/// Deliveries of one notice before it is given up.
pub const MAX_ATTEMPTS: i32 = 8;
/// How long a claimed delivery is left to its sender before another may take it.
const LEASE: Duration = Duration::from_secs(60);
/// The longest a receiver gets to answer.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest the sender rests when nothing is due (a delivery is also poked awake).
const REST: Duration = Duration::from_secs(30);

/// The wait before attempt `attempt + 1`, after `attempt` failed: 1 s doubling, capped at
/// 5 min. Pure.
pub fn backoff(attempt: i32) -> Duration {
    let doublings = u32::try_from(attempt.max(1) - 1).unwrap_or(0).min(16);
    Duration::from_secs(1u64 << doublings).min(Duration::from_secs(300))
}

/// What deliveries are sent with: the HTTP client and the policy of where they may go.
#[derive(Clone)]
pub struct Sender {
    http: reqwest::Client,
    policy: Arc<WebhookPolicy>,
}

impl Sender {
    /// The sender of deliveries to the addresses `policy` admits: `https://` receivers
    /// checked against the system's roots and, when given, the CA in the PEM file `ca` (a
    /// receiver with a private CA).
    pub fn new(ca: Option<&std::path::Path>, policy: WebhookPolicy) -> Result<Sender, String> {
        events::tls::use_ring();
        let policy = Arc::new(policy);
        let mut builder = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Fenced {
                policy: policy.clone(),
            });
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).map_err(|e| format!("`{}`: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("`{}`: {e}", ca.display()))?;
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder.build().map_err(|e| e.to_string())?;
        Ok(Sender { http, policy })
    }

    /// POSTs `delivery`, signed with `secret` at `timestamp` (Unix seconds); whether the
    /// receiver took it (2xx), or why not.
    async fn send(
        &self,
        delivery: &db::Delivery,
        secret: &[u8],
        timestamp: i64,
    ) -> Result<(), String> {
        let url = reqwest::Url::parse(&delivery.url).map_err(|e| format!("not a URL: {e}"))?;
        // An address in the URL is dialled without the resolver: checked here.
        let literal = match url.host() {
            Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            _ => None,
        };
        if let Some(ip) = literal {
            self.policy.check(ip).map_err(|e| format!("refused: {e}"))?;
        }
        let id = delivery.notice_id.to_string();
        let signature = sign(secret, &id, timestamp, delivery.body.as_bytes());
        let sent = self
            .http
            .post(url)
            .header("Idempotency-Key", &id)
            .header("Content-Type", "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", &signature)
            .header("X-Berth-Signature", &signature)
            .body(delivery.body.clone())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) if r.status().is_redirection() => Err(format!(
                "the receiver answered {} (redirects are not followed)",
                r.status()
            )),
            Ok(r) => Err(format!("the receiver answered {}", r.status())),
            Err(e) => Err(format!("the receiver could not be reached: {}", causes(&e))),
        }
    }
}

/// `error` and its causes, in one line: a refusal of the resolver is a cause of reqwest's.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// The resolver deliveries use: the system's lookup, less the addresses the policy refuses.
/// The connection goes to what it returns, so the address checked is the address dialled.
struct Fenced {
    policy: Arc<WebhookPolicy>,
}

/// A host name that resolves to no address a webhook may reach.
#[derive(Debug, thiserror::Error)]
#[error("refused: `{host}` resolves to no address webhooks may reach ({why})")]
struct Refused {
    host: String,
    why: String,
}

impl Resolve for Fenced {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refusals = Vec::new();
            let admitted: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check(a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refusals.push(e.to_string());
                        false
                    }
                })
                .collect();
            if admitted.is_empty() {
                let why = if refusals.is_empty() {
                    "no address at all".to_owned()
                } else {
                    refusals.join("; ")
                };
                return Err(Box::new(Refused { host, why }) as Box<_>);
            }
            Ok(Box::new(admitted.into_iter()) as Addrs)
        })
    }
}

/// A delivery's signature as Standard Webhooks (and Svix) make it: `v1,` and the base64 of
/// HMAC-SHA256, keyed with the secret's bytes, over `<id>.<timestamp>.<body>`. Sent as
/// `webhook-signature` and `X-Berth-Signature`, beside `webhook-id` and `webhook-timestamp`,
/// so a receiver checks the body and that it is fresh (replays are refused by the timestamp
/// and the id). Pure.
pub fn sign(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// Sends due deliveries with `sender` until `stop`; `wake` says one was added.
pub async fn deliver(pool: Pool, sender: Sender, wake: Arc<Notify>, stop: CancellationToken) {
    loop {
        let claimed = match db::claim_deliveries(&pool, LEASE, 32).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "webhook deliveries could not be read; trying again");
                Vec::new()
            }
        };
        let busy = !claimed.is_empty();
        for delivery in claimed {
            let outcome = match db::secret_of(&pool, delivery.user_id, rand::random()).await {
                Ok(secret) => {
                    sender
                        .send(&delivery, &secret, chrono::Utc::now().timestamp())
                        .await
                }
                Err(e) => Err(format!("its owner's signing secret could not be read: {e}")),
            };
            let attempt = delivery.attempts + 1;
            let recorded = match &outcome {
                Ok(()) => db::delivered(&pool, delivery.notice_id).await,
                Err(why) => {
                    if attempt >= MAX_ATTEMPTS {
                        tracing::error!(notice = %delivery.notice_id, url = %delivery.url, %why, "webhook given up after {attempt} attempts");
                    }
                    db::failed(&pool, delivery.notice_id, attempt, backoff(attempt), why).await
                }
            };
            if let Err(e) = recorded {
                tracing::warn!(notice = %delivery.notice_id, error = %e, "a delivery's outcome was not kept; its lease expires");
            }
        }
        if busy {
            continue;
        }
        let rest = match db::next_delivery_in(&pool).await {
            Ok(Some(wait)) => wait.min(REST),
            _ => REST,
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = wake.notified() => {
                // The delivery was added in a transaction that commits just after.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ = tokio::time::sleep(rest) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_signed_as_standard_webhooks_say() {
        // The example of the Standard Webhooks specification and its libraries' tests.
        let secret = BASE64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = sign(
            &secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        // Another body, time or key signs differently.
        assert_ne!(
            sign(
                &secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265331,
                br#"{"test": 2432232314}"#
            ),
            signature
        );
        assert_ne!(
            sign(
                b"other",
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            signature
        );
    }

    #[test]
    fn retries_wait_longer_each_time_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    }
}
