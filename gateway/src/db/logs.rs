//! Logs: the kept output of a session's kernels (`recorder.session_logs`, a header per
//! kernel, and `recorder.session_log_chunks`, its most recent bytes in bounded chunks,
//! written by the recorder from the agents' chunks; logs are not events). Read by byte
//! range, so no answer holds more than a kernel's cap.

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::KernelLog;

/// Which bytes of each kernel's output to read: from `offset` (none: the most recent the
/// kernel's cap keeps), at most `length` of them (none: up to the cap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteRange {
    pub offset: Option<u64>,
    pub length: Option<u64>,
}

/// The kept output of each of session `id`'s kernels in `range`, by kernel index.
pub async fn logs(pool: &Pool, id: Uuid, range: ByteRange) -> Result<Vec<KernelLog>, ApiError> {
    let client = pool.get().await?;
    let heads = client
        .query(
            "SELECT kernel, complete, updated_at, kept_bytes, cap_bytes,
                    (SELECT min(start) FROM recorder.session_log_chunks c
                      WHERE c.session_id = l.session_id AND c.kernel = l.kernel)
             FROM recorder.session_logs l WHERE session_id = $1 ORDER BY kernel",
            &[&id],
        )
        .await?;
    let mut logs = Vec::with_capacity(heads.len());
    for head in heads {
        let kernel: i32 = head.get(0);
        let total: i64 = head.get(3);
        let cap: i64 = head.get::<_, i64>(4).max(1);
        let kept_from = kept_from(head.get(5), total, cap);
        // By default the most recent `cap` bytes; never more than `cap` in one answer.
        let from = match range.offset {
            Some(o) => i64::try_from(o).unwrap_or(i64::MAX),
            None => (total - cap).max(kept_from),
        }
        .max(kept_from);
        let length = range
            .length
            .map_or(cap, |l| i64::try_from(l).unwrap_or(i64::MAX).min(cap));
        let until = from.saturating_add(length).min(total);
        let chunks = client
            .query(
                "SELECT start, content FROM recorder.session_log_chunks
                 WHERE session_id = $1 AND kernel = $2
                   AND start < $4 AND start + octet_length(content) > $3
                 ORDER BY start",
                &[&id, &kernel, &from, &until],
            )
            .await?;
        let pieces: Vec<(i64, String)> = chunks.iter().map(|r| (r.get(0), r.get(1))).collect();
        let (offset, content) = cut(&pieces, from, until);
        logs.push(KernelLog {
            kernel,
            content,
            complete: head.get(1),
            updated_at: head.get(2),
            offset,
            total_bytes: total,
            kept_from,
        });
    }
    Ok(logs)
}

/// The oldest byte of a kernel's output a reader gets, given the oldest one stored, all it
/// printed and its cap. Pure. The cap is what a reader gets: the store may still hold the
/// rest of the chunk that straddles the cap's edge (it deletes whole chunks only, and the
/// agent reads output in chunks of any size up to 64 KiB), but those bytes are past the cap.
pub fn kept_from(oldest_stored: Option<i64>, total: i64, cap: i64) -> i64 {
    oldest_stored.unwrap_or(total).max(total - cap)
}

/// The text of `pieces` (each at its byte offset, in order) between `from` and `until`,
/// widened to whole characters at the start and narrowed at the end; with where it starts.
/// Pure.
pub fn cut(pieces: &[(i64, String)], from: i64, until: i64) -> (i64, String) {
    let mut text = String::new();
    let mut start = None;
    for (at, piece) in pieces {
        let end = at + piece.len() as i64;
        if end <= from || *at >= until {
            continue;
        }
        let mut lo = (from - at).max(0) as usize;
        while !piece.is_char_boundary(lo) {
            lo -= 1;
        }
        let mut hi = ((until - at) as usize).min(piece.len());
        while !piece.is_char_boundary(hi) {
            hi -= 1;
        }
        if start.is_none() {
            start = Some(at + lo as i64);
        }
        text.push_str(&piece[lo..hi.max(lo)]);
    }
    (start.unwrap_or(from), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_cut_from_the_chunks_on_character_boundaries() {
        let pieces = vec![(10, "hello ".to_string()), (16, "wörld".to_string())];
        assert_eq!(cut(&pieces, 0, 100), (10, "hello wörld".into()));
        assert_eq!(
            cut(&pieces, 12, 18),
            (12, "llo w".into()),
            "ö is cut out whole"
        );
        assert_eq!(
            cut(&pieces, 18, 100),
            (17, "örld".into()),
            "widened to ö's start"
        );
        assert_eq!(cut(&pieces, 50, 60), (50, String::new()));
    }

    #[test]
    fn no_more_than_the_cap_is_kept_whatever_the_chunks_sizes() {
        // One chunk of 20 KiB read at once, a cap of 16 KiB: its first 4 KiB are past the cap.
        assert_eq!(kept_from(Some(0), 20 << 10, 16 << 10), 4 << 10);
        // Whole chunks older than the cap are gone already.
        assert_eq!(kept_from(Some(12 << 10), 20 << 10, 16 << 10), 12 << 10);
        // Within the cap, everything; nothing printed yet, nothing.
        assert_eq!(kept_from(Some(0), 10 << 10, 16 << 10), 0);
        assert_eq!(kept_from(None, 0, 16 << 10), 0);
    }
}
