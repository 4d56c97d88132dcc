//! The shared handles [`crate::AppState`] holds that are more than data, kept at the ground
//! floor so that the state imports nothing above it: the last readiness report
//! ([`Readiness`], checked by `crate::ready`), the process's metrics exposition
//! ([`MetricsRender`], served by the router) and Backend.AI's key holder ([`BackendAiKeys`]:
//! the master key keypairs' secrets are derived with, and the signatures honoured lately,
//! used by `crate::backendai` and the admin API).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::time::Instant;

use crate::model::{Dependency, Report};

/// What PostgreSQL down means for the API, as its going down is logged.
pub(crate) const POSTGRES_DOWN: &str = "writes answer 503 until it is back";

/// How long a write that finds PostgreSQL down waits for a connection before it is refused.
const RECHECK_WITHIN: Duration = Duration::from_millis(500);

/// How long a signature is remembered: a date is honoured over twice Backend.AI's clock skew
/// (`crate::backendai::auth::CLOCK_SKEW`, 15 minutes).
const REPLAY_WINDOW: Duration = Duration::from_secs(30 * 60);

/// The last check of everything, shared by the checker and the handlers.
#[derive(Clone, Default)]
pub struct Readiness(Arc<RwLock<Report>>);

impl Readiness {
    /// The last report.
    pub fn report(&self) -> Report {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the last check found PostgreSQL down.
    pub fn postgres_down(&self) -> bool {
        !self.0.read().unwrap_or_else(|e| e.into_inner()).postgres.up
    }

    /// Whether PostgreSQL answers again, asked now rather than at the next check (a write
    /// that finds it down asks, so the first write after its return goes through); noted
    /// when it does.
    pub async fn postgres_back(&self, pool: &Pool) -> bool {
        let answered = matches!(
            tokio::time::timeout(RECHECK_WITHIN, pool.get()).await,
            Ok(Ok(_))
        );
        if answered {
            self.update(|report| {
                report.postgres = report.postgres.noted(Utc::now(), None, "PostgreSQL", "");
            });
        }
        answered
    }

    /// Notes PostgreSQL down as a request found it between two checks: `/readyz` says so at
    /// once rather than at the next check, and the next write asks before it waits. The
    /// next check that reaches PostgreSQL notes it up again.
    pub fn postgres_failed(&self, error: &str) {
        self.update(|report| {
            report.postgres = report.postgres.noted(
                Utc::now(),
                Some(error.to_owned()),
                "PostgreSQL",
                POSTGRES_DOWN,
            );
            report.ready = false;
        });
    }

    /// Changes the report as a check found it.
    pub(crate) fn update(&self, change: impl FnOnce(&mut Report)) {
        change(&mut self.0.write().unwrap_or_else(|e| e.into_inner()));
    }
}

impl Dependency {
    /// This dependency after a check that found `error` (none: up); a change is logged,
    /// with what it means for the API (`meaning`).
    pub(crate) fn noted(
        &self,
        now: DateTime<Utc>,
        error: Option<String>,
        what: &str,
        meaning: &str,
    ) -> Dependency {
        match (self.up, error) {
            (_, None) => {
                if !self.up {
                    tracing::info!(dependency = what, "up again");
                }
                Dependency::default()
            }
            (true, Some(error)) => {
                tracing::warn!(dependency = what, %error, "down; {meaning}");
                Dependency {
                    up: false,
                    error: Some(error),
                    down_since: Some(now),
                }
            }
            (false, Some(error)) => Dependency {
                up: false,
                error: Some(error),
                down_since: self.down_since,
            },
        }
    }
}

/// The process's exposition, made when `/metrics` is asked for.
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// The secret key of `access_key`, derived with `master_key`: 40 hex digits (160 bits).
pub fn derive_secret(master_key: &[u8], access_key: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(master_key).expect("HMAC takes a key of any length");
    mac.update(access_key.as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..20])
}

/// What Backend.AI's API holds: the master key secrets are derived with, and the signatures
/// it has honoured lately.
pub struct BackendAiKeys {
    master_key: Vec<u8>,
    seen: Mutex<Seen>,
}

impl std::fmt::Debug for BackendAiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendAiKeys").finish_non_exhaustive()
    }
}

impl BackendAiKeys {
    /// A holder whose secrets are derived with `master_key` (at least 32 bytes, checked where
    /// the setting is read).
    pub fn new(master_key: Vec<u8>) -> Arc<BackendAiKeys> {
        Arc::new(BackendAiKeys {
            master_key,
            seen: Mutex::new(Seen::default()),
        })
    }

    /// The secret key of `access_key`.
    pub fn secret_of(&self, access_key: &str) -> String {
        derive_secret(&self.master_key, access_key)
    }

    /// The master key's MAC of `message` for `purpose`.
    fn mac(&self, purpose: &str, message: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.master_key)
            .expect("HMAC takes a key of any length");
        mac.update(purpose.as_bytes());
        mac.update(&[0]);
        mac.update(message);
        mac
    }

    /// `message` signed for `purpose` with the master key (HMAC-SHA-256): every gateway of the
    /// install verifies what another signed.
    pub fn sign(&self, purpose: &str, message: &[u8]) -> [u8; 32] {
        self.mac(purpose, message).finalize().into_bytes().into()
    }

    /// Whether `signature` is [`BackendAiKeys::sign`]'s of `message` for `purpose` (compared
    /// in constant time).
    pub fn verify(&self, purpose: &str, message: &[u8], signature: &[u8]) -> bool {
        self.mac(purpose, message).verify_slice(signature).is_ok()
    }

    /// Whether `signature` is seen for the first time in [`REPLAY_WINDOW`] (and remembers it).
    pub(crate) fn first_use(&self, signature: [u8; 32], now: Instant) -> bool {
        self.seen
            .lock()
            .expect("the seen set is never left half-changed")
            .first_use(signature, now)
    }

    /// The key cache's entry for an access key (API keys are kept by their digest).
    pub(crate) fn cache_key(access_key: &str) -> String {
        format!("backendai:{access_key}")
    }
}

/// Signatures honoured in the last [`REPLAY_WINDOW`], oldest first.
#[derive(Default)]
struct Seen {
    order: VecDeque<(Instant, [u8; 32])>,
    set: HashSet<[u8; 32]>,
}

impl Seen {
    fn first_use(&mut self, signature: [u8; 32], now: Instant) -> bool {
        while let Some((at, old)) = self.order.front() {
            if now.duration_since(*at) < REPLAY_WINDOW {
                break;
            }
            self.set.remove(old);
            self.order.pop_front();
        }
        if !self.set.insert(signature) {
            return false;
        }
        self.order.push_back((now, signature));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependency_keeps_when_it_went_down_until_it_is_back() {
        let up = Dependency::default();
        let t0 = Utc::now();
        let down = up.noted(t0, Some("refused".into()), "x", "y");
        assert!(!down.up);
        assert_eq!(down.down_since, Some(t0));
        let later = t0 + chrono::Duration::seconds(3);
        let still = down.noted(later, Some("again".into()), "x", "y");
        assert_eq!(still.down_since, Some(t0));
        assert_eq!(still.error.as_deref(), Some("again"));
        let back = still.noted(t0, None, "x", "y");
        assert!(back.up && back.down_since.is_none() && back.error.is_none());
    }

    #[test]
    fn a_request_that_found_postgresql_down_makes_the_report_not_ready_until_a_check() {
        let readiness = Readiness::default();
        readiness.update(|report| report.ready = true);
        readiness.postgres_failed("refused");
        let report = readiness.report();
        assert!(!report.ready && readiness.postgres_down());
        assert_eq!(report.postgres.error.as_deref(), Some("refused"));
        assert!(report.postgres.down_since.is_some());
    }

    #[test]
    fn a_signature_is_honoured_once_within_the_window() {
        let mut seen = Seen::default();
        let start = Instant::now();
        assert!(seen.first_use([1; 32], start));
        assert!(!seen.first_use([1; 32], start + Duration::from_secs(60)));
        assert!(seen.first_use([2; 32], start + Duration::from_secs(60)));
        // Past the window the first is forgotten (its date is refused by then anyway).
        assert!(seen.first_use([1; 32], start + REPLAY_WINDOW));
        assert_eq!(seen.order.len(), 2);
    }

    #[test]
    fn secrets_are_derived_per_access_key_and_master_key() {
        let (one, two) = (
            b"master one, thirty-two bytes long!",
            b"master two, thirty-two bytes long!",
        );
        let a = derive_secret(one, "AKIAAAAAAAAAAAAAAAAA");
        assert_eq!(a.len(), 40);
        assert_eq!(a, derive_secret(one, "AKIAAAAAAAAAAAAAAAAA"));
        assert_ne!(a, derive_secret(one, "AKIAAAAAAAAAAAAAAAAB"));
        assert_ne!(a, derive_secret(two, "AKIAAAAAAAAAAAAAAAAA"));
    }
}
