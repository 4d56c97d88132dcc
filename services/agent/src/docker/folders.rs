//! What a session's folders hold once it ended: each is measured where it lives (its volume,
//! or this host's data directory) and told to the control plane, which shows it with the
//! folder. Measured by the main kernel's agent, after the containers are gone, so nothing
//! writes meanwhile; off the session's task, so its end is not held up by a large folder.

use std::path::Path;

use bus::protocol::{FolderUsage, Request};
use chrono::Utc;
use domain::aggregate::SessionState;

use super::ctx::Ctx;
use super::spec;

/// Bytes allocated below `root` (as `du` counts them) and how many files, directories and
/// links there are below it; what cannot be read is passed over.
pub fn measure(root: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut files) = (0u64, 0u64);
    for entry in walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .flatten()
    {
        if let Ok(meta) = entry.metadata() {
            bytes = bytes.saturating_add(meta.blocks().saturating_mul(512));
            files += 1;
        }
    }
    (bytes, files)
}

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
            let measured = tokio::task::spawn_blocking(move || measure(&host)).await;
            let Ok((bytes, files)) = measured else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_measured_as_du_counts_with_every_entry_below_it() {
        let root = std::env::temp_dir().join(format!("berth-measure-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::write(root.join("sub/b"), b"x").unwrap();
        let (bytes, files) = measure(&root);
        assert_eq!(files, 3, "two files and a directory");
        // At least what the files hold, allocated in whole blocks.
        assert!(bytes >= 10_001 && bytes % 512 == 0, "{bytes}");
        assert_eq!(measure(&root.join("missing")), (0, 0));
        std::fs::remove_dir_all(root).unwrap();
    }
}
