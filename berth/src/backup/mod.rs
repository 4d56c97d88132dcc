//! Backing berth's database up and restoring it, with the log's order kept: `berth backup`
//! is PostgreSQL's own `pg_dump` (custom format) of the database; `berth restore` replays
//! such a dump into an empty database, on any cluster, with `pg_restore`, then moves the
//! log's clock past every restored event (`events::store::continue_clock`). Without that
//! step a fresh cluster's transaction counter, which starts low again, would sort new events
//! before the restored ones, behind every checkpoint and the audit chain's head.
//!
//! A restore works under any owner, a superuser or not, named as on the dump's cluster or
//! not (a managed PostgreSQL or a Patroni cluster gives berth no superuser): what the dump's
//! owner owned, the restoring user owns (`pg_restore --no-owner`), and what the services'
//! role `berth_service` owned (schemas its rebuilds made) is given back to it, so rebuilds
//! go on. The role must exist on the new cluster with the restoring user a member of it
//! (docs/operations.md, "A PostgreSQL berth does not own").

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

mod db;

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The events the dump held.
    pub events: i64,
    /// What the log's clock now adds to the cluster's transaction ids.
    pub clock_offset: i64,
}

/// Writes a dump of the database at `database_url` to `file` (`pg_dump --format=custom`),
/// without the rows that hold secrets (the `secrets` schema's password hashes and app tokens,
/// and the webhooks' signing secrets): a backup is copied and kept far longer than a secret
/// should live. After a restore, users set their passwords again, apps started anew get new
/// tokens and webhooks new secrets (docs/operations.md).
pub async fn backup(database_url: &str, file: &Path) -> anyhow::Result<()> {
    let mut dump = tokio::process::Command::new(pg_tool("pg_dump"));
    dump.args([
        "--format=custom",
        "--no-password",
        "--exclude-table-data=secrets.*",
        "--exclude-table-data=notification.webhook_secrets",
        "--file",
    ])
    .arg(file)
    .arg("--dbname")
    .arg(database_url);
    run(dump, "pg_dump").await
}

/// Restores the dump in `file` into the database at `database_url` (created when missing;
/// it must hold no berth tables yet), then continues the log's clock after it.
pub async fn restore(database_url: &str, file: &Path) -> anyhow::Result<Restored> {
    events::store::ensure_database(database_url)
        .await
        .context("reach PostgreSQL")?;
    let (client, connection) = events::tls::connect(database_url)
        .await
        .context("reach the database (BERTH_DATABASE_URL)")?;
    tokio::spawn(connection);
    events::store::prepare_restore(&client)
        .await
        .context("prepare the database")?;
    let mut list = tokio::process::Command::new(pg_tool("pg_restore"));
    list.arg("--list").arg(file);
    let listed = output_of(list, "pg_restore --list").await?;
    // Everything but the owner's default privileges, owned by the restoring user.
    let (defaults, rest): (Vec<&str>, Vec<&str>) = listed
        .lines()
        .filter(|l| !l.starts_with(';'))
        .partition(|l| l.contains(" DEFAULT ACL "));
    let lists = tempfile_dir()?;
    let rest_list = lists.join("rest.list");
    std::fs::write(&rest_list, rest.join("\n"))?;
    let mut load = tokio::process::Command::new(pg_tool("pg_restore"));
    load.args([
        "--exit-on-error",
        "--no-password",
        "--no-owner",
        "--use-list",
    ])
    .arg(&rest_list)
    .arg("--dbname")
    .arg(database_url)
    .arg(file);
    run(load, "pg_restore").await?;
    // The default privileges the dump's owner gave (the services' role on tables to come),
    // given again by the restoring user, whatever the dump's owner was called.
    if !defaults.is_empty() {
        let defaults_list = lists.join("defaults.list");
        std::fs::write(&defaults_list, defaults.join("\n"))?;
        let mut sql = tokio::process::Command::new(pg_tool("pg_restore"));
        sql.args(["--use-list"])
            .arg(&defaults_list)
            .args(["--file", "-"])
            .arg(file);
        let sql = output_of(sql, "pg_restore (default privileges)").await?;
        db::give_default_privileges_again(&client, &sql)
            .await
            .context("give the default privileges again")?;
    }
    let _ = std::fs::remove_dir_all(&lists);
    db::give_back_to_the_services_role(&client, &listed)
        .await
        .context("give berth_service back what it owned")?;
    let continued = events::store::continue_clock(&client)
        .await
        .context("continue the log's clock")?;
    Ok(Restored {
        events: continued.events,
        clock_offset: continued.offset,
    })
}

/// A directory of this restore's own for the lists it hands `pg_restore`.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "berth-restore-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("make {}", dir.display()))?;
    Ok(dir)
}

/// What `command` prints, or why it failed.
async fn output_of(mut command: tokio::process::Command, name: &str) -> anyhow::Result<String> {
    let output = command
        .output()
        .await
        .with_context(|| format!("run {name} (PostgreSQL's client programs)"))?;
    if !output.status.success() {
        bail!(
            "{name} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

async fn run(command: tokio::process::Command, name: &str) -> anyhow::Result<()> {
    output_of(command, name).await.map(|_| ())
}

/// PostgreSQL's `tool`: from `BERTH_PG_BIN` when set, else from the newest server install
/// under `/usr/lib/postgresql` (Debian's layout, where the versioned tools live), else from
/// the `PATH`.
pub fn pg_tool(tool: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("BERTH_PG_BIN") {
        return Path::new(&dir).join(tool);
    }
    let mut installs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let path = entry.path().join("bin").join(tool);
            path.exists().then_some((version, path))
        })
        .collect();
    installs.sort();
    installs
        .pop()
        .map_or_else(|| PathBuf::from(tool), |(_, path)| path)
}
