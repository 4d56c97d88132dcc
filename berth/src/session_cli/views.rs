//! The tables of `berth session`'s read commands: which rows of the API's answer each shows,
//! and its columns (`-o wide` adds the wide ones). Read from the JSON as the API sent it, so
//! a field this berth does not know yet never breaks a listing.

use serde_json::Value;

use super::output::{amounts, bytes_at, col, joined, table, text, wide, Column, Output};

/// What one read command shows as a table: its rows within the answer, and its columns.
pub struct View {
    pub rows: fn(&Value) -> Vec<Value>,
    pub columns: &'static [Column],
}

impl View {
    /// The answer `v` as this view's table (`output` table or wide).
    pub fn render(&self, v: &Value, output: Output, colour: bool) -> String {
        table(
            &(self.rows)(v),
            self.columns,
            output == Output::Wide,
            colour,
        )
    }
}

/// The array at `key` of the answer.
fn array(v: &Value, key: &str) -> Vec<Value> {
    v[key].as_array().cloned().unwrap_or_default()
}

fn seconds(v: &Value, at: &str) -> String {
    match v.pointer(at).and_then(Value::as_f64) {
        Some(s) => format!("{s:.0}s"),
        None => "-".into(),
    }
}

/// A status with its reason, as the wide tables show it.
fn status(v: &Value) -> String {
    text(v, "/status")
}

pub const SESSIONS: View = View {
    rows: |v| array(v, "sessions"),
    columns: &[
        col("ID", |v| text(v, "/session_id")),
        col("NAME", |v| text(v, "/name")),
        col("TYPE", |v| text(v, "/type")),
        col("STATUS", status),
        col("AGENT", |v| text(v, "/agent_id")),
        col("OWNER", |v| text(v, "/owner/email")),
        wide("IMAGE", |v| text(v, "/image")),
        wide("GROUP", |v| text(v, "/resource_group")),
        wide("KERNELS", |v| text(v, "/cluster_size")),
        wide("ALLOCATED", |v| amounts(v, "/allocated")),
        wide("CREATED", |v| text(v, "/created_at")),
        wide("ELAPSED", |v| seconds(v, "/elapsed_secs")),
        wide("REASON", |v| text(v, "/status_reason")),
    ],
};

pub const HISTORY: View = View {
    rows: |v| array(v, "history"),
    columns: &[
        col("CREATED", |v| text(v, "/created_at")),
        col("PHASE", |v| text(v, "/phase")),
        col("RESULT", |v| text(v, "/result")),
        col("FROM", |v| text(v, "/from_status")),
        col("TO", |v| text(v, "/to_status")),
        col("ATTEMPTS", |v| text(v, "/attempts")),
        col("MESSAGE", |v| text(v, "/message")),
        wide("ERROR CODE", |v| text(v, "/error_code")),
        wide("STEPS", |v| {
            let steps: Vec<String> = v["sub_steps"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| format!("{}: {}", text(s, "/step"), text(s, "/result")))
                .collect();
            if steps.is_empty() {
                "-".into()
            } else {
                steps.join("; ")
            }
        }),
    ],
};

pub const IMAGES: View = View {
    rows: |v| array(v, "items"),
    columns: &[
        col("NAME", |v| text(v, "/name")),
        col("IMAGE", |v| text(v, "/image")),
        col("SIZE", |v| bytes_at(v, "/size_bytes")),
        col("CREATED", |v| text(v, "/created_at")),
        wide("SESSION", |v| text(v, "/session_id")),
        wide("AGENT", |v| text(v, "/agent_id")),
        wide("IMAGE ID", |v| text(v, "/image_id")),
    ],
};

/// One row per version of each environment, its repository beside it.
pub const ENVIRONMENTS: View = View {
    rows: |v| {
        array(v, "environments")
            .iter()
            .flat_map(|e| {
                array(e, "versions").into_iter().map(move |mut version| {
                    version["environment"] = e["name"].clone();
                    version["customized"] = e["customized"].clone();
                    version
                })
            })
            .collect()
    },
    columns: &[
        col("ENVIRONMENT", |v| text(v, "/environment")),
        col("TAG", |v| text(v, "/tag")),
        col("CUSTOMIZED", |v| text(v, "/customized")),
        wide("IMAGE", |v| text(v, "/image")),
        wide("GROUPS", |v| joined(v, "/resource_groups")),
    ],
};

pub const GROUPS: View = View {
    rows: |v| array(v, "resource_groups"),
    columns: &[
        col("NAME", |v| text(v, "/name")),
        col("AGENTS", |v| text(v, "/agents")),
        col("FREE", |v| amounts(v, "/free")),
        wide("CAPACITY", |v| amounts(v, "/capacity")),
        wide("USED", |v| amounts(v, "/used")),
        wide("QUEUE POLICY", |v| text(v, "/queue_policy")),
        wide("SELECTION", |v| text(v, "/agent_selection")),
    ],
};

pub const AGENTS: View = View {
    rows: |v| array(v, "agents"),
    columns: &[
        col("ID", |v| text(v, "/agent_id")),
        col("GROUP", |v| text(v, "/resource_group")),
        col("FREE", |v| amounts(v, "/free")),
        col("LOST", |v| text(v, "/lost")),
        wide("CAPACITY", |v| amounts(v, "/capacity")),
        wide("USED", |v| amounts(v, "/used")),
        wide("HEARD", |v| seconds(v, "/heartbeat_age_secs")),
        wide("SESSIONS", |v| text(v, "/sessions")),
    ],
};

pub const LAUNCHES: View = View {
    rows: |v| array(v, "launches"),
    columns: &[
        col("ID", |v| text(v, "/launch_id")),
        col("LABEL", |v| text(v, "/label")),
        col("PINNED", |v| text(v, "/pinned")),
        col("IMAGE", |v| text(v, "/request/image")),
        col("CREATED", |v| text(v, "/created_at")),
        wide("TYPE", |v| text(v, "/request/type")),
        wide("SESSIONS", |v| joined(v, "/sessions")),
    ],
};

/// One row per pending session, its group beside it, in the scheduler's order.
pub const QUEUE: View = View {
    rows: |v| {
        array(v, "resource_groups")
            .iter()
            .flat_map(|g| {
                array(g, "sessions").into_iter().map(move |mut s| {
                    s["resource_group"] = g["resource_group"].clone();
                    s
                })
            })
            .collect()
    },
    columns: &[
        col("GROUP", |v| text(v, "/resource_group")),
        col("#", |v| text(v, "/position")),
        col("NAME", |v| text(v, "/name")),
        col("OWNER", |v| text(v, "/owner/email")),
        col("REQUESTED", |v| amounts(v, "/requested")),
        col("WAITS", |v| text(v, "/reason/message")),
        wide("ID", |v| text(v, "/session_id")),
        wide("TYPE", |v| text(v, "/type")),
        wide("ATTEMPTS", |v| text(v, "/attempts")),
        wide("QUEUED", |v| text(v, "/queued_at")),
        wide("STARTS AT", |v| text(v, "/starts_at")),
    ],
};

pub const NOTIFICATIONS: View = View {
    rows: |v| array(v, "items"),
    columns: &[
        col("AT", |v| text(v, "/at")),
        col("SESSION", |v| text(v, "/session_name")),
        col("KIND", |v| text(v, "/kind")),
        col("MESSAGE", |v| text(v, "/message")),
        wide("READ", |v| text(v, "/read_at")),
        wide("SESSION ID", |v| text(v, "/session_id")),
        wide("ID", |v| text(v, "/notice_id")),
    ],
};

pub const APPS: View = View {
    rows: |v| array(v, "apps"),
    columns: &[
        col("APP", |v| text(v, "/name")),
        col("PROTOCOL", |v| text(v, "/protocol")),
        col("PORTS", |v| joined(v, "/ports")),
    ],
};

pub const CIRCUITS: View = View {
    rows: |v| array(v, "circuits"),
    columns: &[
        col("OPEN", |v| text(v, "/app")),
        col("PORT", |v| text(v, "/port")),
        col("PUBLIC", |v| text(v, "/public")),
        col("BYTES IN", |v| text(v, "/bytes_in")),
        col("BYTES OUT", |v| text(v, "/bytes_out")),
    ],
};

/// Sessions sharing one name, as a refusal to guess among them lists them.
pub const NAMESAKES: View = View {
    rows: |v| array(v, "sessions"),
    columns: &[
        col("ID", |v| text(v, "/session_id")),
        col("NAME", |v| text(v, "/name")),
        col("OWNER", |v| text(v, "/owner/email")),
        col("STATUS", status),
        col("CREATED", |v| text(v, "/created_at")),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_answers_become_one_row_each_with_their_parent_beside_them() {
        let environments = json!({"environments": [
            {"name": "berth/python", "customized": false, "versions": [
                {"tag": "3.12", "image": "berth/python:3.12", "resource_groups": ["default"]},
                {"tag": "latest", "image": "berth/python:latest", "resource_groups": ["default", "gpu"]}]},
            {"name": "me/custom", "customized": true, "versions": [
                {"tag": "v1", "image": "me/custom:v1", "resource_groups": []}]}]});
        let rows = (ENVIRONMENTS.rows)(&environments);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2]["environment"], "me/custom");
        let wide = ENVIRONMENTS.render(&environments, Output::Wide, false);
        assert!(wide.contains("default,gpu"), "{wide}");
        let queue = json!({"resource_groups": [
            {"resource_group": "default", "queue_policy": "fifo", "sessions": [
                {"position": 1, "name": "first", "owner": {"email": "a@x"},
                 "requested": {"cpu": 1.0, "memory_bytes": 1073741824, "gpu": 0.0},
                 "reason": {"message": "no agent has room"}}]},
            {"resource_group": "empty", "sessions": []}]});
        let table = QUEUE.render(&queue, Output::Table, false);
        let row = table.lines().nth(1).unwrap();
        assert!(row.starts_with("default"), "{table}");
        assert!(
            row.contains("1.0 cpu, 1 GiB") && row.ends_with("no agent has room"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 2, "{table}");
    }
}
