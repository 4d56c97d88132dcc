//! Backend.AI's request signing, verified as its client signs: HMAC-SHA256 over the method,
//! the request target exactly as sent, the `Date` header verbatim, the `Host` header, the
//! media type and the API version, with a key derived from the secret key, the date and the
//! host. The body is not signed (Backend.AI stopped signing it in v4.20181215), so plain HTTP
//! is safe only on loopback.
//!
//! A keypair's secret key is never stored: it is HMAC-SHA256(master key, access key), the
//! master key held by the gateway outside the log and the database
//! ([`crate::handles::BackendAiKeys`]). The
//! ledger knows only who holds which access key and whether it is revoked.
//!
//! On top of Backend.AI's checks, a signature is honoured once: the client's `Date` has
//! microseconds, so it never repeats one, and a captured request cannot be replayed within
//! the ±15 minutes its date allows (per gateway process: each remembers what it saw).

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use chrono::{DateTime, FixedOffset, NaiveDateTime, TimeDelta, Utc};
use events::ledger::KeyOwner;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use super::problem::Problem;
use crate::handles::BackendAiKeys;
use crate::state::AppState;

type HmacSha256 = Hmac<Sha256>;

/// The API version berth speaks on Backend.AI's paths: the one Backend.AI's 23.09 client
/// speaks, so it uses its newest calls.
pub const API_VERSION: &str = "v7.20230615";

/// How far a request's date may be from the gateway's clock, either way.
pub const CLOCK_SKEW: TimeDelta = TimeDelta::minutes(15);

/// The scheme of the `Authorization` header.
const SCHEME: &str = "BackendAI";

/// What a signature covers besides the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signed<'a> {
    pub method: &'a str,
    /// The path and query exactly as the request line has them.
    pub target: &'a str,
    /// The `Date` (or `X-BackendAI-Date`) header as sent.
    pub date: &'a str,
    /// The `Host` header as sent, port included.
    pub host: &'a str,
    /// The `Content-Type` header as sent; absent signs as `application/octet-stream`.
    pub content_type: Option<&'a str>,
    /// The `X-BackendAI-Version` header (empty when absent).
    pub version: &'a str,
}

impl Signed<'_> {
    /// The media type as signed: lower-case, without parameters, `application/octet-stream`
    /// when the request has none (as aiohttp, Backend.AI's server, reads it).
    fn media_type(&self) -> String {
        match self.content_type {
            Some(t) => t
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase(),
            None => "application/octet-stream".to_owned(),
        }
    }

    /// The text the signature is an HMAC of.
    pub fn string_to_sign(&self) -> String {
        let empty_body = hex::encode(Sha256::digest(b""));
        format!(
            "{}\n{}\n{}\nhost:{}\ncontent-type:{}\nx-backendai-version:{}\n{}",
            self.method.to_ascii_uppercase(),
            self.target,
            self.date,
            self.host,
            self.media_type(),
            self.version,
            empty_body
        )
    }

    /// The signature, as raw bytes, of a request signed at `date` with `secret_key`. The key
    /// is derived from the secret, the date's day (`YYYYMMDD` in the date's own offset) and
    /// the host.
    pub fn signature(&self, secret_key: &str, date: DateTime<FixedOffset>) -> [u8; 32] {
        let day = date.format("%Y%m%d").to_string();
        let key = hmac(secret_key.as_bytes(), day.as_bytes());
        let key = hmac(&key, self.host.as_bytes());
        hmac(&key, self.string_to_sign().as_bytes())
    }
}

impl Signed<'_> {
    /// The `Authorization` header of this request signed with the keypair, as Backend.AI's
    /// client writes it (for tests and benches that sign as the client does); a problem when
    /// the date cannot be read.
    pub fn authorization(&self, access_key: &str, secret_key: &str) -> Result<String, Problem> {
        let signature = self.signature(secret_key, parse_date(self.date)?);
        Ok(format!(
            "{SCHEME} signMethod=HMAC-SHA256, credential={access_key}:{}",
            hex::encode(signature)
        ))
    }
}

/// The `Date` header as Backend.AI's client writes `at`: ISO 8601 with microseconds and
/// `+00:00`.
pub fn client_date(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// What the `Authorization` header claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub access_key: String,
    pub signature: [u8; 32],
}

/// Reads `BackendAI signMethod=HMAC-SHA256, credential=<access key>:<hex signature>`.
pub fn parse_authorization(value: &str) -> Result<Credential, Problem> {
    let bad = |why: &str| Problem::invalid_auth("Authorization", why.to_owned());
    let params = value
        .strip_prefix(SCHEME)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| bad("must be `BackendAI signMethod=HMAC-SHA256, credential=AK:SIG`"))?;
    let (mut method, mut credential) = (None, None);
    for part in params.split(',') {
        match part.trim().split_once('=') {
            Some(("signMethod", v)) => method = Some(v),
            Some(("credential", v)) => credential = Some(v),
            _ => return Err(bad("has a parameter other than signMethod and credential")),
        }
    }
    match method {
        Some("HMAC-SHA256") => {}
        Some(other) => {
            return Err(bad(&format!(
                "signMethod `{other}` is not supported; sign with HMAC-SHA256"
            )))
        }
        None => return Err(bad("names no signMethod")),
    }
    let (access_key, signature) = credential
        .and_then(|c| c.split_once(':'))
        .ok_or_else(|| bad("names no credential `<access key>:<signature>`"))?;
    if access_key.is_empty()
        || access_key.len() > 64
        || !access_key.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(bad("the access key must be 1 to 64 letters and digits"));
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(signature, &mut bytes)
        .map_err(|_| bad("the signature must be 64 hex digits"))?;
    Ok(Credential {
        access_key: access_key.to_owned(),
        signature: bytes,
    })
}

/// Reads a request's date: ISO 8601 as the client sends it
/// (`2026-11-22T08:04:25.809865+00:00`; without an offset, UTC), or an HTTP date.
pub fn parse_date(value: &str) -> Result<DateTime<FixedOffset>, Problem> {
    DateTime::parse_from_rfc3339(value)
        .or_else(|_| DateTime::parse_from_rfc2822(value))
        .or_else(|_| {
            NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S%.f")
                .map(|naive| naive.and_utc().fixed_offset())
        })
        .map_err(|_| {
            Problem::invalid_auth(
                "Date",
                format!("`{value}` is not a date (send ISO 8601, as the client does)"),
            )
        })
}

/// Refuses a date more than [`CLOCK_SKEW`] from `now`, as Backend.AI does (400).
pub fn check_skew(date: DateTime<FixedOffset>, now: DateTime<Utc>) -> Result<(), Problem> {
    let skew = date.with_timezone(&Utc) - now;
    if skew.abs() > CLOCK_SKEW {
        return Err(Problem::invalid_auth(
            "Date",
            format!(
                "the request's date is {} s from the server's clock; at most {} s are allowed",
                skew.num_seconds(),
                CLOCK_SKEW.num_seconds()
            ),
        ));
    }
    Ok(())
}

/// The caller of a Backend.AI call, from its signed request.
#[derive(Debug, Clone)]
pub struct BackendAiCaller {
    pub owner: KeyOwner,
    pub access_key: String,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl FromRequestParts<AppState> for BackendAiCaller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let backendai = state
            .backendai
            .clone()
            .ok_or_else(|| Problem::not_implemented("Backend.AI's API (it is switched off)"))?;
        let authorization = header(&parts.headers, "authorization").ok_or_else(|| {
            Problem::auth_failed(
                "sign the request with a Backend.AI keypair (`berth admin issue-key --backendai`)",
            )
        })?;
        let credential = parse_authorization(authorization)?;
        let date_text = header(&parts.headers, "x-backendai-date")
            .or_else(|| header(&parts.headers, "date"))
            .ok_or_else(|| Problem::invalid_auth("Date", "the request has no Date header"))?;
        let date = parse_date(date_text)?;
        check_skew(date, Utc::now())?;
        // The target as the request line has it: a router nested under a prefix sees a
        // stripped URI, the original is what was signed.
        let uri = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(&parts.uri, |o| &o.0);
        let target = uri.path_and_query().map_or("/", |pq| pq.as_str());
        let host = header(&parts.headers, header::HOST.as_str())
            .or_else(|| uri.authority().map(|a| a.as_str()))
            .ok_or_else(|| Problem::invalid_auth("Host", "the request has no Host header"))?;
        let signed = Signed {
            method: parts.method.as_str(),
            target,
            date: date_text,
            host,
            content_type: header(&parts.headers, header::CONTENT_TYPE.as_str()),
            version: header(&parts.headers, "x-backendai-version").unwrap_or_default(),
        };
        let from = crate::throttle::source(&parts.extensions);
        let owner = owner_of(state, &credential.access_key, from).await?;
        let expected = signed.signature(&backendai.secret_of(&credential.access_key), date);
        if !bool::from(expected.ct_eq(&credential.signature)) {
            // A key guessed at too often is refused outright for a while.
            state
                .throttle
                .signature_failed(&credential.access_key)
                .map_err(|t| Problem::too_many(t.retry_after_secs()))?;
            return Err(Problem::auth_failed(
                "the signature does not match the request (check the secret key, the endpoint \
                 and any proxy that rewrites the path or Host)",
            ));
        }
        if !backendai.first_use(credential.signature, Instant::now()) {
            return Err(Problem::auth_failed(
                "this signature was already used: a request is honoured once",
            ));
        }
        Ok(BackendAiCaller {
            owner,
            access_key: credential.access_key,
        })
    }
}

/// The holder of `access_key`, from the key cache while fresh, else from the ledger (a
/// lookup counted against `from`'s budget, 429 over it); 401 when nobody holds it, it was
/// revoked or its holder is disabled.
async fn owner_of(
    state: &AppState,
    access_key: &str,
    from: std::net::IpAddr,
) -> Result<KeyOwner, Problem> {
    let cached = BackendAiKeys::cache_key(access_key);
    if let Some(owner) = state
        .keys
        .fresh(&cached, crate::caller::bus_connected(state))
    {
        return Ok(owner);
    }
    state
        .throttle
        .key_lookup(from)
        .map_err(|t| Problem::too_many(t.retry_after_secs()))?;
    let client = state.pool.get().await?;
    let owner = events::ledger::backendai_key_owner(&client, access_key)
        .await?
        .ok_or_else(|| {
            Problem::auth_failed("unknown or revoked access key, or its holder is disabled")
        })?;
    state.keys.keep(cached, owner.clone(), None);
    Ok(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "example-secret-key-0123456789abcdefghijk";
    const DATE: &str = "2026-11-22T08:04:25.809865+00:00";

    fn signed<'a>(method: &'a str, target: &'a str, content_type: Option<&'a str>) -> Signed<'a> {
        Signed {
            method,
            target,
            date: DATE,
            host: "127.0.0.1:8480",
            content_type,
            version: API_VERSION,
        }
    }

    fn hex_signature(s: &Signed<'_>) -> String {
        hex::encode(s.signature(SECRET, parse_date(s.date).unwrap()))
    }

    /// The vectors are what Backend.AI's own client (23.09.10) sent, captured on the wire
    /// (`shared/notes/backendai-compat.md`).
    #[test]
    fn the_signatures_of_backend_ai_s_client_verify() {
        assert_eq!(
            hex_signature(&signed("GET", "/session/bai1/logs", Some("text/plain"))),
            "403090f36b2ad6d3133375358422977bd7ec5360f04446229774d3b84d1ed8f6"
        );
        assert_eq!(
            hex_signature(&signed("POST", "/session", Some("application/json"))),
            "cdec26ec1fd7709420894e311a477f5d47a59e41e957e519c87f16d3e58c6e49"
        );
        // An event stream is requested without a Content-Type; it signs as octet-stream.
        assert_eq!(
            hex_signature(&signed(
                "GET",
                "/events/session?sessionName=bai1&scope=*",
                None
            )),
            "cdca7f124bccff8ae59a1c57348a62217aa5523d5ced55d4b3763f64e785ddfe"
        );
    }

    #[test]
    fn a_changed_path_query_host_date_or_secret_changes_the_signature() {
        let good = signed("GET", "/session/bai1/logs", Some("text/plain"));
        let base = hex_signature(&good);
        let variants = [
            Signed {
                target: "/session/bai2/logs",
                ..good
            },
            Signed {
                target: "/session/bai1/logs?x=1",
                ..good
            },
            Signed {
                host: "127.0.0.1:8481",
                ..good
            },
            Signed {
                method: "DELETE",
                ..good
            },
            Signed {
                version: "v6.20220615",
                ..good
            },
            Signed {
                content_type: Some("application/json"),
                ..good
            },
        ];
        for v in variants {
            assert_ne!(hex_signature(&v), base, "{v:?}");
        }
        let other_date = "2026-11-22T08:04:25.809866+00:00";
        let moved = Signed {
            date: other_date,
            ..good
        };
        assert_ne!(hex_signature(&moved), base);
        assert_ne!(
            hex::encode(good.signature("another secret", parse_date(DATE).unwrap())),
            base
        );
        // Parameters of the media type are not signed; its case is not either.
        let with_charset = Signed {
            content_type: Some("Text/Plain; charset=utf-8"),
            ..good
        };
        assert_eq!(hex_signature(&with_charset), base);
    }

    #[test]
    fn the_authorization_header_written_is_the_one_read() {
        let date = client_date(parse_date(DATE).unwrap().with_timezone(&Utc));
        assert_eq!(date, DATE);
        let header = signed("POST", "/session", Some("application/json"))
            .authorization("AKIAEXAMPLEKEY000001", SECRET)
            .unwrap();
        let c = parse_authorization(&header).unwrap();
        assert_eq!(c.access_key, "AKIAEXAMPLEKEY000001");
        assert_eq!(
            hex::encode(c.signature),
            "cdec26ec1fd7709420894e311a477f5d47a59e41e957e519c87f16d3e58c6e49"
        );
    }

    #[test]
    fn the_authorization_header_is_read_as_the_client_writes_it() {
        let sig = "403090f36b2ad6d3133375358422977bd7ec5360f04446229774d3b84d1ed8f6";
        let c = parse_authorization(&format!(
            "BackendAI signMethod=HMAC-SHA256, credential=AKIAEXAMPLEKEY000001:{sig}"
        ))
        .unwrap();
        assert_eq!(c.access_key, "AKIAEXAMPLEKEY000001");
        assert_eq!(hex::encode(c.signature), sig);
        for bad in [
            "Bearer x".to_owned(),
            format!("BackendAI signMethod=HMAC-SHA1, credential=AK:{sig}"),
            "BackendAI signMethod=HMAC-SHA256, credential=AK:nothex".to_owned(),
            format!("BackendAI signMethod=HMAC-SHA256, credential=A-K:{sig}"),
            "BackendAI signMethod=HMAC-SHA256".to_owned(),
        ] {
            let problem = parse_authorization(&bad).unwrap_err();
            assert_eq!(problem.status, 400, "{bad}");
            assert_eq!(problem.slug, "invalid-auth-params");
        }
    }

    #[test]
    fn a_date_more_than_fifteen_minutes_off_is_refused() {
        let date = parse_date(DATE).unwrap();
        let at = date.with_timezone(&Utc);
        assert!(check_skew(date, at + TimeDelta::minutes(15)).is_ok());
        assert!(check_skew(date, at - TimeDelta::minutes(15)).is_ok());
        let late = check_skew(date, at + TimeDelta::minutes(16)).unwrap_err();
        assert_eq!(
            (late.status.as_u16(), late.slug),
            (400, "invalid-auth-params")
        );
        assert!(check_skew(date, at - TimeDelta::minutes(16)).is_err());
        // Other spellings a client may use.
        assert_eq!(parse_date("2026-11-22T08:04:25.809865").unwrap(), date);
        assert!(parse_date("Sun, 22 Nov 2026 08:04:25 +0000").is_ok());
        assert!(parse_date("yesterday").is_err());
    }

    #[test]
    fn the_day_of_the_key_is_the_date_s_own() {
        // 23:30 at -05:00 is the next day in UTC: the key uses the day the header says.
        let s = Signed {
            date: "2026-11-22T23:30:00-05:00",
            ..signed("GET", "/", Some("text/plain"))
        };
        let date = parse_date(s.date).unwrap();
        let day = hmac(SECRET.as_bytes(), b"20261122");
        let key = hmac(
            &hmac(&day, s.host.as_bytes()),
            s.string_to_sign().as_bytes(),
        );
        assert_eq!(s.signature(SECRET, date), key);
    }
}
