//! Rate limits on proving who one is (`governor`'s GCRA, one state per key): sign-ins with a
//! password, per source address and per email, since each try costs an Argon2id hash; lookups
//! of API keys and Backend.AI access keys the gateway has not just verified, per source
//! address, since each costs a query (a guess at a key is one); and failed Backend.AI
//! signatures, per access key. Over a limit the answer is 429 with `Retry-After`, and the
//! costly check is not made. A key the gateway verified lately is served from its cache
//! without counting, so a busy client with a good key is never slowed.
//!
//! Each gateway counts alone: N gateways behind one name allow N times the rate, which is
//! still a bound. The source address is the TCP peer's; behind a reverse proxy it is the
//! proxy's, so every client shares one budget there (the docs say so).

use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Extensions;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Password sign-ins one source address may try a minute (the eleventh is refused).
pub const SIGN_INS_PER_ADDRESS_PER_MINUTE: u32 = 10;
/// Password sign-ins that may name one email a minute, from anywhere.
pub const SIGN_INS_PER_ACCOUNT_PER_MINUTE: u32 = 10;
/// Lookups of keys not verified lately one source address may cause a minute.
pub const KEY_LOOKUPS_PER_ADDRESS_PER_MINUTE: u32 = 300;
/// Failed signatures one Backend.AI access key may have a minute.
pub const SIGNATURE_FAILURES_PER_KEY_PER_MINUTE: u32 = 10;

/// Keys kept before the stale ones are dropped (an address or account unheard from for its
/// whole window holds nothing worth keeping).
const KEYS_KEPT: usize = 100_000;

/// Refused for now: try again after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooMany {
    pub retry_after: Duration,
}

impl TooMany {
    /// Whole seconds to wait, at least one, as `Retry-After` says it.
    pub fn retry_after_secs(self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// One budget per key, refilled evenly over a minute.
struct PerMinute<K: Hash + Eq + Clone>(DefaultKeyedRateLimiter<K>);

impl<K: Hash + Eq + Clone> PerMinute<K> {
    fn new(per_minute: u32) -> PerMinute<K> {
        let n = NonZeroU32::new(per_minute).expect("a limit above zero");
        PerMinute(RateLimiter::keyed(Quota::per_minute(n)))
    }

    /// Takes one try of `key`'s budget, or says how long until there is one.
    fn take(&self, key: &K) -> Result<(), TooMany> {
        if self.0.len() > KEYS_KEPT {
            self.0.retain_recent();
        }
        self.0.check_key(key).map_err(|not_until| TooMany {
            retry_after: not_until.wait_time_from(DefaultClock::default().now()),
        })
    }
}

/// The gateway's limits, shared by every request it serves.
#[derive(Clone)]
pub struct Throttle(Arc<Limits>);

struct Limits {
    sign_ins_by_address: PerMinute<IpAddr>,
    sign_ins_by_account: PerMinute<String>,
    key_lookups_by_address: PerMinute<IpAddr>,
    signature_failures_by_key: PerMinute<String>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle(Arc::new(Limits {
            sign_ins_by_address: PerMinute::new(SIGN_INS_PER_ADDRESS_PER_MINUTE),
            sign_ins_by_account: PerMinute::new(SIGN_INS_PER_ACCOUNT_PER_MINUTE),
            key_lookups_by_address: PerMinute::new(KEY_LOOKUPS_PER_ADDRESS_PER_MINUTE),
            signature_failures_by_key: PerMinute::new(SIGNATURE_FAILURES_PER_KEY_PER_MINUTE),
        }))
    }
}

impl Throttle {
    /// A password sign-in from `from` naming `email`: counted against both budgets (the
    /// email's case folded, so `A@x` and `a@x` share one).
    pub fn sign_in(&self, from: IpAddr, email: &str) -> Result<(), TooMany> {
        self.0.sign_ins_by_address.take(&from)?;
        self.0
            .sign_ins_by_account
            .take(&email.trim().to_ascii_lowercase())
    }

    /// A lookup of a key not verified lately, from `from`.
    pub fn key_lookup(&self, from: IpAddr) -> Result<(), TooMany> {
        self.0.key_lookups_by_address.take(&from)
    }

    /// A failed signature by Backend.AI access key `access_key`.
    pub fn signature_failed(&self, access_key: &str) -> Result<(), TooMany> {
        self.0
            .signature_failures_by_key
            .take(&access_key.to_owned())
    }
}

/// The TCP peer of a request's connection, as the server records it
/// (`crate::run::serve`).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

/// The address a request came from: its TCP peer, or the unspecified address where the
/// server recorded none (a router driven without a socket, as in unit tests).
pub fn source(extensions: &Extensions) -> IpAddr {
    extensions
        .get::<ConnectInfo<Peer>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0 .0.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eleventh_sign_in_from_one_address_in_a_minute_is_refused() {
        let throttle = Throttle::default();
        let from: IpAddr = "192.0.2.7".parse().unwrap();
        for i in 0..10 {
            // Each try names another email: only the address's budget runs out.
            throttle.sign_in(from, &format!("u{i}@x")).unwrap();
        }
        let refused = throttle.sign_in(from, "u10@x").unwrap_err();
        assert!(refused.retry_after_secs() >= 1 && refused.retry_after_secs() <= 60);
        // Another address is not held back by this one.
        assert!(throttle
            .sign_in("192.0.2.8".parse().unwrap(), "v@x")
            .is_ok());
    }

    #[test]
    fn one_email_tried_from_many_addresses_is_refused_at_its_eleventh_try() {
        let throttle = Throttle::default();
        for i in 0..10u8 {
            let from = IpAddr::V4(Ipv4Addr::new(198, 51, 100, i));
            throttle.sign_in(from, "Victim@x").unwrap();
        }
        let from = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 200));
        assert!(throttle.sign_in(from, "victim@X").is_err());
    }

    #[test]
    fn signature_failures_are_counted_per_access_key() {
        let throttle = Throttle::default();
        for _ in 0..SIGNATURE_FAILURES_PER_KEY_PER_MINUTE {
            throttle.signature_failed("AKIAONE").unwrap();
        }
        assert!(throttle.signature_failed("AKIAONE").is_err());
        assert!(throttle.signature_failed("AKIATWO").is_ok());
    }

    #[test]
    fn a_wait_is_said_in_whole_seconds_of_at_least_one() {
        let wait = |ms| TooMany {
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(wait(0).retry_after_secs(), 1);
        assert_eq!(wait(5_001).retry_after_secs(), 6);
    }
}
