//! Model serving: an *endpoint* runs a model as replicas (inference sessions its owner owns)
//! behind one URL that outlives them. Each change is an event of the endpoint's stream,
//! `endpoint-<id>`: made, scaled, a replica added or removed, a route (a replica as the
//! balancer sees it) healthy or unhealthy, a token made, destroyed.
//!
//! Pure: what a model definition file means ([`ModelDefinition`], Backend.AI's
//! `model-definition.yaml`, parsed at the edge), what a stream says ([`fold`]), what should
//! happen next to match it ([`reconcile`]: replicas to start and to take out, with a back-off
//! and a cap so that a model that never starts does not loop for ever), and what a health
//! check's answer changes ([`after_check`]). The gateway records, launches and balances.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use crate::catalogue::Event;
use crate::payloads::{EndpointAutoscalingSet, EndpointCreated, HealthCheck, ServedModel};
use crate::RecordedEvent;

/// The category of the endpoints' streams.
pub const CATEGORY: &str = "endpoint";

/// The stream of endpoint `id`.
pub fn stream_of(id: Uuid) -> String {
    crate::catalogue::stream_id(CATEGORY, id)
}

/// Replicas an endpoint may ask for at most.
pub const MOST_REPLICAS: u32 = 16;

/// The most characters of an endpoint's name.
pub const MOST_NAME_CHARS: usize = 64;

/// Whether `name` can name an endpoint: 1 to 64 lowercase letters, digits and `-`, starting
/// with a letter or a digit (a host name's label, should it become one).
pub fn is_valid_name(name: &str) -> bool {
    (1..=MOST_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

/// Replicas that left without serving, in a row, after which no more are started: the
/// endpoint is degraded until its owner scales or updates it.
pub const FAILURE_CAP: u32 = 5;

/// How long to wait before starting a replica after `failed_in_a_row` failed ones: none after
/// none, then 2 s doubling to at most 60 s.
pub fn backoff(failed_in_a_row: u32) -> Duration {
    match failed_in_a_row {
        0 => Duration::ZERO,
        n => Duration::from_secs((2u64 << (n - 1).min(5)).min(60)),
    }
}

// ---------------------------------------------------------------------------------------------
// The model definition file.

/// Backend.AI's model definition (`model-definition.yaml`): the models a folder serves. Only
/// what serving reads is kept; other keys are allowed and ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelDefinition {
    pub models: Vec<ModelEntry>,
}

/// One model of a definition.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelEntry {
    pub name: String,
    pub model_path: String,
    #[serde(default)]
    pub service: Option<ServiceDefinition>,
}

/// How a model is served: the command that starts its server, the port it listens on, and
/// how to ask it whether it serves.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ServiceDefinition {
    pub start_command: StartCommand,
    pub port: u32,
    #[serde(default)]
    pub health_check: Option<HealthCheckDefinition>,
}

/// A start command as a list of arguments or as one command line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum StartCommand {
    Line(String),
    Arguments(Vec<String>),
}

/// `service.health_check`: times in seconds, as Backend.AI writes them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HealthCheckDefinition {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub interval: Option<f64>,
    #[serde(default)]
    pub max_retries: Option<u32>,
    #[serde(default)]
    pub max_wait_time: Option<f64>,
    #[serde(default)]
    pub expected_status_code: Option<u16>,
    #[serde(default)]
    pub initial_delay: Option<f64>,
}

/// What a definition lacks to be served; `field` names where in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct DefinitionError {
    pub field: String,
    pub message: String,
}

fn refused(field: impl Into<String>, message: impl Into<String>) -> DefinitionError {
    DefinitionError {
        field: field.into(),
        message: message.into(),
    }
}

/// Defaults of a health check the definition leaves out (Backend.AI's).
pub const DEFAULT_CHECK: HealthCheckDefaults = HealthCheckDefaults {
    path: "/",
    interval: Duration::from_secs(10),
    max_retries: 10,
    max_wait: Duration::from_secs(15),
    expected_status: 200,
    initial_delay: Duration::from_secs(60),
};

/// See [`DEFAULT_CHECK`].
pub struct HealthCheckDefaults {
    pub path: &'static str,
    pub interval: Duration,
    pub max_retries: u32,
    pub max_wait: Duration,
    pub expected_status: u16,
    pub initial_delay: Duration,
}

impl ModelDefinition {
    /// What the first model with a `service` serves, checked.
    pub fn served(&self) -> Result<ServedModel, DefinitionError> {
        let (index, model) = self
            .models
            .iter()
            .enumerate()
            .find(|(_, m)| m.service.is_some())
            .ok_or_else(|| refused("models", "no model has a `service` to start"))?;
        let service = model.service.as_ref().expect("found with a service");
        let at = |key: &str| format!("models[{index}].service.{key}");
        let start_command = match &service.start_command {
            StartCommand::Line(line) => line.trim().to_owned(),
            StartCommand::Arguments(args) => shell_join(args),
        };
        if start_command.is_empty() || start_command.contains('\0') {
            return Err(refused(at("start_command"), "must name a command"));
        }
        let port = u16::try_from(service.port)
            .ok()
            .filter(|p| *p >= 1024)
            .ok_or_else(|| refused(at("port"), "must be a port from 1024 to 65535"))?;
        let check = service
            .health_check
            .clone()
            .unwrap_or(HealthCheckDefinition {
                path: None,
                interval: None,
                max_retries: None,
                max_wait_time: None,
                expected_status_code: None,
                initial_delay: None,
            });
        let seconds = |key: &str, value: Option<f64>, default: Duration, least: f64| match value {
            None => Ok(default.as_millis() as u64),
            Some(s) if s.is_finite() && s >= least && s <= 86_400.0 => Ok((s * 1000.0) as u64),
            Some(_) => Err(refused(
                at(&format!("health_check.{key}")),
                format!("must be from {least} to 86400 seconds"),
            )),
        };
        let path = check.path.unwrap_or_else(|| DEFAULT_CHECK.path.to_owned());
        if !path.starts_with('/') || path.chars().any(|c| c.is_control() || c == ' ') {
            return Err(refused(
                at("health_check.path"),
                "must be a path starting with `/`, without spaces",
            ));
        }
        let expected_status = check
            .expected_status_code
            .unwrap_or(DEFAULT_CHECK.expected_status);
        if !(100..=599).contains(&expected_status) {
            return Err(refused(
                at("health_check.expected_status_code"),
                "must be an HTTP status",
            ));
        }
        let max_retries = check.max_retries.unwrap_or(DEFAULT_CHECK.max_retries);
        if !(1..=100).contains(&max_retries) {
            return Err(refused(
                at("health_check.max_retries"),
                "must be from 1 to 100",
            ));
        }
        Ok(ServedModel {
            model_name: model.name.clone(),
            model_path: model.model_path.clone(),
            start_command,
            port,
            health_check: HealthCheck {
                path,
                interval_ms: seconds("interval", check.interval, DEFAULT_CHECK.interval, 0.1)?,
                max_retries,
                max_wait_ms: seconds(
                    "max_wait_time",
                    check.max_wait_time,
                    DEFAULT_CHECK.max_wait,
                    0.1,
                )?,
                expected_status,
                initial_delay_ms: seconds(
                    "initial_delay",
                    check.initial_delay,
                    DEFAULT_CHECK.initial_delay,
                    0.0,
                )?,
            },
        })
    }
}

/// Arguments as one POSIX shell command line, each quoted where it needs to be.
pub fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
            match plain {
                true => arg.clone(),
                false => format!("'{}'", arg.replace('\'', r"'\''")),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// The endpoint, folded.

/// How the balancer sees a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteHealth {
    /// Started, not yet answered its health check: no traffic.
    Starting,
    /// Answers its health check: receives traffic.
    Healthy,
    /// Failed its health check its maximum times in a row: no traffic, to be replaced.
    Unhealthy,
    /// Gets no new calls; ended once those under way had [`DRAIN_FOR`] to finish.
    Draining,
}

/// How long a draining replica is left to finish the calls under way (every gateway stops
/// sending it new ones within a refresh of its table) before its session is ended.
pub const DRAIN_FOR: Duration = Duration::from_secs(5);

/// One replica of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub session_id: Uuid,
    pub health: RouteHealth,
    /// The revision it runs (0: the creation's).
    pub revision: u32,
    /// When it was added.
    pub added_at: DateTime<Utc>,
    /// When its health last changed.
    pub since: DateTime<Utc>,
    /// Why it is unhealthy or draining.
    pub reason: Option<String>,
}

/// A change of the wanted replicas, as the endpoint's history shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    pub at: DateTime<Utc>,
    pub scaled: crate::payloads::EndpointScaled,
}

/// An endpoint as its stream says.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// As made, with the last update folded in (image, folder, resources, model).
    pub created: EndpointCreated,
    pub created_at: DateTime<Utc>,
    /// The revision new replicas run.
    pub revision: u32,
    /// Replicas wanted.
    pub replicas: u32,
    /// Its replicas now, by session.
    pub routes: BTreeMap<Uuid, Route>,
    pub autoscaling: Option<EndpointAutoscalingSet>,
    /// Every change of the wanted replicas, oldest first.
    pub scalings: Vec<Scaling>,
    pub destroyed: bool,
    /// Replicas that left without serving since one last served (or since it was scaled).
    pub failed_in_a_row: u32,
    /// When the last replica left, and why.
    pub last_removed: Option<(DateTime<Utc>, String)>,
    /// The stream's last version, against which what happens next is recorded.
    pub version: u64,
}

impl Endpoint {
    pub fn id(&self) -> Uuid {
        self.created.endpoint_id
    }

    /// Its replicas that receive traffic.
    pub fn healthy(&self) -> impl Iterator<Item = &Route> {
        self.routes
            .values()
            .filter(|r| r.health == RouteHealth::Healthy)
    }

    /// Why no more replicas are started, when that is so: [`FAILURE_CAP`] left in a row.
    pub fn degraded(&self) -> Option<String> {
        (self.failed_in_a_row >= FAILURE_CAP).then(|| {
            let last = self
                .last_removed
                .as_ref()
                .map(|(_, why)| why.as_str())
                .unwrap_or("unknown");
            format!(
                "{} replicas in a row left without serving (the last: {last}); scale or update \
                 the endpoint to try again",
                self.failed_in_a_row
            )
        })
    }

    /// One word for where it stands: `destroyed`, `degraded`, `updating` (replicas of an
    /// older revision still serve), `healthy` (every wanted replica serves), `serving` (some
    /// do), `provisioning` (none yet) or `stopped` (none wanted).
    pub fn status(&self) -> &'static str {
        let healthy = self.healthy().count() as u32;
        let updating = self
            .routes
            .values()
            .any(|r| r.revision != self.revision && r.health != RouteHealth::Draining);
        match () {
            _ if self.destroyed => "destroyed",
            _ if self.degraded().is_some() => "degraded",
            _ if updating => "updating",
            _ if self.replicas == 0 && healthy == 0 => "stopped",
            _ if healthy >= self.replicas && healthy > 0 => "healthy",
            _ if healthy > 0 => "serving",
            _ => "provisioning",
        }
    }

    /// When the wanted replicas last changed.
    pub fn last_scaled_at(&self) -> Option<DateTime<Utc>> {
        self.scalings.last().map(|s| s.at)
    }
}

/// The endpoint a stream's events leave, if it was made.
pub fn fold(stream: &[RecordedEvent]) -> Option<Endpoint> {
    let mut endpoint: Option<Endpoint> = None;
    for recorded in stream {
        let at = recorded.recorded_at;
        if let Event::EndpointCreated(created) = &recorded.event {
            endpoint = Some(Endpoint {
                replicas: created.replicas,
                created: created.clone(),
                created_at: at,
                revision: 0,
                routes: BTreeMap::new(),
                autoscaling: None,
                scalings: Vec::new(),
                destroyed: false,
                failed_in_a_row: 0,
                last_removed: None,
                version: recorded.stream_version,
            });
            continue;
        }
        let Some(e) = endpoint.as_mut() else { continue };
        e.version = recorded.stream_version;
        let mut health = |session: &Uuid, health: RouteHealth, reason: Option<String>| {
            if let Some(route) = e.routes.get_mut(session) {
                route.health = health;
                route.since = at;
                route.reason = reason;
            }
        };
        match &recorded.event {
            Event::EndpointRouteHealthy(r) => health(&r.session_id, RouteHealth::Healthy, None),
            Event::EndpointRouteUnhealthy(r) => health(
                &r.session_id,
                RouteHealth::Unhealthy,
                Some(r.reason.clone()),
            ),
            Event::EndpointRouteDraining(r) => {
                health(&r.session_id, RouteHealth::Draining, Some(r.reason.clone()))
            }
            _ => {}
        }
        match &recorded.event {
            Event::EndpointScaled(scaled) => {
                e.replicas = scaled.replicas;
                e.failed_in_a_row = 0;
                e.scalings.push(Scaling {
                    at,
                    scaled: scaled.clone(),
                });
            }
            Event::EndpointAutoscalingSet(set) => {
                e.autoscaling = (!set.rules.is_empty()).then(|| set.clone());
            }
            Event::EndpointUpdated(updated) => {
                e.revision = updated.revision;
                e.created.image = updated.image.clone();
                e.created.model_folder = updated.model_folder.clone();
                e.created.resources = updated.resources;
                e.created.model = updated.model.clone();
                e.failed_in_a_row = 0;
            }
            Event::EndpointReplicaAdded(added) => {
                e.routes.insert(
                    added.session_id,
                    Route {
                        session_id: added.session_id,
                        health: RouteHealth::Starting,
                        revision: added.revision,
                        added_at: at,
                        since: at,
                        reason: None,
                    },
                );
            }
            Event::EndpointReplicaRemoved(removed) => {
                e.routes.remove(&removed.session_id);
                e.last_removed = Some((at, removed.reason.clone()));
                if removed.failed {
                    e.failed_in_a_row += 1;
                }
            }
            Event::EndpointRouteHealthy(_) => e.failed_in_a_row = 0,
            Event::EndpointDestroyed(_) => e.destroyed = true,
            _ => {}
        }
    }
    endpoint
}

/// The endpoints among events of several endpoint streams (in log order), by name.
pub fn among(events: &[RecordedEvent]) -> Vec<Endpoint> {
    let mut streams: BTreeMap<&str, Vec<RecordedEvent>> = BTreeMap::new();
    for event in events {
        streams
            .entry(event.stream_id.as_str())
            .or_default()
            .push(event.clone());
    }
    let mut endpoints: Vec<Endpoint> = streams.values().filter_map(|s| fold(s)).collect();
    endpoints.sort_by(|a, b| a.created.name.cmp(&b.created.name));
    endpoints
}

// ---------------------------------------------------------------------------------------------
// What to do next.

/// A replica to take out of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub session_id: Uuid,
    pub reason: String,
    /// Counted towards the back-off and the cap.
    pub failed: bool,
    /// Its session is still live and must be terminated.
    pub terminate: bool,
}

/// What an endpoint needs now to match what it asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub remove: Vec<Removal>,
    /// Replicas to stop sending calls to (they end after [`DRAIN_FOR`]), and why.
    pub drain: Vec<(Uuid, String)>,
    /// Replicas to start now (of the endpoint's revision).
    pub start: u32,
    /// Replicas held back by the back-off until then.
    pub start_later: Option<DateTime<Utc>>,
}

/// What `endpoint` needs at `now`, its replicas' sessions being live except those in `ended`
/// (with why each ended).
///
/// Replicas whose session ended or that are unhealthy leave at once (failed, unless it ended
/// being destroyed); draining ones leave once drained. Of the endpoint's revision, replicas
/// past the wanted count are drained (those not serving first, then the newest), and those it
/// is short of are started unless the back-off holds them or the endpoint is degraded.
/// Replicas of an older revision keep serving until as many of the new serve as are wanted
/// (a rolling update), then are drained; those of them not serving leave at once. A destroyed
/// endpoint's every replica leaves.
pub fn reconcile(endpoint: &Endpoint, ended: &BTreeMap<Uuid, String>, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    if endpoint.destroyed {
        plan.remove = endpoint
            .routes
            .values()
            .map(|r| Removal {
                session_id: r.session_id,
                reason: "the endpoint was destroyed".into(),
                failed: false,
                terminate: !ended.contains_key(&r.session_id),
            })
            .collect();
        return plan;
    }
    let drained_by =
        |r: &Route| r.since + chrono::TimeDelta::from_std(DRAIN_FOR).unwrap_or_default();
    let mut current: Vec<&Route> = Vec::new();
    let mut older: Vec<&Route> = Vec::new();
    for route in endpoint.routes.values() {
        let leave = |reason: String, failed: bool, terminate: bool| Removal {
            session_id: route.session_id,
            reason,
            failed,
            terminate,
        };
        match (ended.get(&route.session_id), route.health) {
            (Some(_), RouteHealth::Draining) => {
                plan.remove.push(leave(
                    route.reason.clone().unwrap_or_default(),
                    false,
                    false,
                ));
            }
            (Some(why), _) => {
                plan.remove
                    .push(leave(format!("its session ended: {why}"), true, false));
            }
            (None, RouteHealth::Unhealthy) => plan.remove.push(leave(
                route.reason.clone().unwrap_or_else(|| "unhealthy".into()),
                true,
                true,
            )),
            (None, RouteHealth::Draining) => {
                if drained_by(route) <= now {
                    plan.remove
                        .push(leave(route.reason.clone().unwrap_or_default(), false, true));
                }
            }
            (None, _) if route.revision == endpoint.revision => current.push(route),
            (None, _) => older.push(route),
        }
    }
    let wanted = endpoint.replicas as usize;
    if current.len() > wanted {
        // Those not serving first, then the newest.
        current.sort_by_key(|r| {
            (
                r.health == RouteHealth::Healthy,
                std::cmp::Reverse(r.added_at),
            )
        });
        let surplus = current.len() - wanted;
        for route in current.drain(..surplus) {
            plan.drain
                .push((route.session_id, format!("scaled down to {wanted}")));
        }
    }
    let serving_now = current
        .iter()
        .filter(|r| r.health == RouteHealth::Healthy)
        .count();
    for route in older {
        if route.health != RouteHealth::Healthy {
            plan.remove.push(Removal {
                session_id: route.session_id,
                reason: format!("of revision {}, replaced", route.revision),
                failed: false,
                terminate: true,
            });
        } else if serving_now >= wanted {
            plan.drain.push((
                route.session_id,
                format!("of revision {}, replaced", route.revision),
            ));
        }
    }
    let short = wanted.saturating_sub(current.len()) as u32;
    if short == 0 {
        return plan;
    }
    let failed_now = plan.remove.iter().filter(|r| r.failed).count() as u32;
    let failed_in_a_row = endpoint.failed_in_a_row + failed_now;
    if failed_in_a_row >= FAILURE_CAP {
        return plan;
    }
    let last_left = match failed_now {
        0 => endpoint.last_removed.as_ref().map(|(at, _)| *at),
        _ => Some(now),
    };
    let wait = chrono::TimeDelta::from_std(backoff(failed_in_a_row)).unwrap_or_default();
    match last_left.map(|at| at + wait).filter(|until| *until > now) {
        Some(until) if failed_in_a_row > 0 => plan.start_later = Some(until),
        _ => plan.start = short,
    }
    plan
}

// ---------------------------------------------------------------------------------------------
// Autoscaling.

/// An endpoint's calls over the last window, summed over every gateway, and the use its
/// healthy replicas made of what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Traffic {
    pub requests_per_second: f64,
    pub outstanding_requests: f64,
    /// Percent of the CPU each replica is given, averaged; none without a recent sample.
    pub cpu_utilization: Option<f64>,
    /// Percent GPU utilization, averaged; none without a GPU or a recent sample.
    pub gpu_utilization: Option<f64>,
}

/// A replica's latest sample of what it uses: percent of one core, and percent GPU
/// utilization (none: it holds no GPU, or it was not measured).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReplicaUse {
    pub cpu_percent: Option<f64>,
    pub gpu_percent: Option<f64>,
}

/// The use `endpoint`'s healthy replicas made lately of what each is given, by their latest
/// samples (`samples`, by session): percent of the CPU a replica is given, and percent GPU
/// utilization, each averaged over the healthy replicas sampled. Pure.
pub fn utilization(
    endpoint: &Endpoint,
    samples: &BTreeMap<Uuid, ReplicaUse>,
) -> (Option<f64>, Option<f64>) {
    let cores = endpoint.created.resources.cpu_milli.max(1) as f64 / 1000.0;
    let sampled: Vec<&ReplicaUse> = endpoint
        .healthy()
        .filter_map(|r| samples.get(&r.session_id))
        .collect();
    let mean = |values: Vec<f64>| {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let cpu = mean(
        sampled
            .iter()
            .filter_map(|u| u.cpu_percent.map(|p| p / cores))
            .collect(),
    );
    let gpu = mean(sampled.iter().filter_map(|u| u.gpu_percent).collect());
    (cpu, gpu)
}

/// The most replicas autoscaling may ask for.
pub const MOST_AUTOSCALED: u32 = MOST_REPLICAS;

/// What an endpoint's autoscaling asks for at `now` given `traffic`: the first rule that holds
/// (its metric per healthy replica compared with its threshold) and whose cooldown since the
/// last change of the wanted replicas has passed, its step applied within the bounds; or the
/// bounds themselves when the wanted replicas are outside them. Nothing while no replica serves
/// (a new endpoint, or one scaled to zero: a call wakes that one, [`wake`]).
pub fn autoscale(
    endpoint: &Endpoint,
    traffic: Traffic,
    now: DateTime<Utc>,
) -> Option<crate::payloads::EndpointScaled> {
    use crate::payloads::{Comparator, ScalingMetric};
    let scaling = endpoint
        .autoscaling
        .as_ref()
        .filter(|_| !endpoint.destroyed)?;
    let current = endpoint.replicas;
    let scaled = |replicas: u32, reason: String, figures: BTreeMap<String, f64>| {
        crate::payloads::EndpointScaled {
            endpoint_id: endpoint.id(),
            replicas,
            previous: current,
            reason,
            figures,
        }
    };
    let bounded = current.clamp(scaling.min_replicas, scaling.max_replicas);
    if bounded != current && (current > 0 || scaling.min_replicas > 0) {
        return Some(scaled(
            bounded,
            format!(
                "kept within {}..={} replicas",
                scaling.min_replicas, scaling.max_replicas
            ),
            BTreeMap::new(),
        ));
    }
    let healthy = endpoint.healthy().count();
    if healthy == 0 {
        return None;
    }
    let per_replica = |total: f64| total / healthy as f64;
    let figures = BTreeMap::from([
        (
            "requests_per_second".to_owned(),
            round(per_replica(traffic.requests_per_second)),
        ),
        (
            "outstanding_requests".to_owned(),
            round(per_replica(traffic.outstanding_requests)),
        ),
        ("healthy_replicas".to_owned(), healthy as f64),
    ]);
    let mut figures = figures;
    // Utilizations are averages over replicas already: not divided again.
    for (name, value) in [
        ("cpu_utilization", traffic.cpu_utilization),
        ("gpu_utilization", traffic.gpu_utilization),
    ] {
        if let Some(value) = value {
            figures.insert(name.to_owned(), round(value));
        }
    }
    for (i, rule) in scaling.rules.iter().enumerate() {
        let name = match rule.metric {
            ScalingMetric::RequestsPerSecond => "requests_per_second",
            ScalingMetric::OutstandingRequests => "outstanding_requests",
            ScalingMetric::CpuUtilization => "cpu_utilization",
            ScalingMetric::GpuUtilization => "gpu_utilization",
        };
        // A use not measured lately holds no rule, neither up nor down.
        let Some(&value) = figures.get(name) else {
            continue;
        };
        let (holds, sign) = match rule.comparator {
            Comparator::Lt => (value < rule.threshold, "<"),
            Comparator::Le => (value <= rule.threshold, "<="),
            Comparator::Gt => (value > rule.threshold, ">"),
            Comparator::Ge => (value >= rule.threshold, ">="),
        };
        if !holds {
            continue;
        }
        // A step down also cools down from when a replica last became healthy: one just
        // woken or added has served nothing yet, and the call that woke it may still wait.
        let newest_healthy = (rule.step < 0)
            .then(|| endpoint.healthy().map(|r| r.since).max())
            .flatten();
        let cooled = endpoint
            .last_scaled_at()
            .into_iter()
            .chain(newest_healthy)
            .max()
            .is_none_or(|at| {
                now >= at + chrono::TimeDelta::seconds(rule.cooldown_secs.min(86_400) as i64)
            });
        let wanted = (i64::from(current) + i64::from(rule.step)).clamp(
            i64::from(scaling.min_replicas),
            i64::from(scaling.max_replicas),
        ) as u32;
        if !cooled || wanted == current {
            continue;
        }
        return Some(scaled(
            wanted,
            format!(
                "rule {}: {name} {value} {sign} {} per replica, step {:+}",
                i + 1,
                rule.threshold,
                rule.step
            ),
            figures,
        ));
    }
    None
}

fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// What a call of an endpoint scaled to zero by its autoscaling asks for: its lower bound, at
/// least one replica. Nothing for an endpoint with replicas wanted, or stopped by its owner
/// (no autoscaling).
pub fn wake(endpoint: &Endpoint) -> Option<crate::payloads::EndpointScaled> {
    let scaling = endpoint.autoscaling.as_ref()?;
    if endpoint.destroyed || endpoint.replicas > 0 || scaling.max_replicas == 0 {
        return None;
    }
    Some(crate::payloads::EndpointScaled {
        endpoint_id: endpoint.id(),
        replicas: scaling.min_replicas.max(1),
        previous: 0,
        reason: "a call came while it was scaled to zero".into(),
        figures: BTreeMap::new(),
    })
}

// ---------------------------------------------------------------------------------------------
// Health checks.

/// What one health check of a replica found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckResult {
    /// It answered with this status.
    Answered(u16),
    /// No answer: why (refused, timed out, not yet published).
    NoAnswer(String),
}

/// What a check changes about a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to record; the failures in a row now.
    Unchanged { failures: u32 },
    /// It serves: record it healthy.
    Healthy,
    /// It failed `max_retries` times in a row: record it unhealthy, for this reason.
    Unhealthy(String),
}

/// What `result` changes about `route`, which had failed `failures` checks in a row before
/// it, under `check`. A new replica's failures before its initial delay are not counted (its
/// model may be loading).
pub fn after_check(
    route: &Route,
    check: &HealthCheck,
    failures: u32,
    result: &CheckResult,
    now: DateTime<Utc>,
) -> Verdict {
    let ok = matches!(result, CheckResult::Answered(s) if *s == check.expected_status);
    if route.health == RouteHealth::Draining {
        return Verdict::Unchanged { failures: 0 };
    }
    if ok {
        return match route.health {
            RouteHealth::Healthy => Verdict::Unchanged { failures: 0 },
            _ => Verdict::Healthy,
        };
    }
    if matches!(route.health, RouteHealth::Unhealthy | RouteHealth::Draining) {
        return Verdict::Unchanged { failures };
    }
    let loading = route.health == RouteHealth::Starting
        && now < route.added_at + chrono::TimeDelta::milliseconds(check.initial_delay_ms as i64);
    if loading {
        return Verdict::Unchanged { failures: 0 };
    }
    let failures = failures + 1;
    if failures < check.max_retries {
        return Verdict::Unchanged { failures };
    }
    let what = match result {
        CheckResult::Answered(status) => format!("answered {status}"),
        CheckResult::NoAnswer(why) => format!("did not answer ({why})"),
    };
    Verdict::Unhealthy(format!(
        "GET {} {what}, {failures} times in a row",
        check.path
    ))
}

/// The replicas' sessions among `sessions` that ended, given each one's status (`None`: no
/// such session), with why.
pub fn ended_among(
    sessions: &BTreeMap<Uuid, Option<crate::payloads::SessionStatus>>,
) -> BTreeMap<Uuid, String> {
    sessions
        .iter()
        .filter_map(|(id, status)| match status {
            None => Some((*id, "no such session".to_owned())),
            Some(s) if s.is_terminal() => Some((*id, format!("{s:?}").to_uppercase())),
            Some(_) => None,
        })
        .collect()
}

/// An endpoint made for tests and examples.
#[cfg(any(test, feature = "fixtures"))]
pub fn example_created(id: Uuid) -> EndpointCreated {
    use crate::payloads::{Owner, ResourceSlots};
    EndpointCreated {
        endpoint_id: id,
        name: "iris".into(),
        owner: Owner {
            user_id: id,
            email: "a@b.c".into(),
            project: None,
        },
        image: "berth/python:latest".into(),
        resource_group: "default".into(),
        model_folder: "models".into(),
        resources: ResourceSlots {
            cpu_milli: 500,
            memory_bytes: 256 << 20,
            gpu_milli: 0,
        },
        replicas: 2,
        open_to_public: false,
        model: ServedModel {
            model_name: "iris".into(),
            model_path: "/home/work/models".into(),
            start_command: "python3 /home/work/models/serve.py".into(),
            port: 8000,
            health_check: HealthCheck {
                path: "/health".into(),
                interval_ms: 1000,
                max_retries: 3,
                max_wait_ms: 1000,
                expected_status: 200,
                initial_delay_ms: 5000,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payloads::*;
    use crate::payloads::{Comparator, ScalingMetric, ScalingRule};
    use crate::{LogPosition, Metadata};

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn recorded(version: u64, at: i64, event: Event) -> RecordedEvent {
        RecordedEvent {
            event_id: Uuid::now_v7(),
            stream_id: "endpoint-x".into(),
            stream_version: version,
            schema_version: 1,
            position: LogPosition {
                tx: 10 + version,
                seq: version as i64,
            },
            recorded_at: t(at),
            metadata: Metadata::default(),
            event,
        }
    }

    fn stream(id: Uuid, then: Vec<(i64, Event)>) -> Vec<RecordedEvent> {
        let mut events = vec![recorded(0, 0, Event::EndpointCreated(example_created(id)))];
        for (i, (at, event)) in then.into_iter().enumerate() {
            events.push(recorded(i as u64 + 1, at, event));
        }
        events
    }

    fn added(id: Uuid, session: Uuid) -> Event {
        added_at_revision(id, session, 0)
    }

    fn added_at_revision(id: Uuid, session: Uuid, revision: u32) -> Event {
        Event::EndpointReplicaAdded(EndpointReplicaAdded {
            endpoint_id: id,
            session_id: session,
            revision,
        })
    }

    fn scaled(id: Uuid, replicas: u32, previous: u32) -> Event {
        Event::EndpointScaled(EndpointScaled {
            endpoint_id: id,
            replicas,
            previous,
            reason: "user".into(),
            figures: BTreeMap::new(),
        })
    }

    fn healthy(id: Uuid, session: Uuid) -> Event {
        Event::EndpointRouteHealthy(EndpointRouteHealthy {
            endpoint_id: id,
            session_id: session,
        })
    }

    fn removed(id: Uuid, session: Uuid, failed: bool) -> Event {
        Event::EndpointReplicaRemoved(EndpointReplicaRemoved {
            endpoint_id: id,
            session_id: session,
            reason: "it never answered".into(),
            failed,
        })
    }

    #[test]
    fn a_definition_in_backendais_format_gives_what_replicas_run() {
        let definition: ModelDefinition = serde_json::from_value(serde_json::json!({
            "models": [
                {"name": "notes", "model_path": "/models/notes"},
                {"name": "iris", "model_path": "/models", "service": {
                    "pre_start_actions": [],
                    "start_command": ["python3", "serve.py", "--greeting", "it's up"],
                    "port": 8000,
                    "health_check": {"path": "/health", "interval": 0.5, "max_retries": 3,
                                     "initial_delay": 2, "expected_status_code": 200}}}
            ]
        }))
        .unwrap();
        let served = definition.served().unwrap();
        assert_eq!(served.model_name, "iris");
        assert_eq!(
            served.start_command,
            r"python3 serve.py --greeting 'it'\''s up'"
        );
        assert_eq!(served.port, 8000);
        assert_eq!(served.health_check.interval_ms, 500);
        assert_eq!(served.health_check.initial_delay_ms, 2000);
        assert_eq!(served.health_check.max_wait_ms, 15_000, "the default");
    }

    #[test]
    fn a_definition_that_cannot_be_served_is_refused_naming_where() {
        let refuse = |v: serde_json::Value| {
            serde_json::from_value::<ModelDefinition>(v)
                .unwrap()
                .served()
                .unwrap_err()
                .field
        };
        assert_eq!(
            refuse(serde_json::json!({"models": [{"name": "a", "model_path": "/m"}]})),
            "models"
        );
        let with = |service: serde_json::Value| serde_json::json!({"models": [{"name": "a", "model_path": "/m", "service": service}]});
        assert_eq!(
            refuse(with(serde_json::json!({"start_command": "x", "port": 80}))),
            "models[0].service.port"
        );
        assert_eq!(
            refuse(with(
                serde_json::json!({"start_command": " ", "port": 8000})
            )),
            "models[0].service.start_command"
        );
        assert_eq!(
            refuse(with(serde_json::json!({"start_command": "x", "port": 8000,
                "health_check": {"path": "health"}}))),
            "models[0].service.health_check.path"
        );
        assert_eq!(
            refuse(with(serde_json::json!({"start_command": "x", "port": 8000,
                "health_check": {"interval": -1}}))),
            "models[0].service.health_check.interval"
        );
    }

    #[test]
    fn names_are_host_labels() {
        assert!(is_valid_name("iris-2"));
        for bad in ["", "-a", "Iris", "a_b", "a.b", &"a".repeat(65)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_stream_folds_into_its_replicas_and_their_health() {
        let id = Uuid::now_v7();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let e = fold(&stream(
            id,
            vec![(1, added(id, a)), (1, added(id, b)), (5, healthy(id, a))],
        ))
        .unwrap();
        assert_eq!(e.routes[&a].health, RouteHealth::Healthy);
        assert_eq!(e.routes[&b].health, RouteHealth::Starting);
        assert_eq!(e.status(), "serving");
        assert_eq!(e.version, 3);
        let e = fold(&stream(
            id,
            vec![
                (1, added(id, a)),
                (5, healthy(id, a)),
                (6, scaled(id, 1, 2)),
            ],
        ))
        .unwrap();
        assert_eq!(e.status(), "healthy");
    }

    #[test]
    fn short_of_replicas_it_starts_them_and_past_them_it_takes_the_idle_ones_out_first() {
        let id = Uuid::now_v7();
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let none = BTreeMap::new();
        let e = fold(&stream(id, vec![(1, added(id, a))])).unwrap();
        assert_eq!(reconcile(&e, &none, t(2)).start, 1);

        let mut e = fold(&stream(
            id,
            vec![
                (1, added(id, a)),
                (2, added(id, b)),
                (3, added(id, c)),
                (4, healthy(id, a)),
                (4, healthy(id, c)),
            ],
        ))
        .unwrap();
        e.replicas = 1;
        let plan = reconcile(&e, &none, t(5));
        let out: Vec<Uuid> = plan.drain.iter().map(|(s, _)| *s).collect();
        assert_eq!(out, vec![b, c], "the starting one, then the newest serving");
        assert!(plan.remove.is_empty(), "drained first, not cut");
        assert_eq!(plan.start, 0);

        // Drained: ended once the calls under way had their time.
        let drained = Event::EndpointRouteDraining(EndpointRouteDraining {
            endpoint_id: id,
            session_id: c,
            reason: "scaled down to 1".into(),
        });
        let e = fold(&stream(
            id,
            vec![
                (1, added(id, a)),
                (4, healthy(id, a)),
                (5, added(id, c)),
                (6, healthy(id, c)),
                (10, drained),
            ],
        ))
        .unwrap();
        assert_eq!(e.healthy().count(), 1, "a draining replica gets no calls");
        assert!(reconcile(&e, &none, t(14)).remove.is_empty());
        let plan = reconcile(&e, &none, t(15));
        assert_eq!(plan.remove.len(), 1);
        assert!(plan.remove[0].terminate && !plan.remove[0].failed);
    }

    fn updated(id: Uuid, revision: u32) -> Event {
        let created = example_created(id);
        Event::EndpointUpdated(EndpointUpdated {
            endpoint_id: id,
            revision,
            image: "berth/python:3".into(),
            model_folder: created.model_folder,
            resources: created.resources,
            model: created.model,
            reason: "user".into(),
        })
    }

    #[test]
    fn an_update_starts_the_new_revision_beside_the_old_which_serves_until_the_new_does() {
        let id = Uuid::now_v7();
        let (a, b, c, d) = (
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
            Uuid::now_v7(),
        );
        let none = BTreeMap::new();
        let mut then = vec![
            (1, added(id, a)),
            (1, added(id, b)),
            (2, healthy(id, a)),
            (2, healthy(id, b)),
            (3, updated(id, 1)),
        ];
        let e = fold(&stream(id, then.clone())).unwrap();
        assert_eq!(e.created.image, "berth/python:3");
        assert_eq!(e.status(), "updating");
        let plan = reconcile(&e, &none, t(4));
        assert_eq!(plan.start, 2, "the new revision, beside the old");
        assert!(plan.drain.is_empty() && plan.remove.is_empty());

        then.extend([
            (4, added_at_revision(id, c, 1)),
            (4, added_at_revision(id, d, 1)),
            (6, healthy(id, c)),
        ]);
        let e = fold(&stream(id, then.clone())).unwrap();
        assert_eq!(e.healthy().count(), 3, "old and new serve side by side");
        let plan = reconcile(&e, &none, t(7));
        assert!(
            plan.drain.is_empty(),
            "one new replica serves of two wanted"
        );

        then.push((7, healthy(id, d)));
        let e = fold(&stream(id, then)).unwrap();
        let plan = reconcile(&e, &none, t(8));
        let drained: Vec<Uuid> = plan.drain.iter().map(|(s, _)| *s).collect();
        assert_eq!(drained, vec![a, b]);
        assert_eq!(plan.start, 0);
    }

    fn autoscaled(id: Uuid, min: u32, max: u32) -> Event {
        Event::EndpointAutoscalingSet(EndpointAutoscalingSet {
            endpoint_id: id,
            min_replicas: min,
            max_replicas: max,
            rules: vec![
                ScalingRule {
                    metric: ScalingMetric::RequestsPerSecond,
                    comparator: Comparator::Gt,
                    threshold: 5.0,
                    step: 1,
                    cooldown_secs: 10,
                },
                ScalingRule {
                    metric: ScalingMetric::RequestsPerSecond,
                    comparator: Comparator::Lt,
                    threshold: 1.0,
                    step: -1,
                    cooldown_secs: 30,
                },
            ],
        })
    }

    #[test]
    fn autoscaling_steps_by_its_rules_after_their_cooldown_and_a_call_wakes_it_from_zero() {
        let id = Uuid::now_v7();
        let a = Uuid::now_v7();
        let busy = Traffic {
            requests_per_second: 12.0,
            outstanding_requests: 3.0,
            ..Traffic::default()
        };
        let quiet = Traffic::default();
        let mut then = vec![
            (0, scaled(id, 1, 2)),
            (1, added(id, a)),
            (2, healthy(id, a)),
            (3, autoscaled(id, 0, 3)),
        ];
        let e = fold(&stream(id, then.clone())).unwrap();
        assert_eq!(
            autoscale(&e, busy, t(5)),
            None,
            "cooling down since the scaling at 0"
        );
        let up = autoscale(&e, busy, t(10)).unwrap();
        assert_eq!((up.previous, up.replicas), (1, 2));
        assert_eq!(up.figures["requests_per_second"], 12.0);
        assert_eq!(up.figures["healthy_replicas"], 1.0);
        assert!(
            up.reason.starts_with("rule 1: requests_per_second 12 > 5"),
            "{}",
            up.reason
        );
        assert_eq!(
            autoscale(&e, quiet, t(20)),
            None,
            "the second rule cools down for 30 s"
        );
        assert_eq!(
            autoscale(&e, quiet, t(30)),
            None,
            "the step down cools down from the replica's health at 2"
        );
        let down = autoscale(&e, quiet, t(32)).unwrap();
        assert_eq!(down.replicas, 0, "down to its lower bound, zero");
        assert_eq!(wake(&e), None, "it has a replica");

        then.push((30, Event::EndpointScaled(down)));
        let e = fold(&stream(id, then.clone())).unwrap();
        assert_eq!(autoscale(&e, quiet, t(100)), None);
        let woken = wake(&e).unwrap();
        assert_eq!((woken.previous, woken.replicas), (0, 1));

        // Woken at 100, its replica healthy only at 125: the step down waits 30 s from then.
        let b = Uuid::now_v7();
        then.push((100, Event::EndpointScaled(woken)));
        then.push((101, added(id, b)));
        then.push((125, healthy(id, b)));
        let e = fold(&stream(id, then)).unwrap();
        assert_eq!(
            autoscale(&e, quiet, t(140)),
            None,
            "a replica healthy since 125 has served nothing yet"
        );
        assert_eq!(autoscale(&e, quiet, t(156)).unwrap().replicas, 0);
    }

    #[test]
    fn a_rule_over_the_replicas_use_holds_only_where_the_use_was_measured() {
        let id = Uuid::now_v7();
        let a = Uuid::now_v7();
        let rule = |metric, comparator, threshold, step| ScalingRule {
            metric,
            comparator,
            threshold,
            step,
            cooldown_secs: 0,
        };
        let rules = Event::EndpointAutoscalingSet(EndpointAutoscalingSet {
            endpoint_id: id,
            min_replicas: 1,
            max_replicas: 4,
            rules: vec![
                rule(ScalingMetric::CpuUtilization, Comparator::Ge, 80.0, 2),
                rule(ScalingMetric::GpuUtilization, Comparator::Lt, 10.0, -1),
            ],
        });
        let e = fold(&stream(
            id,
            vec![
                (0, scaled(id, 1, 2)),
                (1, added(id, a)),
                (2, healthy(id, a)),
                (3, rules.clone()),
            ],
        ))
        .unwrap();
        let unmeasured = Traffic::default();
        assert_eq!(autoscale(&e, unmeasured, t(10)), None, "no sample, no step");
        let hot = Traffic {
            cpu_utilization: Some(91.256),
            ..Traffic::default()
        };
        let up = autoscale(&e, hot, t(10)).unwrap();
        assert_eq!((up.previous, up.replicas), (1, 3));
        assert_eq!(up.figures["cpu_utilization"], 91.26);
        assert!(!up.figures.contains_key("gpu_utilization"));
        assert!(
            up.reason.starts_with("rule 1: cpu_utilization 91.26 >= 80"),
            "{}",
            up.reason
        );
        let idle_gpus = Traffic {
            cpu_utilization: Some(20.0),
            gpu_utilization: Some(3.0),
            ..Traffic::default()
        };
        let e = fold(&stream(
            id,
            vec![
                (0, scaled(id, 1, 2)),
                (1, added(id, a)),
                (2, healthy(id, a)),
                (3, rules),
                (4, Event::EndpointScaled(up)),
            ],
        ))
        .unwrap();
        let down = autoscale(&e, idle_gpus, t(20)).unwrap();
        assert_eq!((down.previous, down.replicas), (3, 2));
        assert_eq!(down.figures["gpu_utilization"], 3.0);
    }

    #[test]
    fn utilization_is_what_the_healthy_replicas_use_of_what_they_are_given() {
        let id = Uuid::now_v7();
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let e = fold(&stream(
            id,
            vec![
                (1, added(id, a)),
                (1, added(id, b)),
                (1, added(id, c)),
                (2, healthy(id, a)),
                (2, healthy(id, b)),
            ],
        ))
        .unwrap();
        let cores = e.created.resources.cpu_milli as f64 / 1000.0;
        let sample = |cpu: f64, gpu: Option<f64>| ReplicaUse {
            cpu_percent: Some(cpu * cores),
            gpu_percent: gpu,
        };
        let samples = BTreeMap::from([
            (a, sample(60.0, None)),
            (b, sample(80.0, Some(40.0))),
            (c, sample(100.0, Some(100.0))),
        ]);
        let (cpu, gpu) = utilization(&e, &samples);
        assert!(
            (cpu.unwrap() - 70.0).abs() < 1e-9,
            "c serves no traffic: {cpu:?}"
        );
        assert_eq!(gpu, Some(40.0));
        assert_eq!(utilization(&e, &BTreeMap::new()), (None, None));
    }

    #[test]
    fn a_replica_that_ended_or_failed_is_replaced_after_a_backoff_until_the_cap() {
        let id = Uuid::now_v7();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let e = fold(&stream(id, vec![(1, added(id, a)), (1, added(id, b))])).unwrap();
        let ended = BTreeMap::from([(a, "ERROR".to_owned())]);
        let plan = reconcile(&e, &ended, t(10));
        assert_eq!(plan.remove.len(), 1);
        assert!(plan.remove[0].failed && !plan.remove[0].terminate);
        assert_eq!(plan.start, 0, "held back");
        assert_eq!(plan.start_later, Some(t(12)));

        // Recorded; two seconds later the replacement starts.
        let e = fold(&stream(
            id,
            vec![
                (1, added(id, a)),
                (1, added(id, b)),
                (10, removed(id, a, true)),
            ],
        ))
        .unwrap();
        assert_eq!(reconcile(&e, &BTreeMap::new(), t(11)).start, 0);
        assert_eq!(reconcile(&e, &BTreeMap::new(), t(12)).start, 1);

        // Five in a row that never served: degraded, nothing more is started.
        let mut then = vec![(1, added(id, b))];
        for i in 0..FAILURE_CAP {
            let s = Uuid::now_v7();
            then.push((10 + i as i64, added(id, s)));
            then.push((11 + i as i64, removed(id, s, true)));
        }
        let e = fold(&stream(id, then.clone())).unwrap();
        assert_eq!(e.status(), "degraded");
        assert!(e.degraded().unwrap().contains("it never answered"));
        let plan = reconcile(&e, &BTreeMap::new(), t(10_000));
        assert_eq!((plan.start, plan.start_later), (0, None));

        // One serving again, or the owner scaling, lifts it.
        then.push((20, healthy(id, b)));
        let e = fold(&stream(id, then)).unwrap();
        assert_eq!(e.failed_in_a_row, 0);
        assert_eq!(reconcile(&e, &BTreeMap::new(), t(10_000)).start, 1);
    }

    #[test]
    fn a_destroyed_endpoint_takes_every_replica_out() {
        let id = Uuid::now_v7();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let e = fold(&stream(
            id,
            vec![
                (1, added(id, a)),
                (1, added(id, b)),
                (
                    2,
                    Event::EndpointDestroyed(EndpointDestroyed { endpoint_id: id }),
                ),
            ],
        ))
        .unwrap();
        let plan = reconcile(&e, &BTreeMap::from([(b, "TERMINATED".into())]), t(3));
        assert_eq!(plan.start, 0);
        let terminate: Vec<(Uuid, bool)> = plan
            .remove
            .iter()
            .map(|r| (r.session_id, r.terminate))
            .collect();
        assert!(terminate.contains(&(a, true)) && terminate.contains(&(b, false)));
    }

    #[test]
    fn checks_make_a_replica_healthy_at_once_and_unhealthy_after_its_retries() {
        let check = example_created(Uuid::nil()).model.health_check;
        let route = |health| Route {
            session_id: Uuid::nil(),
            health,
            revision: 0,
            added_at: t(0),
            since: t(0),
            reason: None,
        };
        let ok = CheckResult::Answered(200);
        let down = CheckResult::NoAnswer("connection refused".into());
        assert_eq!(
            after_check(&route(RouteHealth::Starting), &check, 0, &ok, t(1)),
            Verdict::Healthy
        );
        // Loading: failures before the initial delay do not count.
        assert_eq!(
            after_check(&route(RouteHealth::Starting), &check, 0, &down, t(4)),
            Verdict::Unchanged { failures: 0 }
        );
        assert_eq!(
            after_check(
                &route(RouteHealth::Healthy),
                &check,
                1,
                &CheckResult::Answered(503),
                t(9)
            ),
            Verdict::Unchanged { failures: 2 }
        );
        assert_eq!(
            after_check(&route(RouteHealth::Healthy), &check, 2, &down, t(9)),
            Verdict::Unhealthy(
                "GET /health did not answer (connection refused), 3 times in a row".into()
            )
        );
        assert_eq!(
            after_check(&route(RouteHealth::Healthy), &check, 2, &ok, t(9)),
            Verdict::Unchanged { failures: 0 }
        );
    }

    #[test]
    fn the_backoff_doubles_to_a_minute() {
        let secs: Vec<u64> = (0..9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![0, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
