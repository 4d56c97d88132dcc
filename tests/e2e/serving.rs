//! Model serving on a real Docker agent, with the example model of `examples/serving/iris`
//! (Python's standard library in `berth/python`): an endpoint made from a folder holding a
//! model definition answers through its lasting URL, balanced over two replicas; a replica's
//! container killed under a steady load loses only the requests in flight there, and is
//! replaced and serves again; a private endpoint lets through only its owner's live tokens;
//! a streamed answer comes through chunk by chunk; a destroyed endpoint's URL answers 404 and
//! its replicas end.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use crate::files::one_host;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

const DEFINITION: &str = include_str!("../../examples/serving/iris/model-definition.yaml");
const SERVER: &str = include_str!("../../examples/serving/iris/serve.py");

/// Requests sent at once by the steady load.
const WORKERS: usize = 4;

/// Waits up to `secs` for `probe` to give something.
async fn within<T, F, Fut>(secs: u64, what: &str, probe: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Puts the example model in folder `models` of the user with `key`.
async fn model_folder(h: &Harness, key: &str) {
    let (status, body) = h.post(key, "/v1/folders", json!({"name": "models"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for (path, text) in [("model-definition.yaml", DEFINITION), ("serve.py", SERVER)] {
        let put = h
            .http
            .put(format!("{}/v1/folders/models/files?path={path}", h.base))
            .header("x-api-key", key)
            .body(text)
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), StatusCode::CREATED, "{path}");
    }
}

/// One prediction through `url` with `token`: the replica and boot that answered, or why not.
async fn predict(http: &reqwest::Client, url: &str, token: &str) -> Result<String, String> {
    let answer = http
        .post(format!("{url}predict"))
        .bearer_auth(token)
        .json(&json!({"features": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    let body: Value = answer.json().await.map_err(|e| e.to_string())?;
    if status != StatusCode::OK {
        return Err(format!("{status}: {body}"));
    }
    assert_eq!(body["predictions"], json!(["setosa", "virginica"]));
    Ok(format!("{}/{}", body["replica"], body["boot"]))
}

async fn service(h: &Harness, key: &str, id: &str) -> Value {
    let (status, body) = h.get(key, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn an_endpoint_balances_its_replicas_and_replaces_a_killed_one_losing_only_what_was_in_flight(
) {
    let (h, (_agent, _cleanup)) = one_host().await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    model_folder(&h, &alice).await;
    let body = |name: &str| {
        json!({"name": name, "model_folder": "models", "image": "berth/python:latest",
               "resources": {"cpu": 0.25, "memory": "128m"}, "replicas": 2})
    };

    // Refused by field, before anything is made.
    for (bad, field) in [
        (json!({"name": "Iris"}), "name"),
        (json!({"model_folder": "nothing"}), "model_folder"),
        (
            json!({"model_definition_path": "serve.py"}),
            "model_definition_path",
        ),
        (json!({"replicas": 17}), "replicas"),
        (json!({"resources": {"cpu": 0}}), "resources.cpu"),
    ] {
        let mut asked = body("iris");
        asked
            .as_object_mut()
            .unwrap()
            .extend(bad.as_object().unwrap().clone());
        let (status, refused) = h.post(&alice, "/v1/services", asked).await;
        assert!(status.is_client_error(), "{bad}: {status} {refused}");
        assert_eq!(refused["error"]["field"], field, "{bad}: {refused}");
    }

    let (status, made) = h.post(&alice, "/v1/services", body("iris")).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["model_name"], "iris");
    assert_eq!(made["port"], 8000);
    assert_eq!(made["open_to_public"], false);
    let url = format!("{}{}", h.base, made["url"].as_str().unwrap());
    let (status, again) = h.post(&alice, "/v1/services", body("iris")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    // Bob neither sees nor manages it.
    let (status, _) = h.get(&bob, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, listed) = h.get(&bob, "/v1/services").await;
    assert_eq!(listed["services"], json!([]));
    let (status, _) = h.delete(&bob, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Tokens: none, a wrong one and an expired one are refused; the owner's live one passes.
    let token = |expires_in: u64| {
        let h = &h;
        let alice = alice.clone();
        let id = id.clone();
        async move {
            let (status, made) = h
                .post(
                    &alice,
                    &format!("/v1/services/{id}/tokens"),
                    json!({"expires_in": expires_in}),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{made}");
            made["token"].as_str().unwrap().to_owned()
        }
    };
    let live = token(3600).await;
    let expired = token(1).await;
    let serving = within(90, "two healthy replicas", || async {
        let s = service(&h, &alice, &id).await;
        (s["healthy_replicas"] == 2).then_some(s)
    })
    .await;
    assert_eq!(serving["status"], "healthy", "{serving}");
    let http = reqwest::Client::new();
    let unauthorized = |answer: reqwest::Response| {
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
        assert!(answer.headers().contains_key("www-authenticate"));
    };
    let call = |token: Option<&str>| {
        let request = http.get(format!("{url}health"));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    unauthorized(call(None).send().await.unwrap());
    unauthorized(call(Some("bst_not-a-token")).send().await.unwrap());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    unauthorized(call(Some(&expired)).send().await.unwrap());
    assert_eq!(
        call(Some(&live)).send().await.unwrap().status(),
        StatusCode::OK
    );

    // Both replicas take turns.
    let mut answered = BTreeSet::new();
    for _ in 0..10 {
        answered.insert(predict(&http, &url, &live).await.unwrap());
    }
    assert_eq!(answered.len(), 2, "{answered:?}");

    // A streamed answer passes through as it comes: each token in its own chunk.
    let streamed = http
        .post(format!("{url}generate"))
        .bearer_auth(&live)
        .json(&json!({"prompt": "a b c d e", "tokens": 5, "delay_ms": 200}))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), StatusCode::OK);
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    let chunks: Vec<String> = streamed
        .bytes_stream()
        .map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap())
        .collect()
        .await;
    let events: Vec<&String> = chunks.iter().filter(|c| c.starts_with("data: ")).collect();
    assert_eq!(
        events.len(),
        6,
        "one chunk per token, then [DONE]: {chunks:?}"
    );
    assert!(
        chunks.iter().all(|c| c.matches("data: ").count() == 1),
        "{chunks:?}"
    );

    // A steady load; one replica's container is killed under it.
    let stop = Arc::new(AtomicBool::new(false));
    let results: Arc<Mutex<Vec<Result<String, String>>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (http, url, live) = (http.clone(), url.clone(), live.clone());
        let (stop, results) = (stop.clone(), results.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let result = predict(&http, &url, &live).await;
                results.lock().unwrap().push(result);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let victim = serving["routes"][0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let detail = h.cached_detail(&victim).await;
    let container = detail["containers"][0]["container_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before: BTreeSet<String> = results
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| r.clone().ok())
        .collect();
    let docker = agent::docker::connect().await.unwrap();
    docker
        .kill_container(
            &container,
            None::<bollard::container::KillContainerOptions<String>>,
        )
        .await
        .unwrap();

    // It is taken out, replaced, and the new replica serves once healthy.
    let replaced = within(90, "a replacement serving", || async {
        let s = service(&h, &alice, &id).await;
        let routes = s["routes"].as_array().unwrap();
        let gone = routes.iter().all(|r| r["session_id"] != victim.as_str());
        let new: BTreeSet<String> = results
            .lock()
            .unwrap()
            .iter()
            .filter_map(|r| r.clone().ok())
            .filter(|r| !before.contains(r))
            .collect();
        (gone && s["healthy_replicas"] == 2 && !new.is_empty()).then_some(s)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let results = results.lock().unwrap().clone();
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let served = results.len() - failed.len();
    eprintln!(
        "{served} requests served, {} failed (at most {WORKERS} were in flight)",
        failed.len()
    );
    assert!(
        failed.len() <= WORKERS,
        "only requests in flight on the killed replica may fail: {failed:?}"
    );
    assert!(served > 20, "{served}");

    // Its history says what happened, with the reason.
    let removed = h.count_events("EndpointReplicaRemoved").await;
    assert!(removed >= 1);
    let unhealthy_or_ended = replaced["routes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["health"] == "healthy");
    assert!(unhealthy_or_ended, "{replaced}");

    // Destroyed: the URL answers 404 and the replicas end.
    let replicas: Vec<String> = replaced["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect();
    let (status, _) = h.delete(&alice, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = h.get(&alice, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    within(30, "the URL gone", || async {
        let status = call(Some(&live)).send().await.unwrap().status();
        (status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    for replica in replicas {
        h.wait_session_within(&replica, Duration::from_secs(60), |s| {
            s["status"] == "TERMINATED"
        })
        .await;
    }
}
