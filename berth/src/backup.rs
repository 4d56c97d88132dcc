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
        // The dump's preamble sets the session's search path and more: reset after it.
        client
            .batch_execute(&format!("{}\nRESET ALL;", as_restoring_owner(&sql)))
            .await
            .context("give the default privileges again")?;
    }
    let _ = std::fs::remove_dir_all(&lists);
    for statement in service_owned(&listed) {
        client
            .batch_execute(&statement)
            .await
            .with_context(|| format!("give berth_service back what it owned: {statement}"))?;
    }
    let continued = events::store::continue_clock(&client)
        .await
        .context("continue the log's clock")?;
    Ok(Restored {
        events: continued.events,
        clock_offset: continued.offset,
    })
}

/// The role berth's services run as (events/migrations/0006_service_role.sql).
const SERVICE_ROLE: &str = "berth_service";

/// The `ALTER ... OWNER TO berth_service` statements that give the services' role back the
/// schemas, tables, sequences and views it owned, as `pg_restore --list` lists them
/// (`<id>; <oid> <oid> <TYPE> <schema or -> <name> <owner>`). Pure.
fn service_owned(listing: &str) -> Vec<String> {
    let mut statements = Vec::new();
    for line in listing.lines().filter(|l| !l.starts_with(';')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        // id; oid oid TYPE schema name owner
        let [_, _, _, kind, schema, name, owner] = words[..] else {
            continue;
        };
        if owner != SERVICE_ROLE {
            continue;
        }
        let quoted = |n: &str| format!("\"{}\"", n.trim_matches('"').replace('"', "\"\""));
        let statement = match kind {
            "SCHEMA" => format!("ALTER SCHEMA {} OWNER TO {SERVICE_ROLE}", quoted(name)),
            "TABLE" | "SEQUENCE" | "VIEW" => format!(
                "ALTER {kind} {}.{} OWNER TO {SERVICE_ROLE}",
                quoted(schema),
                quoted(name)
            ),
            _ => continue,
        };
        statements.push(statement);
    }
    statements
}

/// `ALTER DEFAULT PRIVILEGES FOR ROLE <the dump's owner> ...` as the restoring user's own
/// (the clause left out); those of the services' role kept as they are; psql's
/// meta-commands (`\restrict`, which newer `pg_restore`s write) left out, since the server
/// runs the rest. Pure.
fn as_restoring_owner(sql: &str) -> String {
    sql.lines()
        .filter(|line| !line.starts_with('\\'))
        .map(
            |line| match line.split_once("ALTER DEFAULT PRIVILEGES FOR ROLE ") {
                Some((before, rest)) => {
                    let (role, after) = rest.split_once(' ').unwrap_or((rest, ""));
                    if role.trim_matches('"') == SERVICE_ROLE {
                        line.to_owned()
                    } else {
                        format!("{before}ALTER DEFAULT PRIVILEGES {after}")
                    }
                }
                None => line.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dumps_owners_default_privileges_become_the_restoring_users() {
        let sql = "\\restrict abc\n\
SET search_path = '';\n\
ALTER DEFAULT PRIVILEGES FOR ROLE owner_a IN SCHEMA ledger GRANT SELECT,INSERT ON TABLES  TO berth_service;\n\
ALTER DEFAULT PRIVILEGES FOR ROLE berth_service IN SCHEMA x GRANT SELECT ON TABLES  TO owner_a;";
        assert_eq!(
            as_restoring_owner(sql),
            "SET search_path = '';\n\
ALTER DEFAULT PRIVILEGES IN SCHEMA ledger GRANT SELECT,INSERT ON TABLES  TO berth_service;\n\
ALTER DEFAULT PRIVILEGES FOR ROLE berth_service IN SCHEMA x GRANT SELECT ON TABLES  TO owner_a;"
        );
    }

    #[test]
    fn what_the_services_role_owned_is_given_back_to_it_and_nothing_else() {
        let listing = "\
;
; Archive created at 2026-11-28 15:50:00 UTC
9; 2615 382585 SCHEMA - idle_reaper probe_owner
12; 2615 382700 SCHEMA - gateway_sessions_v2 berth_service
3733; 0 0 ACL - SCHEMA idle_reaper probe_owner
240; 1259 382701 TABLE gateway_sessions_v2 sessions berth_service
241; 1259 382702 SEQUENCE gateway_sessions_v2 sessions_seq berth_service
242; 1259 382703 TABLE ledger agents probe_owner
3900; 0 382701 TABLE DATA gateway_sessions_v2 sessions berth_service
";
        assert_eq!(
            service_owned(listing),
            [
                "ALTER SCHEMA \"gateway_sessions_v2\" OWNER TO berth_service",
                "ALTER TABLE \"gateway_sessions_v2\".\"sessions\" OWNER TO berth_service",
                "ALTER SEQUENCE \"gateway_sessions_v2\".\"sessions_seq\" OWNER TO berth_service",
            ]
        );
    }
}
