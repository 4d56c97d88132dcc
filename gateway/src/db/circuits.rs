//! The app proxy's reads: its open circuits with their sessions' status, the ports they hold,
//! and the secret an app was started with, from the ledger (`ledger.circuits`,
//! `ledger.sessions`, `ledger.app_services`, written by `events::ledger`); and its passes,
//! the tickets and cookies every gateway honours (`proxy.tickets`, `proxy.cookies`, the
//! gateway's own schema, written here alone: `migrations/0001_app_passes.sql`).

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;

/// An open circuit of the app proxy, as the ledger keeps it, with its session's status.
#[derive(Debug, Clone)]
pub struct CircuitRow {
    pub circuit_id: Uuid,
    pub session_id: Uuid,
    pub owner: Uuid,
    pub app: String,
    pub container_port: u16,
    pub port: u16,
    pub admission: domain::apps::Admission,
    /// `None` when the ledger has no such session.
    pub session_status: Option<String>,
}

/// Open circuits: all of them, or those of `session` (of `app` only, when given), oldest first.
pub async fn circuits(
    pool: &Pool,
    session: Option<Uuid>,
    app: Option<&str>,
) -> Result<Vec<CircuitRow>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT c.circuit_id, c.session_id, c.owner, c.app, c.container_port, c.port,
                    c.admission, s.status
             FROM ledger.circuits c LEFT JOIN ledger.sessions s USING (session_id)
             WHERE ($1::uuid IS NULL OR c.session_id = $1) AND ($2::text IS NULL OR c.app = $2)
             ORDER BY c.opened_at",
            &[&session, &app],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CircuitRow {
            circuit_id: row.get(0),
            session_id: row.get(1),
            owner: row.get(2),
            app: row.get(3),
            container_port: row.get::<_, i32>(4) as u16,
            port: row.get::<_, i32>(5) as u16,
            // Written by the ledger's fold from a typed event: it reads back.
            admission: serde_json::from_value(row.get(6)).unwrap_or(domain::apps::Admission {
                public: false,
                allowed: Vec::new(),
            }),
            session_status: row.get(7),
        })
        .collect())
}

/// The proxy ports the ledger's open circuits hold (this gateway's and any other's).
pub async fn circuit_ports(pool: &Pool) -> Result<Vec<u16>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query("SELECT port FROM ledger.circuits", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get::<_, i32>(0) as u16).collect())
}

/// The session and port of open circuit `id`.
pub async fn circuit(pool: &Pool, id: Uuid) -> Result<Option<(Uuid, u16)>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT session_id, port FROM ledger.circuits WHERE circuit_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get::<_, i32>(1) as u16)))
}

/// The secret app `app` of `session` was started with, if berth started it (kept apart from
/// the log, in `secrets.app_tokens`).
pub async fn app_token(pool: &Pool, session: Uuid, app: &str) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT token FROM secrets.app_tokens WHERE session_id = $1 AND app = $2",
            &[&session, &app],
        )
        .await?;
    Ok(row.and_then(|r| r.get(0)))
}

/// The private half of the SSH key the session's agent installed in it (kept apart from the
/// log, in `secrets.ssh_keys`, until the session gives back its resources).
pub async fn ssh_key(pool: &Pool, session: Uuid) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT private_key FROM secrets.ssh_keys WHERE session_id = $1",
            &[&session],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Keeps a ticket (the SHA-256 of its secret) for `circuit_id` for `ttl`, and drops the
/// tickets whose time is past.
pub async fn mint_ticket(
    pool: &Pool,
    digest: &[u8; 32],
    circuit_id: Uuid,
    ttl: std::time::Duration,
) -> Result<(), ApiError> {
    let client = pool.get().await?;
    client
        .execute("DELETE FROM proxy.tickets WHERE expires_at < now()", &[])
        .await?;
    let ttl_secs = ttl.as_secs_f64();
    client
        .execute(
            "INSERT INTO proxy.tickets (ticket_sha256, circuit_id, expires_at)
             VALUES ($1, $2, now() + make_interval(secs => $3::float8))",
            &[&digest.as_slice(), &circuit_id, &ttl_secs],
        )
        .await?;
    Ok(())
}

/// Takes the ticket `digest` for `circuit_id`: true once, within its time, whichever gateway
/// asks (the row goes with the first).
pub async fn redeem_ticket(
    pool: &Pool,
    digest: &[u8; 32],
    circuit_id: Uuid,
) -> Result<bool, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "DELETE FROM proxy.tickets WHERE ticket_sha256 = $1
             RETURNING circuit_id = $2 AND expires_at > now()",
            &[&digest.as_slice(), &circuit_id],
        )
        .await?;
    Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
}

/// Keeps a cookie (the SHA-256 of its secret) a login handed out for `circuit_id`.
pub async fn keep_cookie(pool: &Pool, digest: &[u8; 32], circuit_id: Uuid) -> Result<(), ApiError> {
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO proxy.cookies (cookie_sha256, circuit_id) VALUES ($1, $2)",
            &[&digest.as_slice(), &circuit_id],
        )
        .await?;
    Ok(())
}

/// Whether the cookie `digest` was handed out for `circuit_id` (by any gateway).
pub async fn cookie_issued(
    pool: &Pool,
    digest: &[u8; 32],
    circuit_id: Uuid,
) -> Result<bool, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT 1 FROM proxy.cookies WHERE cookie_sha256 = $1 AND circuit_id = $2",
            &[&digest.as_slice(), &circuit_id],
        )
        .await?;
    Ok(row.is_some())
}

/// Forgets the tickets and cookies of a closed circuit.
pub async fn forget_passes(pool: &Pool, circuit_id: Uuid) -> Result<(), ApiError> {
    let client = pool.get().await?;
    client
        .execute(
            "DELETE FROM proxy.tickets WHERE circuit_id = $1",
            &[&circuit_id],
        )
        .await?;
    client
        .execute(
            "DELETE FROM proxy.cookies WHERE circuit_id = $1",
            &[&circuit_id],
        )
        .await?;
    Ok(())
}
