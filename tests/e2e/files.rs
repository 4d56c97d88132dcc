//! A folder's files over the API, where the gateway's host holds them (a one-host install:
//! the agent's data directory is the gateway's `host-local`): a file uploaded is what a session
//! reads, a file a session writes is downloaded whole and by range, directories made, listed
//! and removed; `..`, absolute paths and a link a session planted to outside the folder are
//! refused, and another user reaches nothing.

use crate::apps::Cleanup;
use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, logs, run_as, start_agent_on, AgentSetup};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_folders_files_go_in_and_out_through_the_api_and_never_outside_it() {
    let dir = data_dir();
    let mut config = test_config();
    config.agent_data_dir = dir.clone();
    let h = start_with(config).await;
    let id = fresh_agent_id();
    let _cleanup = Cleanup(id.clone());
    let docker = agent::docker::connect().await.unwrap();
    let _agent = start_agent_on(&h, &id, &dir, docker, AgentSetup::cpu(2_000))
        .await
        .unwrap();
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
