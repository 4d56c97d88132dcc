//! `berth replay workload`: the log's requests of a time window run again through another
//! queue policy in simulated time ([`scheduler::whatif`]), printed next to what really
//! happened: waits per user, utilization, Jain's fairness index, and the placements that
//! differ. `-o json` (or `yaml`) prints the comparisons as `{"groups": [...]}` for scripts
//! (its shape is in docs/operations.md).

use std::process::ExitCode;

use chrono::{DateTime, Utc};
use comfy_table::{presets, ContentArrangement, Table};
use events::payloads::QueuePolicy;
use scheduler::whatif::figures::{Comparison, Waits};

use crate::session_cli::Output;
use berth::config::Config;

/// The options of `berth replay workload` (the other projections take none of them).
#[derive(clap::Args, Debug, Default)]
pub struct WorkloadArgs {
    /// `workload` only: the queue policy to replay through (fifo, backfill, lifo, drf,
    /// fair-share); default: the one that really ran.
    #[arg(long)]
    pub policy: Option<String>,
    /// `workload` only: the window's start, RFC 3339 (default: the log's first event).
    #[arg(long)]
    pub from: Option<DateTime<Utc>>,
    /// `workload` only: the window's end, RFC 3339 (default: the log's last event).
    #[arg(long)]
    pub to: Option<DateTime<Utc>>,
    /// `workload` only: one resource group (default: each, replayed separately).
    #[arg(long)]
    pub group: Option<String>,
    /// `workload` only: how to print: table (default), json or yaml.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

pub async fn run(config: &Config, args: WorkloadArgs) -> anyhow::Result<ExitCode> {
    let policy = match args.policy.as_deref() {
        None => None,
        Some(name) => Some(QueuePolicy::parse(name).ok_or_else(|| {
            let known: Vec<&str> = QueuePolicy::ALL.iter().map(|p| p.as_str()).collect();
            anyhow::anyhow!("unknown --policy `{name}`; known: {}", known.join(", "))
        })?),
    };
    if let (Some(from), Some(to)) = (args.from, args.to) {
        anyhow::ensure!(from <= to, "--from {from} is after --to {to}");
    }
    let pool = berth::app::connect_database(config, 2).await?;
    let client = pool.get().await?;
    // The live scheduler was paced by this install's settings, which the log does not hold.
    let pacing = scheduler::whatif::Pacing {
        interval: config.timings.scheduler_interval,
        silent_after: config.timings.agent_silent_after,
    };
    let comparisons = scheduler::whatif::replay(
        &client,
        policy,
        args.group.as_deref(),
        args.from,
        args.to,
        pacing,
    )
    .await?;
    let body = serde_json::json!({ "groups": comparisons });
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&body)?),
        Output::Yaml => print!("{}", serde_norway::to_string(&body)?),
        Output::Table | Output::Wide => {
            if comparisons.is_empty() {
                println!("no requests in the log's window: nothing to replay");
            }
            for comparison in &comparisons {
                print!("{}", table(comparison));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{s:.1} s"))
}

fn share(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.1}%", s * 100.0))
}

fn plain(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{s:.3}"))
}

fn borderless() -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .force_no_tty();
    t
}

fn trimmed(t: &Table) -> String {
    t.to_string()
        .lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end().to_owned() + "\n")
        .collect()
}

/// One group's comparison as a person reads it.
pub fn table(c: &Comparison) -> String {
    let mut out = format!(
        "resource group `{}`: {} requests from {} to {}; recorded under {}, replayed through {}\n\n",
        c.group,
        c.requests,
        c.from.to_rfc3339(),
        c.to.to_rfc3339(),
        c.recorded_policy,
        c.simulated_policy
    );
    let mut users = borderless();
    users.set_header([
        "USER",
        "SESSIONS",
        "PLACED REC/SIM",
        "WAIT P50 REC",
        "WAIT P50 SIM",
        "WAIT P99 REC",
        "WAIT P99 SIM",
        "SLOWDOWN REC",
        "SLOWDOWN SIM",
    ]);
    let row = |name: String, sessions: usize, r: &Waits, s: &Waits| {
        vec![
            name,
            sessions.to_string(),
            format!("{}/{}", r.placed, s.placed),
            secs(r.wait_p50_secs),
            secs(s.wait_p50_secs),
            secs(r.wait_p99_secs),
            secs(s.wait_p99_secs),
            plain(r.mean_slowdown),
            plain(s.mean_slowdown),
        ]
    };
    for u in &c.users {
        users.add_row(row(u.user.clone(), u.sessions, &u.recorded, &u.simulated));
    }
    out += &trimmed(&users);
    out += "\n";
    let mut overall = borderless();
    overall.set_header(["OVERALL", "RECORDED", "SIMULATED"]);
    let (r, s) = (&c.recorded, &c.simulated);
    let lines: [(&str, String, String); 10] = [
        ("placed", r.placed.to_string(), s.placed.to_string()),
        (
            "not placed",
            r.not_placed.to_string(),
            s.not_placed.to_string(),
        ),
        ("wait p50", secs(r.wait_p50_secs), secs(s.wait_p50_secs)),
        ("wait p99", secs(r.wait_p99_secs), secs(s.wait_p99_secs)),
        (
            "utilization cpu",
            share(r.utilization.cpu),
            share(s.utilization.cpu),
        ),
        (
            "utilization memory",
            share(r.utilization.memory),
            share(s.utilization.memory),
        ),
        (
            "utilization gpu",
            share(r.utilization.gpu),
            share(s.utilization.gpu),
        ),
        ("jain's index", plain(r.jain_index), plain(s.jain_index)),
        (
            "gave up or expired",
            r.cancelled.to_string(),
            s.cancelled.to_string(),
        ),
        ("passes", r.passes.to_string(), s.passes.to_string()),
    ];
    for (name, r, s) in lines {
        overall.add_row([name.to_owned(), r, s]);
    }
    out += &trimmed(&overall);
    let p = &c.placements;
    out += &format!(
        "\nplacements: {} compared, {} differ, same order: {}{}\n\n",
        p.compared,
        p.differing,
        if p.same_order { "yes" } else { "no" },
        p.first_difference
            .map(|id| format!(" (first difference: session {id})"))
            .unwrap_or_default()
    );
    out
}
