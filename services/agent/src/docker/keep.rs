//! What the agent sends of a running kernel while it runs: its output (read on from where
//! the last send ended) and its resource usage, that of the GPUs it holds included (through
//! the host's accelerators). Both are telemetry, not events (large or
//! frequent, and nothing is decided on them): they travel on the telemetry stream, and the
//! control plane's sink stores them idempotently.

use bollard::container::{LogOutput, LogsOptions};
use bus::protocol::{LogChunk, UsageSample};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use uuid::Uuid;

use super::ctx::Ctx;
use super::spec::LABEL_GPUS;

/// How far a kernel's output has been kept: the engine's timestamp of the last frame kept and
/// how many kept frames carry exactly that timestamp. Output is read from there on, so a
/// long-running session costs each second only what it printed in that second. `epoch`
/// names this reading of the output (time-ordered: a later reading replaces an earlier one
/// at the sink) and `sent` is how many bytes of it have been sent.
#[derive(Debug)]
pub(super) struct LogCursor {
    epoch: Uuid,
    sent: u64,
    last: Option<DateTime<Utc>>,
    at_last: usize,
    /// How many of the kernel's most recent bytes the control plane keeps (the session's
    /// log cap); `None`: its default.
    keep_bytes: Option<u64>,
}

impl Default for LogCursor {
    fn default() -> Self {
        LogCursor {
            epoch: Uuid::now_v7(),
            sent: 0,
            last: None,
            at_last: 0,
            keep_bytes: None,
        }
    }
}

impl LogCursor {
    /// A new reading of a kernel's output whose most recent `bytes` are kept.
    pub(super) fn keeping(bytes: u64) -> LogCursor {
        LogCursor {
            keep_bytes: Some(bytes),
            ..LogCursor::default()
        }
    }

    /// `text`, read at this cursor, as the next chunk of the kernel's output, not the last.
    fn chunk(&self, session_id: Uuid, kernel: u32, text: String) -> LogChunk {
        LogChunk {
            session_id,
            kernel,
            epoch: self.epoch,
            offset: self.sent,
            complete: false,
            text,
            keep_bytes: self.keep_bytes,
        }
    }

    /// The text of the frames not kept yet, in order; advances the cursor past them. Pure.
    /// `frames` come from the engine with timestamps, oldest first, from `since` on (whole
    /// seconds), so some were kept already.
    fn take_new(&mut self, frames: impl IntoIterator<Item = (DateTime<Utc>, String)>) -> String {
        let mut text = String::new();
        let mut seen_at_last = 0;
        for (at, frame) in frames {
            let fresh = match self.last {
                None => true,
                Some(last) if at > last => true,
                Some(last) if at == last => {
                    seen_at_last += 1;
                    seen_at_last > self.at_last
                }
                Some(_) => false,
            };
            if !fresh {
                continue;
            }
            if self.last == Some(at) {
                self.at_last += 1;
            } else {
                self.last = Some(at);
                self.at_last = 1;
                seen_at_last = 1;
            }
            text.push_str(&frame);
        }
        text
    }
}

/// Splits a frame the engine wrote with `timestamps` into its time and its text.
fn split_stamp(frame: &str) -> Option<(DateTime<Utc>, String)> {
    let (stamp, text) = frame.split_once(' ')?;
    let at = DateTime::parse_from_rfc3339(stamp)
        .ok()?
        .with_timezone(&Utc);
    Some((at, text.to_owned()))
}

/// What became of a keep of a kernel's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kept {
    /// Sent (or nothing new to send).
    Sent,
    /// The telemetry stream did not take it.
    NotSent,
    /// The engine could not be read.
    EngineAway,
}

/// Sends the kernel's new output while it runs (nothing when it printed nothing new). A new
/// cursor reads the output from its start under a new epoch, so what it sends replaces what
/// an earlier reading sent (an agent restarted mid-session starts a new cursor); later sends
/// append.
pub(super) async fn save_logs(
    ctx: &Ctx,
    session_id: Uuid,
    kernel: u32,
    container: &str,
    cursor: &tokio::sync::Mutex<LogCursor>,
) -> Kept {
    // Held across the read and the write, so the keeper and the final keep never both
    // append the same frames.
    let mut cursor = cursor.lock().await;
    let Some(text) = read_new(ctx, container, &mut cursor).await else {
        return Kept::EngineAway;
    };
    if text.is_empty() {
        return Kept::Sent;
    }
    let chunk = cursor.chunk(session_id, kernel, text);
    send_logs(ctx, &mut cursor, chunk).await
}

/// Sends the rest of the kernel's output once, marked complete (even when nothing is left):
/// one try of [`save_final_logs`].
async fn save_rest_of_logs(
    ctx: &Ctx,
    session_id: Uuid,
    kernel: u32,
    container: &str,
    cursor: &tokio::sync::Mutex<LogCursor>,
) -> Kept {
    let mut cursor = cursor.lock().await;
    let Some(text) = read_new(ctx, container, &mut cursor).await else {
        return Kept::EngineAway;
    };
    let chunk = LogChunk {
        complete: true,
        ..cursor.chunk(session_id, kernel, text)
    };
    send_logs(ctx, &mut cursor, chunk).await
}

/// The text the container printed since `cursor`, which moves past it; `None` when the
/// engine went away mid-read: nothing is taken then, so the next reading starts where this
/// one did.
async fn read_new(ctx: &Ctx, container: &str, cursor: &mut LogCursor) -> Option<String> {
    let mut stream = ctx.docker.logs(
        container,
        Some(LogsOptions::<String> {
            stdout: true,
            stderr: true,
            timestamps: true,
            since: cursor.last.map_or(0, |t| t.timestamp()),
            tail: "all".into(),
            ..Default::default()
        }),
    );
    let mut frames = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(
                LogOutput::StdOut { message }
                | LogOutput::StdErr { message }
                | LogOutput::Console { message },
            ) => {
                if let Some(frame) = split_stamp(&String::from_utf8_lossy(&message)) {
                    frames.push(frame);
                }
            }
            Ok(LogOutput::StdIn { .. }) => {}
            Err(e) if super::engine::unreachable(&e) => return None,
            Err(_) => break,
        }
    }
    Some(cursor.take_new(frames))
}

/// Sends `chunk`, read at `cursor`, in pieces of at most [`LogChunk::MOST_TEXT`] bytes (the
/// last one carries `complete`); the cursor counts each sent, or starts over when one was
/// not.
async fn send_logs(ctx: &Ctx, cursor: &mut LogCursor, chunk: LogChunk) -> Kept {
    let session_id = chunk.session_id;
    let pieces = pieces(&chunk.text, LogChunk::MOST_TEXT);
    let last = pieces.len().saturating_sub(1);
    for (i, text) in pieces.into_iter().enumerate() {
        let piece = LogChunk {
            offset: cursor.sent,
            text: text.to_owned(),
            complete: chunk.complete && i == last,
            ..chunk.clone()
        };
        if let Err(e) = ctx.link.send_log(&piece).await {
            // The frames are lost to the sink, not to the next reading: start over.
            *cursor = LogCursor {
                keep_bytes: cursor.keep_bytes,
                ..LogCursor::default()
            };
            tracing::warn!(%session_id, error = %e, "could not send the logs");
            return Kept::NotSent;
        }
        cursor.sent += piece.text.len() as u64;
    }
    Kept::Sent
}

/// `text` cut into pieces of at most `most` bytes, each ending on a character's boundary;
/// one empty piece for empty text (a last, empty chunk still says the output is complete).
/// Pure.
fn pieces(text: &str, most: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > most {
        let mut cut = most;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out.push(rest);
    out
}

/// Sends the kernel's whole remaining output, the last send before its end is reported and
/// its container removed: a failed send (the stream slow to acknowledge) is tried again, from
/// a new reading, with growing waits, rather than losing the output with the container; an
/// engine out of reach is waited for.
pub(super) async fn save_final_logs(
    ctx: &Ctx,
    session_id: Uuid,
    kernel: u32,
    container: &str,
    cursor: &tokio::sync::Mutex<LogCursor>,
) {
    let mut wait = std::time::Duration::from_millis(250);
    let mut tries = 0;
    while tries < 8 {
        match save_rest_of_logs(ctx, session_id, kernel, container, cursor).await {
            Kept::Sent => return,
            // Not a try: the output is still in the engine, read once it answers.
            Kept::EngineAway if !ctx.stop.is_cancelled() => {
                ctx.wait_for_engine().await;
                continue;
            }
            Kept::EngineAway | Kept::NotSent => tries += 1,
        }
        tokio::select! {
            _ = ctx.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(std::time::Duration::from_secs(5));
    }
    tracing::error!(%session_id, kernel, "the output could not be sent; it is lost with the container");
}

/// The GPUs the container holds, as its label says (none when it holds none, or the engine
/// does not answer).
pub(super) async fn gpus_held_by(ctx: &Ctx, container: &str) -> Vec<String> {
    if ctx.gpus.gpus().is_empty() {
        return Vec::new();
    }
    let inspected = ctx.docker.inspect_container(container, None).await;
    inspected
        .ok()
        .and_then(|c| c.config?.labels?.remove(LABEL_GPUS))
        .map(|label| crate::gpu::devices_of(&label))
        .unwrap_or_default()
}

/// What the GPUs `devices` are doing now, through the host's accelerators: (utilization,
/// memory used), in percent.
fn sample_gpus(ctx: &Ctx, devices: &[String]) -> (Option<f64>, Option<f64>) {
    let source = &ctx.config.gpus.source;
    let held: Vec<_> = ctx
        .gpus
        .gpus()
        .iter()
        .filter(|g| devices.contains(&g.uuid))
        .map(|g| (g, source.sample(&g.uuid)))
        .collect();
    crate::gpu::usage_of(&held)
}

/// Samples the container's CPU, memory and network counters, and the use of the GPUs it
/// holds (`gpus`), and keeps the latest; returns (CPU nanoseconds, when) for the next
/// sample's CPU percentage.
pub(super) async fn sample_usage(
    ctx: &Ctx,
    session_id: Uuid,
    container: &str,
    gpus: &[String],
    previous: Option<(u64, tokio::time::Instant)>,
) -> Option<(u64, tokio::time::Instant)> {
    let options = bollard::container::StatsOptions {
        stream: false,
        one_shot: true,
    };
    let stats = ctx
        .docker
        .stats(container, Some(options))
        .next()
        .await?
        .ok()?;
    // An exited container answers with empty counters read at the zero time: not a sample.
    if stats.read.starts_with("0001-") {
        return previous;
    }
    let now = tokio::time::Instant::now();
    let cpu_ns = stats.cpu_stats.cpu_usage.total_usage;
    let cpu_percent = previous.and_then(|(ns, at)| {
        let elapsed = now.duration_since(at).as_nanos() as f64;
        (elapsed > 0.0).then(|| cpu_ns.saturating_sub(ns) as f64 / elapsed * 100.0)
    });
    let (rx, tx) = stats
        .networks
        .unwrap_or_default()
        .values()
        .fold((0u64, 0u64), |(r, t), n| (r + n.rx_bytes, t + n.tx_bytes));
    let memory = stats.memory_stats.usage.unwrap_or(0) as i64;
    let (gpu_percent, gpu_memory_percent) = sample_gpus(ctx, gpus);
    let sample = UsageSample {
        session_id,
        sampled_at: Utc::now(),
        cpu_seconds: cpu_ns as f64 / 1e9,
        cpu_percent,
        memory_bytes: memory,
        rx_bytes: rx as i64,
        tx_bytes: tx as i64,
        gpu_percent,
        gpu_memory_percent,
    };
    if let Err(e) = ctx.link.send_usage(&sample).await {
        tracing::debug!(%session_id, error = %e, "usage sample not sent");
    }
    Some((cpu_ns, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: u32, nanos: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + i64::from(second), nanos).unwrap()
    }

    fn frames(list: &[(u32, u32, &str)]) -> Vec<(DateTime<Utc>, String)> {
        list.iter()
            .map(|(s, n, t)| (at(*s, *n), t.to_string()))
            .collect()
    }

    #[test]
    fn a_cursor_keeps_each_frame_once_across_reads_that_overlap() {
        let mut cursor = LogCursor::default();
        let first = frames(&[(0, 1, "a\n"), (0, 5, "b\n"), (1, 0, "c\n")]);
        assert_eq!(cursor.take_new(first.clone()), "a\nb\nc\n");
        // The next read starts at the last frame's whole second: c comes again, then d.
        let second = frames(&[(1, 0, "c\n"), (1, 7, "d\n")]);
        assert_eq!(cursor.take_new(second), "d\n");
        // Nothing new: nothing taken.
        assert_eq!(cursor.take_new(frames(&[(1, 7, "d\n")])), "");
        // An older frame read again is never taken.
        assert_eq!(cursor.take_new(first), "");
    }

    #[test]
    fn frames_that_share_a_timestamp_are_counted_not_lost() {
        let mut cursor = LogCursor::default();
        assert_eq!(
            cursor.take_new(frames(&[(2, 3, "x\n"), (2, 3, "y\n")])),
            "x\ny\n"
        );
        // A third frame with the very same time arrives after the read.
        assert_eq!(
            cursor.take_new(frames(&[(2, 3, "x\n"), (2, 3, "y\n"), (2, 3, "z\n")])),
            "z\n"
        );
        assert_eq!(cursor.at_last, 3);
    }

    #[test]
    fn the_engines_timestamps_are_read_off_each_frame() {
        let (t, text) = split_stamp("2026-11-21T23:46:27.123456789Z hello world\n").unwrap();
        assert_eq!(text, "hello world\n");
        assert_eq!(t.timestamp_subsec_nanos(), 123_456_789);
        // Docker trims trailing zeros of the fraction.
        let (short, _) = split_stamp("2026-11-21T23:46:27.1Z x").unwrap();
        assert_eq!(short.timestamp_subsec_nanos(), 100_000_000);
        assert!(split_stamp("no stamp here").is_none());
    }

    #[test]
    fn long_output_goes_in_pieces_that_end_on_character_boundaries() {
        assert_eq!(pieces("", 4), [""]);
        assert_eq!(pieces("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        let text = "aé€b".repeat(3);
        let cut = pieces(&text, 4);
        assert_eq!(cut.concat(), text);
        assert!(cut.iter().all(|p| p.len() <= 4 && !p.is_empty()), "{cut:?}");
    }
}
