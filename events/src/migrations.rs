//! The backbone's migrations (component `events`): the log, the ledger, the checkpoints and
//! the rest of what `events` owns, each version with its SQL, in order, for
//! [`crate::store::migrate`]. Shaped like the lists the services that own a schema export
//! (`idle_reaper::MIGRATIONS`, `recorder::MIGRATIONS`, ...); a new migration is one file under
//! `events/migrations/` and one line here.

use crate::store::Migration;

/// What a backbone migration whose tables moved to their service's crate now runs: nothing.
///
/// Those versions stay, as no-ops, so that a database migrated before and one migrated since
/// hold the same backbone history: a database that ran the old SQL skips them as before, and
/// its service's migration finds the tables (in `public` or already in the service's schema)
/// and moves or leaves them (each is written to run twice); an older berth started on a
/// database migrated since finds nothing left to apply.
const MOVED_TO_ITS_SERVICE: &str = "-- moved to the service that owns the schema";

/// The backbone's migrations, in the order they run.
pub const MIGRATIONS: &[Migration] = &[
    backbone(1, include_str!("../migrations/0001_event_store.sql")),
    backbone(2, include_str!("../migrations/0002_ledger.sql")),
    // 0003, 0005, 0008, 0009 and 0024 made and changed the recorder's logs, usage and
    // liveness tables in `public`; `recorder::MIGRATIONS` makes (or moves) them in its schema.
    backbone(3, MOVED_TO_ITS_SERVICE),
    backbone(4, include_str!("../migrations/0004_folders.sql")),
    backbone(5, MOVED_TO_ITS_SERVICE),
    backbone(6, include_str!("../migrations/0006_service_role.sql")),
    backbone(7, include_str!("../migrations/0007_session_trace.sql")),
    backbone(8, MOVED_TO_ITS_SERVICE),
    backbone(9, MOVED_TO_ITS_SERVICE),
    // 0010 and 0011 made the idle-reaper's and the notification service's schemas, and 0012
    // the image-commit service's beside the ledger's customized images (its ledger part stays).
    backbone(10, MOVED_TO_ITS_SERVICE),
    backbone(11, MOVED_TO_ITS_SERVICE),
    backbone(12, include_str!("../migrations/0012_custom_images.sql")),
    backbone(13, include_str!("../migrations/0013_apps.sql")),
    backbone(14, include_str!("../migrations/0014_log_clock.sql")),
    backbone(17, include_str!("../migrations/0017_image_claims.sql")),
    backbone(18, include_str!("../migrations/0018_launches.sql")),
    backbone(19, include_str!("../migrations/0019_credentials.sql")),
    backbone(20, include_str!("../migrations/0020_network_scope.sql")),
    backbone(21, include_str!("../migrations/0021_group_scheduling.sql")),
    backbone(22, include_str!("../migrations/0022_session_priority.sql")),
    backbone(24, MOVED_TO_ITS_SERVICE),
    backbone(
        25,
        include_str!("../migrations/0025_backendai_keypairs.sql"),
    ),
    backbone(30, include_str!("../migrations/0030_credential_life.sql")),
    backbone(31, include_str!("../migrations/0031_container_fence.sql")),
    backbone(32, include_str!("../migrations/0032_secrets.sql")),
    backbone(33, include_str!("../migrations/0033_pushed_images.sql")),
    backbone(34, include_str!("../migrations/0034_volumes.sql")),
    backbone(35, include_str!("../migrations/0035_session_image.sql")),
    backbone(36, include_str!("../migrations/0036_registries.sql")),
    backbone(37, include_str!("../migrations/0037_ssh_keys.sql")),
    backbone(38, include_str!("../migrations/0038_folder_shares.sql")),
    backbone(39, include_str!("../migrations/0039_folder_life.sql")),
    backbone(40, include_str!("../migrations/0040_folder_quota.sql")),
    backbone(41, include_str!("../migrations/0041_group_defaults.sql")),
    backbone(42, include_str!("../migrations/0042_image_catalogue.sql")),
    backbone(43, include_str!("../migrations/0043_fit_watches.sql")),
    backbone(44, include_str!("../migrations/0044_seal_blocks.sql")),
];

/// One migration of the backbone (component `events`).
const fn backbone(version: i32, sql: &'static str) -> Migration {
    ("events", version, sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_rise_and_name_the_backbone() {
        assert!(MIGRATIONS
            .iter()
            .all(|(component, _, _)| *component == "events"));
        assert!(MIGRATIONS.windows(2).all(|w| w[0].1 < w[1].1));
    }
}
