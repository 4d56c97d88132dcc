//! The agent's reads and writes of PostgreSQL, as typed functions: the only place in this
//! crate that writes SQL (the workspace's tidy test checks it). Events go through
//! `events::ledger`. Rule 8 of the brief wants agents off the database entirely (they are to
//! speak only NATS); until then, every statement an agent makes is here, in one place to move.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::{GenericClient, Pool};
use events::ledger::LedgerError;
use events::payloads::SessionStatus;
use uuid::Uuid;

/// Replaces a kernel's kept output with `text`.
pub async fn replace_logs(
    pool: &Pool,
    session_id: Uuid,
    kernel: i32,
    text: &str,
    complete: bool,
) -> Result<(), LedgerError> {
    let sql = "INSERT INTO session_logs (session_id, kernel, content, complete) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session_id, kernel) DO UPDATE SET content = $3, complete = $4, updated_at = now()";
    keep_logs(pool, sql, session_id, kernel, text, complete).await
}

/// Appends `text` to a kernel's kept output.
pub async fn append_logs(
    pool: &Pool,
    session_id: Uuid,
    kernel: i32,
    text: &str,
    complete: bool,
) -> Result<(), LedgerError> {
    let sql =
        "INSERT INTO session_logs (session_id, kernel, content, complete) VALUES ($1, $2, $3, $4)
         ON CONFLICT (session_id, kernel) DO UPDATE
           SET content = session_logs.content || $3, complete = $4, updated_at = now()";
    keep_logs(pool, sql, session_id, kernel, text, complete).await
}

/// Runs one of the two statements above.
async fn keep_logs(
    pool: &Pool,
    sql: &str,
    session_id: Uuid,
    kernel: i32,
    text: &str,
    complete: bool,
) -> Result<(), LedgerError> {
    let client = pool.get().await?;
    client
        .execute(sql, &[&session_id, &kernel, &text, &complete])
        .await?;
    Ok(())
}

/// One sample of a session's resource usage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSample {
    pub cpu_seconds: f64,
    pub cpu_percent: Option<f64>,
    pub memory_bytes: i64,
    pub rx_bytes: i64,
    pub tx_bytes: i64,
}

/// Keeps `sample` as the session's latest usage.
pub async fn keep_usage(
    pool: &Pool,
    session_id: Uuid,
    sample: UsageSample,
) -> Result<(), LedgerError> {
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO session_usage (session_id, cpu_seconds, cpu_percent, memory_bytes, rx_bytes, tx_bytes)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (session_id) DO UPDATE SET cpu_seconds = $2, cpu_percent = $3,
               memory_bytes = $4, rx_bytes = $5, tx_bytes = $6, sampled_at = now()",
            &[
                &session_id,
                &sample.cpu_seconds,
                &sample.cpu_percent,
                &sample.memory_bytes,
                &sample.rx_bytes,
                &sample.tx_bytes,
            ],
        )
        .await?;
    Ok(())
}

/// Sessions placed on `agent_id` that hold resources, with their status names.
pub async fn holding_sessions(
    client: &impl GenericClient,
    agent_id: &str,
) -> Result<HashMap<Uuid, String>, LedgerError> {
    let sql = format!(
        "SELECT session_id, status FROM ledger.sessions WHERE agent_id = $1 AND {}",
        events::sql::holds_resources("status")
    );
    Ok(client
        .query(&sql, &[&agent_id])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// Sessions of other agents with kernels on `agent_id` (multi-node clusters), still going.
pub async fn secondaries_going(
    client: &impl GenericClient,
    agent_id: &str,
) -> Result<HashSet<Uuid>, LedgerError> {
    let going = events::sql::status_list(&[
        SessionStatus::Preparing,
        SessionStatus::Pulling,
        SessionStatus::Prepared,
        SessionStatus::Creating,
        SessionStatus::Running,
        SessionStatus::Restarting,
    ]);
    let sql = format!(
        "SELECT DISTINCT s.session_id FROM ledger.kernels k JOIN ledger.sessions s USING (session_id)
         WHERE k.agent_id = $1 AND s.agent_id <> $1 AND s.status IN ({going})"
    );
    Ok(client
        .query(&sql, &[&agent_id])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// What the agent's loop has to look at: its sessions to start (`SCHEDULED`) or stop
/// (`TERMINATING`), the `tracked` ones with their status, and sessions of other agents with
/// a kernel here that are creating or running (status `SECONDARY`).
pub async fn work(
    pool: &Pool,
    agent_id: &str,
    tracked: &[Uuid],
) -> Result<Vec<(Uuid, String)>, LedgerError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT session_id, status FROM ledger.sessions
             WHERE (agent_id = $1 AND status IN ('SCHEDULED', 'TERMINATING')) OR session_id = ANY($2)
             UNION ALL
             SELECT DISTINCT s.session_id, 'SECONDARY' FROM ledger.kernels k
               JOIN ledger.sessions s USING (session_id)
             WHERE k.agent_id = $1 AND s.agent_id <> $1 AND s.status IN ('CREATING', 'RUNNING')",
            &[&agent_id, &tracked],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// A session with a kernel on a simulated agent, as its loop sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedWork {
    pub session_id: Uuid,
    pub status: String,
    pub session_type: String,
    pub secs_in_status: f64,
}

/// Sessions with a kernel on `agent_id` that a simulated agent moves on.
pub async fn simulated_work(
    pool: &Pool,
    agent_id: &str,
) -> Result<Vec<SimulatedWork>, LedgerError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT DISTINCT s.session_id, s.status, s.session_type,
                    extract(epoch FROM now() - s.status_since)::float8
             FROM ledger.sessions s JOIN ledger.kernels k USING (session_id)
             WHERE k.agent_id = $1 AND s.status IN ('SCHEDULED', 'RUNNING', 'TERMINATING')",
            &[&agent_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| SimulatedWork {
            session_id: r.get(0),
            status: r.get(1),
            session_type: r.get(2),
            secs_in_status: r.get(3),
        })
        .collect())
}
