//! What a session's folders hold once it ended: each is measured where it lives (its volume,
//! or this host's data directory) and told to the control plane, which shows it with the
//! folder. Measured by the main kernel's agent, after the containers are gone, so nothing
//! writes meanwhile; off the session's task, so its end is not held up by a large folder.

use bus::protocol::{FolderUsage, Measured, Request};
use chrono::Utc;
use domain::aggregate::SessionState;

use super::ctx::Ctx;
use super::spec;

/// Measures each folder the session mounted and tells the recorder, in a task of its own.
pub(super) fn report(ctx: &Ctx, state: &SessionState) {
    let request = &state.request;
    if request.mounts.is_empty() {
        return;
    }
    let Ok(found) = spec::folders(state, &ctx.config.data_dir, &ctx.config.volumes) else {
        return;
    };
    let owner = request.owner.user_id;
    let folders: Vec<(String, String, std::path::PathBuf)> = request
        .mounts
        .iter()
        .zip(found)
        .map(|(folder, (host, _))| {
            let volume = request
                .volumes
                .get(folder)
                .cloned()
                .unwrap_or_else(|| domain::volumes::HOST_LOCAL.to_owned());
            (folder.clone(), volume, host)
        })
        .collect();
    let ctx = ctx.clone();
    tokio::spawn(async move {
        for (folder, volume, host) in folders {
            let measured =
                tokio::task::spawn_blocking(move || Measured::walk(&host, u64::MAX)).await;
            let Ok(Measured { bytes, files, .. }) = measured else {
                continue;
            };
            let usage = FolderUsage {
                owner,
                folder,
                volume,
                bytes,
                files,
                measured_at: Utc::now(),
            };
            if let Err(e) = ctx.link.ask(&Request::FolderUsage(usage), &ctx.stop).await {
                tracing::info!(error = %e, "a folder's usage was not told");
            }
        }
    });
}
