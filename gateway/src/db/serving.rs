//! Model endpoints' tokens, by the SHA-256 of each (`serving.tokens`, the gateway's own
//! schema, `migrations/0003_serving.sql`, written here alone), the calls each gateway
//! reports (`serving.traffic`), the replicas' latest use samples (`recorder.session_usage`,
//! kept by the recorder), and the advisory lock that lets one gateway at a time run the
//! endpoints' replicas. The endpoints themselves are read from their streams
//! (`crate::serving`).

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use domain::payloads::EndpointTokenIssued;
use events::catalogue::Event;
use events::ledger;
use events::store::ExpectedVersion;
use uuid::Uuid;

use crate::error::ApiError;

/// Key of the session-level advisory lock held by the gateway that runs the endpoints'
/// replicas (their launches, removals and health checks).
const SERVING_LOCK: i64 = 0x6265_7274_6873_7276; // "berthsrv"

/// Takes the serving lock on `client` if no other session holds it; it is held until the
/// connection closes (or the lock is let go), so the holder keeps `client` while it leads.
pub async fn try_lead(client: &Object) -> Result<bool, ApiError> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&SERVING_LOCK])
        .await?;
    Ok(row.get(0))
}

/// Keeps a token's `digest` for endpoint `issued.endpoint_id` and records that it was made
/// (`EndpointTokenIssued`, against the endpoint stream's `version`), in one transaction;
/// `false`, with nothing kept, when the stream moved past `version` meanwhile.
pub async fn keep_token(
    pool: &Pool,
    stream: &str,
    version: u64,
    issued: EndpointTokenIssued,
    digest: &[u8],
    metadata: &events::Metadata,
) -> Result<bool, ApiError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute(
        "INSERT INTO serving.tokens (token_id, endpoint_id, digest, expires_at)
         VALUES ($1, $2, $3, $4)",
        &[
            &issued.token_id,
            &issued.endpoint_id,
            &digest,
            &issued.expires_at,
        ],
    )
    .await?;
    match ledger::record(
        &tx,
        stream,
        ExpectedVersion::Exact(version),
        &[Event::EndpointTokenIssued(issued)],
        metadata,
    )
    .await
    {
        // Dropped uncommitted: the row goes with it.
        Err(e) if e.is_conflict() => return Ok(false),
        other => other?,
    };
    tx.commit().await?;
    Ok(true)
}

/// The endpoint and expiry of the token whose digest is `digest`, if one is kept.
pub async fn token(pool: &Pool, digest: &[u8]) -> Result<Option<(Uuid, DateTime<Utc>)>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT endpoint_id, expires_at FROM serving.tokens WHERE digest = $1",
            &[&digest],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Forgets the tokens of endpoint `endpoint` (it was destroyed).
pub async fn forget_tokens(pool: &Pool, endpoint: Uuid) -> Result<(), ApiError> {
    let client = pool.get().await?;
    client
        .execute(
            "DELETE FROM serving.tokens WHERE endpoint_id = $1",
            &[&endpoint],
        )
        .await?;
    Ok(())
}

/// Keeps this gateway's (`gateway`) calls of each endpoint lately: requests per second and
/// requests under way, by endpoint.
pub async fn report_traffic(
    pool: &Pool,
    gateway: Uuid,
    rows: &[(Uuid, f64, i32)],
) -> Result<(), ApiError> {
    if rows.is_empty() {
        return Ok(());
    }
    let endpoints: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
    let rates: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let outstanding: Vec<i32> = rows.iter().map(|r| r.2).collect();
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO serving.traffic (gateway_id, endpoint_id, requests_per_second, outstanding, at)
             SELECT $1, e, r, o, now() FROM unnest($2::uuid[], $3::float8[], $4::int4[]) AS t(e, r, o)
             ON CONFLICT (gateway_id, endpoint_id) DO UPDATE
             SET requests_per_second = excluded.requests_per_second,
                 outstanding = excluded.outstanding, at = excluded.at",
            &[&gateway, &endpoints, &rates, &outstanding],
        )
        .await?;
    Ok(())
}

/// Every endpoint's calls lately, summed over the gateways that reported within `fresh`:
/// requests per second and requests under way.
pub async fn traffic(
    pool: &Pool,
    fresh: std::time::Duration,
) -> Result<std::collections::HashMap<Uuid, (f64, f64)>, ApiError> {
    let client = pool.get().await?;
    let seconds = fresh.as_secs_f64();
    // Prepared once per connection: the autoscaler asks several times a second.
    let statement = client
        .prepare_cached(
            "SELECT endpoint_id, sum(requests_per_second), sum(outstanding)::float8
             FROM serving.traffic WHERE at > now() - make_interval(secs => $1)
             GROUP BY endpoint_id",
        )
        .await?;
    let rows = client.query(&statement, &[&seconds]).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect())
}

/// The latest use sample of each of `sessions` taken within `fresh`: percent of one core,
/// and percent GPU utilization where its GPUs were measured.
pub async fn replica_use(
    pool: &Pool,
    sessions: &[Uuid],
    fresh: std::time::Duration,
) -> Result<std::collections::BTreeMap<Uuid, domain::serving::ReplicaUse>, ApiError> {
    if sessions.is_empty() {
        return Ok(Default::default());
    }
    let client = pool.get().await?;
    let seconds = fresh.as_secs_f64();
    let rows = client
        .query(
            "SELECT session_id, cpu_percent, gpu_percent FROM recorder.session_usage
             WHERE session_id = ANY($1) AND sampled_at > now() - make_interval(secs => $2)",
            &[&sessions, &seconds],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let sample = domain::serving::ReplicaUse {
                cpu_percent: r.get(1),
                gpu_percent: r.get(2),
            };
            (r.get(0), sample)
        })
        .collect())
}
