//! Sessions across hosts, on two Docker engines each on a host of its own (a network
//! namespace with its own engine, bridge and address, made by `infra/host.sh`), joined in one
//! swarm: a multi-node cluster with a kernel on each engine runs over an overlay network the
//! main kernel's agent makes, its kernels reach each other by host name through the hosts'
//! network alone and see the cluster's environment; the network outlives its agent's SIGKILL
//! and restart, and goes with the session. A session committed on one host runs on the
//! other, its image pulled from the stack's registry; an image of a registry no agent holds a
//! credential for runs once an admin stores one, which never enters the log. A folder on a
//! shared volume (one
//! directory both engines bind-mount, standing in for an NFS export both hosts mount) is the
//! same on both hosts, and places its sessions where its volume is mounted.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent::docker::registry::Registry;

use crate::apps::Cleanup;
use crate::common::*;
use crate::containers::{
    data_dir, depart, fresh_agent_id, kill, logs, run_as, start_agent_on, AgentSetup, DockerAgent,
};
use reqwest::StatusCode;
use serde_json::json;

/// Hosts 2 and 3 of `infra/host.sh`, their engines in one swarm, each with the shell image:
/// their engines' sockets, or `None` where this machine cannot make them (a failure under CI).
fn two_hosts_in_a_swarm() -> Option<[PathBuf; 2]> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/host.sh");
    let made = Command::new(&script)
        .args(["swarm", "2", "3"])
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        berth_tests::missing_prerequisite(
            "`infra/host.sh swarm 2 3` failed (it needs root, iproute2, util-linux's nsenter and dockerd)",
        );
        return None;
    }
    let socket = |n: &str| {
        let loaded = Command::new(&script)
            .args(["load", n, "berth/shell:latest"])
            .status()
            .unwrap();
        assert!(loaded.success(), "host {n} has the shell image");
        let env = Command::new(&script).args(["env", n]).output().unwrap();
        let env = String::from_utf8(env.stdout).unwrap();
        let socket = env
            .split_whitespace()
            .find_map(|word| word.strip_prefix("DOCKER_HOST=unix://"))
            .unwrap_or_else(|| panic!("host {n}'s engine: {env}"));
        PathBuf::from(socket)
    };
    Some([socket("2"), socket("3")])
}

async fn engine(socket: &Path) -> bollard::Docker {
    bollard::Docker::connect_with_unix(socket.to_str().unwrap(), 120, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .expect("the host's engine answers")
}

/// What `docker <args>` prints against the engine at `socket`, and whether it succeeded.
fn docker_on(socket: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("docker")
        .arg("-H")
        .arg(format!("unix://{}", socket.display()))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The agent `id` on the engine at `socket`, with room for one kernel of a core.
async fn agent_on(h: &Harness, id: &str, dir: &Path, socket: &Path) -> DockerAgent {
    start_agent_on(h, id, dir, engine(socket).await, AgentSetup::cpu(1_000))
        .await
        .expect("the agent starts")
}

/// Sends `word` from kernel `main` (on the engine at `from`) to port 7000 of the host name
/// `sub1`, where kernel `sub` (on the engine at `to`) echoes it back.
async fn echo_across(from: &Path, main: &str, to: &Path, sub: &str, word: &str) {
    let (listening, _) = docker_on(to, &["exec", "-d", sub, "sh", "-c", "nc -l -p 7000 -e cat"]);
    assert!(listening, "a listener in {sub}");
    let line = format!("echo {word} | nc -w 3 sub1 7000");
    let echoed = wait_for(|| async {
        let (_, out) = docker_on(from, &["exec", main, "sh", "-c", &line]);
        (out.trim() == word).then_some(out)
    })
    .await;
    assert_eq!(echoed.trim(), word);
}

#[tokio::test]
async fn a_cluster_spans_two_engines_over_an_overlay_that_outlives_its_agents_restart_and_goes_with_the_session(
) {
    let Some(sockets) = two_hosts_in_a_swarm() else {
        return;
    };
    let h = start().await;
    let ids = [fresh_agent_id(), fresh_agent_id()];
    let dirs = [data_dir(), data_dir()];
    let _cleanup = (Cleanup(ids[0].clone()), Cleanup(ids[1].clone()));
    // Each agent has room for one kernel: the cluster takes both engines.
    let mut agents = [
        Some(agent_on(&h, &ids[0], &dirs[0], &sockets[0]).await),
        Some(agent_on(&h, &ids[1], &dirs[1], &sockets[1]).await),
    ];

    let (status, created) = h
        .create(
            &h.admin_key,
            json!({"image": "berth/shell:latest", "cluster_mode": "multi-node",
                   "cluster_size": 2, "startup_command": "sleep 600",
                   "resources": {"cpu": 1, "memory": "256m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids_of(&created);
    let detail = h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    let placed: Vec<&str> = detail["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["agent_id"].as_str().unwrap())
        .collect();
    let main_at = ids.iter().position(|a| a == placed[0]).unwrap();
    assert_eq!(
        placed[1],
        ids[1 - main_at],
        "one kernel on each engine: {detail}"
    );
    let (main_socket, sub_socket) = (&sockets[main_at], &sockets[1 - main_at]);
    let simple = uuid::Uuid::parse_str(&id).unwrap().simple().to_string();
    let (main, sub) = (format!("berth-{simple}-0"), format!("berth-{simple}-1"));
    let network = format!("berth-{simple}");

    // The overlay the main kernel's engine made, which the other's kernel joined.
    let (_, driver) = docker_on(
        main_socket,
        &[
            "network",
            "inspect",
            "-f",
            "{{.Driver}} {{.Scope}}",
            &network,
        ],
    );
    assert_eq!(driver.trim(), "overlay swarm");

    // Each kernel is told its place in the cluster.
    let (_, main_env) = docker_on(main_socket, &["exec", &main, "env"]);
    let (_, sub_env) = docker_on(sub_socket, &["exec", &sub, "env"]);
    for (env, wanted) in [
        (&main_env, "BACKENDAI_CLUSTER_HOSTS=main1,sub1"),
        (&main_env, "BACKENDAI_CLUSTER_ROLE=main"),
        (&main_env, "BERTH_CLUSTER_HOST=main1"),
        (&main_env, "MASTER_ADDR=main1"),
        (&sub_env, "BACKENDAI_CLUSTER_SIZE=2"),
        (&sub_env, "BACKENDAI_CLUSTER_HOST=sub1"),
        (&sub_env, "BACKENDAI_CLUSTER_ROLE=sub"),
        (&sub_env, "WORLD_RANK=1"),
    ] {
        assert!(env.lines().any(|l| l == wanted), "{wanted} in {env}");
    }
    // The main kernel reaches the other engine's by host name.
    echo_across(main_socket, &main, sub_socket, &sub, "before").await;

    // The main kernel's agent dies (SIGKILL) and starts again: it adopts the session, whose
    // network and kernels are as they were.
    kill(agents[main_at].take().unwrap()).await;
    agents[main_at] = Some(agent_on(&h, &ids[main_at], &dirs[main_at], main_socket).await);
    let (status, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["status"], "RUNNING", "{detail}");
    echo_across(main_socket, &main, sub_socket, &sub, "after").await;

    // Ended, the session leaves no kernel and no network on either engine.
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    for socket in &sockets {
        wait_for(|| async {
            let (exists, _) = docker_on(socket, &["network", "inspect", &network]);
            let (_, containers) = docker_on(
                socket,
                &[
                    "ps",
                    "-aq",
                    "--filter",
                    &format!("label=ai.berth.session={id}"),
                ],
            );
            (!exists && containers.trim().is_empty()).then_some(())
        })
        .await;
    }
}

fn ids_of(created: &serde_json::Value) -> String {
    ids(created).remove(0)
}

/// The stack's registry (`infra/services.sh up` starts it and its `env` names it), or `None`
/// where it is not running (a failure under CI).
fn stack_registry() -> Option<Registry> {
    let (Ok(address), Ok(file)) = (
        std::env::var("BERTH_REGISTRY"),
        std::env::var("BERTH_REGISTRY_CREDENTIAL"),
    ) else {
        berth_tests::missing_prerequisite(
            "the stack's registry: BERTH_REGISTRY and BERTH_REGISTRY_CREDENTIAL (infra/services.sh up starts it, its env names it)",
        );
        return None;
    };
    let credential = std::fs::read_to_string(file).expect("the registry's credential");
    Some(Registry::with_credential(address, &credential).expect("user:password"))
}

#[tokio::test]
async fn a_session_committed_on_one_host_runs_on_another_pulled_from_the_stacks_registry() {
    let Some(sockets) = two_hosts_in_a_swarm() else {
        return;
    };
    let Some(registry) = stack_registry() else {
        return;
    };
    let h = start().await;
    let alice = h.user("alice@example.com").await;
    let (first, second) = (fresh_agent_id(), fresh_agent_id());
    let _cleanup = (Cleanup(first.clone()), Cleanup(second.clone()));
    // Each host has room for one session of a core.
    let setup = || AgentSetup {
        registry: Some(registry.clone()),
        ..AgentSetup::cpu(1_000)
    };
    let _on_first = start_agent_on(&h, &first, &data_dir(), engine(&sockets[0]).await, setup())
        .await
        .unwrap();

    // On host 2, a session writes a file into its image and is committed.
    let writes =
        "mkdir -p /opt/kept && echo made-on-host-2 > /opt/kept/file && echo ready && sleep 600";
    let (status, created) = h
        .create(
            &alice,
            json!({"image": "berth/shell:latest", "startup_command": writes,
                   "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids_of(&created);
    h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    wait_for(|| async { logs(&h, &id).await.contains("ready").then_some(()) }).await;
    let (status, started) = h
        .post(
            &alice,
            &format!("/v1/sessions/{id}/commit"),
            json!({"name": "carried"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let image = started["image"].as_str().unwrap().to_owned();
    // Pushed: the catalogue says it runs on every agent.
    let listed = wait_for(|| async {
        let (_, listed) = h.get(&alice, "/v1/images").await;
        (listed["items"][0]["runs_on"] == "everywhere").then_some(listed)
    })
    .await;
    assert_eq!(listed["items"][0]["image"], image.as_str(), "{listed}");

    // Host 3's agent never had it; with host 2 full, a session of it goes there, which
    // pulls it from the registry under its own name.
    let _on_second = start_agent_on(&h, &second, &data_dir(), engine(&sockets[1]).await, setup())
        .await
        .unwrap();
    let (present, _) = docker_on(&sockets[1], &["image", "inspect", &image]);
    assert!(!present, "host 3 lacks the image before");
    let (status, created) = h
        .create(
            &alice,
            json!({"type": "batch", "image": image, "startup_command": "cat /opt/kept/file",
                   "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let next = ids_of(&created);
    let ended = h
        .wait_session_within(&next, std::time::Duration::from_secs(60), |s| {
            s["status"] == "TERMINATED"
        })
        .await;
    assert_eq!(ended["kernels"][0]["agent_id"], second.as_str(), "{ended}");
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let output = logs(&h, &next).await;
    assert!(output.contains("made-on-host-2"), "{output}");
    let (present, _) = docker_on(&sockets[1], &["image", "inspect", &image]);
    assert!(present, "host 3 holds it under its own name");

    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

/// Pushes the shell image to the stack's registry as `<registry>/private/shell:<tag>` from
/// this host's engine (then forgets that name here, so a session of it must pull it): the
/// reference pushed.
async fn pushed_privately(registry: &Registry) -> String {
    use bollard::image::{PushImageOptions, RemoveImageOptions, TagImageOptions};
    use futures::StreamExt;
    let docker = agent::docker::connect().await.unwrap();
    let repository = format!("{}/private/shell", registry.address);
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let options = TagImageOptions {
        repo: repository.clone(),
        tag: tag.clone(),
    };
    docker
        .tag_image("berth/shell:latest", Some(options))
        .await
        .unwrap();
    let options = PushImageOptions { tag: tag.clone() };
    let mut pushing = docker.push_image(&repository, Some(options), registry.credentials());
    while let Some(step) = pushing.next().await {
        assert!(step.unwrap().error.is_none(), "the push");
    }
    let reference = format!("{repository}:{tag}");
    let options = RemoveImageOptions {
        noprune: true,
        ..Default::default()
    };
    docker
        .remove_image(&reference, Some(options), None)
        .await
        .unwrap();
    reference
}

#[tokio::test]
async fn an_image_of_a_private_registry_runs_with_the_credential_an_admin_stored_outside_the_log() {
    let Some(registry) = stack_registry() else {
        return;
    };
    let login =
        std::fs::read_to_string(std::env::var("BERTH_REGISTRY_CREDENTIAL").unwrap()).unwrap();
    let (username, password) = login.trim_end().split_once(':').unwrap();
    let image = pushed_privately(&registry).await;
    let h = start().await;
    let alice = h.user("alice@example.com").await;
    let id = fresh_agent_id();
    let _cleanup = Cleanup(id.clone());
    // An agent given no registry: what it pulls, it pulls with what the control plane hands it.
    let _agent = start_agent_on(
        &h,
        &id,
        &data_dir(),
        agent::docker::connect().await.unwrap(),
        AgentSetup::cpu(1_000),
    )
    .await
    .unwrap();
    let batch = json!({"type": "batch", "image": image, "startup_command": "echo pulled-privately",
                       "resources": {"cpu": 1, "memory": "128m"}});
    let (status, refused) = h.create(&alice, batch.clone()).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "no credential yet: {refused}"
    );
    assert_eq!(refused["error"]["field"], "image", "{refused}");

    let path = format!("/v1/admin/registries/{}", registry.address);
    let (status, answer) = h
        .put(
            &alice,
            &path,
            json!({"username": username, "password": password}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "superadmins only: {answer}");
    // A wrong password is stored as given: the pull fails, saying why.
    let (status, answer) = h
        .put(
            &h.admin_key,
            &path,
            json!({"username": username, "password": "not-it"}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let failed = run_as(&h, &alice, batch.clone()).await;
    assert_eq!(failed["status"], "ERROR", "{failed}");
    assert!(
        failed["status_reason"].to_string().contains("pulling"),
        "{failed}"
    );
    // The right one: the image is pulled with it and runs.
    let (status, answer) = h
        .put(
            &h.admin_key,
            &path,
            json!({"username": username, "password": password}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let ran = run_as(&h, &alice, batch.clone()).await;
    assert_eq!(
        (&ran["status"], &ran["exit_code"]),
        (&json!("TERMINATED"), &json!(0)),
        "{ran}"
    );
    let output = logs(&h, ran["session_id"].as_str().unwrap()).await;
    assert!(output.contains("pulled-privately"), "{output}");

    // Listed with its user, never its password; no event holds the password.
    let (status, listed) = h.get(&h.admin_key, "/v1/admin/registries").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        listed["registries"][0]["registry"],
        registry.address.as_str()
    );
    assert_eq!(listed["registries"][0]["username"], username);
    assert!(!listed.to_string().contains(password), "{listed}");
    let client = h.pool.get().await.unwrap();
    let payloads: Vec<String> = client
        .query("SELECT payload::text FROM events", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        payloads.iter().any(|p| p.contains("\"username\"")),
        "the event is there"
    );
    for payload in &payloads {
        assert!(
            !payload.contains(password),
            "the password in the log: {payload}"
        );
    }

    // Removed: its images are offered no more; removing it again names what is missing.
    let (status, _) = h.delete(&h.admin_key, &path).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, refused) = h.create(&alice, batch).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    let (status, missing) = h.delete(&h.admin_key, &path).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["error"]["field"], "registry", "{missing}");
}

/// Runs the batch `command` as `key` (mounting `mounts`, on agent `agent` when given) to its
/// end: the session's detail and output.
async fn batch_to_its_end(
    h: &Harness,
    key: &str,
    agent: Option<&str>,
    mounts: &[&str],
    command: &str,
) -> (serde_json::Value, String) {
    let mut body = json!({"type": "batch", "image": "berth/shell:latest", "mounts": mounts,
                          "startup_command": command,
                          "resources": {"cpu": 1, "memory": "128m"}});
    if let Some(agent) = agent {
        body["agent"] = json!(agent);
    }
    let ended = run_as(h, key, body).await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let output = logs(h, ended["session_id"].as_str().unwrap()).await;
    (ended, output)
}

#[tokio::test]
async fn a_folder_on_a_shared_volume_is_the_same_on_every_host_and_places_its_sessions() {
    let Some(sockets) = two_hosts_in_a_swarm() else {
        return;
    };
    let h = start().await;
    let alice = h.user("alice@example.com").await;
    // The shared file system: volumes `shared` (both hosts) and `only3` (host 3 alone).
    let exports = data_dir();
    let mounts = |names: &[&str]| {
        names
            .iter()
            .map(|name| {
                let path = exports.join(name);
                std::fs::create_dir_all(&path).unwrap();
                (name.to_string(), path)
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (two, three) = (fresh_agent_id(), fresh_agent_id());
    let _cleanup = (Cleanup(two.clone()), Cleanup(three.clone()));
    // Host 2 is the larger: a session that may go anywhere would go there.
    let _on_two = start_agent_on(
        &h,
        &two,
        &data_dir(),
        engine(&sockets[0]).await,
        AgentSetup {
            volumes: mounts(&["shared"]),
            ..AgentSetup::cpu(4_000)
        },
    )
    .await
    .unwrap();
    let on_three = start_agent_on(
        &h,
        &three,
        &data_dir(),
        engine(&sockets[1]).await,
        AgentSetup {
            volumes: mounts(&["shared", "only3"]),
            ..AgentSetup::cpu(2_000)
        },
    )
    .await
    .unwrap();

    // Folders on volumes: one that no agent mounts is refused, naming the field.
    let (status, made) = h
        .post(
            &alice,
            "/v1/folders",
            json!({"name": "results", "volume": "shared"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["volume"], "shared");
    let (status, refused) = h
        .post(
            &alice,
            "/v1/folders",
            json!({"name": "lost", "volume": "nowhere"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(refused["error"]["field"], "volume", "{refused}");
    let (_, listed) = h.get(&alice, "/v1/folders").await;
    assert_eq!(listed["folders"][0]["volume"], "shared", "{listed}");

    // Written on host 2, read on host 3: the folder is the volume's, not a host's.
    let (ended, _) = batch_to_its_end(
        &h,
        &alice,
        Some(&two),
        &["results"],
        "echo written-on-host-2 > /home/work/results/note",
    )
    .await;
    assert_eq!(ended["kernels"][0]["agent_id"], two.as_str(), "{ended}");
    let (ended, output) = batch_to_its_end(
        &h,
        &alice,
        Some(&three),
        &["results"],
        "cat /home/work/results/note",
    )
    .await;
    assert_eq!(ended["kernels"][0]["agent_id"], three.as_str(), "{ended}");
    assert!(output.contains("written-on-host-2"), "{output}");

    // A folder on `only3`: its sessions go to host 3 alone, though host 2 has more room.
    let (status, made) = h
        .post(
            &alice,
            "/v1/folders",
            json!({"name": "big", "volume": "only3"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let (ended, _) = batch_to_its_end(&h, &alice, None, &["big"], "true").await;
    assert_eq!(ended["kernels"][0]["agent_id"], three.as_str(), "{ended}");

    // Host 3 gone: a session of it waits, its history naming the volume.
    depart(on_three).await;
    let (status, created) = h
        .create(
            &alice,
            json!({"type": "batch", "image": "berth/shell:latest", "mounts": ["big"],
                   "startup_command": "true", "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let waiting = ids_of(&created);
    let entry = wait_for(|| async {
        h.history(&waiting)
            .await
            .into_iter()
            .find(|e| e["error_code"] == "NO_VOLUME")
    })
    .await;
    let message = entry["message"].as_str().unwrap();
    assert!(message.contains("volume `only3`"), "{message}");
    let (_, detail) = h.get(&alice, &format!("/v1/sessions/{waiting}")).await;
    assert_eq!(detail["status"], "PENDING", "{detail}");
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{waiting}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}
