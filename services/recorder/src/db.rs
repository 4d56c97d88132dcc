//! The statements this crate makes, as typed functions: the only place in it that writes
//! SQL (the workspace's tidy test checks it). Events go through `events::ledger`; what agents
//! send that is not history (logs, usage, liveness) is kept in schema `recorder`, which the
//! crate migrates itself ([`MIGRATIONS`]).

use bus::protocol::{FolderUsage, LiveSession, LogChunk, SshKey, UsageSample};
use deadpool_postgres::{GenericClient, Pool};
use events::ledger::LedgerError;
use events::payloads::{ContainerFence, SessionStatus};
use events::store::Migration;
use uuid::Uuid;

/// The schema `recorder`, for `events::store::migrate` (component `recorder`).
pub const MIGRATIONS: &[Migration] = &[
    (
        "recorder",
        1,
        include_str!("../migrations/0001_recorder.sql"),
    ),
    (
        "recorder",
        2,
        include_str!("../migrations/0002_log_chunks.sql"),
    ),
    (
        "recorder",
        3,
        include_str!("../migrations/0003_folder_usage.sql"),
    ),
    (
        "recorder",
        4,
        include_str!("../migrations/0004_usage_series.sql"),
    ),
];

/// The session's status now, if report `report_id` has been recorded on it.
pub async fn recorded_status(
    pool: &Pool,
    session_id: Uuid,
    report_id: Uuid,
) -> Result<Option<SessionStatus>, LedgerError> {
    let client = pool.get().await?;
    let stream = events::catalogue::stream_id("session", session_id);
    // Asked before every report is recorded: prepared once per connection.
    let statement = client
        .prepare_cached(
            "SELECT s.status FROM ledger.sessions s
             WHERE s.session_id = $1 AND EXISTS (
               SELECT 1 FROM events e WHERE e.stream_id = $2
                 AND e.metadata->>'causation_id' = $3)",
        )
        .await?;
    let row = client
        .query_opt(&statement, &[&session_id, &stream, &report_id.to_string()])
        .await?;
    Ok(row.and_then(|r| SessionStatus::parse(r.get(0))))
}

/// The live sessions with kernels on `agent_id`: those it holds resources for as their main
/// agent, and other agents' clusters with a kernel here that are still going.
pub async fn live_sessions(pool: &Pool, agent_id: &str) -> Result<Vec<LiveSession>, LedgerError> {
    let client = pool.get().await?;
    let going = events::sql::status_list(&[
        SessionStatus::Preparing,
        SessionStatus::Pulling,
        SessionStatus::Prepared,
        SessionStatus::Creating,
        SessionStatus::Running,
        SessionStatus::Restarting,
    ]);
    let sql = format!(
        "SELECT session_id, status, true FROM ledger.sessions WHERE agent_id = $1 AND {}
         UNION
         SELECT DISTINCT s.session_id, s.status, false FROM ledger.kernels k
           JOIN ledger.sessions s USING (session_id)
         WHERE k.agent_id = $1 AND s.agent_id <> $1 AND s.status IN ({going})",
        events::sql::holds_resources("status")
    );
    let rows = client.query(&sql, &[&agent_id]).await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(LiveSession {
                session_id: r.get(0),
                status: SessionStatus::parse(r.get(1))?,
                main: r.get(2),
            })
        })
        .collect())
}

/// The agents holding kernels of a session as the ledger has them now, each with whether
/// it is the session's main agent.
pub async fn kernel_holders(
    client: &impl GenericClient,
    session_id: Uuid,
) -> Result<Vec<(String, bool)>, LedgerError> {
    let rows = client
        .query(
            "SELECT DISTINCT k.agent_id, k.agent_id = s.agent_id FROM ledger.kernels k
               JOIN ledger.sessions s USING (session_id)
             WHERE k.session_id = $1",
            &[&session_id],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// How many times session stream `stream_id` gave back its resources before its event
/// `version`: which placement a release ends. Counted on the log's rows, without decoding
/// the session's events; prepared once per connection (once per session that ends).
pub async fn releases_before(
    client: &impl GenericClient,
    stream_id: &str,
    version: u64,
) -> Result<u32, LedgerError> {
    let statement = client
        .prepare_cached(
            "SELECT count(*) FROM events
             WHERE stream_id = $1 AND stream_version < $2
               AND event_type = 'SessionResourcesReleased'",
        )
        .await?;
    let count: i64 = client
        .query_one(&statement, &[&stream_id, &(version as i64)])
        .await?
        .get(0);
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

/// What became of a chunk of output offered to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Appended, or it replaced an older reading.
    Now,
    /// Held already (a redelivery), or of an older reading: nothing to do.
    Already,
    /// It starts past what is held of its reading: an earlier chunk is still to come.
    Early,
}

/// Keeps a chunk of a kernel's output: appended at the end of what is held of the same
/// reading (`epoch`), or, as a later reading's first chunk, in place of an older one. The
/// header (`session_logs`) counts the reading's bytes; the text is a row of
/// `session_log_chunks` at its offset; chunks wholly older than the kernel's cap (the
/// chunk's `keep_bytes`, within [`ContainerFence`]'s bounds) are deleted, in the same
/// transaction.
pub async fn keep_log_chunk(pool: &Pool, chunk: &LogChunk) -> Result<Kept, LedgerError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let kernel = chunk.kernel as i32;
    let offset = i64::try_from(chunk.offset).unwrap_or(i64::MAX);
    let cap = chunk
        .keep_bytes
        .unwrap_or(ContainerFence::DEFAULT_LOG_BYTES)
        .clamp(
            ContainerFence::LEAST_LOG_BYTES,
            ContainerFence::MOST_LOG_BYTES,
        ) as i64;
    let params: [&(dyn deadpool_postgres::tokio_postgres::types::ToSql + Sync); 6] = [
        &chunk.session_id,
        &kernel,
        &chunk.text,
        &chunk.complete,
        &chunk.epoch,
        &offset,
    ];
    // The header moves on: `(kept_bytes, replaced)` after it, when the chunk is the next.
    let moved = tx
        .query_opt(
            "UPDATE recorder.session_logs l SET
               kept_bytes = CASE WHEN l.epoch = $5 THEN l.kept_bytes + octet_length($3)
                                 ELSE octet_length($3) END,
               complete = $4, epoch = $5, updated_at = now(), cap_bytes = $7
             WHERE l.session_id = $1 AND l.kernel = $2
               AND ((l.epoch = $5 AND l.kept_bytes = $6)
                    OR ($6 = 0 AND (l.epoch IS NULL OR l.epoch < $5)))
             RETURNING l.kept_bytes, $6 = 0",
            &[
                params[0], params[1], params[2], params[3], params[4], params[5], &cap,
            ],
        )
        .await?;
    let kept = match moved {
        Some(row) => {
            if row.get::<_, bool>(1) {
                // A later reading's first chunk: the older reading's text goes.
                tx.execute(
                    "DELETE FROM recorder.session_log_chunks WHERE session_id = $1 AND kernel = $2",
                    &[&chunk.session_id, &kernel],
                )
                .await?;
            }
            Some(row.get::<_, i64>(0))
        }
        None if offset == 0 => tx
            .query_opt(
                "INSERT INTO recorder.session_logs (session_id, kernel, content, complete, epoch, kept_bytes, cap_bytes)
                 SELECT $1::uuid, $2::int4, '', $4::bool, $5::uuid, octet_length($3::text), $7::int8
                 WHERE $6::int8 = 0
                 ON CONFLICT (session_id, kernel) DO NOTHING
                 RETURNING kept_bytes",
                &[
                    params[0], params[1], params[2], params[3], params[4], params[5], &cap,
                ],
            )
            .await?
            .map(|r| r.get::<_, i64>(0)),
        None => None,
    };
    if let Some(total) = kept {
        if !chunk.text.is_empty() {
            tx.execute(
                "INSERT INTO recorder.session_log_chunks (session_id, kernel, start, content)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session_id, kernel, start) DO UPDATE SET content = $4",
                &[&chunk.session_id, &kernel, &offset, &chunk.text],
            )
            .await?;
        }
        tx.execute(
            "DELETE FROM recorder.session_log_chunks
             WHERE session_id = $1 AND kernel = $2 AND start + octet_length(content) <= $3",
            &[&chunk.session_id, &kernel, &(total - cap)],
        )
        .await?;
        tx.commit().await?;
        return Ok(Kept::Now);
    }
    let held = tx
        .query_opt(
            "SELECT epoch, kept_bytes FROM recorder.session_logs WHERE session_id = $1 AND kernel = $2",
            &[&chunk.session_id, &kernel],
        )
        .await?;
    Ok(match held {
        None => Kept::Early,
        Some(row)
            if row.get::<_, Option<Uuid>>(0) == Some(chunk.epoch)
                && row.get::<_, i64>(1) < offset =>
        {
            Kept::Early
        }
        Some(_) => Kept::Already,
    })
}

/// Keeps `token`, the secret app `app` of `session_id` was started with, in
/// `secrets.app_tokens` (out of the log; the last one reported wins).
pub async fn keep_app_token(
    pool: &Pool,
    session_id: Uuid,
    app: &str,
    token: &str,
) -> Result<(), LedgerError> {
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO secrets.app_tokens VALUES ($1, $2, $3)
             ON CONFLICT (session_id, app) DO UPDATE SET token = $3",
            &[&session_id, &app, &token],
        )
        .await?;
    Ok(())
}

/// Keeps a usage sample unless a later one is kept already, and in the session's series
/// (`domain::usage`: its minute and hour buckets, the day's minutes and the last 90 days' hours
/// kept).
pub async fn keep_usage(pool: &Pool, sample: &UsageSample) -> Result<(), LedgerError> {
    let client = pool.get().await?;
    let network = sample.rx_bytes.saturating_add(sample.tx_bytes);
    let [(minute, minute_bucket), (hour, hour_bucket)] = events::usage::buckets(sample.sampled_at);
    // One statement: the sample into its minute and its hour, and what aged out (minutes older
    // than a day, hours past the most kept) gone.
    client
        .execute(
            "WITH aged AS (
               DELETE FROM recorder.usage_series
               WHERE session_id = $1
                 AND ((width_secs = $2 AND bucket < $11) OR (width_secs = $4 AND bucket < $12)))
             INSERT INTO recorder.usage_series AS s VALUES
               ($1, $2, $3, $6, $7, $8, $9, $10), ($1, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (session_id, width_secs, bucket) DO UPDATE SET sampled_at = $6,
               cpu_percent = $7, memory_bytes = $8, network_bytes = $9, gpu_percent = $10
             WHERE s.sampled_at <= $6",
            &[
                &sample.session_id,
                &minute,
                &minute_bucket,
                &hour,
                &hour_bucket,
                &sample.sampled_at,
                &sample.cpu_percent,
                &sample.memory_bytes,
                &network,
                &sample.gpu_percent,
                &events::usage::minutes_kept_since(sample.sampled_at),
                &(sample.sampled_at - chrono::TimeDelta::hours(events::usage::MOST_HOURS)),
            ],
        )
        .await?;
    client
        .execute(
            "INSERT INTO recorder.session_usage AS u (session_id, cpu_seconds, cpu_percent, memory_bytes, rx_bytes, tx_bytes, sampled_at,
               gpu_percent, gpu_memory_percent)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (session_id) DO UPDATE SET cpu_seconds = $2, cpu_percent = $3,
               memory_bytes = $4, rx_bytes = $5, tx_bytes = $6, sampled_at = $7,
               gpu_percent = $8, gpu_memory_percent = $9
             WHERE u.sampled_at <= $7",
            &[
                &sample.session_id,
                &sample.cpu_seconds,
                &sample.cpu_percent,
                &sample.memory_bytes,
                &sample.rx_bytes,
                &sample.tx_bytes,
                &sample.sampled_at,
                &sample.gpu_percent,
                &sample.gpu_memory_percent,
            ],
        )
        .await?;
    Ok(())
}

/// Keeps what `agent_id` measured of a folder, unless a later measurement is kept already.
pub async fn keep_folder_usage(
    pool: &Pool,
    agent_id: &str,
    usage: &FolderUsage,
) -> Result<(), LedgerError> {
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO recorder.folder_usage AS u VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (owner, folder) DO UPDATE SET volume = $3, bytes = $4, files = $5,
               measured_at = $6, agent_id = $7
             WHERE u.measured_at <= $6",
            &[
                &usage.owner,
                &usage.folder,
                &usage.volume,
                &(usage.bytes.min(i64::MAX as u64) as i64),
                &(usage.files.min(i64::MAX as u64) as i64),
                &usage.measured_at,
                &agent_id,
            ],
        )
        .await?;
    Ok(())
}

/// Keeps the SSH key `agent_id` made for a session, when the session is live and its main
/// kernel is on that agent; whether it was kept.
pub async fn keep_ssh_key(pool: &Pool, agent_id: &str, key: &SshKey) -> Result<bool, LedgerError> {
    let client = pool.get().await?;
    let kept = client
        .execute(
            &format!(
                "INSERT INTO secrets.ssh_keys
                 SELECT s.session_id, $3 FROM ledger.sessions s
                  WHERE s.session_id = $1 AND s.agent_id = $2 AND {}
                 ON CONFLICT (session_id) DO UPDATE SET private_key = $3",
                events::sql::is_live("s.status")
            ),
            &[&key.session_id, &agent_id, &key.private_key],
        )
        .await?;
    Ok(kept == 1)
}

/// Whether `agent_id` runs the session's main kernel or has started one of its kernels.
pub async fn has_kernel_on(
    pool: &Pool,
    session_id: Uuid,
    agent_id: &str,
) -> Result<bool, LedgerError> {
    let client = pool.get().await?;
    let stream = events::catalogue::stream_id("session", session_id);
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM ledger.sessions WHERE session_id = $1 AND agent_id = $2)
                 OR EXISTS (SELECT 1 FROM events WHERE stream_id = $3
                              AND event_type = 'KernelStarted' AND payload->>'agent_id' = $2)",
            &[&session_id, &agent_id, &stream],
        )
        .await?;
    Ok(row.get(0))
}

/// The credential an admin stored for the registry of the session's image, when the session
/// is live and holds shares on `agent_id` (it is placed there): `None` otherwise, or when
/// none is stored.
pub async fn pull_login(
    pool: &Pool,
    session_id: Uuid,
    agent_id: &str,
) -> Result<Option<(String, String)>, LedgerError> {
    let client = pool.get().await?;
    let image: Option<String> = client
        .query_opt(
            &format!(
                "SELECT s.image FROM ledger.sessions s
                 WHERE s.session_id = $1 AND {}
                   AND EXISTS (SELECT 1 FROM ledger.kernels k
                               WHERE k.session_id = s.session_id AND k.agent_id = $2)",
                events::sql::is_live("s.status")
            ),
            &[&session_id, &agent_id],
        )
        .await?
        .map(|r| r.get(0));
    match image {
        Some(image) => {
            events::ledger::registry_login(&client, events::images::registry_of(&image)).await
        }
        None => Ok(None),
    }
}

/// Keeps when `agents` were last heard from (`times`, pairwise); the ids among them the
/// ledger marks lost (and not revoked or departed), which have returned. A departed agent
/// returns by registering, never by a heartbeat: one it sent before leaving may be heard
/// after.
pub async fn keep_seen(
    pool: &Pool,
    agents: &[String],
    times: &[chrono::DateTime<chrono::Utc>],
) -> Result<Vec<String>, LedgerError> {
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO recorder.agent_liveness AS l (agent_id, seen_at)
             SELECT * FROM unnest($1::text[], $2::timestamptz[])
             ON CONFLICT (agent_id) DO UPDATE SET seen_at = greatest(l.seen_at, EXCLUDED.seen_at)",
            &[&agents, &times],
        )
        .await?;
    let rows = client
        .query(
            "SELECT agent_id FROM ledger.agents
             WHERE agent_id = ANY($1) AND lost IS NOT NULL AND lost NOT LIKE 'revoked:%'
               AND NOT starts_with(lost, $2)",
            &[&agents, &events::payloads::DEPARTED],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Keeps this recorder's watch: listening without a break since `listening_since` (`None`:
/// not listening now, so the watch is withdrawn).
pub async fn keep_watch(
    pool: &Pool,
    watcher: &str,
    listening_since: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), LedgerError> {
    let client = pool.get().await?;
    match listening_since {
        Some(since) => {
            client
                .execute(
                    "INSERT INTO recorder.liveness_watch (watcher, listening_since, checked_at)
                     VALUES ($1, $2, now())
                     ON CONFLICT (watcher) DO UPDATE SET listening_since = $2, checked_at = now()",
                    &[&watcher, &since],
                )
                .await?;
        }
        None => {
            client
                .execute(
                    "DELETE FROM recorder.liveness_watch WHERE watcher = $1",
                    &[&watcher],
                )
                .await?;
        }
    }
    Ok(())
}
