//! The audit chain: proof that the log has not been altered.
//!
//! A sealer reads the log behind the horizon, in global order, and gives each event a dense
//! `audit_seq` and a hash that covers the event's stored bytes and the hash before it, kept up
//! to a thousand links to a row (`event_seal_blocks`: the events' positions and their hashes),
//! then moves the chain head (`audit_head`). Appenders never touch the
//! chain, so they never wait for each other on it; one sealer runs at a time under a
//! transaction-scoped advisory lock. `verify` recomputes the chain and names the first event
//! where it breaks: altered, deleted (one event or a whole stream), inserted behind the
//! head, or a truncated tail.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::pg::{RawJson, Xid8};
use crate::store::{LogPosition, StoreError};

const SEAL_LOCK: i64 = 0x6265_7274_685f_7331;
/// Connections that read a window's events at once.
const READERS: usize = 4;
/// Fewer events than this are read by one connection.
const MIN_PART: usize = 1_000;
const GENESIS: [u8; 32] = [0; 32];

/// The stored bytes of one event that the chain covers.
struct Link<'a> {
    position: LogPosition,
    event_id: Uuid,
    stream_id: &'a str,
    stream_version: i64,
    event_type: &'a str,
    schema_version: i32,
    payload: &'a str,
    metadata: &'a str,
    recorded_at: DateTime<Utc>,
}

impl Link<'_> {
    /// hash = SHA-256(previous hash ‖ every stored field, length-prefixed where variable).
    fn hash(&self, previous: &[u8; 32]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(previous);
        h.update(self.position.tx.to_be_bytes());
        h.update(self.position.seq.to_be_bytes());
        h.update(self.event_id.as_bytes());
        for text in [self.stream_id, self.event_type] {
            h.update((text.len() as u64).to_be_bytes());
            h.update(text.as_bytes());
        }
        h.update(self.stream_version.to_be_bytes());
        h.update(self.schema_version.to_be_bytes());
        for text in [self.payload, self.metadata] {
            h.update((text.len() as u64).to_be_bytes());
            h.update(text.as_bytes());
        }
        h.update(self.recorded_at.timestamp_micros().to_be_bytes());
        h.finalize().into()
    }
}

const LINK_COLUMNS: &str = "e.tx_id, e.seq, e.event_id, e.stream_id, e.stream_version, \
     e.event_type, e.schema_version, e.payload, e.metadata, e.recorded_at";

fn link_from_row(row: &tokio_postgres::Row, offset: usize) -> Link<'_> {
    let Xid8(tx) = row.get(offset);
    Link {
        position: LogPosition {
            tx,
            seq: row.get(offset + 1),
        },
        event_id: row.get(offset + 2),
        stream_id: row.get(offset + 3),
        stream_version: row.get(offset + 4),
        event_type: row.get(offset + 5),
        schema_version: row.get(offset + 6),
        payload: row.get::<_, RawJson>(offset + 7).0,
        metadata: row.get::<_, RawJson>(offset + 8).0,
        recorded_at: row.get(offset + 9),
    }
}

/// The chain's head: how far sealing has gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub audit_seq: i64,
    pub position: LogPosition,
    pub hash: [u8; 32],
}

/// The most links a seal block holds.
const BLOCK: usize = 1_000;

/// Consecutive links of the chain, as the sealer writes them: one row of `event_seal_blocks`.
struct Block {
    first_audit_seq: i64,
    positions: Vec<LogPosition>,
    hashes: Vec<u8>,
}

impl Block {
    fn starting(audit_seq: i64, position: LogPosition, hash: &[u8; 32]) -> Block {
        let mut block = Block {
            first_audit_seq: audit_seq,
            positions: Vec::with_capacity(BLOCK),
            hashes: Vec::with_capacity(BLOCK * 32),
        };
        block.push(position, hash);
        block
    }

    fn push(&mut self, position: LogPosition, hash: &[u8; 32]) {
        self.positions.push(position);
        self.hashes.extend_from_slice(hash);
    }

    /// Its row's columns, as `copy_rows` binds them.
    fn columns(&self) -> (i64, Vec<Xid8>, Vec<i64>, &[u8]) {
        (
            self.first_audit_seq,
            self.positions.iter().map(|p| Xid8(p.tx)).collect(),
            self.positions.iter().map(|p| p.seq).collect(),
            &self.hashes,
        )
    }
}

async fn read_head<C: deadpool_postgres::GenericClient>(
    client: &C,
) -> Result<Option<Head>, StoreError> {
    let row = client
        .query_opt(
            "SELECT audit_seq, tx_id, seq, hash FROM audit_head WHERE id = 1",
            &[],
        )
        .await?;
    Ok(row.map(|r| Head {
        audit_seq: r.get(0),
        position: LogPosition {
            tx: r.get::<_, Xid8>(1).0,
            seq: r.get(2),
        },
        hash: r.get::<_, &[u8]>(3).try_into().unwrap_or([0xff; 32]),
    }))
}

/// Seals up to `batch` events past the head. Returns how many were sealed; 0 when there was
/// nothing to seal or another sealer holds the lock.
pub async fn seal_once(pool: &Pool, batch: i64) -> Result<usize, StoreError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let locked: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&SEAL_LOCK])
        .await?
        .get(0);
    if !locked {
        return Ok(0);
    }
    let head = read_head(&tx).await?;
    let (mut audit_seq, after, mut hash) = match &head {
        Some(h) => (h.audit_seq, h.position, h.hash),
        None => (0, LogPosition::START, GENESIS),
    };
    // The window: the positions of up to `batch` events after the head, behind the horizon,
    // found on the log's key alone. Every event in it has committed and none can join it.
    let window: Vec<(Xid8, i64)> = tx
        .query(
            "SELECT tx_id, seq FROM events
             WHERE (tx_id, seq) > ($1, $2) AND tx_id < berth_log_horizon()
             ORDER BY tx_id, seq LIMIT $3",
            &[&Xid8(after.tx), &after.seq, &batch],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if window.is_empty() {
        return Ok(0);
    }
    // Its events read in contiguous parts over connections of their own, at once: rendering
    // payloads as text is most of a seal's cost, and under a full write load every backend
    // has an even share of the CPU, so one reader alone falls behind the writers.
    let position = |&(Xid8(tx), seq): &(Xid8, i64)| LogPosition { tx, seq };
    let ends: Vec<LogPosition> = window
        .chunks(window.len().div_ceil(READERS).max(MIN_PART))
        .map(|chunk| position(&chunk[chunk.len() - 1]))
        .collect();
    let read_part = |index: usize| {
        // After the part before it (or the head), up to its own last event.
        let from = if index == 0 { after } else { ends[index - 1] };
        let to = ends[index];
        async move {
            let client = pool.get().await?;
            let sql = format!(
                "SELECT {LINK_COLUMNS} FROM events e
                 WHERE (e.tx_id, e.seq) > ($1, $2) AND (e.tx_id, e.seq) <= ($3, $4)
                 ORDER BY e.tx_id, e.seq"
            );
            let statement = client.prepare_cached(&sql).await?;
            let rows = client
                .query(
                    &statement,
                    &[&Xid8(from.tx), &from.seq, &Xid8(to.tx), &to.seq],
                )
                .await?;
            Ok::<_, StoreError>(rows)
        }
    };
    let parts = futures::future::try_join_all((0..ends.len()).map(read_part)).await?;
    let rows: Vec<&tokio_postgres::Row> = parts.iter().flatten().collect();
    let mut blocks: Vec<Block> = Vec::new();
    let mut last = after;
    for row in rows.iter().copied() {
        let link = link_from_row(row, 0);
        hash = link.hash(&hash);
        audit_seq += 1;
        last = link.position;
        match blocks.last_mut() {
            Some(block) if block.positions.len() < BLOCK => block.push(link.position, &hash),
            _ => blocks.push(Block::starting(audit_seq, link.position, &hash)),
        }
    }
    let columns: Vec<_> = blocks.iter().map(Block::columns).collect();
    let block_rows: Vec<[&(dyn ToSql + Sync); 4]> = columns
        .iter()
        .map(|(first, txs, seqs, hashes)| -> [&(dyn ToSql + Sync); 4] {
            [first, txs, seqs, hashes]
        })
        .collect();
    crate::pg::copy_rows(
        &tx,
        "event_seal_blocks",
        ["first_audit_seq", "tx_ids", "seqs", "hashes"],
        &block_rows,
    )
    .await?;
    tx.execute(
        "INSERT INTO audit_head (id, audit_seq, tx_id, seq, hash, sealed_at)
         VALUES (1, $1, $2, $3, $4, now())
         ON CONFLICT (id) DO UPDATE SET audit_seq = $1, tx_id = $2, seq = $3, hash = $4, sealed_at = now()",
        &[&audit_seq, &Xid8(last.tx), &last.seq, &hash.as_slice()],
    )
    .await?;
    tx.commit().await?;
    Ok(rows.len())
}

/// The most events one pass of [`keep_sealing`] seals.
pub const WINDOW: i64 = 20_000;

/// How long [`keep_sealing`] rests after a pass that sealed less than a whole window: long
/// enough for a busy log to gather a block's worth of events, so that what a pass costs
/// whatever it seals (a transaction and its commit, the window's read, a block row) is paid
/// for many events rather than for the few that arrived while the last pass ran.
pub const GATHER: Duration = Duration::from_millis(100);

/// Seals the log until `stop`, a pass at a time: the next pass at once after a whole window
/// (a backlog is waiting), [`GATHER`] (at most `idle`) after part of one, `idle` after none.
/// The chain so trails a busy log by about a tenth of a second and a quiet one by `idle`.
pub async fn keep_sealing(
    pool: &Pool,
    idle: Duration,
    stop: &CancellationToken,
) -> Result<(), StoreError> {
    while !stop.is_cancelled() {
        let sealed = seal_once(pool, WINDOW).await? as i64;
        let rest = if sealed >= WINDOW {
            continue;
        } else if sealed > 0 {
            GATHER.min(idle)
        } else {
            idle
        };
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(rest) => {}
        }
    }
    Ok(())
}

/// Seals every event committed before the call. The horizon is cluster-wide, so a
/// transaction still open anywhere may hold sealing back for a moment: this waits for it.
/// Returns how many events were sealed.
pub async fn seal_all(pool: &Pool) -> Result<u64, StoreError> {
    let target = {
        let client = pool.get().await?;
        crate::store::last_committed(&client).await?
    };
    let mut total = 0;
    loop {
        let n = seal_once(pool, 5_000).await?;
        total += n as u64;
        if n == 0 {
            let sealed_to = head(pool).await?.map(|h| h.position);
            if sealed_to >= target {
                return Ok(total);
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// Where and how the chain is broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    /// The seal where the break shows, when there is one.
    pub audit_seq: Option<i64>,
    pub position: LogPosition,
    pub event_id: Option<Uuid>,
    pub stream_id: Option<String>,
    pub stream_version: Option<i64>,
    pub reason: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at position {}", self.position)?;
        if let Some(seq) = self.audit_seq {
            write!(f, " (audit seq {seq})")?;
        }
        if let (Some(stream), Some(version)) = (&self.stream_id, self.stream_version) {
            write!(f, ", stream {stream} version {version}")?;
        }
        if let Some(id) = self.event_id {
            write!(f, ", event {id}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The outcome of a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Seals checked.
    pub sealed: i64,
    /// The first break in log order, if any.
    pub first_break: Option<Break>,
}

/// How many links `verify` reads at a time, give or take a block: the blocks that start
/// within this many links, and their events in one query, however many links a block holds
/// (a sealer that keeps up with a trickle writes blocks of a few).
const VERIFY_STRETCH: i64 = 10_000;

/// The seal blocks after link `sealed` that start within [`VERIFY_STRETCH`] links of it, in
/// order; else the next block after a gap wider than that; none when the chain ends there.
async fn next_blocks(
    client: &deadpool_postgres::Client,
    sealed: i64,
) -> Result<Vec<Block>, StoreError> {
    const COLUMNS: &str = "first_audit_seq, tx_ids, seqs, hashes";
    let mut rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM event_seal_blocks
                 WHERE first_audit_seq > $1 AND first_audit_seq <= $1 + $2
                 ORDER BY first_audit_seq"
            ),
            &[&sealed, &VERIFY_STRETCH],
        )
        .await?;
    if rows.is_empty() {
        rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM event_seal_blocks WHERE first_audit_seq > $1
                     ORDER BY first_audit_seq LIMIT 1"
                ),
                &[&sealed],
            )
            .await?;
    }
    Ok(rows
        .iter()
        .map(|row| {
            let txs: Vec<Xid8> = row.get(1);
            let seqs: Vec<i64> = row.get(2);
            Block {
                first_audit_seq: row.get(0),
                positions: txs
                    .iter()
                    .zip(&seqs)
                    .map(|(&Xid8(tx), &seq)| LogPosition { tx, seq })
                    .collect(),
                hashes: row.get::<_, &[u8]>(3).to_vec(),
            }
        })
        .collect())
}

/// Recomputes the whole chain and compares it with the log, the seals and the head.
///
/// The seal blocks are walked in order beside the events they cover (each block covers the
/// events after the previous block's last link, up to its own last), so the first link
/// where the log and the chain disagree is found in one pass: a sealed event that is gone, an
/// event in a sealed range that no link names, an event whose bytes no longer hash to its
/// link.
pub async fn verify(pool: &Pool) -> Result<Verification, StoreError> {
    let client = pool.get().await?;
    let head = read_head(&client).await?;
    let mut hash = GENESIS;
    let mut sealed = 0i64;
    let mut previous = LogPosition::START;
    let events_sql = format!(
        "SELECT {LINK_COLUMNS} FROM events e
         WHERE (e.tx_id, e.seq) > ($1, $2) AND (e.tx_id, e.seq) <= ($3, $4)
         ORDER BY e.tx_id, e.seq"
    );
    let inserted = |link: &Link<'_>| Break {
        audit_seq: None,
        position: link.position,
        event_id: Some(link.event_id),
        stream_id: Some(link.stream_id.to_owned()),
        stream_version: Some(link.stream_version),
        reason: "event inserted: it sits behind the sealed head but was never sealed".into(),
    };
    let first_break = 'walk: loop {
        let blocks = next_blocks(&client, sealed).await?;
        let Some(end) = blocks
            .iter()
            .rev()
            .find_map(|b| b.positions.last().copied())
        else {
            break None;
        };
        // The events the blocks cover, from the last link verified to their last one.
        let rows = client
            .query(
                &events_sql,
                &[&Xid8(previous.tx), &previous.seq, &Xid8(end.tx), &end.seq],
            )
            .await?;
        let mut events = rows.iter().map(|row| link_from_row(row, 0)).peekable();
        for block in &blocks {
            let first = block.first_audit_seq;
            let at = |audit_seq: i64, position: LogPosition, reason: String| Break {
                audit_seq: Some(audit_seq),
                position,
                event_id: None,
                stream_id: None,
                stream_version: None,
                reason,
            };
            let Some(&start) = block.positions.first() else {
                break 'walk Some(at(first, previous, "an empty seal block".into()));
            };
            if first != sealed + 1 {
                break 'walk Some(at(
                    first,
                    start,
                    format!(
                        "seals {} to {} are missing: events were removed with their seals",
                        sealed + 1,
                        first - 1
                    ),
                ));
            }
            for (index, (&position, sealed_hash)) in block
                .positions
                .iter()
                .zip(block.hashes.chunks(32))
                .enumerate()
            {
                let audit_seq = first + index as i64;
                if position <= previous {
                    break 'walk Some(at(audit_seq, position, "seal is out of log order".into()));
                }
                // An event before the link's own, after the link before it: no link names it.
                if let Some(link) = events.next_if(|link| link.position < position) {
                    break 'walk Some(inserted(&link));
                }
                let Some(link) = events.next_if(|link| link.position == position) else {
                    break 'walk Some(at(
                        audit_seq,
                        position,
                        "event deleted: the seal names an event that is not in the log".into(),
                    ));
                };
                hash = link.hash(&hash);
                if hash.as_slice() != sealed_hash {
                    break 'walk Some(Break {
                        event_id: Some(link.event_id),
                        stream_id: Some(link.stream_id.to_owned()),
                        stream_version: Some(link.stream_version),
                        ..at(
                            audit_seq,
                            position,
                            "event altered: its bytes no longer hash to the sealed value (or a \
                             seal before it was removed)"
                                .into(),
                        )
                    });
                }
                previous = position;
                sealed += 1;
            }
        }
    };
    let first_break = match (first_break, &head) {
        (Some(found), _) => Some(found),
        (None, None) if sealed > 0 => Some(Break {
            audit_seq: None,
            position: previous,
            event_id: None,
            stream_id: None,
            stream_version: None,
            reason: "the chain head is missing".into(),
        }),
        (None, Some(h)) if h.audit_seq != sealed || h.hash != hash => Some(Break {
            audit_seq: Some(sealed + 1),
            position: previous,
            event_id: None,
            stream_id: None,
            stream_version: None,
            reason: format!(
                "tail truncated: the head was sealed at audit seq {} but the chain ends at {sealed}",
                h.audit_seq
            ),
        }),
        // An event after the chain's last link but behind the head was put there after
        // sealing.
        (None, Some(h)) => client
            .query_opt(
                &format!(
                    "SELECT {LINK_COLUMNS} FROM events e
                     WHERE (e.tx_id, e.seq) > ($1, $2) AND (e.tx_id, e.seq) <= ($3, $4)
                     ORDER BY e.tx_id, e.seq LIMIT 1"
                ),
                &[
                    &Xid8(previous.tx),
                    &previous.seq,
                    &Xid8(h.position.tx),
                    &h.position.seq,
                ],
            )
            .await?
            .map(|row| inserted(&link_from_row(&row, 0))),
        (None, None) => None,
    };
    Ok(Verification {
        sealed,
        first_break,
    })
}

/// The current head, for anchoring it outside the database.
pub async fn head(pool: &Pool) -> Result<Option<Head>, StoreError> {
    let client = pool.get().await?;
    read_head(&client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link<'a>(payload: &'a str) -> Link<'a> {
        Link {
            position: LogPosition { tx: 7, seq: 1 },
            event_id: Uuid::nil(),
            stream_id: "agent-a",
            stream_version: 0,
            event_type: "AgentLost",
            schema_version: 1,
            payload,
            metadata: "{}",
            recorded_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        }
    }

    #[test]
    fn every_byte_and_the_previous_hash_change_the_link() {
        let a = link(r#"{"x": 1}"#).hash(&GENESIS);
        assert_eq!(a, link(r#"{"x": 1}"#).hash(&GENESIS));
        assert_ne!(a, link(r#"{"x": 2}"#).hash(&GENESIS));
        assert_ne!(a, link(r#"{"x": 1}"#).hash(&[1; 32]));
        // Length prefixes keep field boundaries: moving a byte between fields changes the hash.
        let mut shifted = link(r#"{"x": 1}"#);
        shifted.stream_id = "agent-aA";
        shifted.event_type = "gentLost";
        assert_ne!(a, shifted.hash(&GENESIS));
    }
}
