//! A folder's files over the API, where the gateway's host holds them (a one-host install:
//! the agent's data directory is the gateway's `host-local`): a file uploaded is what a session
//! reads, a file a session writes is downloaded whole and by range, directories made, listed
//! and removed; `..`, absolute paths and a link a session planted to outside the folder are
//! refused, and another user reaches nothing unless the folder is shared with them, then as
//! the share allows (in sessions too); a resumable upload survives a dropped connection; a
//! folder is renamed with its files and shares, moved to the trash (reached by nobody),
//! restored, and purged with its files.

use crate::apps::Cleanup;
use crate::common::*;
use crate::containers::{
    data_dir, fresh_agent_id, logs, run_as, start_agent_on, AgentSetup, DockerAgent,
};
use reqwest::StatusCode;
use serde_json::json;

/// A one-host install: a control plane whose gateway serves the data directory of the Docker
/// agent beside it (`host-local`), and that agent (removed with what it made when dropped).
pub(crate) async fn one_host() -> (Harness, (DockerAgent, Cleanup)) {
    one_host_with(test_config()).await
}

/// [`one_host`] with the gateway configured as `config` says.
pub(crate) async fn one_host_with(
    mut config: berth::config::Config,
) -> (Harness, (DockerAgent, Cleanup)) {
    let dir = data_dir();
    config.agent_data_dir = dir.clone();
    let h = start_with(config).await;
    let id = fresh_agent_id();
    let cleanup = Cleanup(id.clone());
    let docker = agent::docker::connect().await.unwrap();
    let agent = start_agent_on(&h, &id, &dir, docker, AgentSetup::cpu(2_000))
        .await
        .unwrap();
    (h, (agent, cleanup))
}

#[tokio::test]
async fn a_folders_files_go_in_and_out_through_the_api_and_never_outside_it() {
    let (h, _agent) = one_host().await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let (status, _) = h.post(&alice, "/v1/folders", json!({"name": "data"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let url = |path: &str| format!("{}/v1/folders/data/{path}", h.base);

    // In: a file uploaded (streamed), its directory made on the way.
    let upload = h
        .http
        .put(url("files?path=in/hello.txt"))
        .header("x-api-key", &alice)
        .body("hello from outside\n")
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), StatusCode::CREATED);
    let written: serde_json::Value = upload.json().await.unwrap();
    assert_eq!(written, json!({"path": "in/hello.txt", "size": 19}));
    let (status, listed) = h.get(&alice, "/v1/folders/data/files?path=in").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["entries"][0]["name"], "hello.txt");
    assert_eq!(listed["entries"][0]["kind"], "file");
    assert_eq!(listed["entries"][0]["size"], 19);

    // A session reads it, writes a file back, and plants a link to outside the folder.
    let ran = run_as(
        &h,
        &alice,
        json!({"type": "batch", "image": "berth/shell:latest", "mounts": ["data"],
               "resources": {"cpu": 1, "memory": "128m"},
               "startup_command": "cat /home/work/data/in/hello.txt && \
                 seq 1 1000 > /home/work/data/out.txt && ln -s /etc /home/work/data/escape"}),
    )
    .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let output = logs(&h, ran["session_id"].as_str().unwrap()).await;
    assert!(output.contains("hello from outside"), "{output}");

    // Out: whole, and a range of it.
    let out = h
        .http
        .get(url("download?path=out.txt"))
        .header("x-api-key", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::OK);
    assert_eq!(
        out.headers()["content-disposition"],
        "attachment; filename=\"out.txt\""
    );
    let expected: String = (1..=1000).map(|n| format!("{n}\n")).collect();
    assert_eq!(out.text().await.unwrap(), expected);
    let part = h
        .http
        .get(url("download?path=out.txt"))
        .header("x-api-key", &alice)
        .header("range", "bytes=0-5")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.text().await.unwrap(), "1\n2\n3\n");

    // The link is shown for what it is and never followed; `..` and absolute paths refused.
    let (_, top) = h.get(&alice, "/v1/folders/data/files").await;
    let escape = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "escape")
        .expect("the link is listed")
        .clone();
    assert_eq!(escape["kind"], "link", "{top}");
    for path in [
        "escape/passwd",
        "../../../etc/passwd",
        "/etc/passwd",
        "in/../../x",
    ] {
        let refused = h
            .http
            .get(url(&format!("download?path={path}")))
            .header("x-api-key", &alice)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["field"], "path", "{path}: {body}");
    }
    let planted = h
        .http
        .put(url("files?path=escape/planted"))
        .header("x-api-key", &alice)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(planted.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(!std::path::Path::new("/etc/planted").exists());

    // Another user reaches nothing of it.
    let (status, hidden) = h.get(&bob, "/v1/folders/data/files").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{hidden}");
    assert_eq!(hidden["error"]["field"], "name");
    let theirs = h
        .http
        .get(url("download?path=out.txt"))
        .header("x-api-key", &bob)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND);

    // Directories made and removed; the link removed alone, /etc untouched.
    let (status, _) = h
        .post(
            &alice,
            "/v1/folders/data/directories",
            json!({"path": "a/b"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, again) = h
        .post(
            &alice,
            "/v1/folders/data/directories",
            json!({"path": "a/b"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    for path in ["a", "escape", "in"] {
        let (status, _) = h
            .delete(&alice, &format!("/v1/folders/data/files?path={path}"))
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}");
    }
    assert!(std::path::Path::new("/etc/passwd").exists());
    let (_, left) = h.get(&alice, "/v1/folders/data/files").await;
    let names: Vec<&str> = left["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["out.txt"], "{left}");
}

/// Sharing: a folder shared read-only is listed, read and mounted by its grantee, who cannot
/// change it (the API answers 403 and a write inside the session fails); a project's share
/// lets its members write; a share taken back leaves nothing reachable; shares with oneself,
/// nobody or from a folder one does not own are refused.
#[tokio::test]
async fn a_shared_folder_is_reached_as_its_share_allows_on_the_api_and_in_sessions() {
    let (h, _agent) = one_host().await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let carol = h.user("carol@example.com").await;
    let (status, _) = h.post(&alice, "/v1/folders", json!({"name": "set"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let put = |key: &str, path: &str, body: &'static str| {
        h.http
            .put(format!("{}/v1/folders/set/files?path={path}", h.base))
            .header("x-api-key", key)
            .body(body)
            .send()
    };
    assert_eq!(
        put(&alice, "in.txt", "shared bytes\n")
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    let (status, _) = h.get(&bob, "/v1/folders/set/files").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not shared yet");

    // Read-only with bob.
    let (status, share) = h
        .put(
            &alice,
            "/v1/folders/set/shares/users/bob@example.com",
            json!({"permission": "ro"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{share}");
    assert_eq!(
        share,
        json!({"kind": "user", "with": "bob@example.com", "permission": "ro"})
    );
    let (_, mine) = h.get(&alice, "/v1/folders").await;
    assert_eq!(mine["folders"][0]["shares"], json!([share]));
    let (_, bobs) = h.get(&bob, "/v1/folders").await;
    assert_eq!(bobs["folders"][0]["name"], "set");
    assert_eq!(bobs["folders"][0]["owner"], "alice@example.com");
    assert_eq!(bobs["folders"][0]["permission"], "ro");
    assert_eq!(bobs["folders"][0]["shares"], json!([]), "{bobs}");
    let read = h
        .http
        .get(format!("{}/v1/folders/set/download?path=in.txt", h.base))
        .header("x-api-key", &bob)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(read.text().await.unwrap(), "shared bytes\n");
    let refused = put(&bob, "bobs.txt", "no").await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let refused: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "read_only", "{refused}");
    // A large upload refused before its body is read still gets its answer, not a
    // connection cut while its bytes are being sent (what a refusal that never read them did).
    let refused = h
        .http
        .put(format!("{}/v1/folders/set/files?path=big.bin", h.base))
        .header("x-api-key", &bob)
        .body(streamed_body(64, 64 * 1024, b'x'))
        .send()
        .await
        .expect("the refusal of a 4 MiB upload reaches the client");
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let refused: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "read_only", "{refused}");
    let (status, _) = h.delete(&bob, "/v1/folders/set/files?path=in.txt").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Mounted read-only in bob's session: it reads, and its write fails inside.
    let ran = run_as(
        &h,
        &bob,
        json!({"type": "batch", "image": "berth/shell:latest", "mounts": ["set"],
               "resources": {"cpu": 1, "memory": "128m"},
               "startup_command": "cat /home/work/set/in.txt; echo bob > /home/work/set/bob.txt"}),
    )
    .await;
    let output = logs(&h, ran["session_id"].as_str().unwrap()).await;
    assert_ne!(ran["exit_code"], 0, "{ran} {output}");
    assert!(output.contains("shared bytes"), "{output}");
    assert!(output.contains("Read-only file system"), "{output}");

    // Read-write with a project: its member carol writes; bob, outside it, still cannot.
    for (path, body) in [
        ("/v1/admin/projects", json!({"name": "ml"})),
        (
            "/v1/admin/projects/ml/members",
            json!({"email": "carol@example.com"}),
        ),
    ] {
        let (status, answer) = h.post(&h.admin_key, path, body).await;
        assert!(status.is_success(), "{answer}");
    }
    let (status, _) = h
        .put(
            &alice,
            "/v1/folders/set/shares/projects/ml",
            json!({"permission": "rw"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        put(&carol, "carol.txt", "from carol\n")
            .await
            .unwrap()
            .status(),
        StatusCode::CREATED
    );
    assert_eq!(
        put(&bob, "bobs.txt", "no").await.unwrap().status(),
        StatusCode::FORBIDDEN
    );

    // Taken back: bob reaches nothing; carol's share stays.
    let (status, _) = h
        .delete(&alice, "/v1/folders/set/shares/users/bob@example.com")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = h.get(&bob, "/v1/folders/set/files").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, bobs) = h.get(&bob, "/v1/folders").await;
    assert_eq!(bobs["folders"], json!([]));
    let (status, listed) = h.get(&carol, "/v1/folders/set/files").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["total"], 2, "{listed}");

    // Refused: oneself (409), nobody (404), a folder one does not own (404, even shared).
    let ro = json!({"permission": "ro"});
    for (key, path, expected) in [
        (
            &alice,
            "/v1/folders/set/shares/users/alice@example.com",
            StatusCode::CONFLICT,
        ),
        (
            &alice,
            "/v1/folders/set/shares/users/nobody@example.com",
            StatusCode::NOT_FOUND,
        ),
        (
            &carol,
            "/v1/folders/set/shares/users/bob@example.com",
            StatusCode::NOT_FOUND,
        ),
        (
            &alice,
            "/v1/folders/set/shares/projects/nope",
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (status, answer) = h.put(key, path, ro.clone()).await;
        assert_eq!(status, expected, "{path}: {answer}");
    }
    let (status, answer) = h
        .put(
            &alice,
            "/v1/folders/set/shares/users/bob@example.com",
            json!({"permission": "all"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "permission", "{answer}");
}

/// A folder's life over the API, its files on disk with it: renamed (files and shares follow,
/// a taken name refused), an entry moved inside it, moved to the trash (its owner lists it
/// there, nobody reaches its files, the share's user no longer sees it, and it cannot be
/// renamed), restored as it was, and purged (not before the trash) with its directory; the
/// ledger folded again from the log is the same.
#[tokio::test]
async fn a_folder_is_renamed_trashed_restored_and_purged_with_its_files_and_shares() {
    let dir = data_dir();
    let mut config = test_config();
    config.agent_data_dir = dir.clone();
    let h = start_with(config).await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let (status, made) = h
        .post(
            &alice,
            "/v1/folders",
            json!({"name": "models", "usage_mode": "model"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let (status, _) = h
        .post(&alice, "/v1/folders", json!({"name": "other"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, bad) = h
        .post(
            &alice,
            "/v1/folders",
            json!({"name": "x", "usage_mode": "weights"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert_eq!(bad["error"]["field"], "usage_mode", "{bad}");
    let put = h
        .http
        .put(format!(
            "{}/v1/folders/models/files?path=a/weights.bin",
            h.base
        ))
        .header("x-api-key", &alice)
        .body("0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let (status, _) = h
        .put(
            &alice,
            "/v1/folders/models/shares/users/bob@example.com",
            json!({"permission": "ro"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let hr = &h;
    let rename = |key: &str, from: &str, to: &str| {
        let (key, path, body) = (
            key.to_owned(),
            format!("/v1/folders/{from}"),
            json!({ "name": to }),
        );
        async move {
            hr.call(&key, reqwest::Method::PATCH, &path, Some(body))
                .await
        }
    };
    let mine = |key: String| async move {
        let (status, listed) = hr.get(&key, "/v1/folders").await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        listed["folders"].as_array().unwrap().clone()
    };

    // Renamed: the files and the share follow; the old name is gone, a taken one refused.
    let (status, taken) = rename(&alice, "models", "other").await;
    assert_eq!(status, StatusCode::CONFLICT, "{taken}");
    assert_eq!(taken["error"]["field"], "to", "{taken}");
    let (status, _) = rename(&bob, "models", "mine-now").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "only the owner renames");
    let (status, answer) = rename(&alice, "models", "zoo").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let folders = mine(alice.clone()).await;
    let zoo = folders
        .iter()
        .find(|f| f["name"] == "zoo")
        .expect("renamed");
    assert_eq!(zoo["usage_mode"], "model");
    assert_eq!(zoo["trashed_at"], serde_json::Value::Null);
    assert_eq!(zoo["shares"][0]["with"], "bob@example.com", "{zoo}");
    assert!(!folders.iter().any(|f| f["name"] == "models"));
    let (status, listed) = h.get(&alice, "/v1/folders/zoo/files?path=a").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["entries"][0]["name"], "weights.bin");
    let (status, _) = h.get(&bob, "/v1/folders/zoo/files?path=a").await;
    assert_eq!(status, StatusCode::OK, "the share followed the rename");

    // An entry moved inside it; into itself, over another or out of it: refused.
    let (status, answer) = h
        .post(
            &alice,
            "/v1/folders/zoo/moves",
            json!({"from": "a/weights.bin", "to": "b/w.bin"}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let (status, listed) = h.get(&alice, "/v1/folders/zoo/files?path=b").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["entries"][0]["name"], "w.bin");
    assert_eq!(listed["entries"][0]["size"], 10);
    // A directory downloads as a tar archive of it, made as it streams.
    let tar = h
        .http
        .get(format!("{}/v1/folders/zoo/download?path=b", h.base))
        .header("x-api-key", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(tar.status(), StatusCode::OK);
    assert_eq!(tar.headers()["content-type"], "application/x-tar");
    let tar = tar.bytes().await.unwrap();
    let mut archive = tar::Archive::new(&tar[..]);
    let names: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["b/", "b/w.bin"]);
    let (status, answer) = h
        .post(
            &alice,
            "/v1/folders/zoo/moves",
            json!({"from": "b", "to": "b/c"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let (status, answer) = h
        .post(
            &alice,
            "/v1/folders/zoo/moves",
            json!({"from": "b", "to": "../b"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "to", "{answer}");
    let (status, _) = h
        .post(
            &bob,
            "/v1/folders/zoo/moves",
            json!({"from": "b", "to": "c"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a read-only share moves nothing"
    );

    // To the trash: listed to its owner there, reached by nobody.
    let (status, answer) = h.delete(&bob, "/v1/folders/zoo").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "only the owner trashes: {answer}"
    );
    let (status, answer) = h.post(&alice, "/v1/folders/zoo/purge", json!({})).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a purge takes the trash first: {answer}"
    );
    let (status, _) = h.delete(&alice, "/v1/folders/zoo").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let folders = mine(alice.clone()).await;
    let zoo = folders.iter().find(|f| f["name"] == "zoo").expect("listed");
    assert!(zoo["trashed_at"].is_string(), "{zoo}");
    let (status, trashed) = h.get(&alice, "/v1/folders/zoo/files").await;
    assert_eq!(status, StatusCode::CONFLICT, "{trashed}");
    assert_eq!(trashed["error"]["code"], "folder_trashed", "{trashed}");
    assert!(!mine(bob.clone()).await.iter().any(|f| f["name"] == "zoo"));
    let (status, _) = h.get(&bob, "/v1/folders/zoo/files").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = rename(&alice, "zoo", "zoo2").await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a folder in the trash is not renamed"
    );

    // Restored as it was.
    let (status, _) = h.post(&alice, "/v1/folders/zoo/restore", json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, listed) = h.get(&bob, "/v1/folders/zoo/files?path=b").await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["entries"][0]["name"], "w.bin");

    // Cloned, by its owner and by the user it is shared with (read-only is enough to copy):
    // each clone theirs, with the files, its usage mode kept.
    for (key, clone) in [(&alice, "zoo-copy"), (&bob, "bobs-zoo")] {
        let (status, made) = h
            .post(key, "/v1/folders/zoo/clone", json!({ "name": clone }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let (status, listed) = h
            .get(key, &format!("/v1/folders/{clone}/files?path=b"))
            .await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        assert_eq!(listed["entries"][0]["name"], "w.bin");
    }
    let cloned = mine(bob.clone()).await;
    let bobs = cloned.iter().find(|f| f["name"] == "bobs-zoo").unwrap();
    assert_eq!(bobs["permission"], "owner");
    assert_eq!(bobs["usage_mode"], "model");
    let (status, _) = h
        .post(&alice, "/v1/folders/zoo/clone", json!({"name": "other"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "a name taken is refused");

    // Purged: its directory and its share go with it.
    let on_disk = || {
        std::fs::read_dir(dir.join("folders"))
            .unwrap()
            .any(|owner| owner.unwrap().path().join("zoo").exists())
    };
    assert!(on_disk());
    let (status, _) = h.delete(&alice, "/v1/folders/zoo").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = h.post(&alice, "/v1/folders/zoo/purge", json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(!on_disk(), "the purged folder's files are removed");
    assert!(!mine(alice.clone()).await.iter().any(|f| f["name"] == "zoo"));
    assert!(!mine(bob.clone()).await.iter().any(|f| f["name"] == "zoo"));
    let (status, _) = h.post(&alice, "/v1/folders/zoo/restore", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A resumable upload (tus): made with its length, half of it sent on a connection that drops
/// mid-body, its offset asked, the rest sent from there; the file in the folder is the same
/// bytes. A wrong offset, a wrong content type and a token nobody made are refused.
#[tokio::test]
async fn a_resumable_upload_goes_on_after_a_dropped_connection_to_the_same_bytes() {
    use tokio::io::AsyncWriteExt;
    let dir = data_dir();
    let mut config = test_config();
    config.agent_data_dir = dir.clone();
    let h = start_with(config).await;
    let alice = h.user("alice@example.com").await;
    let (status, _) = h.post(&alice, "/v1/folders", json!({"name": "big"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let bytes: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();

    let made = h
        .http
        .post(format!(
            "{}/v1/folders/big/uploads?path=sets/all.bin",
            h.base
        ))
        .header("x-api-key", &alice)
        .header("tus-resumable", "1.0.0")
        .header("upload-length", bytes.len())
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let location = made.headers()["location"].to_str().unwrap().to_owned();
    let made: serde_json::Value = made.json().await.unwrap();
    assert_eq!(made["location"], location);
    let upload = format!("{}{location}", h.base);

    // Half the body, then the connection is gone.
    let address = h.base.trim_start_matches("http://").to_owned();
    let mut raw = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "PATCH {location} HTTP/1.1\r\nHost: {address}\r\nTus-Resumable: 1.0.0\r\n\
         Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\n\
         Content-Length: {}\r\n\r\n",
        bytes.len()
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    raw.write_all(&bytes[..bytes.len() / 2]).await.unwrap();
    raw.flush().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    drop(raw);

    // As a tus client does: ask where it is, send the rest from there (again while the
    // dropped request is still being wound up).
    let mut offset = 0;
    for _ in 0..100 {
        let asked = h
            .http
            .head(&upload)
            .header("tus-resumable", "1.0.0")
            .send()
            .await
            .unwrap();
        assert_eq!(asked.status(), StatusCode::OK);
        assert_eq!(asked.headers()["upload-length"], bytes.len().to_string());
        offset = asked.headers()["upload-offset"]
            .to_str()
            .unwrap()
            .parse::<usize>()
            .unwrap();
        let sent = h
            .http
            .patch(&upload)
            .header("tus-resumable", "1.0.0")
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", offset)
            .body(bytes[offset..].to_vec())
            .send()
            .await
            .unwrap();
        if sent.status() == StatusCode::NO_CONTENT {
            assert_eq!(sent.headers()["upload-offset"], bytes.len().to_string());
            break;
        }
        assert_eq!(sent.status(), StatusCode::CONFLICT, "busy or moved on");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        offset > 0 && offset <= bytes.len() / 2,
        "the dropped request kept what arrived: {offset}"
    );
    let back = h
        .http
        .get(format!(
            "{}/v1/folders/big/download?path=sets/all.bin",
            h.base
        ))
        .header("x-api-key", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(back.status(), StatusCode::OK);
    assert!(back.bytes().await.unwrap() == bytes, "the same bytes");
    // Finished: the upload is gone.
    let gone = h.http.head(&upload).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);

    // Refusals.
    let made: serde_json::Value = h
        .http
        .post(format!("{}/v1/folders/big/uploads?path=x.bin", h.base))
        .header("x-api-key", &alice)
        .header("upload-length", "4")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let upload = format!("{}{}", h.base, made["location"].as_str().unwrap());
    let patch = |offset: &str, content_type: &str, body: &'static str| {
        h.http
            .patch(&upload)
            .header("content-type", content_type)
            .header("upload-offset", offset)
            .body(body)
            .send()
    };
    let wrong = patch("2", "application/offset+octet-stream", "ab")
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::CONFLICT);
    let wrong = patch("0", "application/octet-stream", "ab").await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let long = patch("0", "application/offset+octet-stream", "abcdef")
        .await
        .unwrap();
    assert_eq!(long.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let nobody = h
        .http
        .head(format!("{}/v1/uploads/{}", h.base, "0".repeat(32)))
        .send()
        .await
        .unwrap();
    assert_eq!(nobody.status(), StatusCode::NOT_FOUND);
    let (status, answer) = h
        .post(&alice, "/v1/folders/big/uploads?path=y.bin", json!({}))
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "no Upload-Length: {answer}"
    );
    assert_eq!(answer["error"]["field"], "upload-length", "{answer}");
}

/// A folder's quota comes from its owner's resource policy: an upload past it is refused on
/// every way in (a plain upload whether it says its length or not, a resumable one, Backend.AI's
/// through the same check) and leaves nothing, writing over a file counts the bytes it frees,
/// what a session wrote inside is measured and shown with the quota, and a folder past its
/// quota takes nothing more until the policy gives it room.
#[tokio::test]
async fn a_folders_quota_from_its_owners_policy_refuses_uploads_past_it_and_shows_its_usage() {
    let (h, _agent) = one_host().await;
    const KIB: usize = 1024;
    let policy = |quota: Option<u64>| {
        json!({"max_concurrent_sessions": 10,
               "max_total": {"cpu": 8, "memory_bytes": 8u64 << 30, "gpu": 0},
               "max_folder_bytes": quota})
    };
    let (status, answer) = h
        .put(
            &h.admin_key,
            "/v1/admin/policies/tight",
            policy(Some(64 << 10)),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/users",
            json!({"email": "carol@example.com", "resource_policy": "tight"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let carol = answer["api_key"].as_str().unwrap().to_owned();
    let (status, _) = h.post(&carol, "/v1/folders", json!({"name": "q"})).await;
    assert_eq!(status, StatusCode::CREATED);
    async fn listed(h: &Harness, key: &str) -> serde_json::Value {
        let (status, folders) = h.get(key, "/v1/folders").await;
        assert_eq!(status, StatusCode::OK, "{folders}");
        folders["folders"][0].clone()
    }
    let q = listed(&h, &carol).await;
    assert_eq!(q["quota_bytes"], 64 << 10, "{q}");

    let put = |path: &str, body: reqwest::Body| {
        h.http
            .put(format!("{}/v1/folders/q/files?path={path}", h.base))
            .header("x-api-key", &carol)
            .body(body)
            .send()
    };
    let refused = |answer: &serde_json::Value| {
        answer["error"]["code"] == "quota_exceeded" && answer["error"]["field"] == "name"
    };
    let sent = put("a.bin", vec![1u8; 40 * KIB].into()).await.unwrap();
    assert_eq!(sent.status(), StatusCode::CREATED);
    let q = listed(&h, &carol).await;
    assert_eq!(q["usage"]["agent_id"], "gateway", "measured as listed: {q}");
    assert!(q["usage"]["bytes"].as_u64().unwrap() >= 40 << 10, "{q}");
    // Its length said: refused before a byte is taken.
    let sent = put("b.bin", vec![2u8; 40 * KIB].into()).await.unwrap();
    assert_eq!(sent.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let answer: serde_json::Value = sent.json().await.unwrap();
    assert!(refused(&answer), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("40960 bytes of its 65536-byte quota"),
        "{answer}"
    );
    // Streamed with no length: cut once past the room, nothing of it kept.
    let sent = put("c.bin", streamed_body(40, KIB, 3)).await.unwrap();
    assert_eq!(sent.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (_, files) = h.get(&carol, "/v1/folders/q/files").await;
    let names: Vec<&str> = files["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.bin"], "{files}");
    // Over a.bin: the 40 KiB it frees count.
    let sent = put("a.bin", vec![4u8; 56 * KIB].into()).await.unwrap();
    assert_eq!(sent.status(), StatusCode::CREATED);
    // A resumable upload is refused when it is made.
    let made = h
        .http
        .post(format!("{}/v1/folders/q/uploads?path=t.bin", h.base))
        .header("x-api-key", &carol)
        .header("tus-resumable", "1.0.0")
        .header("upload-length", 32 * KIB)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(refused(&made.json().await.unwrap()));

    // Inside a session the quota is not the file system's (this volume has none): what it
    // writes is measured and shown past the quota, and the folder takes no more uploads.
    let ran = run_as(
        &h,
        &carol,
        json!({"type": "batch", "image": "berth/shell:latest", "mounts": ["q"],
               "resources": {"cpu": 1, "memory": "128m"},
               "startup_command": "head -c 102400 /dev/zero > /home/work/q/inside.bin"}),
    )
    .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let q = listed(&h, &carol).await;
    let used = q["usage"]["bytes"].as_u64().unwrap();
    assert!(used >= (56 + 100) << 10, "{q}");
    let sent = put("one.txt", vec![5u8; 1].into()).await.unwrap();
    assert_eq!(sent.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // The policy without a quota: room again.
    let (status, _) = h
        .put(&h.admin_key, "/v1/admin/policies/tight", policy(None))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let sent = put("one.txt", vec![5u8; 1].into()).await.unwrap();
    assert_eq!(sent.status(), StatusCode::CREATED);
    assert_eq!(
        listed(&h, &carol).await["quota_bytes"],
        serde_json::Value::Null
    );
}
