//! Backend.AI's event stream, `GET /events/session`: sessions' lifecycles as Backend.AI's
//! client names them (`session_enqueued` ... `session_terminated`), as server-sent events
//! whose data is Backend.AI's payload, `{reason, sessionName, ownerAccessKey, sessionId,
//! exitCode}`, with `kernelId`, `clusterRole` and `clusterIdx` for kernel events.
//!
//! Like berth's own stream (`crate::sse`), events come from NATS as the relay published them,
//! and a user sees only their own sessions (a superadmin every one). [`Tracked::apply`] is the
//! translation: pure, one berth event to the Backend.AI events it means.
//!
//! Two departures from Backend.AI, both so that scripts end: a stream filtered to one session
//! (`sessionId`, or a name) begins with that session's past events, read from the log, and
//! after its last one sends `server_close` (the one event on which the client stops
//! listening) and closes, so `backend.ai events <id>` returns, also on a session that ended
//! before it connected. The stream of every session (`*`) starts at the moment of connect and
//! never ends, as Backend.AI's does.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::routing::get;
use axum::Router;
use events::authorization::{self, Action};
use events::catalogue::Event;
use events::payloads::{SessionRequested, SessionStatus, SessionStatusChanged, SessionType};
use events::RecordedEvent;
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{acting_owner, resolve_session, BackendAiCaller, Problem};
use crate::db;
use crate::error::ApiError;
use crate::sse::session_of;
use crate::state::AppState;

/// How often an idle stream says it is alive (an SSE comment, which the client skips).
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The event after which Backend.AI's client stops listening.
const SERVER_CLOSE: &str = "server_close";

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/events/session", get(session_events))
}

/// The kernel id Backend.AI's events and GraphQL give kernel `kernel` (berth's number, 0 the
/// main one) of `session`: the session's own id for the main kernel (Backend.AI's old
/// convention), else the UUIDv5 of the kernel's number (decimal) in the session's id.
pub(crate) fn kernel_id(session: Uuid, kernel: u32) -> Uuid {
    if kernel == 0 {
        session
    } else {
        Uuid::new_v5(&session, kernel.to_string().as_bytes())
    }
}

/// Which events a stream carries (`scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    Session,
    Kernel,
}

impl Scope {
    fn parse(text: &str) -> Result<Scope, Problem> {
        match text {
            "*" => Ok(Scope::All),
            "session" => Ok(Scope::Session),
            "kernel" => Ok(Scope::Kernel),
            _ => Err(Problem::invalid(
                "scope",
                "must be `*`, `session` or `kernel`",
            )),
        }
    }

    fn shows(self, event: &Emitted) -> bool {
        match self {
            Scope::All => true,
            Scope::Session => event.kernel.is_none(),
            Scope::Kernel => event.kernel.is_some(),
        }
    }
}

/// The query, as Backend.AI reads it.
#[derive(Debug, Clone, PartialEq)]
struct Params {
    /// `name` or `sessionName`: `*`, every session, or one of the owner's by name.
    name: String,
    /// `sessionId`: one session (over `name`).
    session_id: Option<Uuid>,
    /// `ownerAccessKey` (the SDK sends `owner_access_key`): whose sessions.
    owner_access_key: Option<String>,
    /// `group` or `groupName`: `*`, or the sessions of one project (`default`: of none).
    group: String,
    scope: Scope,
}

impl Params {
    fn parse(query: &str) -> Result<Params, Problem> {
        let mut params = Params {
            name: "*".to_owned(),
            session_id: None,
            owner_access_key: None,
            group: "*".to_owned(),
            scope: Scope::All,
        };
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "name" | "sessionName" => params.name = value.into_owned(),
                "sessionId" => {
                    let id = Uuid::parse_str(&value)
                        .map_err(|_| Problem::invalid("sessionId", "must be a UUID"))?;
                    params.session_id = Some(id);
                }
                "ownerAccessKey" | "owner_access_key" => {
                    params.owner_access_key = Some(value.into_owned()).filter(|k| !k.is_empty())
                }
                "group" | "groupName" => params.group = value.into_owned(),
                "scope" => params.scope = Scope::parse(&value)?,
                _ => {}
            }
        }
        if params.name.is_empty() {
            return Err(Problem::invalid(
                "sessionName",
                "name a session, or `*` for every one",
            ));
        }
        Ok(params)
    }
}

/// One Backend.AI event, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Emitted {
    pub name: &'static str,
    pub reason: String,
    pub exit_code: Option<i32>,
    /// The kernel (berth's number, 0 the main one) of a kernel event; `None` for a session's.
    pub kernel: Option<u32>,
}

/// A session as its Backend.AI stream knows it: what each event's payload needs besides the
/// berth event it comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tracked {
    pub session_id: Uuid,
    pub name: String,
    pub owner: Uuid,
    pub project: Option<String>,
    pub batch: bool,
    /// Its kernels (the cluster's size): a kernel event is told of each.
    pub kernels: u32,
    /// The last exit code an event reported.
    pub exit_code: Option<i32>,
    /// Whether its last Backend.AI event has been told.
    pub ended: bool,
}

impl Tracked {
    /// The session `request` asks for, as it is before anything else happened to it.
    pub(crate) fn requested(request: &SessionRequested) -> Tracked {
        Tracked {
            session_id: request.session_id,
            name: request.name.clone(),
            owner: request.owner.user_id,
            project: request.owner.project.clone(),
            batch: request.session_type == SessionType::Batch,
            kernels: request.cluster_size.max(1),
            exit_code: None,
            ended: false,
        }
    }

    /// The Backend.AI events that berth's `event` of this session means, in order, and the
    /// session as it leaves it. Events Backend.AI has no name for (scheduling attempts,
    /// releases, apps, ...) mean none.
    pub(crate) fn apply(&mut self, event: &Event) -> Vec<Emitted> {
        match event {
            Event::SessionRequested(request) => {
                *self = Tracked::requested(request);
                vec![session_event("session_enqueued", "", None)]
            }
            Event::SessionScheduled(_) => vec![session_event("session_scheduled", "", None)],
            Event::SessionRenamed(renamed) => {
                self.name = renamed.new_name.clone();
                Vec::new()
            }
            Event::KernelStarted(started) => vec![Emitted {
                name: "kernel_started",
                reason: String::new(),
                exit_code: None,
                kernel: Some(started.kernel),
            }],
            Event::SessionStatusChanged(moved) => self.moved(moved),
            _ => Vec::new(),
        }
    }

    fn moved(&mut self, moved: &SessionStatusChanged) -> Vec<Emitted> {
        use SessionStatus::*;
        if moved.exit_code.is_some() {
            self.exit_code = moved.exit_code;
        }
        let reason = moved.reason.as_deref().unwrap_or_default();
        let code = self.exit_code;
        let mut told = Vec::new();
        match moved.to {
            // Back in the queue (a placement that stalled, an agent that went away).
            Pending => told.push(session_event("session_enqueued", reason, None)),
            Preparing => told.extend(self.kernel_events("kernel_preparing", reason, None)),
            Pulling => told.extend(self.kernel_events("kernel_pulling", reason, None)),
            Creating => told.extend(self.kernel_events("kernel_creating", reason, None)),
            Running => told.push(session_event("session_started", reason, None)),
            Terminating => {
                told.extend(self.kernel_events("kernel_terminating", reason, None));
                told.push(session_event("session_terminating", reason, None));
            }
            Terminated => {
                told.extend(self.kernel_events("kernel_terminated", reason, code));
                // A batch session's result is its command's: berth knows only the main
                // kernel's exit code, and none when it ended before its command did.
                match (self.batch, code) {
                    (true, Some(0)) => told.push(session_event("session_success", reason, code)),
                    (true, Some(_)) => told.push(session_event("session_failure", reason, code)),
                    _ => {}
                }
                told.push(session_event("session_terminated", reason, code));
                self.ended = true;
            }
            Cancelled => {
                told.extend(self.kernel_events("kernel_cancelled", reason, None));
                told.push(session_event("session_cancelled", reason, None));
                self.ended = true;
            }
            // Backend.AI 23.09 has no event for an error: the session ends, for the reason.
            Error => {
                told.push(session_event("session_terminated", reason, code));
                self.ended = true;
            }
            Scheduled | Prepared | Restarting => {}
        }
        told
    }

    /// `name` for each kernel; the exit code is the main kernel's.
    fn kernel_events(
        &self,
        name: &'static str,
        reason: &str,
        main_exit: Option<i32>,
    ) -> Vec<Emitted> {
        (0..self.kernels)
            .map(|kernel| Emitted {
                name,
                reason: reason.to_owned(),
                exit_code: if kernel == 0 { main_exit } else { None },
                kernel: Some(kernel),
            })
            .collect()
    }

    /// The `data` of `event`, as Backend.AI writes it.
    pub(crate) fn data(&self, event: &Emitted, owner_access_key: Option<&str>) -> Value {
        let mut data = json!({
            "reason": event.reason,
            "sessionName": self.name,
            "ownerAccessKey": owner_access_key,
            "sessionId": self.session_id.to_string(),
            "exitCode": event.exit_code,
        });
        if let Some(kernel) = event.kernel {
            let (role, index) = if kernel == 0 {
                ("main", 1)
            } else {
                ("sub", kernel)
            };
            data["kernelId"] = json!(kernel_id(self.session_id, kernel).to_string());
            data["clusterRole"] = json!(role);
            data["clusterIdx"] = json!(index);
        }
        data
    }
}

fn session_event(name: &'static str, reason: &str, exit_code: Option<i32>) -> Emitted {
    Emitted {
        name,
        reason: reason.to_owned(),
        exit_code,
        kernel: None,
    }
}

/// Whether a session of `project` belongs to group `group` (`*`: any; `default`: also a
/// session of no project, which is Backend.AI's default group).
fn in_group(group: &str, project: Option<&str>) -> bool {
    group == "*" || project == Some(group) || (project.is_none() && group == "default")
}

/// A stream being followed: what it shows, what it knows of each session, and the events
/// written but not yet sent.
struct Follow {
    state: AppState,
    /// The caller's user id and access key: the key their own sessions are told under.
    caller: (Uuid, String),
    /// Only this owner's sessions; `None`: everyone's (a superadmin's, or one session).
    owner: Option<Uuid>,
    group: String,
    scope: Scope,
    /// The one session followed, and the last version of its stream already taken (a
    /// stream's first event is version 0).
    only: Option<(Uuid, Option<u64>)>,
    sessions: HashMap<Uuid, Tracked>,
    /// Each owner's access key as the events name it (the first active one).
    access_keys: HashMap<Uuid, Option<String>>,
    pending: VecDeque<SseEvent>,
    /// Where events come from; `None` once the stream has ended.
    source: Option<async_nats::Subscriber>,
}

impl Follow {
    /// Takes one berth event: what it means, for a session this stream shows, is queued to
    /// be sent; after the last event of the one session followed, `server_close`, and the
    /// stream ends.
    async fn take(&mut self, event: RecordedEvent) {
        // Ended: what the log holds after the session's last event (its release, ...) is not
        // told, nor is the end twice.
        if self.source.is_none() {
            return;
        }
        let Some(id) = session_of(&event) else {
            return;
        };
        if let Some((only, taken)) = &mut self.only {
            if id != *only || taken.is_some_and(|v| event.stream_version <= v) {
                return;
            }
            *taken = Some(event.stream_version);
        }
        if !self.sessions.contains_key(&id) {
            let Some(tracked) = self.look_up(id, &event.event).await else {
                return;
            };
            self.sessions.insert(id, tracked);
        }
        let tracked = self.sessions.get_mut(&id).expect("inserted above");
        let told = tracked.apply(&event.event);
        let tracked = tracked.clone();
        let shown = self.owner.is_none_or(|o| o == tracked.owner)
            && in_group(&self.group, tracked.project.as_deref());
        if shown && told.iter().any(|e| self.scope.shows(e)) {
            let key = self.access_key_of(tracked.owner).await;
            for emitted in told.iter().filter(|e| self.scope.shows(e)) {
                self.pending.push_back(
                    SseEvent::default()
                        .event(emitted.name)
                        .data(tracked.data(emitted, key.as_deref()).to_string()),
                );
            }
        }
        if self.only.is_some() && tracked.ended {
            self.pending
                .push_back(SseEvent::default().event(SERVER_CLOSE).data("{}"));
            self.source = None;
        }
    }

    /// A session first seen in this stream: from its request, or from the ledger when the
    /// stream began after it.
    async fn look_up(&self, id: Uuid, event: &Event) -> Option<Tracked> {
        if let Event::SessionRequested(request) = event {
            return Some(Tracked::requested(request));
        }
        let known = db::backendai::streamed_session(&self.state.pool, id)
            .await
            .ok()??;
        Some(Tracked {
            session_id: id,
            name: known.name,
            owner: known.owner,
            project: known.project,
            batch: known.batch,
            kernels: known.cluster_size.max(1),
            exit_code: None,
            ended: false,
        })
    }

    /// The access key `owner`'s sessions are told under: the caller's own for the caller's
    /// sessions, else the owner's first active keypair (none for a user who has none).
    async fn access_key_of(&mut self, owner: Uuid) -> Option<String> {
        if owner == self.caller.0 {
            return Some(self.caller.1.clone());
        }
        if let Some(key) = self.access_keys.get(&owner) {
            return key.clone();
        }
        let client = self.state.pool.get().await.ok()?;
        let keys = events::ledger::backendai_keypairs(&client, Some(owner), None)
            .await
            .ok()?;
        let key = keys.into_iter().find(|k| k.active).map(|k| k.access_key);
        self.access_keys.insert(owner, key.clone());
        key
    }

    /// The stream of what is queued and what comes, until the source ends.
    fn into_stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> {
        futures::stream::unfold(self, |mut follow| async move {
            loop {
                if let Some(event) = follow.pending.pop_front() {
                    return Some((Ok(event), follow));
                }
                let message = follow.source.as_mut()?.next().await?;
                if let Ok(event) = serde_json::from_slice::<RecordedEvent>(&message.payload) {
                    follow.take(event).await;
                }
            }
        })
    }
}

/// `GET /events/session`: the lifecycle events of the caller's sessions (a superadmin's:
/// everyone's), of one owner's (`ownerAccessKey`: the caller's own, or anyone's for an
/// admin), of one project (`group`), or of one session (`sessionId`, or `sessionName`, which
/// names the owner's live session of that name, else their newest ended one).
async fn session_events(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    RawQuery(query): RawQuery,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, Problem> {
    let params = Params::parse(query.as_deref().unwrap_or_default())?;
    let owner = acting_owner(
        &state,
        &caller,
        params.owner_access_key.as_deref(),
        Action::See,
    )
    .await?;
    let only = match (params.session_id, params.name.as_str()) {
        (Some(id), _) => {
            Some(resolve_session(&state, &caller.owner, &owner, &id.to_string(), true).await?)
        }
        (None, "*") => None,
        (None, name) => Some(resolve_session(&state, &caller.owner, &owner, name, true).await?),
    };
    let nats = state.bus("the event stream cannot be followed")?.clone();
    let subject = match only {
        Some(id) => state
            .topology
            .stream_subject("session", &events::catalogue::stream_id("session", id)),
        None => state.topology.category_subject("session"),
    };
    let source = nats.subscribe(subject).await.map_err(ApiError::internal)?;
    // Once the server has the subscription, nothing published after it is missed; what was
    // published before is in the log.
    nats.flush().await.map_err(ApiError::internal)?;
    let everyone =
        authorization::lists_everyone(caller.owner.role) && params.owner_access_key.is_none();
    let mut follow = Follow {
        state: state.clone(),
        caller: (caller.owner.user_id, caller.access_key.clone()),
        owner: (only.is_none() && !everyone).then_some(owner.user_id),
        group: params.group,
        scope: params.scope,
        only: only.map(|id| (id, None)),
        sessions: HashMap::new(),
        access_keys: HashMap::new(),
        pending: VecDeque::new(),
        source: Some(source),
    };
    if let Some(id) = only {
        let past = events::EventStore::new(state.pool.clone())
            .read_stream(&events::catalogue::stream_id("session", id))
            .await
            .map_err(ApiError::from)?;
        for event in past {
            follow.take(event).await;
        }
    }
    Ok(Sse::new(follow.into_stream()).keep_alive(KeepAlive::new().interval(HEARTBEAT)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::payloads::{KernelStarted, Owner, ResourceSlots, SessionRenamed, SessionScheduled};

    fn request(session_type: SessionType, cluster_size: u32) -> SessionRequested {
        SessionRequested {
            session_id: Uuid::from_u128(7),
            name: "job1".into(),
            owner: Owner {
                user_id: Uuid::from_u128(1),
                email: "ada@example.com".into(),
                project: None,
            },
            session_type,
            resources: ResourceSlots::default(),
            cluster_size,
            ..domain::fixtures::session_requested()
        }
    }

    fn moved(from: SessionStatus, to: SessionStatus, reason: &str, code: Option<i32>) -> Event {
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id: Uuid::from_u128(7),
            from,
            to,
            reason: (!reason.is_empty()).then(|| reason.to_owned()),
            exit_code: code,
            occurred_at: None,
        })
    }

    fn started(kernel: u32) -> Event {
        Event::KernelStarted(KernelStarted {
            session_id: Uuid::from_u128(7),
            kernel,
            agent_id: "a1".into(),
            container_id: "c1".into(),
            ports: Vec::new(),
            hostname: None,
            address: None,
            started_at: None,
        })
    }

    fn scheduled() -> Event {
        Event::SessionScheduled(SessionScheduled {
            session_id: Uuid::from_u128(7),
            agent_id: "a1".into(),
            resources: ResourceSlots::default(),
            kernels: Vec::new(),
        })
    }

    /// The names told for `events`, in order, each with its kernel where it has one.
    fn told(tracked: &mut Tracked, events: &[Event]) -> Vec<String> {
        events
            .iter()
            .flat_map(|e| tracked.apply(e))
            .map(|e| match e.kernel {
                Some(k) => format!("{}#{k}", e.name),
                None => e.name.to_owned(),
            })
            .collect()
    }

    fn life(exit: &[Event]) -> Vec<Event> {
        use SessionStatus::*;
        let mut events = vec![
            Event::SessionRequested(Box::new(request(SessionType::Batch, 1))),
            scheduled(),
            moved(Pending, Scheduled, "", None),
            moved(Scheduled, Preparing, "", None),
            moved(Preparing, Pulling, "", None),
            moved(Pulling, Prepared, "", None),
            moved(Prepared, Creating, "", None),
            started(0),
            moved(Creating, Running, "", None),
        ];
        events.extend_from_slice(exit);
        events
    }

    #[test]
    fn a_failed_batch_session_tells_its_whole_life_and_its_exit_code() {
        let request = request(SessionType::Batch, 1);
        let mut tracked = Tracked::requested(&request);
        let exit = [moved(
            SessionStatus::Running,
            SessionStatus::Terminated,
            "failed with exit code 3",
            Some(3),
        )];
        assert_eq!(
            told(&mut tracked, &life(&exit)),
            [
                "session_enqueued",
                "session_scheduled",
                "kernel_preparing#0",
                "kernel_pulling#0",
                "kernel_creating#0",
                "kernel_started#0",
                "session_started",
                "kernel_terminated#0",
                "session_failure",
                "session_terminated",
            ]
        );
        assert!(tracked.ended);
        // The exit code is told where the client reads it (`watch` exits with it).
        let mut again = Tracked::requested(&request);
        let all: Vec<Emitted> = life(&exit).iter().flat_map(|e| again.apply(e)).collect();
        for name in ["kernel_terminated", "session_failure", "session_terminated"] {
            let e = all.iter().find(|e| e.name == name).unwrap();
            assert_eq!(e.exit_code, Some(3), "{name}");
            assert_eq!(e.reason, "failed with exit code 3", "{name}");
        }
        assert!(all
            .iter()
            .filter(|e| e.name != "kernel_terminated" && e.name != "session_failure")
            .filter(|e| e.name != "session_terminated")
            .all(|e| e.exit_code.is_none()));
    }

    #[test]
    fn a_batch_session_that_exits_zero_succeeds_and_an_interactive_one_has_no_result() {
        let exit = [moved(
            SessionStatus::Running,
            SessionStatus::Terminated,
            "exited",
            Some(0),
        )];
        let mut batch = Tracked::requested(&request(SessionType::Batch, 1));
        let names = told(&mut batch, &life(&exit));
        assert_eq!(
            names[names.len() - 3..],
            [
                "kernel_terminated#0",
                "session_success",
                "session_terminated"
            ]
        );
        let mut interactive = Tracked::requested(&request(SessionType::Interactive, 1));
        let mut events = life(&[]);
        events[0] = Event::SessionRequested(Box::new(request(SessionType::Interactive, 1)));
        events.push(moved(
            SessionStatus::Running,
            SessionStatus::Terminating,
            "user-requested",
            None,
        ));
        events.push(moved(
            SessionStatus::Terminating,
            SessionStatus::Terminated,
            "user-requested",
            Some(137),
        ));
        let names = told(&mut interactive, &events);
        assert_eq!(
            names[names.len() - 4..],
            [
                "kernel_terminating#0",
                "session_terminating",
                "kernel_terminated#0",
                "session_terminated"
            ]
        );
    }

    #[test]
    fn a_cancelled_session_cancels_each_kernel_and_an_error_ends_it_with_the_reason() {
        use SessionStatus::*;
        let mut cluster = Tracked::requested(&request(SessionType::Interactive, 3));
        let names = told(
            &mut cluster,
            &[moved(Pending, Cancelled, "no agent fits", None)],
        );
        assert_eq!(
            names,
            [
                "kernel_cancelled#0",
                "kernel_cancelled#1",
                "kernel_cancelled#2",
                "session_cancelled"
            ]
        );
        assert!(cluster.ended);
        let mut failed = Tracked::requested(&request(SessionType::Batch, 1));
        let all = failed.apply(&moved(Preparing, Error, "the image is gone", None));
        assert_eq!(
            all,
            [Emitted {
                name: "session_terminated",
                reason: "the image is gone".into(),
                exit_code: None,
                kernel: None,
            }]
        );
        assert!(failed.ended);
        // A session sent back to the queue is enqueued again; statuses Backend.AI does not
        // name tell nothing.
        let mut requeued = Tracked::requested(&request(SessionType::Batch, 1));
        assert_eq!(
            told(
                &mut requeued,
                &[
                    moved(Scheduled, Pending, "agent lost", None),
                    moved(Pending, Scheduled, "", None),
                    moved(Pulling, Prepared, "", None),
                ]
            ),
            ["session_enqueued"]
        );
        assert!(!requeued.ended);
    }

    #[test]
    fn the_payload_names_the_session_by_its_current_name_and_each_kernel() {
        let request = request(SessionType::Interactive, 2);
        let mut tracked = Tracked::requested(&request);
        tracked.apply(&Event::SessionRenamed(SessionRenamed {
            session_id: request.session_id,
            old_name: "job1".into(),
            new_name: "job2".into(),
        }));
        let sub = &tracked.apply(&started(1))[0];
        let data = tracked.data(sub, Some("AKIAEXAMPLE"));
        assert_eq!(
            data,
            json!({
                "reason": "",
                "sessionName": "job2",
                "ownerAccessKey": "AKIAEXAMPLE",
                "sessionId": request.session_id.to_string(),
                "exitCode": null,
                "kernelId": Uuid::new_v5(&request.session_id, b"1").to_string(),
                "clusterRole": "sub",
                "clusterIdx": 1,
            })
        );
        let main = &tracked.apply(&started(0))[0];
        let data = tracked.data(main, None);
        assert_eq!(data["kernelId"], request.session_id.to_string());
        assert_eq!(
            (&data["clusterRole"], &data["clusterIdx"]),
            (&json!("main"), &json!(1))
        );
        assert_eq!(data["ownerAccessKey"], Value::Null);
        let session = tracked.data(&session_event("session_started", "", None), None);
        assert!(session.get("kernelId").is_none(), "{session}");
        assert_ne!(
            kernel_id(request.session_id, 1),
            kernel_id(request.session_id, 2)
        );
    }

    #[test]
    fn the_query_is_read_as_backend_ai_reads_it() {
        let p = Params::parse("sessionName=bai1&scope=*").unwrap();
        assert_eq!(
            (p.name.as_str(), p.scope, p.session_id),
            ("bai1", Scope::All, None)
        );
        let id = Uuid::from_u128(9);
        let p = Params::parse(&format!(
            "name=x&sessionId={id}&owner_access_key=AK1&groupName=vision&scope=kernel"
        ))
        .unwrap();
        assert_eq!(p.session_id, Some(id));
        assert_eq!(p.owner_access_key.as_deref(), Some("AK1"));
        assert_eq!((p.group.as_str(), p.scope), ("vision", Scope::Kernel));
        let p = Params::parse("").unwrap();
        assert_eq!((p.name.as_str(), p.group.as_str()), ("*", "*"));
        for (bad, field) in [
            ("scope=all", "scope"),
            ("sessionId=bai1", "sessionId"),
            ("sessionName=", "sessionName"),
        ] {
            let problem = Params::parse(bad).unwrap_err();
            assert_eq!(problem.status, 400, "{bad}");
            assert!(problem.data.unwrap().get(field).is_some(), "{bad}");
        }
        assert!(in_group("*", Some("vision")) && in_group("vision", Some("vision")));
        assert!(in_group("default", None) && !in_group("vision", None));
        let kernel = session_event("x", "", None);
        assert!(Scope::Session.shows(&kernel) && !Scope::Kernel.shows(&kernel));
    }
}
