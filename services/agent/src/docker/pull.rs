//! An image pull's progress, told to the control plane while the session is PULLING: the
//! engine's per-layer messages summed up ([`PullTally`], pure), and a reporter that sends
//! the latest sum at most once a second, apart from the pull so a slow control plane never
//! slows the pull.

use std::collections::BTreeMap;
use std::time::Duration;

use bus::protocol::Fact;
use uuid::Uuid;

use super::ctx::Ctx;

/// How often, at most, a pull's progress is reported.
const EVERY: Duration = Duration::from_secs(1);

/// One layer of a pull, as the engine's messages about it tell.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Layer {
    current: u64,
    total: u64,
    done: bool,
}

/// What the engine's messages have told of a pull, layer by layer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PullTally {
    layers: BTreeMap<String, Layer>,
}

/// A pull's progress summed over its layers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PullFigures {
    pub current_bytes: u64,
    pub total_bytes: u64,
    pub layers_done: u32,
    pub layers: u32,
}

impl PullTally {
    /// Takes in one message of the engine (`id` a layer's, `status` what happened to it,
    /// `current`/`total` its download's bytes); messages about no layer (the image's tag, its
    /// digest) are left out. Whether the figures changed.
    pub fn note(
        &mut self,
        id: Option<&str>,
        status: Option<&str>,
        current: Option<i64>,
        total: Option<i64>,
    ) -> bool {
        let (Some(id), Some(status)) = (id, status) else {
            return false;
        };
        let known = [
            "Pulling fs layer",
            "Waiting",
            "Downloading",
            "Verifying Checksum",
            "Download complete",
            "Extracting",
            "Pull complete",
            "Already exists",
        ];
        if !known.contains(&status) {
            return false;
        }
        let before = self.layers.get(id).copied();
        let layer = self.layers.entry(id.to_owned()).or_default();
        let bytes = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
        match status {
            "Downloading" => {
                if let Some(total) = bytes(total).filter(|t| *t > 0) {
                    layer.total = total;
                }
                if let Some(current) = bytes(current) {
                    layer.current = current;
                }
            }
            // Downloaded: what is left is the engine's own work.
            "Download complete" | "Extracting" | "Verifying Checksum" => {
                layer.current = layer.total;
            }
            "Pull complete" | "Already exists" => {
                layer.current = layer.total;
                layer.done = true;
            }
            _ => {}
        }
        before != Some(*layer)
    }

    pub fn figures(&self) -> PullFigures {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        PullFigures {
            current_bytes: self.layers.values().map(|l| l.current).sum(),
            total_bytes: self.layers.values().map(|l| l.total).sum(),
            layers_done: count(self.layers.values().filter(|l| l.done).count()),
            layers: count(self.layers.len()),
        }
    }
}

/// Reports the figures sent on `figures` for session `session_id`'s pull of `image`: the
/// latest at most once a second, until the sender is dropped. A report the control plane does
/// not record (the session moved on) is nothing to worry about.
pub(super) fn report(
    ctx: &Ctx,
    session_id: Uuid,
    image: String,
    mut figures: tokio::sync::watch::Receiver<PullFigures>,
) -> tokio::task::JoinHandle<()> {
    let (link, stop) = (ctx.link.clone(), ctx.stop.clone());
    tokio::spawn(async move {
        while figures.changed().await.is_ok() {
            let now = *figures.borrow_and_update();
            let fact = Fact::PullProgressed {
                image: image.clone(),
                current_bytes: now.current_bytes,
                total_bytes: now.total_bytes,
                layers_done: now.layers_done,
                layers: now.layers,
            };
            if let Err(e) = link.report(session_id, fact, &stop).await {
                tracing::debug!(%session_id, error = %e, "a pull's progress was not reported");
            }
            tokio::select! {
                _ = tokio::time::sleep(EVERY) => {}
                _ = stop.cancelled() => return,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_sums_its_layers_bytes_and_counts_those_done() {
        let mut tally = PullTally::default();
        assert!(!tally.note(
            Some("latest"),
            Some("Pulling from berth/python"),
            None,
            None
        ));
        assert!(tally.note(Some("a"), Some("Pulling fs layer"), None, None));
        assert!(tally.note(Some("b"), Some("Already exists"), None, None));
        assert!(tally.note(Some("c"), Some("Waiting"), None, None));
        assert!(tally.note(Some("a"), Some("Downloading"), Some(10), Some(100)));
        assert!(tally.note(Some("c"), Some("Downloading"), Some(5), Some(50)));
        assert_eq!(
            tally.figures(),
            PullFigures {
                current_bytes: 15,
                total_bytes: 150,
                layers_done: 1,
                layers: 3
            }
        );
        assert!(
            !tally.note(Some("a"), Some("Downloading"), Some(10), Some(100)),
            "nothing new"
        );
        assert!(tally.note(Some("a"), Some("Download complete"), None, None));
        assert!(
            !tally.note(Some("a"), Some("Extracting"), Some(3), Some(7)),
            "extracting's bytes are not downloaded bytes"
        );
        assert!(tally.note(Some("a"), Some("Pull complete"), None, None));
        let figures = tally.figures();
        assert_eq!((figures.current_bytes, figures.layers_done), (105, 2));
        assert!(!tally.note(None, Some("Digest: sha256:abc"), None, None));
        assert!(!tally.note(
            None,
            Some("Status: Downloaded newer image for berth/python:latest"),
            None,
            None
        ));
    }
}
