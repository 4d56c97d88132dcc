//! Examples for tests (feature `fixtures`, which other crates turn on in their
//! dev-dependencies; always on for this crate's own tests): one place that spells out a whole
//! payload, so that a new field is one edit here rather than one in every crate's tests. A
//! test names only what it depends on and takes the rest from the example:
//! `SessionRequested { cluster_size: 2, ..fixtures::session_requested() }`.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::payloads::{
    ClusterMode, Owner, ResourceSlots, SessionPriority, SessionRequested, SessionType,
};

/// A small interactive session on one node (one CPU, 1 GiB, no GPU) of `berth/shell:latest`
/// in group `default`, with fresh session and owner ids and every option at its default.
pub fn session_requested() -> SessionRequested {
    SessionRequested {
        shared_mounts: Default::default(),
        session_id: Uuid::now_v7(),
        name: "test1".into(),
        owner: Owner {
            user_id: Uuid::now_v7(),
            email: "a@b.c".into(),
            project: None,
        },
        requested_by: None,
        session_type: SessionType::Interactive,
        resource_group: "default".into(),
        image: "berth/shell:latest".into(),
        environment: BTreeMap::new(),
        resources: ResourceSlots {
            cpu_milli: 1000,
            memory_bytes: 1 << 30,
            gpu_milli: 0,
        },
        shared_memory_bytes: 0,
        cluster_mode: ClusterMode::SingleNode,
        cluster_size: 1,
        agent_id: None,
        preopen_ports: Vec::new(),
        mounts: Vec::new(),
        startup_command: None,
        starts_at: None,
        batch_timeout_secs: None,
        omp_num_threads: 1,
        max_lifetime_secs: None,
        network_idle_timeout_secs: None,
        apps: Vec::new(),
        priority: SessionPriority::DEFAULT,
        pids_limit: None,
        log_limit_bytes: None,
        volumes: Default::default(),
    }
}
