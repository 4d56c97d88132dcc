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
use crate::files::{one_host, one_host_with};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

const DEFINITION: &str = include_str!("../../examples/serving/iris/model-definition.yaml");
const SERVER: &str = include_str!("../../examples/serving/iris/serve.py");

/// Requests sent at once by the steady load.
const WORKERS: usize = 4;

/// Waits up to `secs` for `probe` to give something.
pub(crate) async fn within<T, F, Fut>(secs: u64, what: &str, probe: F) -> T
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
pub(crate) async fn model_folder(h: &Harness, key: &str) {
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

pub(crate) async fn service(h: &Harness, key: &str, id: &str) -> Value {
    let (status, body) = h.get(key, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn an_endpoint_balances_its_replicas_and_replaces_a_killed_one_losing_only_what_was_in_flight(
) {
    let mut config = test_config();
    config.serve_domain = Some("models.test".into());
    let (h, (_agent, _cleanup)) = one_host_with(config).await;
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

    // The operator's serving domain: the endpoint answers at a host name of its own too, its
    // model's paths at the root; a name under the domain that is no endpoint's is 404.
    let host = made["host"].as_str().unwrap();
    assert_eq!(host, format!("{}.models.test", id.replace('-', "")));
    let by_host = |host: &str| {
        http.post(format!("{}/predict", h.base))
            .header("host", host)
            .bearer_auth(&live)
            .json(&json!({"features": [[5.1, 3.5, 1.4, 0.2]]}))
    };
    let answer = by_host(host).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let predicted: Value = answer.json().await.unwrap();
    assert_eq!(predicted["predictions"], json!(["setosa"]));
    let answer = by_host(&host.to_ascii_uppercase()).send().await.unwrap();
    assert_eq!(
        answer.status(),
        StatusCode::OK,
        "a host name's case does not matter"
    );
    let stranger = by_host("0123456789abcdef0123456789abcdef.models.test");
    assert_eq!(
        stranger.send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let unnamed = http.get(format!("{}/health", h.base)).header("host", host);
    assert_eq!(
        unnamed.send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED,
        "its token is asked for at its host as at its path"
    );

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
    let load = Load::start(&http, &url, &live, WORKERS);
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
    let before = load.answered();
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
        let new = load.answered().into_iter().any(|r| !before.contains(&r));
        (gone && s["healthy_replicas"] == 2 && new).then_some(s)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let results = load.finish().await;
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

/// A steady load: `workers` callers of an endpoint, each calling again as soon as answered,
/// every result kept.
struct Load {
    stop: Arc<AtomicBool>,
    results: Arc<Mutex<Vec<Result<String, String>>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(http: &reqwest::Client, url: &str, token: &str, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let results: Arc<Mutex<Vec<Result<String, String>>>> = Arc::default();
        let workers = (0..workers)
            .map(|_| {
                let (http, url, token) = (http.clone(), url.to_owned(), token.to_owned());
                let (stop, results) = (stop.clone(), results.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let result = predict(&http, &url, &token).await;
                        results.lock().unwrap().push(result);
                    }
                })
            })
            .collect();
        Load {
            stop,
            results,
            workers,
        }
    }

    /// The answers that came so far (replica and boot).
    fn answered(&self) -> BTreeSet<String> {
        let results = self.results.lock().unwrap();
        results.iter().filter_map(|r| r.clone().ok()).collect()
    }

    /// Stops the callers; every result.
    async fn finish(self) -> Vec<Result<String, String>> {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            worker.await.unwrap();
        }
        let results = self.results.lock().unwrap();
        results.clone()
    }
}

#[tokio::test]
async fn an_endpoint_updates_rolling_without_a_failed_call_scales_by_its_rules_and_wakes_from_zero()
{
    let (h, (_agent, _cleanup)) = one_host().await;
    let alice = h.user("alice@example.com").await;
    model_folder(&h, &alice).await;
    let (status, made) = h
        .post(
            &alice,
            "/v1/services",
            json!({"name": "iris", "model_folder": "models", "image": "berth/python:latest",
                   "resources": {"cpu": 0.25, "memory": "128m"}, "replicas": 2,
                   "open_to_public": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let url = format!("{}{}", h.base, made["url"].as_str().unwrap());
    let http = reqwest::Client::new();
    within(90, "two healthy replicas", || async {
        (service(&h, &alice, &id).await["healthy_replicas"] == 2).then_some(())
    })
    .await;
    // Public: no token needed.
    predict(&http, &url, "").await.unwrap();

    // A rolling update under load: not one call fails.
    let load = Load::start(&http, &url, "", 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, updating) = h
        .patch(
            &alice,
            &format!("/v1/services/{id}"),
            json!({"resources": {"cpu": 0.3, "memory": "128m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updating}");
    assert_eq!(updating["revision"], 1);
    assert_eq!(updating["status"], "updating");
    within(90, "the new revision alone serving", || async {
        let s = service(&h, &alice, &id).await;
        let routes = s["routes"].as_array().unwrap().clone();
        (s["healthy_replicas"] == 2
            && routes.len() == 2
            && routes.iter().all(|r| r["revision"] == 1))
        .then_some(())
    })
    .await;
    let results = load.finish().await;
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    eprintln!(
        "rolling update: {} calls, {} failed",
        results.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert!(results.len() > 20, "{}", results.len());

    // Autoscaling: quiet, down to 1; from 1 up to 3 under load, back to 1 once quiet, each
    // step with its figures. The update's calls leave the rate's window first.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rules = |min: u32| {
        json!({"min_replicas": min, "max_replicas": 3, "rules": [
            {"metric": "requests_per_second", "comparator": "gt", "threshold": 5.0,
             "step": 1, "cooldown_secs": 2},
            {"metric": "requests_per_second", "comparator": "lt", "threshold": 1.0,
             "step": -1, "cooldown_secs": 3}]})
    };
    let (status, set) = h
        .put(&alice, &format!("/v1/services/{id}/autoscaling"), rules(1))
        .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    let (status, refused) = h
        .put(
            &alice,
            &format!("/v1/services/{id}/autoscaling"),
            json!({"min_replicas": 3, "max_replicas": 1, "rules": []}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["error"]["field"], "min_replicas");
    within(60, "one replica once quiet", || async {
        let s = service(&h, &alice, &id).await;
        (s["replicas"] == 1 && s["routes"].as_array().unwrap().len() == 1).then_some(())
    })
    .await;
    let load = Load::start(&http, &url, "", 4);
    within(120, "three replicas serving under load", || async {
        (service(&h, &alice, &id).await["healthy_replicas"] == 3).then_some(())
    })
    .await;
    assert!(load.finish().await.iter().all(|r| r.is_ok()));
    let quiet = within(120, "back to one replica once quiet", || async {
        let s = service(&h, &alice, &id).await;
        (s["replicas"] == 1 && s["routes"].as_array().unwrap().len() == 1).then_some(s)
    })
    .await;
    let steps: Vec<(u64, u64)> = quiet["scaling_history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["reason"].as_str().unwrap().starts_with("rule "))
        .map(|s| {
            (
                s["previous"].as_u64().unwrap(),
                s["replicas"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![(2, 1), (1, 2), (2, 3), (3, 2), (2, 1)],
        "{quiet:#}"
    );
    let rule_steps: Vec<&Value> = quiet["scaling_history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["reason"].as_str().unwrap().starts_with("rule "))
        .collect();
    for step in &rule_steps {
        assert!(step["figures"]["requests_per_second"].is_number(), "{step}");
        assert!(step["figures"]["healthy_replicas"].as_f64().unwrap() >= 1.0);
    }
    // The replicas' CPU use, sampled by the agent every second, is among the figures.
    assert!(
        rule_steps
            .iter()
            .any(|s| s["figures"]["cpu_utilization"].is_number()),
        "{quiet:#}"
    );

    // Scaled to zero when quiet; a cold call wakes it and is answered once a replica serves.
    let (status, _) = h
        .put(&alice, &format!("/v1/services/{id}/autoscaling"), rules(0))
        .await;
    assert_eq!(status, StatusCode::OK);
    within(60, "scaled to zero", || async {
        let s = service(&h, &alice, &id).await;
        (s["replicas"] == 0 && s["routes"].as_array().unwrap().is_empty()).then_some(())
    })
    .await;
    let answered = predict(&http, &url, "").await;
    assert!(answered.is_ok(), "the cold call: {answered:?}");
    let woken = service(&h, &alice, &id).await;
    let last = woken["scaling_history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["previous"], 0, "{woken:#}");
    assert_eq!(last["replicas"], 1);
    assert!(last["reason"].as_str().unwrap().contains("scaled to zero"));
}
