//! The SQL a restore runs besides `pg_restore`'s own: the dump owner's default privileges
//! given again by the restoring user, and what the services' role owned given back to it.
//! The statements are made from `pg_restore`'s output by pure functions.

use tokio_postgres::Client;

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

/// Runs the dump's default privileges (`sql`, as `pg_restore --file -` writes them) as the
/// restoring user's own; its preamble's session settings (the search path among them) are
/// reset after it.
pub(super) async fn give_default_privileges_again(
    client: &Client,
    sql: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!("{}\nRESET ALL;", as_restoring_owner(sql)))
        .await
}

/// Gives `berth_service` back the objects `listing` (`pg_restore --list`) says it owned.
pub(super) async fn give_back_to_the_services_role(
    client: &Client,
    listing: &str,
) -> Result<(), tokio_postgres::Error> {
    for statement in service_owned(listing) {
        client.batch_execute(&statement).await?;
    }
    Ok(())
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
