//! Webhooks: each new notice of a user who set one is POSTed to it as JSON, with the notice's
//! id (its event's id) as `Idempotency-Key`, until it answers 2xx; a failure is tried again
//! after 1 s, 2 s, 4 s ... (capped at 5 min), at most `MAX_ATTEMPTS` times, then given up and
//! logged. Deliveries are rows (`notification.deliveries`) written in the transaction that
//! keeps the notice, so a restart loses none. A batch is claimed with a short lease in one
//! short statement and sent outside any transaction (a slow receiver never holds the log's
//! readers back); a crash mid-send leaves the lease to expire and the notice is sent again,
//! which the key lets the receiver drop.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
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

/// The client deliveries are sent with: `https://` receivers checked against the system's
/// roots and, when given, the CA in the PEM file `ca` (a receiver with a private CA).
pub fn client(ca: Option<&std::path::Path>) -> Result<reqwest::Client, String> {
    events::tls::use_ring();
    let mut builder = reqwest::Client::builder().timeout(TIMEOUT);
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| format!("`{}`: {e}", ca.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("`{}`: {e}", ca.display()))?;
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| e.to_string())
}

/// Sends due deliveries with `http` until `stop`; `wake` says one was added.
pub async fn deliver(
    pool: Pool,
    http: reqwest::Client,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
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
            let sent = http
                .post(&delivery.url)
                .header("Idempotency-Key", delivery.notice_id.to_string())
                .header("Content-Type", "application/json")
                .body(delivery.body.clone())
                .send()
                .await;
            let outcome = match sent {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(format!("the receiver answered {}", r.status())),
                Err(e) => Err(format!("the receiver could not be reached: {e}")),
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
    fn retries_wait_longer_each_time_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    }
}
