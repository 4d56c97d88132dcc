//! The create body of Backend.AI's client, read as Backend.AI's server reads it (its aliases,
//! a null for every field left unset, numbers sent as text) and translated into berth's own
//! create request, which the launcher then holds to every rule `/v1` is held to. Pure: no I/O,
//! so every translation is unit-tested here.
//!
//! Nothing is dropped silently: a field berth cannot honour (`mount_map`, `dependencies`,
//! `callback_url`, `bootstrap_script`, `mount_options`, a resource berth does not have) is
//! refused by its name when it says anything, and a field neither Backend.AI nor berth knows
//! is refused by its name, as Backend.AI's server refuses it.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use events::payloads::{ClusterMode, SessionType};
use launcher::domain::NameRule;
use launcher::launch::{ByteSize, CreateSession, ResourceRequest};
use serde_json::{Map, Value};

use crate::backendai::Problem;

/// The cores a session gets when the request names none. Backend.AI fills the resources a
/// request leaves out from its image's declared minimum (the CLI sends `resources: {}`
/// without `-r`); berth's images declare none, so its compatibility paths fill the minimum
/// Backend.AI's stock images declare. `/v1` keeps requiring them.
pub const DEFAULT_CPU: f64 = 1.0;
/// The memory a session gets when the request names none (see [`DEFAULT_CPU`]).
pub const DEFAULT_MEMORY: &str = "1g";

/// The resource keys that ask for GPUs: Backend.AI's whole devices and fractional shares,
/// and berth's own name.
const GPU_KEYS: [&str; 3] = ["cuda.device", "cuda.shares", "gpu"];

/// A create body, read.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateBody {
    /// berth's request (the owner, the project and the agent still to be settled by who
    /// asks: [`CreateBody::group`], [`CreateBody::agents`], [`CreateBody::owner_access_key`]).
    pub request: CreateSession,
    pub owner_access_key: Option<String>,
    /// Backend.AI's group: berth's project of that name when the owner is in one.
    pub group: Option<String>,
    /// Agents chosen by hand (`config.agentList`): admins only.
    pub agents: Vec<String>,
    pub enqueue_only: bool,
    /// 0: no limit asked.
    pub max_wait_seconds: u64,
    /// Get-or-create: a live session of the same name and image is answered, not refused.
    pub reuse: bool,
    /// The key the GPU amount came under, to name it in an error.
    gpu_key: Option<String>,
}

/// Where berth's create request's fields came from in Backend.AI's body: a problem the
/// launcher finds names the client's field. Prefixes: `environment.A` is `config.environ.A`.
const CLIENT_FIELDS: &[(&str, &str)] = &[
    ("resources.cpu", "config.resources.cpu"),
    ("resources.memory", "config.resources.mem"),
    ("resources.shared_memory", "config.resource_opts.shmem"),
    ("resources", "config.resources"),
    ("environment", "config.environ"),
    ("mounts", "config.mounts"),
    ("preopen_ports", "config.preopen_ports"),
    ("resource_group", "config.scalingGroup"),
    ("cluster_size", "clusterSize"),
    ("cluster_mode", "clusterMode"),
    ("startup_command", "startupCommand"),
    ("owner_email", "owner_access_key"),
    ("owner", "owner_access_key"),
    ("project", "group"),
    ("agent", "config.agentList"),
];

impl CreateBody {
    /// The field of the client's body that berth's field `berth` (as the launcher names it)
    /// came from.
    pub fn client_field(&self, berth: &str) -> String {
        if berth == "resources.gpu" {
            let key = self.gpu_key.as_deref().unwrap_or("cuda.shares");
            return format!("config.resources.{key}");
        }
        for (ours, theirs) in CLIENT_FIELDS {
            if let Some(rest) = berth.strip_prefix(ours) {
                if rest.is_empty() || rest.starts_with('.') || rest.starts_with('[') {
                    return format!("{theirs}{rest}");
                }
            }
        }
        berth.to_owned()
    }
}

/// The fields of one JSON object, taken one by one; what is left at the end is unknown.
pub(in crate::backendai) struct Fields {
    map: Map<String, Value>,
    /// The path of this object in the body (`config.`), for naming its fields.
    at: &'static str,
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

impl Fields {
    pub(in crate::backendai) fn new(
        value: Value,
        at: &'static str,
        field: &str,
    ) -> Result<Fields, Problem> {
        match value {
            Value::Object(map) => Ok(Fields { map, at }),
            _ => Err(Problem::invalid(field, "must be a JSON object")),
        }
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.at)
    }

    /// The value under the first of `aliases` present and not null, and the field's name as
    /// sent; 400 when two aliases both say something.
    pub(in crate::backendai) fn take(
        &mut self,
        aliases: &[&str],
    ) -> Result<Option<(String, Value)>, Problem> {
        let mut found: Option<(String, Value)> = None;
        for alias in aliases {
            let Some(value) = self.map.remove(*alias) else {
                continue;
            };
            if value.is_null() {
                continue;
            }
            if let Some((first, _)) = &found {
                return Err(Problem::invalid(
                    &self.name(alias),
                    format!("is given twice, also as `{first}`"),
                ));
            }
            found = Some((self.name(alias), value));
        }
        Ok(found)
    }

    pub(in crate::backendai) fn string(
        &mut self,
        aliases: &[&str],
    ) -> Result<Option<(String, String)>, Problem> {
        match self.take(aliases)? {
            None => Ok(None),
            Some((field, Value::String(s))) => Ok(Some((field, s))),
            Some((field, _)) => Err(Problem::invalid(&field, "must be a string")),
        }
    }

    /// A flag as Backend.AI's server reads one: a boolean, 0 or 1, or words such as `true`,
    /// `no`, `on`.
    pub(in crate::backendai) fn flag(&mut self, aliases: &[&str]) -> Result<Option<bool>, Problem> {
        let Some((field, value)) = self.take(aliases)? else {
            return Ok(None);
        };
        let word = match &value {
            Value::Bool(b) => return Ok(Some(*b)),
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.to_ascii_lowercase(),
            _ => String::new(),
        };
        match word.as_str() {
            "true" | "t" | "yes" | "y" | "on" | "1" => Ok(Some(true)),
            "false" | "f" | "no" | "n" | "off" | "0" | "" => Ok(Some(false)),
            _ => Err(Problem::invalid(&field, "must be true or false")),
        }
    }

    /// A whole number, given as a number or as its digits.
    pub(in crate::backendai) fn whole(
        &mut self,
        aliases: &[&str],
    ) -> Result<Option<(String, u64)>, Problem> {
        let Some((field, value)) = self.take(aliases)? else {
            return Ok(None);
        };
        whole(&value)
            .map(|n| Some((field.clone(), n)))
            .ok_or_else(|| Problem::invalid(&field, "must be a whole number, 0 or more"))
    }

    /// Refuses a field berth cannot honour when it says anything (an empty value says
    /// nothing: the client sends `mount_map: {}` and `dependencies: []` unasked).
    pub(in crate::backendai) fn refuse(
        &mut self,
        aliases: &[&str],
        why: &str,
    ) -> Result<(), Problem> {
        match self.take(aliases)? {
            Some((field, value)) if !is_empty(&value) => Err(Problem::invalid(&field, why)),
            _ => Ok(()),
        }
    }

    /// Refuses what is left that says anything: a field berth does not know.
    pub(in crate::backendai) fn finish(self) -> Result<(), Problem> {
        match self.map.iter().find(|(_, v)| !v.is_null()) {
            Some((key, _)) => Err(Problem::invalid(
                &self.name(key),
                "is not a field of Backend.AI's create request that berth knows",
            )),
            None => Ok(()),
        }
    }
}

fn whole(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..9.0e15).contains(f))
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An amount (cores, GPUs) given as a number or as text.
fn amount(field: &str, value: &Value) -> Result<f64, Problem> {
    let parsed = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    parsed
        .filter(|f| f.is_finite())
        .ok_or_else(|| Problem::invalid(field, "must be a number (`1`, `0.5`)"))
}

/// A size given as a number of bytes or as text (`512m`; bare digits are bytes, as
/// Backend.AI reads them). The launcher checks the text.
pub(in crate::backendai) fn size(field: &str, value: &Value) -> Result<ByteSize, Problem> {
    match value {
        Value::String(s) => Ok(ByteSize::Text(s.clone())),
        other => whole(other)
            .map(ByteSize::Bytes)
            .ok_or_else(|| Problem::invalid(field, "must be a size (`512m`, `4g`, or bytes)")),
    }
}

/// A span as Backend.AI writes one: an optional sign, then days, hours, minutes and seconds
/// each at most once (`1h`, `1d12h`, `30m`, `-10s`, `1.5hours`).
pub fn parse_span(text: &str) -> Option<TimeDelta> {
    let text = text.trim();
    let (sign, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return None;
    }
    let mut seconds = 0.0;
    let mut seen: Vec<f64> = Vec::new();
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let number: f64 = number.parse().ok()?;
        let letters = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(letters);
        let scale = match unit {
            "d" | "day" | "days" => 86_400.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            _ => return None,
        };
        if seen.contains(&scale) {
            return None;
        }
        seen.push(scale);
        seconds += number * scale;
        rest = tail;
    }
    if !seconds.is_finite() || seconds > 1.0e11 {
        return None;
    }
    TimeDelta::try_milliseconds((sign * seconds * 1000.0).round() as i64)
}

/// When a batch session may start: an ISO 8601 time (UTC without an offset) or a span from
/// `now` (`1h`), as Backend.AI reads `starts_at`.
pub fn parse_starts_at(text: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(at) = NaiveDateTime::parse_from_str(text, format) {
            return Some(at.and_utc());
        }
    }
    if let Ok(at) = DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%:z") {
        return Some(at.with_timezone(&Utc));
    }
    parse_span(text).map(|span| now + span)
}

/// Reads Backend.AI's create body `value` (a JSON object) at `now` (for a relative
/// `starts_at`).
pub fn read(value: Value, now: DateTime<Utc>) -> Result<CreateBody, Problem> {
    let mut body = Fields::new(value, "", "body")?;
    let mut request = CreateSession {
        name_rule: NameRule::BackendAi,
        ..CreateSession::default()
    };

    request.name = body
        .string(&["name", "session_name", "clientSessionToken"])?
        .map(|(_, name)| name);
    request.image = body
        .string(&["image", "lang"])?
        .map(|(_, image)| image)
        .ok_or_else(|| Problem::invalid("image", "is required"))?;
    if let Some((field, arch)) = body.string(&["architecture", "arch"])? {
        if arch != "x86_64" {
            return Err(Problem::invalid(
                &field,
                format!("berth's agents run x86_64 images, not `{arch}`"),
            ));
        }
    }
    if let Some((field, kind)) = body.string(&["type", "sessionType"])? {
        request.session_type = Some(match kind.to_ascii_lowercase().as_str() {
            "interactive" => SessionType::Interactive,
            "batch" => SessionType::Batch,
            "inference" => SessionType::Inference,
            _ => {
                return Err(Problem::invalid(
                    &field,
                    format!("must be interactive, batch or inference, not `{kind}`"),
                ))
            }
        });
    }
    if let Some((field, domain)) = body.string(&["domain", "domainName", "domain_name"])? {
        if domain != "default" {
            return Err(Problem::invalid(
                &field,
                format!("berth has one domain, `default`, not `{domain}`"),
            ));
        }
    }
    let group = body
        .string(&["group", "groupName", "group_name"])?
        .map(|(_, g)| g);
    // Backend.AI's tag annotates a session for its lists; berth has no such field to keep
    // it in or to show it (`/v1` and the console show none), so a tag is accepted and not
    // kept.
    body.string(&["tag"])?;
    if let Some((field, size)) = body.whole(&["clusterSize", "cluster_size"])? {
        request.cluster_size =
            Some(u32::try_from(size).map_err(|_| Problem::invalid(&field, "is too large"))?);
    }
    if let Some((field, mode)) = body.string(&["clusterMode", "cluster_mode"])? {
        request.cluster_mode = Some(match mode.to_ascii_lowercase().replace('_', "-").as_str() {
            "single-node" => ClusterMode::SingleNode,
            "multi-node" => ClusterMode::MultiNode,
            _ => {
                return Err(Problem::invalid(
                    &field,
                    format!("must be single-node or multi-node, not `{mode}`"),
                ))
            }
        });
    }
    let enqueue_only = body.flag(&["enqueueOnly"])?.unwrap_or(false);
    let max_wait_seconds = body
        .whole(&["maxWaitSeconds"])?
        .map_or(0, |(_, seconds)| seconds);
    let reuse = body.flag(&["reuseIfExists"])?.unwrap_or(true);
    request.startup_command = body
        .string(&["startupCommand", "startup_command"])?
        .map(|(_, c)| c);
    if let Some((field, text)) = body.string(&["starts_at", "startsAt"])? {
        request.starts_at = Some(parse_starts_at(&text, now).ok_or_else(|| {
            Problem::invalid(
                &field,
                format!("`{text}` is neither an ISO 8601 time nor a span such as `1h`"),
            )
        })?);
    }
    if let Some((field, value)) = body.take(&["batch_timeout", "batchTimeout"])? {
        let seconds = match &value {
            Value::String(text) => parse_span(text)
                .filter(|span| *span > TimeDelta::zero())
                .map(|span| span.num_seconds().max(1) as u64),
            other => whole(other),
        };
        request.batch_timeout =
            Some(seconds.ok_or_else(|| {
                Problem::invalid(&field, "must be seconds or a span such as `1h`")
            })?);
    }
    body.refuse(
        &["bootstrap_script", "bootstrapScript"],
        "berth runs no bootstrap script; put it in startupCommand",
    )?;
    body.refuse(
        &["dependencies"],
        "berth does not order sessions after others",
    )?;
    body.refuse(
        &["callback_url", "callbackUrl", "callbackURL"],
        "berth calls no URL back; follow /events/session",
    )?;
    let owner_access_key = body.string(&["owner_access_key"])?.map(|(_, k)| k);

    let mut agents = Vec::new();
    let mut gpu_key = None;
    if let Some((field, config)) = body.take(&["config"])? {
        let mut config = Fields::new(config, "config.", &field)?;
        if let Some((field, mounts)) = config.take(&["mounts"])? {
            request.mounts = strings(&field, mounts)?;
        }
        config.refuse(
            &["mount_map", "mountMap"],
            "berth mounts each folder at /home/work/<name>; it cannot mount one elsewhere",
        )?;
        config.refuse(
            &["mount_options", "mountOptions"],
            "berth mounts folders one way only",
        )?;
        if let Some((field, environ)) = config.take(&["environ"])? {
            request.environment = environment(&field, environ)?;
        }
        request.resource_group = config
            .string(&["scalingGroup", "scaling_group"])?
            .map(|(_, g)| g);
        if let Some((field, resources)) = config.take(&["resources"])? {
            let Value::Object(resources) = resources else {
                return Err(Problem::invalid(&field, "must be a JSON object"));
            };
            (request.resources, gpu_key) = self::resources(&field, resources)?;
        }
        if let Some((field, opts)) = config.take(&["resource_opts", "resourceOpts"])? {
            let Value::Object(opts) = opts else {
                return Err(Problem::invalid(&field, "must be a JSON object"));
            };
            for (key, value) in opts.into_iter().filter(|(_, v)| !v.is_null()) {
                let at = format!("{field}.{key}");
                match key.as_str() {
                    "shmem" => request.resources.shared_memory = Some(size(&at, &value)?),
                    _ => {
                        return Err(Problem::invalid(
                            &at,
                            "berth knows one resource option, shmem",
                        ))
                    }
                }
            }
        }
        if let Some((field, ports)) = config.take(&["preopen_ports", "preopenPorts"])? {
            let Value::Array(ports) = ports else {
                return Err(Problem::invalid(&field, "must be a list of ports"));
            };
            request.preopen_ports = ports
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    whole(p)
                        .and_then(|p| u32::try_from(p).ok())
                        .ok_or_else(|| Problem::invalid(&format!("{field}[{i}]"), "must be a port"))
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some((field, list)) = config.take(&["agentList", "agent_list"])? {
            agents = strings(&field, list)?;
        }
        config.finish()?;
    }
    body.finish()?;
    if request.resources.cpu.is_none() {
        request.resources.cpu = Some(DEFAULT_CPU);
    }
    if request.resources.memory.is_none() {
        request.resources.memory = Some(ByteSize::Text(DEFAULT_MEMORY.into()));
    }
    Ok(CreateBody {
        request,
        owner_access_key,
        group,
        agents,
        enqueue_only,
        max_wait_seconds,
        reuse,
        gpu_key,
    })
}

fn strings(field: &str, value: Value) -> Result<Vec<String>, Problem> {
    let Value::Array(items) = value else {
        return Err(Problem::invalid(field, "must be a list of names"));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s),
            _ => Err(Problem::invalid(
                &format!("{field}[{i}]"),
                "must be a string",
            )),
        })
        .collect()
}

fn environment(field: &str, value: Value) -> Result<BTreeMap<String, String>, Problem> {
    let Value::Object(variables) = value else {
        return Err(Problem::invalid(field, "must be a JSON object of strings"));
    };
    variables
        .into_iter()
        .map(|(name, value)| match value {
            Value::String(s) => Ok((name, s)),
            _ => Err(Problem::invalid(
                &format!("{field}.{name}"),
                "must be a string",
            )),
        })
        .collect()
}

/// `config.resources`: `cpu`, `mem`, and GPUs under one of [`GPU_KEYS`]; the GPU key used.
pub(in crate::backendai) fn resources(
    field: &str,
    resources: Map<String, Value>,
) -> Result<(ResourceRequest, Option<String>), Problem> {
    let mut asked = ResourceRequest::default();
    let mut gpu_key: Option<String> = None;
    for (key, value) in resources.into_iter().filter(|(_, v)| !v.is_null()) {
        let at = format!("{field}.{key}");
        match key.as_str() {
            "cpu" => asked.cpu = Some(amount(&at, &value)?),
            "mem" => asked.memory = Some(size(&at, &value)?),
            k if GPU_KEYS.contains(&k) => {
                if let Some(first) = &gpu_key {
                    return Err(Problem::invalid(
                        &at,
                        format!("GPUs are asked for once; `{field}.{first}` asks already"),
                    ));
                }
                asked.gpu = Some(amount(&at, &value)?);
                gpu_key = Some(key);
            }
            _ => {
                return Err(Problem::invalid(
                    &at,
                    "berth has no such resource; it knows cpu, mem, cuda.device and cuda.shares",
                ))
            }
        }
    }
    Ok((asked, gpu_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// The body the CLI sent for `backend.ai session create -t cap-sess1 --type batch
    /// -c true -r cpu=1 -r mem=512 --resource-opts shmem=64m -e FOO=bar --enqueue-only
    /// berth/shell:latest`, as captured (shared/notes/backendai-compat.md).
    fn captured() -> Value {
        json!({
            "tag": null, "name": "cap-sess1",
            "config": {"mounts": [], "environ": {"FOO": "bar"},
                       "resources": {"cpu": "1", "mem": "512m"},
                       "resource_opts": {"shmem": "64m"}, "scalingGroup": null,
                       "mount_map": {}, "preopen_ports": null},
            "dependencies": null, "callback_url": null, "architecture": "x86_64",
            "clusterSize": 1, "clusterMode": "single-node", "starts_at": null,
            "bootstrap_script": null, "owner_access_key": null, "domain": "default",
            "group": "default", "type": "batch", "enqueueOnly": true, "maxWaitSeconds": 0,
            "reuseIfExists": true, "startupCommand": "true", "image": "berth/shell:latest"
        })
    }

    #[test]
    fn the_client_s_captured_body_becomes_berth_s_request() {
        let body = read(captured(), now()).unwrap();
        let r = &body.request;
        assert_eq!(r.name.as_deref(), Some("cap-sess1"));
        assert_eq!(r.image, "berth/shell:latest");
        assert_eq!(r.session_type, Some(SessionType::Batch));
        assert_eq!(r.startup_command.as_deref(), Some("true"));
        assert_eq!(r.environment.get("FOO").map(String::as_str), Some("bar"));
        assert_eq!(r.resources.cpu, Some(1.0));
        assert_eq!(r.resources.memory, Some(ByteSize::Text("512m".into())));
        assert_eq!(
            r.resources.shared_memory,
            Some(ByteSize::Text("64m".into()))
        );
        assert_eq!(r.cluster_mode, Some(ClusterMode::SingleNode));
        assert_eq!(r.cluster_size, Some(1));
        assert_eq!(r.name_rule, NameRule::BackendAi);
        assert!(r.mounts.is_empty() && r.preopen_ports.is_empty());
        assert_eq!(body.group.as_deref(), Some("default"));
        assert!(body.enqueue_only && body.reuse);
        assert_eq!(body.max_wait_seconds, 0);
        assert_eq!(body.owner_access_key, None);
    }

    #[test]
    fn unset_resources_get_backend_ai_s_minimum_and_gpus_come_under_any_of_their_keys() {
        let body = read(json!({"image": "x", "config": {"environ": null}}), now()).unwrap();
        assert_eq!(body.request.resources.cpu, Some(DEFAULT_CPU));
        assert_eq!(
            body.request.resources.memory,
            Some(ByteSize::Text(DEFAULT_MEMORY.into()))
        );
        assert!(body.request.environment.is_empty());
        for key in GPU_KEYS {
            let body = read(
                json!({"image": "x", "config": {"resources": {key: "0.5", "mem": 1024}}}),
                now(),
            )
            .unwrap();
            assert_eq!(body.request.resources.gpu, Some(0.5), "{key}");
            assert_eq!(body.request.resources.memory, Some(ByteSize::Bytes(1024)));
            assert_eq!(
                body.client_field("resources.gpu"),
                format!("config.resources.{key}")
            );
        }
        let twice = read(
            json!({"image": "x", "config": {"resources": {"cuda.device": 1, "cuda.shares": 1}}}),
            now(),
        )
        .unwrap_err();
        assert_eq!(twice.slug, "invalid-api-params");
        assert!(twice
            .data
            .unwrap()
            .get("config.resources.cuda.shares")
            .is_some());
    }

    /// Every field berth cannot honour is refused by its name once it says anything; an
    /// empty one (the client sends `mount_map: {}` unasked) passes.
    #[test]
    fn what_berth_cannot_honour_is_refused_by_name() {
        let cases = [
            (
                json!({"config": {"mount_map": {"d": "/x"}}}),
                "config.mount_map",
            ),
            (
                json!({"config": {"mountMap": {"d": "/x"}}}),
                "config.mountMap",
            ),
            (json!({"dependencies": ["a"]}), "dependencies"),
            (json!({"callback_url": "http://x"}), "callback_url"),
            (json!({"bootstrap_script": "ZWNobw=="}), "bootstrap_script"),
            (
                json!({"config": {"resources": {"tpu": 1}}}),
                "config.resources.tpu",
            ),
            (
                json!({"config": {"resource_opts": {"x": 1}}}),
                "config.resource_opts.x",
            ),
            (json!({"config": {"nosuch": 1}}), "config.nosuch"),
            (json!({"nosuch": 1}), "nosuch"),
            (json!({"domain": "other"}), "domain"),
            (json!({"architecture": "aarch64"}), "architecture"),
            (json!({"type": "system"}), "type"),
            (json!({"clusterMode": "sideways"}), "clusterMode"),
            (json!({"starts_at": "tomorrow-ish"}), "starts_at"),
            (json!({"config": {"environ": {"A": 1}}}), "config.environ.A"),
            (
                json!({"config": {"preopen_ports": ["x"]}}),
                "config.preopen_ports[0]",
            ),
            (json!({"enqueueOnly": "maybe"}), "enqueueOnly"),
            (json!({"maxWaitSeconds": -1}), "maxWaitSeconds"),
            (json!({"name": "a", "session_name": "b"}), "session_name"),
        ];
        for (extra, field) in cases {
            let mut value = json!({"image": "berth/shell:latest"});
            for (k, v) in extra.as_object().unwrap() {
                value[k] = v.clone();
            }
            let problem = read(value, now()).unwrap_err();
            assert_eq!(problem.status, 400, "{field}");
            assert!(
                problem.data.as_ref().unwrap().get(field).is_some(),
                "{field}: {problem:?}"
            );
        }
        let empty = json!({"image": "x", "config": {"mount_map": {}, "mounts": []},
            "dependencies": [], "callback_url": null, "bootstrap_script": "", "unknown": null});
        assert!(read(empty, now()).is_ok());
        assert_eq!(
            read(json!({"name": "x"}), now()).unwrap_err().data,
            Some(json!({"image": "is required"}))
        );
    }

    #[test]
    fn spans_and_times_read_as_backend_ai_reads_them() {
        assert_eq!(parse_span("1h"), Some(TimeDelta::hours(1)));
        assert_eq!(parse_span("1d12h"), Some(TimeDelta::hours(36)));
        assert_eq!(parse_span("+30m"), Some(TimeDelta::minutes(30)));
        assert_eq!(parse_span("-10s"), Some(TimeDelta::seconds(-10)));
        assert_eq!(parse_span("1.5hours"), Some(TimeDelta::minutes(90)));
        for bad in ["", "1", "1x", "1h1h", "h", "--1h"] {
            assert_eq!(parse_span(bad), None, "{bad}");
        }
        let at = parse_starts_at("2026-11-23T10:00:00+09:00", now()).unwrap();
        assert_eq!(at.to_rfc3339(), "2026-11-23T01:00:00+00:00");
        assert_eq!(
            parse_starts_at("2026-11-23T01:00:00", now()),
            Some(at),
            "no offset is UTC"
        );
        assert_eq!(
            parse_starts_at("1h", now()),
            Some(now() + TimeDelta::hours(1))
        );
        let body = read(
            json!({"image": "x", "type": "batch", "startupCommand": "true",
                   "starts_at": "2h", "batch_timeout": "30m"}),
            now(),
        )
        .unwrap();
        assert_eq!(body.request.starts_at, Some(now() + TimeDelta::hours(2)));
        assert_eq!(body.request.batch_timeout, Some(1800));
    }

    #[test]
    fn the_launcher_s_fields_are_named_as_the_client_sent_them() {
        let body = read(captured(), now()).unwrap();
        for (ours, theirs) in [
            ("resources.memory", "config.resources.mem"),
            ("resources.shared_memory", "config.resource_opts.shmem"),
            ("environment.1A", "config.environ.1A"),
            ("mounts[2]", "config.mounts[2]"),
            ("preopen_ports[0]", "config.preopen_ports[0]"),
            ("resource_group", "config.scalingGroup"),
            ("startup_command", "startupCommand"),
            ("owner_email", "owner_access_key"),
            ("project", "group"),
            ("starts_at", "starts_at"),
            ("name", "name"),
        ] {
            assert_eq!(body.client_field(ours), theirs);
        }
    }
}
