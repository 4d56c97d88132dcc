//! The figures a what-if replay is judged by, for a simulated run and for what really
//! happened alike (both are an [`Outcome`] of the same [`Workload`]): waits per user,
//! utilization, Jain's fairness index, and where the placements differ.
//!
//! A request's wait runs from its request to its placement; one never placed in the window
//! waited until it left the queue (withdrawn, given up on, expired) or until the window's end,
//! so a policy that starves someone shows it. Its bounded slowdown is
//! `max(1, (wait + run) / max(run, 10 s))`, its run being how long it held its agents.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use events::payloads::ResourceSlots;
use serde::Serialize;
use uuid::Uuid;

use super::{Outcome, Workload, SLOWDOWN_BOUND_SECS};

/// A what-if replay next to what really happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub group: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The policy that really ran (the group's as recorded).
    pub recorded_policy: String,
    /// The policy the requests were replayed through.
    pub simulated_policy: String,
    pub requests: usize,
    pub users: Vec<UserComparison>,
    pub recorded: Figures,
    pub simulated: Figures,
    pub placements: PlacementDiff,
}

/// One user's requests, as recorded and as simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UserComparison {
    pub owner: Uuid,
    pub user: String,
    pub sessions: usize,
    pub recorded: Waits,
    pub simulated: Waits,
}

/// Waits of a set of requests, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waits {
    pub placed: usize,
    pub wait_p50_secs: Option<f64>,
    pub wait_p99_secs: Option<f64>,
    pub mean_slowdown: Option<f64>,
}

/// The figures of one run over the whole window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub placed: usize,
    pub not_placed: usize,
    /// Given up on or expired by the scheduler.
    pub cancelled: usize,
    pub wait_p50_secs: Option<f64>,
    pub wait_p99_secs: Option<f64>,
    pub utilization: Utilization,
    /// Jain's index over the users' mean bounded slowdowns: 1 is even.
    pub jain_index: Option<f64>,
    /// Passes of the scheduling core (recorded: the passes in the log that decided).
    pub passes: usize,
}

/// Resource-seconds held over capacity-seconds offered within the window, per resource
/// (`None` where the agents offered none).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Utilization {
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
    pub gpu: Option<f64>,
}

/// How the simulated placements differ from the recorded ones.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementDiff {
    /// Requests placed in either run.
    pub compared: usize,
    /// Of those, placed in one run only, or on other agents.
    pub differing: usize,
    /// Whether both runs placed the same sessions in the same order.
    pub same_order: bool,
    /// The first request (in request order) placed differently.
    pub first_difference: Option<Uuid>,
}

/// Compares `simulated` (the workload run through `simulated_policy`) with what really
/// happened.
pub fn compare(workload: &Workload, simulated: &Outcome, simulated_policy: &str) -> Comparison {
    let recorded = Outcome::recorded(workload);
    let mut users: BTreeMap<Uuid, (String, Vec<usize>)> = BTreeMap::new();
    for (i, r) in workload.requests.iter().enumerate() {
        users
            .entry(r.owner)
            .or_insert_with(|| (r.user.clone(), Vec::new()))
            .1
            .push(i);
    }
    let mut users: Vec<UserComparison> = users
        .into_iter()
        .map(|(owner, (user, requests))| UserComparison {
            owner,
            user,
            sessions: requests.len(),
            recorded: waits(workload, &recorded, &requests),
            simulated: waits(workload, simulated, &requests),
        })
        .collect();
    users.sort_by(|a, b| a.user.cmp(&b.user).then(a.owner.cmp(&b.owner)));
    Comparison {
        group: workload.rules.name.clone(),
        from: workload.from,
        to: workload.to,
        recorded_policy: workload.rules.queue_policy.as_str().to_owned(),
        simulated_policy: simulated_policy.to_owned(),
        requests: workload.requests.len(),
        recorded: figures(workload, &recorded, &users, |u| &u.recorded),
        simulated: figures(workload, simulated, &users, |u| &u.simulated),
        users,
        placements: diff(workload, &recorded, simulated),
    }
}

/// When request `i` left the queue and how long it then held its agents.
fn wait_and_run(workload: &Workload, outcome: &Outcome, i: usize) -> (f64, f64) {
    let request = &workload.requests[i];
    let secs = |d: TimeDelta| d.num_milliseconds().max(0) as f64 / 1000.0;
    match &outcome.placements[i] {
        Some(placement) => {
            let run = request
                .held_in_all()
                .unwrap_or_else(|| workload.to - placement.at);
            (secs(placement.at - request.requested_at), secs(run))
        }
        None => {
            let left = outcome.cancelled[i]
                .as_ref()
                .map(|(at, _)| *at)
                .into_iter()
                .chain(request.withdrawn_at)
                .chain([workload.to])
                .min()
                .expect("the window's end at least");
            (secs(left - request.requested_at), 0.0)
        }
    }
}

fn slowdown(wait: f64, run: f64) -> f64 {
    ((wait + run) / run.max(SLOWDOWN_BOUND_SECS)).max(1.0)
}

fn waits(workload: &Workload, outcome: &Outcome, requests: &[usize]) -> Waits {
    let figures: Vec<(f64, f64)> = requests
        .iter()
        .map(|i| wait_and_run(workload, outcome, *i))
        .collect();
    let waits: Vec<f64> = figures.iter().map(|(w, _)| *w).collect();
    let slowdowns: Vec<f64> = figures.iter().map(|(w, r)| slowdown(*w, *r)).collect();
    Waits {
        placed: requests
            .iter()
            .filter(|i| outcome.placements[**i].is_some())
            .count(),
        wait_p50_secs: percentile(&waits, 50.0),
        wait_p99_secs: percentile(&waits, 99.0),
        mean_slowdown: (!slowdowns.is_empty())
            .then(|| slowdowns.iter().sum::<f64>() / slowdowns.len() as f64),
    }
}

fn figures(
    workload: &Workload,
    outcome: &Outcome,
    users: &[UserComparison],
    of: impl Fn(&UserComparison) -> &Waits,
) -> Figures {
    let all: Vec<usize> = (0..workload.requests.len()).collect();
    let overall = waits(workload, outcome, &all);
    let slowdowns: Vec<f64> = users.iter().filter_map(|u| of(u).mean_slowdown).collect();
    Figures {
        placed: overall.placed,
        not_placed: all.len() - overall.placed,
        cancelled: outcome.cancelled.iter().flatten().count(),
        wait_p50_secs: overall.wait_p50_secs,
        wait_p99_secs: overall.wait_p99_secs,
        utilization: utilization(workload, outcome),
        jain_index: jain(&slowdowns),
        passes: outcome.passes,
    }
}

/// The nearest-rank percentile `p` (0 to 100) of `values`.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// Jain's fairness index of `values`: `(Σx)² / (n · Σx²)`, 1 when all are equal, `1/n` when
/// one has everything; `None` for none, and 1 when all are 0.
pub fn jain(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        return Some(1.0);
    }
    Some(sum * sum / (values.len() as f64 * squares))
}

/// Resource-seconds of `slots` held from `from` to `until` within the window.
fn resource_seconds(
    workload: &Workload,
    slots: ResourceSlots,
    from: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
) -> [f64; 3] {
    let start = from.max(workload.from);
    let end = until.unwrap_or(workload.to).min(workload.to);
    if end <= start {
        return [0.0; 3];
    }
    let secs = (end - start).num_milliseconds() as f64 / 1000.0;
    [
        slots.cpu_milli as f64 * secs,
        slots.memory_bytes as f64 * secs,
        slots.gpu_milli as f64 * secs,
    ]
}

fn add(sum: &mut [f64; 3], more: [f64; 3]) {
    for (s, m) in sum.iter_mut().zip(more) {
        *s += m;
    }
}

fn utilization(workload: &Workload, outcome: &Outcome) -> Utilization {
    let mut capacity = [0.0; 3];
    let mut joined: BTreeMap<&str, (DateTime<Utc>, ResourceSlots)> = BTreeMap::new();
    for change in &workload.agents {
        if let Some((since, offered)) = joined.remove(change.agent_id.as_str()) {
            add(
                &mut capacity,
                resource_seconds(workload, offered, since, Some(change.at)),
            );
        }
        if let Some(offer) = &change.joined {
            joined.insert(&change.agent_id, (change.at, offer.capacity));
        }
    }
    for (since, offered) in joined.into_values() {
        add(
            &mut capacity,
            resource_seconds(workload, offered, since, None),
        );
    }
    let mut used = [0.0; 3];
    for hold in &workload.background {
        let total = super::hold_total(hold);
        add(
            &mut used,
            resource_seconds(workload, total, hold.from, hold.until),
        );
    }
    for (request, placement) in workload.requests.iter().zip(&outcome.placements) {
        if let Some(placement) = placement {
            let until = request.held_in_all().map(|d| placement.at + d);
            add(
                &mut used,
                resource_seconds(workload, request.total(), placement.at, until),
            );
        }
    }
    let share = |i: usize| (capacity[i] > 0.0).then(|| used[i] / capacity[i]);
    Utilization {
        cpu: share(0),
        memory: share(1),
        gpu: share(2),
    }
}

fn diff(workload: &Workload, recorded: &Outcome, simulated: &Outcome) -> PlacementDiff {
    let agents = |p: &Option<super::Placement>| {
        p.as_ref().map(|p| {
            p.kernels
                .iter()
                .map(|k| k.agent_id.clone())
                .collect::<Vec<_>>()
        })
    };
    let mut compared = 0;
    let mut differing = 0;
    let mut first_difference = None;
    for (i, request) in workload.requests.iter().enumerate() {
        let (r, s) = (&recorded.placements[i], &simulated.placements[i]);
        if r.is_none() && s.is_none() {
            continue;
        }
        compared += 1;
        if agents(r) != agents(s) {
            differing += 1;
            first_difference.get_or_insert(request.session_id);
        }
    }
    let order = |o: &Outcome| {
        let mut placed: Vec<(DateTime<Utc>, usize)> = o
            .placements
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p.as_ref()?.at, i)))
            .collect();
        placed.sort();
        placed.into_iter().map(|(_, i)| i).collect::<Vec<_>>()
    };
    PlacementDiff {
        compared,
        differing,
        same_order: order(recorded) == order(simulated),
        first_difference,
    }
}
