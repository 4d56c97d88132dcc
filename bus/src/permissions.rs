//! What an agent may do on NATS, as subjects: publish its own requests and telemetry, pull
//! and acknowledge its own command consumer, and read replies on its own inbox; nothing else
//! (no events, no other agent's subjects, no JetStream API beyond its consumer). A durable
//! subscription's reader may only pull and acknowledge its own consumer of the events
//! ([`reader_permissions`]). An agent
//! authenticates with an nkey (the public half is recorded at admission), and
//! [`authorization`] renders the server's `authorization` block from the admitted agents and
//! the control plane's user. Several installations can share one server: each renders its
//! agents as a [`users_fragment`], and [`compose`] joins them into one block. Pure.

use serde_json::{json, Value};

use crate::subjects::Subjects;

/// The inbox prefix agent `agent` uses, so its replies can be allowed to it alone.
pub fn inbox_prefix(agent: &str) -> String {
    format!("_INBOX.{agent}")
}

/// The subjects agent `agent` may publish on and subscribe to.
pub fn agent_permissions(subjects: &Subjects, agent: &str) -> (Vec<String>, Vec<String>) {
    let stream = &subjects.commands_stream;
    let consumer = subjects.consumer_of(agent);
    let publish = vec![
        subjects.requests_of(agent),
        format!("{}.tel.{agent}.>", subjects.root),
        format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
        format!("$JS.ACK.{stream}.{consumer}.>"),
        // The longer form of the ack subject, with a domain and an account hash.
        format!("$JS.ACK.*.*.{stream}.{consumer}.>"),
    ];
    let subscribe = vec![format!("{}.>", inbox_prefix(agent))];
    (publish, subscribe)
}

/// What the NATS user of a durable subscription may do: pull from its own consumer of the
/// relay's events stream and acknowledge it, and read replies on its own inbox; nothing else
/// (no publishing of events, no other consumer, no JetStream API beyond its consumer).
pub fn reader_permissions(events_stream: &str, consumer: &str) -> (Vec<String>, Vec<String>) {
    let publish = vec![
        format!("$JS.API.CONSUMER.INFO.{events_stream}.{consumer}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{events_stream}.{consumer}"),
        format!("$JS.ACK.{events_stream}.{consumer}.>"),
        format!("$JS.ACK.*.*.{events_stream}.{consumer}.>"),
    ];
    let subscribe = vec![format!("{}.>", inbox_prefix(consumer))];
    (publish, subscribe)
}

/// A durable subscription read over NATS, as the server's configuration needs it: its
/// consumer and its user's public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderKey {
    pub consumer: String,
    pub public_key: String,
}

/// Each NATS reader of a durable subscription as a user of the server: its nkey, and its own
/// consumer of `events_stream` only.
pub fn reader_users(events_stream: &str, readers: &[ReaderKey]) -> Vec<Value> {
    readers
        .iter()
        .map(|reader| {
            nkey_user(
                &reader.public_key,
                reader_permissions(events_stream, &reader.consumer),
            )
        })
        .collect()
}

/// A user of the server known by its nkey, allowed to publish and subscribe to these subjects
/// only.
fn nkey_user(public_key: &str, (publish, subscribe): (Vec<String>, Vec<String>)) -> Value {
    json!({
        "nkey": public_key,
        "permissions": {
            "publish": {"allow": publish},
            "subscribe": {"allow": subscribe},
        },
    })
}

/// An admitted agent, as the server's configuration needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedKey {
    pub agent_id: String,
    pub public_key: String,
}

/// The NATS server's `authorization` block (JSON, which the server's configuration format
/// reads): the control plane's user with every right, and each admitted agent by its nkey,
/// with its own subjects only.
pub fn authorization(
    subjects: &Subjects,
    control_user: &str,
    control_password: &str,
    agents: &[AdmittedKey],
) -> Value {
    let mut users = vec![json!({"user": control_user, "password": control_password})];
    users.extend(agent_users(subjects, agents));
    json!({"users": users})
}

/// Each admitted agent as a user of the server: its nkey, and its own subjects only.
pub fn agent_users(subjects: &Subjects, agents: &[AdmittedKey]) -> Vec<Value> {
    agents
        .iter()
        .map(|agent| {
            nkey_user(
                &agent.public_key,
                agent_permissions(subjects, &agent.agent_id),
            )
        })
        .collect()
}

/// One installation's share of a server's users: a user per line (the server's configuration
/// format reads a newline as the separator of an array's items), so the shares of several
/// installations on one server are joined by concatenation ([`compose`]; `infra/services.sh`
/// joins them the same way with `cat`).
pub fn users_fragment(users: &[Value]) -> String {
    users.iter().map(|user| format!("{user}\n")).collect()
}

/// The server's `authorization` block made of the [`users_fragment`]s of every installation
/// it serves (the control plane's user among them). A key listed twice (two installations
/// that share a database but not a subject root) is kept once, the first time: the server
/// refuses a configuration with a user twice, and would keep its old one.
pub fn compose<'a>(fragments: impl IntoIterator<Item = &'a str>) -> String {
    let mut block = String::from("authorization {\n  users = [\n");
    let mut seen = std::collections::HashSet::new();
    for line in fragments.into_iter().flat_map(str::lines) {
        let key = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|user| user.get("nkey").or(user.get("user")).cloned());
        if key.is_none_or(|key| seen.insert(key)) {
            block.push_str(line);
            block.push('\n');
        }
    }
    block.push_str("  ]\n}\n");
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(patterns: &[String], subject: &str) -> bool {
        patterns.iter().any(|p| matches(p, subject))
    }

    /// NATS subject matching: `*` one token, `>` the rest.
    fn matches(pattern: &str, subject: &str) -> bool {
        let (mut p, mut s) = (pattern.split('.'), subject.split('.'));
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    #[test]
    fn an_agent_may_touch_its_own_subjects_and_no_others() {
        let subjects = Subjects::default();
        let (publish, subscribe) = agent_permissions(&subjects, "a1");
        let session = uuid::Uuid::nil();
        for own in [
            subjects.requests_of("a1"),
            subjects.log("a1", session, 0),
            subjects.usage("a1", session),
            "$JS.API.CONSUMER.MSG.NEXT.BERTH_AGENT_CMDS.agent-a1".into(),
            "$JS.ACK.BERTH_AGENT_CMDS.agent-a1.1.2.3.4.5".into(),
        ] {
            assert!(allowed(&publish, &own), "{own}");
        }
        for other in [
            subjects.requests_of("a2"),
            subjects.log("a2", session, 0),
            subjects.command("a1", session),
            "berth.evt.session.x".into(),
            "$JS.API.CONSUMER.MSG.NEXT.BERTH_AGENT_CMDS.agent-a2".into(),
            "$JS.API.CONSUMER.CREATE.BERTH_AGENT_CMDS".into(),
            "$JS.API.STREAM.DELETE.BERTH_EVENTS".into(),
            "$JS.ACK.BERTH_AGENT_CMDS.agent-a2.1.2.3.4.5".into(),
        ] {
            assert!(!allowed(&publish, &other), "{other}");
        }
        assert!(allowed(&subscribe, "_INBOX.a1.xyz"));
        for other in [
            "_INBOX.a2.xyz",
            "_INBOX.xyz",
            "berth.cmd.a1.x",
            "berth.evt.>",
        ] {
            assert!(!allowed(&subscribe, other), "{other}");
        }
    }

    #[test]
    fn a_subscriptions_reader_may_pull_and_acknowledge_its_own_consumer_only() {
        let (publish, subscribe) = reader_permissions("BERTH_EVENTS", "sub-u1-billing");
        for own in [
            "$JS.API.CONSUMER.MSG.NEXT.BERTH_EVENTS.sub-u1-billing",
            "$JS.API.CONSUMER.INFO.BERTH_EVENTS.sub-u1-billing",
            "$JS.ACK.BERTH_EVENTS.sub-u1-billing.1.2.3.4.5",
        ] {
            assert!(allowed(&publish, own), "{own}");
        }
        for other in [
            "berth.evt.session.x",
            "berth.rec.a1",
            "$JS.API.CONSUMER.MSG.NEXT.BERTH_EVENTS.sub-u2-billing",
            "$JS.API.CONSUMER.CREATE.BERTH_EVENTS",
            "$JS.API.CONSUMER.DELETE.BERTH_EVENTS.sub-u1-billing",
            "$JS.API.STREAM.PURGE.BERTH_EVENTS",
            "$JS.ACK.BERTH_EVENTS.sub-u2-billing.1.2.3.4.5",
            "$JS.API.CONSUMER.MSG.NEXT.BERTH_AGENT_CMDS.agent-a1",
        ] {
            assert!(!allowed(&publish, other), "{other}");
        }
        assert!(allowed(&subscribe, "_INBOX.sub-u1-billing.x"));
        for other in ["_INBOX.a1.x", "berth.evt.>", "berth.cmd.a1.x"] {
            assert!(!allowed(&subscribe, other), "{other}");
        }
        let users = reader_users(
            "BERTH_EVENTS",
            &[ReaderKey {
                consumer: "sub-u1-billing".into(),
                public_key: "UR1".into(),
            }],
        );
        assert_eq!(users[0]["nkey"], "UR1");
    }

    #[test]
    fn the_authorization_block_names_each_agent_by_key() {
        let keys = [AdmittedKey {
            agent_id: "a1".into(),
            public_key: "UA1".into(),
        }];
        let block = authorization(&Subjects::default(), "control", "secret", &keys);
        let users = block["users"].as_array().unwrap();
        assert_eq!(users[0]["user"], "control");
        assert!(
            users[0].get("permissions").is_none(),
            "the control plane may do anything"
        );
        assert_eq!(users[1]["nkey"], "UA1");
        assert_eq!(
            users[1]["permissions"]["subscribe"]["allow"][0],
            "_INBOX.a1.>"
        );
    }

    #[test]
    fn installations_sharing_a_server_each_add_their_agents_to_one_user_list() {
        let key = |agent_id: &str, public_key: &str| AdmittedKey {
            agent_id: agent_id.into(),
            public_key: public_key.into(),
        };
        let control = users_fragment(&[json!({"user": "control", "password": "secret"})]);
        let ours = Subjects {
            root: "t1".into(),
            ..Subjects::default()
        };
        let theirs = Subjects {
            root: "t2".into(),
            ..Subjects::default()
        };
        let first = users_fragment(&agent_users(&ours, &[key("a1", "UA1"), key("a2", "UA2")]));
        let second = users_fragment(&agent_users(&theirs, &[key("b1", "UB1")]));
        assert_eq!(first.lines().count(), 2, "a user per line");
        let again = users_fragment(&agent_users(&theirs, &[key("a1", "UA1")]));
        let block = compose([control.as_str(), first.as_str(), second.as_str(), &again]);
        assert!(
            block.starts_with("authorization {\n  users = [\n"),
            "{block}"
        );
        assert!(block.ends_with("  ]\n}\n"), "{block}");
        let users: Vec<Value> = block
            .lines()
            .filter(|line| line.starts_with('{'))
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(users.len(), 4, "a1's key once: {block}");
        assert_eq!(users[0]["user"], "control");
        assert_eq!(users[3]["nkey"], "UB1");
        assert!(users[3]["permissions"]["publish"]["allow"][0]
            .as_str()
            .unwrap()
            .starts_with("t2."));
    }
}
