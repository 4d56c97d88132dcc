//! The subjects and streams agents and the control plane meet on, all under one root
//! (`berth` in production; a test takes a root of its own):
//!
//! | subject | kind | from → to |
//! |---|---|---|
//! | `<root>.cmd.<agent>.<session>` | JetStream `commands_stream` | dispatcher → the agent's durable consumer `agent-<agent>` |
//! | `<root>.rec.<agent>` | core request-reply, queue group `recorder` | agent → recorder |
//! | `<root>.tel.<agent>.log.<session>.<kernel>`, `<root>.tel.<agent>.usage.<session>` | JetStream `telemetry_stream` | agent → telemetry sink, idle-reaper |
//! | `<root>.idle.readings`, `<root>.idle.preview` | core request-reply | gateway, CLI → idle-reaper |
//! | `<root>.proxy.busy` | core publish | each gateway's app proxy → the others' idle closers |
//! | `<root>.notify.<user>` | core publish | notification service → the gateway's notification streams |
//!
//! The agent's id is a subject token, so an agent's rights can be written as subjects.

use uuid::Uuid;

/// Where agents and the control plane meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    pub root: String,
    /// The JetStream stream that keeps commands until their agent takes them.
    pub commands_stream: String,
    /// The JetStream stream that carries logs and usage to the control plane.
    pub telemetry_stream: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Subjects {
            root: "berth".into(),
            commands_stream: "BERTH_AGENT_CMDS".into(),
            telemetry_stream: "BERTH_TELEMETRY".into(),
        }
    }
}

/// The recorder's queue group: several recorders share the requests.
pub const RECORDER_QUEUE: &str = "recorder";

/// Whether `id` can be an agent's id: a non-empty subject token of letters, digits, `-` and
/// `_`, at most 64 long. Pure.
pub fn is_valid_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Subjects {
    /// Where the dispatcher sends `agent` its commands about `session`.
    pub fn command(&self, agent: &str, session: Uuid) -> String {
        format!("{}.cmd.{agent}.{}", self.root, session.simple())
    }

    /// Every command of `agent` (its consumer's filter).
    pub fn commands_of(&self, agent: &str) -> String {
        format!("{}.cmd.{agent}.>", self.root)
    }

    /// Every command (the commands stream's subjects).
    pub fn all_commands(&self) -> String {
        format!("{}.cmd.>", self.root)
    }

    /// The durable consumer the control plane creates for `agent`.
    pub fn consumer_of(&self, agent: &str) -> String {
        format!("agent-{agent}")
    }

    /// Where `agent` sends its requests to the recorder.
    pub fn requests_of(&self, agent: &str) -> String {
        format!("{}.rec.{agent}", self.root)
    }

    /// Every agent's requests (the recorder's subscription).
    pub fn all_requests(&self) -> String {
        format!("{}.rec.*", self.root)
    }

    /// The agent a request subject names, when it is one.
    pub fn agent_of_request<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let agent = subject.strip_prefix(&self.root)?.strip_prefix(".rec.")?;
        is_valid_agent_id(agent).then_some(agent)
    }

    /// Where `agent` sends a kernel's output.
    pub fn log(&self, agent: &str, session: Uuid, kernel: u32) -> String {
        format!(
            "{}.tel.{agent}.log.{}.{kernel}",
            self.root,
            session.simple()
        )
    }

    /// Where `agent` sends a session's usage.
    pub fn usage(&self, agent: &str, session: Uuid) -> String {
        format!("{}.tel.{agent}.usage.{}", self.root, session.simple())
    }

    /// Every telemetry subject (the telemetry stream's subjects).
    pub fn all_telemetry(&self) -> String {
        format!("{}.tel.>", self.root)
    }

    /// Every usage subject (the idle-reaper's filter on the telemetry stream).
    pub fn all_usage(&self) -> String {
        format!("{}.tel.*.usage.>", self.root)
    }

    /// Where the scheduler answers when a shape would start in a group, and what would start
    /// sooner (`domain::advice::AdviceAsked`, answered with an `Advice` or an error's words).
    pub fn scheduler_advice(&self) -> String {
        format!("{}.scheduler.advice", self.root)
    }

    /// Where the idle-reaper answers what its checkers say of a session
    /// (`domain::idleness::SessionReadings`, or null when it does not watch it).
    pub fn idle_readings(&self) -> String {
        format!("{}.idle.readings", self.root)
    }

    /// Where berth's app proxy tells the idle-reaper that bytes moved through a session's
    /// circuits (`protocol::AppActivity`).
    pub fn idle_activity(&self) -> String {
        format!("{}.idle.activity", self.root)
    }

    /// Where each gateway's app proxy tells the others which circuits it saw in use
    /// (`protocol::CircuitsBusy`).
    pub fn circuits_busy(&self) -> String {
        format!("{}.proxy.busy", self.root)
    }

    /// Where a gateway that changed a user's credentials (a key revoked, the user disabled,
    /// enabled or given another role) tells every gateway to forget the keys it keeps for
    /// them, at once, before the relay publishes the event (the payload: the user's id).
    pub fn keys_forget(&self) -> String {
        format!("{}.keys.forget", self.root)
    }

    /// Where the idle-reaper answers which sessions it would reap now, and why.
    pub fn idle_preview(&self) -> String {
        format!("{}.idle.preview", self.root)
    }

    /// Where the notification service pushes a user's new notifications, live.
    pub fn notices(&self, user: Uuid) -> String {
        format!("{}.notify.{}", self.root, user.simple())
    }

    /// The agent a telemetry subject names, when it is one.
    pub fn agent_of_telemetry<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let rest = subject.strip_prefix(&self.root)?.strip_prefix(".tel.")?;
        rest.split('.').next().filter(|a| is_valid_agent_id(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_ids_are_subject_tokens() {
        for good in ["a1", "gpu-node_07", "A"] {
            assert!(is_valid_agent_id(good), "{good}");
        }
        let long = "x".repeat(65);
        for bad in ["", "a.b", "a*", "a>", "a b", "ä", long.as_str()] {
            assert!(!is_valid_agent_id(bad), "{bad}");
        }
    }

    #[test]
    fn subjects_name_their_agent_and_nothing_else() {
        let s = Subjects::default();
        let session = Uuid::nil();
        assert_eq!(
            s.command("a1", session),
            "berth.cmd.a1.00000000000000000000000000000000"
        );
        assert_eq!(s.requests_of("a1"), "berth.rec.a1");
        assert_eq!(s.agent_of_request("berth.rec.a1"), Some("a1"));
        assert_eq!(s.agent_of_request("berth.rec.a1.x"), None);
        assert_eq!(s.agent_of_request("other.rec.a1"), None);
        assert_eq!(s.agent_of_telemetry(&s.log("a2", session, 1)), Some("a2"));
        assert_eq!(s.agent_of_telemetry(&s.usage("a3", session)), Some("a3"));
        assert_eq!(s.agent_of_telemetry("berth.cmd.a3.x"), None);
    }
}
