//! What `berth admin` prints from the gateway's answers: listings and shares as tables (or
//! the API's JSON with `--output json`), and a Backend.AI keypair as the `export` lines its
//! client reads.

use serde_json::Value;

use super::Kind;
use crate::session_cli::{bytes, show, Output};
use gateway::model::{
    AdminGroups, AdminPolicies, AdminProjects, AdminUsers, AdmittedAgents, Amounts, ApiKeysListed,
    GroupShares, HeldImages, IdleSettings, KeypairsListed, Presets, Registries,
};

/// A Backend.AI keypair as Backend.AI's client takes it: `export` lines to paste into a
/// shell, under a comment (so the whole output pastes) that says it is shown once, and where
/// the client's endpoint is, when known.
pub(super) fn print_keypair(
    email: &str,
    access_key: &str,
    secret_key: &str,
    endpoint: Option<&str>,
) {
    println!(
        "# Backend.AI keypair of {email}: the secret key is shown only now (berth keeps none)"
    );
    if let Some(endpoint) = endpoint {
        println!("# Backend.AI's client reaches berth at its gateway: export BACKEND_ENDPOINT={endpoint}");
    }
    println!("export BACKEND_ACCESS_KEY={access_key}");
    println!("export BACKEND_SECRET_KEY={secret_key}");
}

/// Prints rows under their headers, each column as wide as its widest cell.
fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c
                } else {
                    format!("{c:<width$}", width = widths[i])
                }
            })
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

/// `2 cpu, 4.0 GiB, 0 gpu`.
fn amount(a: &Amounts) -> String {
    format!(
        "{} cpu, {:.1} GiB, {} gpu",
        a.cpu,
        a.memory_bytes as f64 / (1u64 << 30) as f64,
        a.gpu
    )
}

fn yes_no(v: bool) -> String {
    if v { "yes" } else { "no" }.into()
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_owned())
}

/// A group's shares as a table: one line per user, then one per project.
pub(super) fn print_shares(output: Output, v: Value) {
    show(output, v, |s: GroupShares| {
        println!(
            "{}: {} (half-life {} s, look-back {} s, starvation bound {} s)",
            s.resource_group,
            s.queue_policy,
            s.half_life_secs,
            s.lookback_secs,
            s.starve_after_secs
        );
        table(
            &[
                "USER",
                "QUEUED",
                "DOMINANT-SHARE",
                "DECAYED-USE",
                "FACTOR",
                "MAX-PRIORITY",
            ],
            s.users
                .into_iter()
                .map(|u| {
                    vec![
                        u.email.unwrap_or_else(|| u.user_id.to_string()),
                        u.queued.to_string(),
                        format!("{:.3} ({})", u.dominant_share, u.dominant),
                        format!("{:.0}", u.decayed_usage),
                        format!("{:.3}", u.fair_share_factor),
                        u.max_session_priority.to_string(),
                    ]
                })
                .collect(),
        );
        if !s.projects.is_empty() {
            table(
                &["PROJECT", "DECAYED-USE", "FACTOR"],
                s.projects
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.project,
                            format!("{:.0}", p.decayed_usage),
                            format!("{:.3}", p.fair_share_factor),
                        ]
                    })
                    .collect(),
            );
        }
    })
}

/// Prints a listing as a table, or as the API's JSON.
pub(super) fn print_listing(kind: Kind, output: Output, v: Value) {
    match kind {
        Kind::Users => show(output, v, |l: AdminUsers| {
            table(
                &[
                    "EMAIL", "ROLE", "STATE", "POLICY", "KEYS", "PASSWORD", "PROJECTS", "ID",
                ],
                l.users
                    .into_iter()
                    .map(|u| {
                        vec![
                            u.email,
                            u.role,
                            if u.disabled { "disabled" } else { "enabled" }.into(),
                            u.resource_policy,
                            u.api_keys.to_string(),
                            if u.has_password { "yes" } else { "no" }.into(),
                            u.projects.join(","),
                            u.user_id.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Keys => show(output, v, |l: ApiKeysListed| {
            table(
                &["PREFIX", "EMAIL", "STATE", "EXPIRES", "USER"],
                l.api_keys
                    .into_iter()
                    .map(|k| {
                        let state = if k.revoked { "revoked" } else { "active" };
                        let expires = k.expires_at.map_or("never".into(), |t| t.to_rfc3339());
                        vec![
                            k.key_prefix,
                            k.email,
                            state.into(),
                            expires,
                            k.user_id.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Keypairs => show(output, v, |l: KeypairsListed| {
            table(
                &["ACCESS-KEY", "EMAIL", "STATE", "USER"],
                l.keypairs
                    .into_iter()
                    .map(|k| {
                        let state = if k.active { "active" } else { "revoked" };
                        vec![
                            k.access_key,
                            k.email,
                            state.to_owned(),
                            k.user_id.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Projects => show(output, v, |l: AdminProjects| {
            table(
                &["NAME", "MEMBERS", "GROUPS", "DESCRIPTION"],
                l.projects
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.name,
                            p.members.join(","),
                            p.resource_groups.join(","),
                            p.description,
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Groups => show(output, v, |l: AdminGroups| {
            table(
                &[
                    "NAME",
                    "QUEUE",
                    "SELECTION",
                    "MAX-ATTEMPTS",
                    "SKIP-AFTER",
                    "PENDING-TIMEOUT",
                    "PROJECTS",
                ],
                l.resource_groups
                    .into_iter()
                    .map(|g| {
                        vec![
                            g.name,
                            g.queue_policy,
                            g.agent_selection,
                            g.max_attempts.to_string(),
                            g.skip_after.to_string(),
                            format!("{}s", g.pending_timeout_secs),
                            g.projects.join(","),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Policies => show(output, v, |l: AdminPolicies| {
            table(
                &[
                    "NAME",
                    "SESSIONS",
                    "MAX-TOTAL",
                    "LIFETIME",
                    "CUSTOM-IMAGES",
                    "FOLDER-QUOTA",
                    "USERS",
                ],
                l.policies
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.name,
                            p.max_concurrent_sessions.to_string(),
                            amount(&p.max_total),
                            or_dash(p.max_session_lifetime_secs.map(|s| format!("{s}s"))),
                            or_dash(p.max_custom_images.map(|n| n.to_string())),
                            or_dash(p.max_folder_bytes.map(|n| bytes(n as f64))),
                            p.users.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Presets => show(output, v, |l: Presets| {
            table(
                &["NAME", "RESOURCES", "SHM"],
                l.presets
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.name,
                            amount(&p.resources),
                            format!("{} MiB", p.shared_memory_bytes >> 20),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Idle => show(output, v, |l: IdleSettings| {
            table(
                &["SCOPE", "NAME", "CHECKS"],
                l.idle_checks
                    .into_iter()
                    .map(|s| {
                        let (scope, name) = match s.scope {
                            events::idleness::IdleScope::ResourceGroup(n) => ("group", n),
                            events::idleness::IdleScope::ResourcePolicy(n) => ("policy", n),
                        };
                        vec![
                            scope.to_owned(),
                            name,
                            serde_json::to_string(&s.checks).unwrap_or_default(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Agents => show(output, v, |l: AdmittedAgents| {
            table(
                &[
                    "ID",
                    "GROUP",
                    "STATE",
                    "CAPACITY",
                    "FREE",
                    "HEARTBEAT-AGE",
                    "SESSIONS",
                    "VERSION",
                ],
                l.agents
                    .into_iter()
                    .map(|a| {
                        let state = match (&a.revoked, &a.capacity, &a.lost) {
                            (Some(_), _, _) => "revoked".to_owned(),
                            (None, None, _) => "admitted".to_owned(),
                            (None, Some(_), Some(why)) => format!("lost ({why})"),
                            (None, Some(_), None) => "live".to_owned(),
                        };
                        vec![
                            a.agent_id,
                            a.resource_group,
                            state,
                            or_dash(a.capacity.as_ref().map(amount)),
                            or_dash(a.free.as_ref().map(amount)),
                            or_dash(a.heartbeat_age_secs.map(|s| format!("{s:.0}s"))),
                            or_dash(a.sessions.map(|n| n.to_string())),
                            or_dash(a.version),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Images => show(output, v, |l: HeldImages| {
            table(
                &["IMAGE", "GROUPS", "SESSION-LABELS", "LISTING", "OFFERED"],
                l.images
                    .into_iter()
                    .map(|i| {
                        vec![
                            i.image,
                            i.resource_groups.join(","),
                            yes_no(i.session_image),
                            format!("{:?}", i.listing).to_lowercase(),
                            yes_no(i.offered),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Registries => show(output, v, |l: Registries| {
            table(
                &["REGISTRY", "USERNAME", "SET"],
                l.registries
                    .into_iter()
                    .map(|r| vec![r.registry, r.username, r.set_at.to_rfc3339()])
                    .collect(),
            )
        }),
    }
}
