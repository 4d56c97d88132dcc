//! The app proxy's reads: its open circuits with their sessions' status, the ports they hold,
//! and the secret an app was started with, from the ledger (`ledger.circuits`,
//! `ledger.sessions`, `ledger.app_services`, written by `events::ledger`).

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

/// The secret app `app` of `session` was started with, if berth started it.
pub async fn app_token(pool: &Pool, session: Uuid, app: &str) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT token FROM ledger.app_services WHERE session_id = $1 AND app = $2",
            &[&session, &app],
        )
        .await?;
    Ok(row.and_then(|r| r.get(0)))
}
