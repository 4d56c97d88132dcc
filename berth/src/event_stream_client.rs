//! Reading the gateway's event stream as a client: the answer's bytes handed to the
//! `eventsource-stream` parser a few kilobytes at a time. Its parser keeps what it has not read
//! yet in one buffer and copies the rest of that buffer at every line it reads, so a large
//! read (the gateway sends a catch-up's batch of hundreds of events in one chunk) costs time
//! in its square; pieces of [`PIECE`] bytes keep that copy small whatever the server sends.

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};

/// The most bytes handed to the parser at once.
pub const PIECE: usize = 8 * 1024;

/// The server-sent events of `response`'s body.
pub fn events_of(
    response: reqwest::Response,
) -> impl Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> {
    response
        .bytes_stream()
        .flat_map(|chunk| {
            let pieces: Vec<Result<Bytes, reqwest::Error>> = match chunk {
                Ok(bytes) => (0..bytes.len())
                    .step_by(PIECE)
                    .map(|at| Ok(bytes.slice(at..bytes.len().min(at + PIECE))))
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(pieces)
        })
        .eventsource()
}
