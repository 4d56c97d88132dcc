//! The web console in a real headless Chromium, against the whole platform and a Docker
//! agent: signing in, a batch session launched through the launcher ("Skip to review", the
//! no-folder warning, the toast), found under Finished with its elapsed time, its detail and
//! its scheduling history filtered by result; a field error's card with nothing created;
//! a launch done by keyboard alone, every form control labelled; an interactive session's
//! terminal and Jupyter opened from the console, and refused to a browser without the
//! cookie until it signs in with an email and password (and again once it signs out); the
//! Data page making a folder, uploading by the file picker, downloading the same bytes and
//! removing. Every step that fails keeps a screenshot (`target/console-screenshots/`), and the
//! run keeps the README's pictures (`docs/console/`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::apps::Cleanup;
use crate::chrome::Browser;
use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, spawn_agent, DockerAgent};

/// The platform, a Docker agent, a user and a browser signed in as them.
struct Scene {
    h: Harness,
    user: String,
    browser: Browser,
    _agent: (DockerAgent, Cleanup),
}

async fn scene(test: &str) -> Option<Scene> {
    scene_signed_in(test, false).await
}

/// [`scene`], its browser signed in as the superadmin when `superadmin`.
async fn scene_signed_in(test: &str, superadmin: bool) -> Option<Scene> {
    let browser = crate::chrome::browser().await?;
    let mut config = test_config();
    let first = free_port_range(10);
    config.proxy_ports = Some((first, first + 9));
    let h = start_with(config).await;
    let agent_id = fresh_agent_id();
    let agent = spawn_agent(&h, &agent_id, &data_dir(), 8_000, None).await;
    let user = h.user("carol@example.com").await;
    let scene = Scene {
        browser,
        user,
        _agent: (agent, Cleanup(agent_id)),
        h,
    };
    let key = if superadmin {
        scene.h.admin_key.clone()
    } else {
        scene.user.clone()
    };
    sign_in(&scene, test, &key).await;
    Some(scene)
}

/// `n` neighbouring ports nothing listens on now, below the kernel's ephemeral range.
fn free_port_range(n: u16) -> u16 {
    loop {
        let first = 20_000 + (uuid::Uuid::new_v4().as_u128() % 12_000) as u16;
        if (first..first + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return first;
        }
    }
}

/// Signs in with the user's API key through the form, from the page asked for.
async fn sign_in(s: &Scene, test: &str, key: &str) {
    let b = &s.browser;
    b.step(test, "sign in", async {
        b.client
            .goto(&format!("{}/console/sessions?tab=finished", s.h.base))
            .await
            .unwrap();
        // Not signed in: the sign-in form, which comes back to the page asked for.
        b.find("#sign-in").await;
        assert!(b.unlabelled_controls().await.is_empty());
        b.fill("#key", "not-a-key").await;
        b.click("#sign-in").await;
        b.find("#sign-in-error").await;
        b.fill("#key", key).await;
        b.click("#sign-in").await;
        b.find("#sessions").await;
        let url = b.client.current_url().await.unwrap();
        assert!(
            url.as_str().ends_with("/console/sessions?tab=finished"),
            "{url}"
        );
    })
    .await;
}

async fn sessions_of(h: &Harness, key: &str) -> Vec<Value> {
    let (status, page) = h.get(key, "/v1/sessions?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["sessions"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_batch_session_is_launched_found_and_explained_in_the_console() {
    const TEST: &str = "batch";
    let Some(s) = scene(TEST).await else {
        return;
    };
    let b = &s.browser;

    // The launcher: batch with its script, an image typed by name, then "Skip to review".
    b.step(TEST, "launcher", async {
        b.click("#start").await;
        b.click("#type-batch").await;
        b.fill("#name", "consolebatch").await;
        b.fill("#startup_command", "echo hello-from-the-console")
            .await;
        assert!(b.unlabelled_controls().await.is_empty());
        b.click("#next").await;
        b.fill("#image", "berth/shell:latest").await;
        b.fill("#cpu", "0.5").await;
        b.fill("#memory", "256m").await;
        // Environment variables a row each: one added, another added and removed.
        b.click("#env-add").await;
        b.fill("#env-rows .env-row:last-child .env-name", "GREETING")
            .await;
        b.fill("#env-rows .env-row:last-child .env-value", "hi")
            .await;
        b.click("#env-add").await;
        b.fill("#env-rows .env-row:last-child .env-name", "DROPPED")
            .await;
        b.click("#env-rows .env-row:last-child .env-remove").await;
        assert!(b.unlabelled_controls().await.is_empty());
        b.click("#skip-to-review").await;
        b.find("#launch").await;
        let errors = b
            .eval("return document.querySelectorAll('[data-error-field]').length")
            .await;
        assert_eq!(errors, json!(0));
        b.document("launcher-review").await;
        // No folder: the warning first, then the start.
        b.click("#launch").await;
        b.find("#no-folder-warning").await;
        b.click("#start-anyway").await;
    })
    .await;

    let id = b
        .step(TEST, "toast", async {
            let text = b.text_of("[data-toast]").await;
            assert!(text.contains("consolebatch"), "{text}");
            for button in ["Apps", "Terminal", "Logs", "Terminate"] {
                assert!(text.contains(button), "the toast lacks {button}: {text}");
            }
            let created = sessions_of(&s.h, &s.user).await;
            assert_eq!(created.len(), 1, "{created:?}");
            let id = created[0]["session_id"].as_str().unwrap().to_owned();
            let (_, detail) = s.h.get(&s.user, &format!("/v1/sessions/{id}")).await;
            assert_eq!(
                detail["request"]["environment"],
                json!({"GREETING": "hi"}),
                "{detail}"
            );
            id
        })
        .await;
    s.h.wait_session_within(&id, Duration::from_secs(90), |d| {
        d["status"] == "TERMINATED"
    })
    .await;
    b.step(TEST, "live toast", async {
        // Without a reload: the event stream brings the end, the row leaves the Running tab
        // and the toast closes itself 3 s after TERMINATED (within a minute, however loaded
        // the machine: each look at the page is a round trip to the browser).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            let left = b
                .eval(&format!(
                    "return !document.querySelector('[data-toast]') && \
                     !document.querySelector(\"tr[data-session='{id}']\")"
                ))
                .await;
            if left == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the page never showed the session's end by itself");
    })
    .await;

    b.step(TEST, "finished tab", async {
        b.client
            .goto(&format!("{}/console/sessions", s.h.base))
            .await
            .unwrap();
        b.click("#tab-finished").await;
        let text = b.text_of(&format!("tr[data-session='{id}']")).await;
        assert!(
            text.contains("consolebatch") && text.contains("TERMINATED"),
            "{text}"
        );
        let elapsed = b
            .text_of(&format!("tr[data-session='{id}'] .elapsed"))
            .await;
        assert!(
            elapsed.ends_with('s'),
            "the elapsed time is shown: {elapsed}"
        );
        assert!(b.unlabelled_controls().await.is_empty());
        b.document("sessions").await;
    })
    .await;

    b.step(TEST, "detail", async {
        b.click(&format!("tr[data-session='{id}'] .session-name"))
            .await;
        let detail = b.text_of("#detail").await;
        for field in [
            "Session ID",
            &id,
            "berth/shell:latest",
            "Elapsed",
            "Kernels",
            "Exit code",
        ] {
            assert!(detail.contains(field), "the detail lacks {field}: {detail}");
        }
        b.find("#status-info").await;
        assert!(b.unlabelled_controls().await.is_empty());
        b.eval("document.getElementById('detail').scrollIntoView(); return true")
            .await;
        b.document("detail").await;
    })
    .await;

    b.step(TEST, "history", async {
        b.click("#open-history").await;
        let rows = b.eval("return document.querySelectorAll('.history-row').length").await;
        assert!(rows.as_u64().unwrap() >= 1, "{rows}");
        b.find("#filter-result").await.select_by_value("SUCCESS").await.unwrap();
        b.click("#apply-filters").await;
        // The filtered page, its filter in the URL.
        let mut url = b.client.current_url().await.unwrap();
        for _ in 0..300 {
            if url.as_str().contains("result=SUCCESS") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            url = b.client.current_url().await.unwrap();
        }
        assert!(
            url.as_str().contains("result=SUCCESS"),
            "the filter is in the URL: {url}"
        );
        b.find("#history-rows").await;
        let badges = b
            .eval("return [...document.querySelectorAll('.history-row .badge')].map(e => e.textContent)")
            .await;
        let badges: Vec<String> = serde_json::from_value(badges).unwrap();
        assert!(!badges.is_empty() && badges.iter().all(|b| b == "SUCCESS"), "{badges:?}");
        assert!(b.unlabelled_controls().await.is_empty());
        b.document("history").await;
    })
    .await;

    b.step(TEST, "recent history", async {
        let before = sessions_of(&s.h, &s.user).await.len();
        b.client
            .goto(&format!("{}/console/launch", s.h.base))
            .await
            .unwrap();
        let entry = b.find("#recent-history li[data-launch]").await;
        let text = entry.text().await.unwrap();
        assert!(text.contains("consolebatch"), "{text}");
        b.click("#recent-history li[data-launch] .pin").await;
        // Pinned, once the launcher has come back.
        b.wait_for_text("Unpin").await;
        b.click("#recent-history li[data-launch] .relaunch").await;
        // The review step, filled from the kept request.
        b.find("#launch").await;
        let review = b.find("#wizard").await.text().await.unwrap();
        assert!(review.contains("echo hello-from-the-console"), "{review}");
        b.click("#launch").await;
        b.click("#start-anyway").await;
        b.find("[data-toast]").await;
        assert_eq!(sessions_of(&s.h, &s.user).await.len(), before + 1);
    })
    .await;

    b.step(TEST, "field error", async {
        let before = sessions_of(&s.h, &s.user).await.len();
        b.client
            .goto(&format!(
                "{}/console/launch?step=5&image=berth%2Fshell%3Alatest&memory=lots",
                s.h.base
            ))
            .await
            .unwrap();
        let card = b.find("[data-error-field]").await;
        assert_eq!(
            card.attr("data-error-field").await.unwrap().as_deref(),
            Some("resources.memory")
        );
        let disabled = b
            .eval("return document.querySelector('#launch').disabled")
            .await;
        assert_eq!(disabled, json!(true));
        assert_eq!(
            sessions_of(&s.h, &s.user).await.len(),
            before,
            "nothing was created"
        );
    })
    .await;

    b.step(TEST, "keyboard launch", async {
        let before = sessions_of(&s.h, &s.user).await.len();
        b.client
            .goto(&format!("{}/console/launch?step=2", s.h.base))
            .await
            .unwrap();
        let enter = char::from(fantoccini::key::Key::Enter).to_string();
        b.tab_to("image").await;
        b.press("berth/shell:latest").await;
        b.tab_to("cpu").await;
        b.press("0.5").await;
        b.tab_to("memory").await;
        b.press("128m").await;
        b.tab_to("skip-to-review").await;
        b.press(&enter).await;
        b.find("#launch").await;
        b.tab_to("launch").await;
        b.press(&enter).await;
        b.find("#start-anyway").await;
        b.tab_to("start-anyway").await;
        b.press(&enter).await;
        b.find("[data-toast]").await;
        assert_eq!(sessions_of(&s.h, &s.user).await.len(), before + 1);
    })
    .await;

    b.step(TEST, "defaults launch", async {
        // Start, then straight to the review naming nothing: the group's defaults, said so.
        let before = sessions_of(&s.h, &s.user).await.len();
        b.client
            .goto(&format!("{}/console/sessions", s.h.base))
            .await
            .unwrap();
        b.click("#start").await;
        b.click("#skip-to-review").await;
        b.find("#launch").await;
        let errors = b
            .eval("return document.querySelectorAll('[data-error-field]').length")
            .await;
        assert_eq!(errors, json!(0));
        let review = b.find("#wizard").await.text().await.unwrap();
        assert!(
            review.contains("berth/shell:latest (the group's default: set by an operator)")
                && review.contains("small (the group's default: the smallest preset that fits)"),
            "{review}"
        );
        b.document("launcher-defaults").await;
        b.click("#launch").await;
        b.click("#start-anyway").await;
        b.find("[data-toast]").await;
        let sessions = sessions_of(&s.h, &s.user).await;
        assert_eq!(sessions.len(), before + 1);
        let newest = sessions
            .iter()
            .max_by_key(|s| s["created_at"].as_str().unwrap_or_default().to_owned())
            .unwrap();
        let id = newest["session_id"].as_str().unwrap().to_owned();
        let ran =
            s.h.wait_session_within(&id, Duration::from_secs(90), |d| d["status"] == "RUNNING")
                .await;
        assert_eq!(ran["image"], "berth/shell:latest");
    })
    .await;

    b.step(TEST, "errors tab", async {
        // An image that cannot be pulled: the session ends in ERROR, listed under Errors
        // (Backend.AI's "Others") and not under Finished's ordinary ends alone.
        let (status, created) = s
            .h
            .create(
                &s.user,
                json!({"type": "batch", "name": "wontpull", "image": crate::containers::ABSENT,
                       "startup_command": "true", "resources": {"cpu": 0.5, "memory": "64m"}}),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{created}");
        let failed = ids(&created)[0].clone();
        s.h.wait_session_within(&failed, Duration::from_secs(120), |d| d["status"] == "ERROR")
            .await;
        b.client
            .goto(&format!("{}/console/sessions", s.h.base))
            .await
            .unwrap();
        b.click("#tab-errors").await;
        let text = b.text_of(&format!("tr[data-session='{failed}']")).await;
        assert!(text.contains("wontpull") && text.contains("ERROR"), "{text}");
        let rows = b
            .eval("return [...document.querySelectorAll('tr[data-session] .status')].map(e => e.textContent)")
            .await;
        let rows: Vec<String> = serde_json::from_value(rows).unwrap();
        assert!(rows.iter().all(|r| r == "ERROR"), "{rows:?}");
    })
    .await;

    b.step(TEST, "terminate asks first", async {
        let (status, created) =
            s.h.create(
                &s.user,
                json!({"name": "keepme", "image": "berth/shell:latest",
                       "resources": {"cpu": 0.5, "memory": "64m"}}),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{created}");
        let id = ids(&created)[0].clone();
        s.h.wait_session_within(&id, Duration::from_secs(90), |d| d["status"] == "RUNNING")
            .await;
        b.client
            .goto(&format!("{}/console/sessions", s.h.base))
            .await
            .unwrap();
        // The row's own controls: apps, terminal, logs and the red power button.
        let controls = b
            .eval(&format!(
                "return [...document.querySelectorAll(\"tr[data-session='{id}'] .controls .icon\")]\
                 .map(e => e.getAttribute('title'))"
            ))
            .await;
        assert_eq!(controls, json!(["Apps", "Terminal", "Logs", "Terminate"]));
        b.click(&format!("[data-terminate='{id}']")).await;
        let dialog = b.text_of("#confirm-terminate").await;
        assert!(
            dialog.contains("Terminate keepme?") && dialog.contains("lost"),
            "{dialog}"
        );
        assert!(b.unlabelled_controls().await.is_empty());
        b.document("confirm-terminate").await;
        b.click("#confirm-no").await;
        b.find("#sessions").await;
        let open = b
            .eval("return !!document.querySelector('#confirm-terminate')")
            .await;
        assert_eq!(open, json!(false), "Cancel closes it");
        let (_, detail) = s.h.get(&s.user, &format!("/v1/sessions/{id}")).await;
        assert_eq!(detail["status"], "RUNNING", "nothing ended on Cancel");
        // Committed, its image is on My images: its reference to copy, and a remove that asks.
        let (status, started) =
            s.h.post(
                &s.user,
                &format!("/v1/sessions/{id}/commit"),
                json!({"name": "keepme1"}),
            )
            .await;
        assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{started}");
        let image = started["image"].as_str().unwrap().to_owned();
        wait_for(|| async {
            let (_, listed) = s.h.get(&s.user, "/v1/images").await;
            (listed["items"][0]["image"] == image.as_str()).then_some(())
        })
        .await;
        b.client
            .goto(&format!("{}/console/images", s.h.base))
            .await
            .unwrap();
        let copy = b.find("tr[data-image='keepme1'] [data-copy]").await;
        assert_eq!(
            copy.attr("data-copy").await.unwrap().as_deref(),
            Some(image.as_str())
        );
        assert!(b.unlabelled_controls().await.is_empty());
        b.click("[data-remove='keepme1']").await;
        let dialog = b.text_of("#confirm-remove").await;
        assert!(dialog.contains("Remove keepme1?"), "{dialog}");
        b.document("images").await;
        b.click("#remove-yes").await;
        wait_for(|| async {
            let (_, listed) = s.h.get(&s.user, "/v1/images").await;
            (listed["items"] == json!([])).then_some(())
        })
        .await;

        // Chromium drops a request under way when the host's interfaces change (it notices a
        // new container's veth a moment late): a yes lost that way is given again.
        for _ in 0..5 {
            b.client
                .goto(&format!("{}/console/sessions", s.h.base))
                .await
                .unwrap();
            b.click(&format!("[data-terminate='{id}']")).await;
            b.click("#confirm-yes").await;
            let mut asked = false;
            for _ in 0..50 {
                let (_, d) = s.h.get(&s.user, &format!("/v1/sessions/{id}")).await;
                if d["status"] != "RUNNING" {
                    asked = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if asked {
                break;
            }
        }
        s.h.wait_session_within(&id, Duration::from_secs(90), |d| {
            d["status"] == "TERMINATED"
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn an_interactive_sessions_terminal_and_jupyter_open_from_the_console() {
    const TEST: &str = "interactive";
    let Some(s) = scene(TEST).await else {
        return;
    };
    let b = &s.browser;
    b.client
        .goto(&format!(
            "{}/console/launch?step=5&name=consolejup&image=berth%2Fjupyter%3Alatest&cpu=1&memory=768m",
            s.h.base
        ))
        .await
        .unwrap();
    b.step(TEST, "launch", async {
        b.click("#launch").await;
        b.click("#start-anyway").await;
        b.find("[data-toast]").await;
    })
    .await;
    let id = sessions_of(&s.h, &s.user).await[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.h.wait_session_within(&id, Duration::from_secs(120), |d| d["status"] == "RUNNING")
        .await;
    let console = b.client.window().await.unwrap();

    b.step(TEST, "terminal", async {
        b.client
            .goto(&format!("{}/console/sessions?session={id}", s.h.base))
            .await
            .unwrap();
        b.click("#open-terminal").await;
        let window = new_window(b, &console).await;
        b.client.switch_to_window(window).await.unwrap();
        // The page marks itself once the shell has said something.
        b.find("body[data-connected]").await;
        let typed = format!(
            "echo console-$((6*7)){}",
            char::from(fantoccini::key::Key::Enter)
        );
        b.press(&typed).await;
        b.wait_for_text("console-42").await;
        b.client.close_window().await.unwrap();
        b.client.switch_to_window(console.clone()).await.unwrap();
    })
    .await;

    b.step(TEST, "exempt", async {
        // The idle-reaper reads a session once it has seen it run.
        wait_for(|| async {
            let (status, _) = s.h.get(&s.user, &format!("/v1/sessions/{id}/idle")).await;
            (status == StatusCode::OK).then_some(())
        })
        .await;
        b.client
            .goto(&format!("{}/console/sessions?session={id}", s.h.base))
            .await
            .unwrap();
        assert!(b.unlabelled_controls().await.is_empty());
        b.fill("#exempt-reason", "a long training run").await;
        b.click("form[action$='/exempt'] button").await;
        // The page the form comes back to shows the idle-reaper's fold, which takes in the
        // exemption a moment after it is recorded (under a loaded run, after the page is
        // drawn): once the reaper says so, the panel, drawn again, does too.
        wait_for(|| async {
            let (_, idle) = s.h.get(&s.user, &format!("/v1/sessions/{id}/idle")).await;
            (idle["exempt"] == true).then_some(())
        })
        .await;
        b.client
            .goto(&format!("{}/console/sessions?session={id}", s.h.base))
            .await
            .unwrap();
        b.wait_for_text("Exempt from idle checks: it is never reaped")
            .await;
    })
    .await;

    let jupyter = b
        .step(TEST, "jupyter", async {
            b.client
                .goto(&format!("{}/console/sessions/{id}/apps", s.h.base))
                .await
                .unwrap();
            assert!(b.unlabelled_controls().await.is_empty());
            b.click("#open-jupyter").await;
            let window = new_window(b, &console).await;
            b.client.switch_to_window(window).await.unwrap();
            for _ in 0..600 {
                if b.client.title().await.unwrap().contains("JupyterLab") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(b.client.title().await.unwrap().contains("JupyterLab"));
            b.client.current_url().await.unwrap()
        })
        .await;

    // Another browser profile, without the cookies: neither JupyterLab nor the console.
    let stranger = crate::chrome::browser().await.expect("a second browser");
    stranger
        .step(TEST, "stranger", async {
            stranger.client.goto(jupyter.as_str()).await.unwrap();
            let title = stranger.client.title().await.unwrap();
            assert!(!title.contains("JupyterLab"), "{title}");
            events::tls::use_ring();
            let answer = reqwest::get(jupyter.as_str()).await.unwrap();
            assert!(answer.status().is_client_error(), "{}", answer.status());
            stranger
                .client
                .goto(&format!("{}/console/sessions?session={id}", s.h.base))
                .await
                .unwrap();
            stranger.find("#sign-in").await;
            // Signed in with an email and the password an admin set, the session is theirs
            // to see; signed out, the cookie is worth nothing.
            launcher::credentials::set_password(&s.h.pool, "carol@example.com", "correct horse")
                .await
                .unwrap();
            stranger.fill("#email", "carol@example.com").await;
            stranger.fill("#password", "wrong horse").await;
            stranger.click("#sign-in").await;
            stranger.find("#sign-in-error").await;
            stranger.fill("#password", "correct horse").await;
            stranger.click("#sign-in").await;
            stranger.find("#detail").await;
            stranger.click("header .who button").await;
            stranger.find("#sign-in").await;
            stranger
                .client
                .goto(&format!("{}/console/sessions", s.h.base))
                .await
                .unwrap();
            stranger.find("#sign-in").await;
        })
        .await;
}

/// The window a click just opened, beside `console`.
async fn new_window(
    b: &Browser,
    console: &fantoccini::wd::WindowHandle,
) -> fantoccini::wd::WindowHandle {
    for _ in 0..300 {
        let windows = b.client.windows().await.unwrap();
        if let Some(w) = windows.into_iter().find(|w| w != console) {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no window opened");
}

#[tokio::test]
async fn a_superadmin_sees_the_agents_and_the_queue_in_the_schedulers_order() {
    const TEST: &str = "queue";
    let Some(s) = scene_signed_in(TEST, true).await else {
        return;
    };
    let b = &s.browser;
    // The agent has 8 GiB: the first session runs, the next two wait behind it.
    let mut queued = Vec::new();
    for name in ["first", "second", "third"] {
        let (status, created) =
            s.h.create(
                &s.user,
                json!({"name": format!("queue{name}"), "image": "berth/shell:latest",
                       "startup_command": "sleep 300", "resources": {"cpu": 0.1, "memory": "5g"}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        queued.push(ids(&created)[0].clone());
    }
    let ids = queued;
    {}
    s.h.wait_session_within(&ids[0], Duration::from_secs(60), |d| {
        d["status"] == "RUNNING"
    })
    .await;
    // Each waiting session has been tried and said why.
    let mut reasons = Vec::new();
    for id in &ids[1..] {
        let history = wait_for(|| async {
            let history = s.h.history(id).await;
            (!history.is_empty()).then_some(history)
        })
        .await;
        reasons.push(
            history.last().unwrap()["message"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }

    b.step(TEST, "agents", async {
        b.client
            .goto(&format!("{}/console/agents", s.h.base))
            .await
            .unwrap();
        let row = b.find("#agents tr[data-agent]").await.text().await.unwrap();
        assert!(
            row.contains("default") && row.contains("8 cores") && row.contains("live"),
            "{row}"
        );
    })
    .await;

    b.step(TEST, "queue", async {
        b.client
            .goto(&format!("{}/console/queue", s.h.base))
            .await
            .unwrap();
        b.find(".queue[data-group='default']").await;
        let rows = b
            .eval(
                "return [...document.querySelectorAll(\".queue[data-group='default'] tr[data-session]\")]\
                 .map(r => [r.dataset.session, r.querySelector('.reason').textContent])",
            )
            .await;
        let rows: Vec<(String, String)> = serde_json::from_value(rows).unwrap();
        let order: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order, vec![ids[1].as_str(), ids[2].as_str()], "the scheduler's order");
        for ((_, shown), reason) in rows.iter().zip(&reasons) {
            assert!(shown.contains(reason.as_str()), "`{shown}` is not the history's `{reason}`");
        }
    })
    .await;

    // The launcher's review says when the same shape would start, after the two waiting,
    // and offers to tell when it fits.
    b.step(TEST, "advice", async {
        // A waiting session's detail says when it was expected to start.
        b.client
            .goto(&format!("{}/console/sessions?session={}", s.h.base, ids[1]))
            .await
            .unwrap();
        let info = b.text_of("#status-info").await;
        assert!(info.contains("Expected to start in about"), "{info}");
        b.client
            .goto(&format!(
                "{}/console/launch?step=5&image=berth%2Fshell%3Alatest&cpu=0.1&memory=5g",
                s.h.base
            ))
            .await
            .unwrap();
        let advice = b.text_of("#advice").await;
        assert!(advice.contains("Expected to start in about"), "{advice}");
        let ahead = b.text_of("#advice-ahead").await;
        assert_eq!(
            ahead, "queuesecond, queuethird",
            "the waiting sessions, in the queue's order"
        );
        b.document("launcher-advice").await;
        b.click("#notify-when-fits").await;
        b.find("#fit-watching").await;
    })
    .await;
    let (_, watching) = s.h.get(&s.h.admin_key, "/v1/fit-watches").await;
    assert_eq!(
        watching["fit_watches"].as_array().map(Vec::len),
        Some(1),
        "{watching}"
    );
    for id in &ids {
        s.h.delete(&s.user, &format!("/v1/sessions/{id}?force=true"))
            .await;
    }
}

/// The administration pages: a superadmin makes a preset and a user with a password from
/// the forms (a bad field refused as the API refuses it, naming it, with nothing made) and
/// sees the catalogue leave a server's image out; the new user signs in with that password,
/// is offered no server's image, and launches with the preset.
#[tokio::test]
async fn an_admin_makes_a_user_and_a_preset_from_the_admin_pages_and_the_user_launches_with_it() {
    const TEST: &str = "admin";
    // A server's image on the agent's engine (built on berth/shell, whose session label it
    // inherits), which the catalogue must never offer.
    let server = format!(
        "berth-test/console-server:{}",
        uuid::Uuid::new_v4().simple()
    );
    let _server = LabelledImage::build(&server, "ai.berth.server=test");
    let Some(s) = scene_signed_in(TEST, true).await else {
        return;
    };
    let b = &s.browser;
    b.step(TEST, "preset", async {
        b.click("#admin-link").await;
        b.find("#new-user").await;
        b.client
            .goto(&format!("{}/console/admin/presets", s.h.base))
            .await
            .unwrap();
        assert!(b.unlabelled_controls().await.is_empty());
        // A name the API refuses: its field named, no preset made.
        b.fill("#save-preset-name", "not a name").await;
        b.fill("#save-preset-cpu", "0.25").await;
        b.fill("#save-preset-memory_gib", "0.125").await;
        b.click("#save-preset-submit").await;
        let field = b.find("[data-error-field]").await;
        assert_eq!(
            field.attr("data-error-field").await.unwrap().as_deref(),
            Some("name")
        );
        b.client.back().await.unwrap();
        b.fill("#save-preset-name", "tiny").await;
        b.fill("#save-preset-cpu", "0.25").await;
        b.fill("#save-preset-memory_gib", "0.125").await;
        b.click("#save-preset-submit").await;
        assert!(b.text_of("#admin-done").await.contains("preset tiny saved"));
        let row = b.text_of("#admin-table tr[data-row='tiny']").await;
        assert!(row.contains("0.25") && row.contains("128 MiB"), "{row}");
        b.document("admin-presets").await;
    })
    .await;
    let (_, presets) = s.h.get(&s.h.admin_key, "/v1/presets").await;
    let names: Vec<&str> = presets["presets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"tiny") && !names.contains(&"not a name"),
        "{names:?}"
    );

    b.step(TEST, "user", async {
        b.client
            .goto(&format!("{}/console/admin/users", s.h.base))
            .await
            .unwrap();
        assert!(b.unlabelled_controls().await.is_empty());
        b.fill("#new-user-email", "dave@example.com").await;
        b.fill("#new-user-password", "correct horse battery").await;
        b.click("#new-user-submit").await;
        let key = b.find("#issued-key").await.prop("value").await.unwrap();
        assert!(
            key.is_some_and(|k| k.starts_with("berth_")),
            "a key shown once"
        );
        let row = b
            .text_of("#admin-table tr[data-row='dave@example.com']")
            .await;
        assert!(row.contains("user") && row.contains("active"), "{row}");
        b.document("admin-users").await;
        b.client
            .goto(&format!("{}/console/admin/images", s.h.base))
            .await
            .unwrap();
        let row = b
            .text_of("#admin-table tr[data-row='berth/shell:latest']")
            .await;
        assert!(row.contains("offered"), "{row}");
        let row = b
            .text_of(&format!("#admin-table tr[data-row='{server}']"))
            .await;
        assert!(row.contains("not offered"), "{row}");
        b.document("admin-images").await;
    })
    .await;

    b.step(TEST, "groups", async {
        b.client
            .goto(&format!("{}/console/admin/groups", s.h.base))
            .await
            .unwrap();
        assert!(b.unlabelled_controls().await.is_empty());
        b.fill("#new-group-name", "burst").await;
        b.find("#new-group-queue_policy")
            .await
            .select_by_value("backfill")
            .await
            .unwrap();
        b.click("#new-group-submit").await;
        assert!(b.text_of("#admin-done").await.contains("burst created"));
        b.fill(
            "#admin-table tr[data-row='burst'] input[name='project']",
            "default",
        )
        .await;
        b.click("#admin-table tr[data-row='burst'] form[data-action='Grant'] button")
            .await;
        // The table is drawn again once the grant is answered.
        b.wait_for_text("default may use burst").await;
        let row = b.text_of("#admin-table tr[data-row='burst']").await;
        assert!(row.contains("backfill") && row.contains("default"), "{row}");
        b.document("admin-groups").await;
    })
    .await;

    b.step(TEST, "the new user launches with the preset", async {
        b.click("header .who button").await;
        b.find("#sign-in").await;
        b.fill("#email", "dave@example.com").await;
        b.fill("#password", "correct horse battery").await;
        b.click("#sign-in").await;
        b.find("#sessions").await;
        b.click("#start").await;
        b.fill("#name", "withpreset").await;
        b.click("#next").await;
        b.find("#environment").await;
        let offered = b
            .eval("return [...document.querySelectorAll('#environment option')].map(o => o.value)")
            .await;
        let offered: Vec<String> = serde_json::from_value(offered).unwrap();
        assert!(
            offered.iter().any(|i| i == "berth/shell:latest") && !offered.contains(&server),
            "the catalogue offers session images only: {offered:?}"
        );
        b.fill("#image", "berth/shell:latest").await;
        b.find("#preset")
            .await
            .select_by_value("tiny")
            .await
            .unwrap();
        b.click("#skip-to-review").await;
        b.click("#launch").await;
        b.click("#start-anyway").await;
        b.find("[data-toast]").await;
    })
    .await;
    let (_, listed) = s.h.get(&s.h.admin_key, "/v1/sessions?limit=500").await;
    let session = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "withpreset")
        .cloned()
        .unwrap_or_else(|| panic!("no session withpreset in {listed}"));
    let id = session["session_id"].as_str().unwrap().to_owned();
    let running =
        s.h.wait_session_within(&id, Duration::from_secs(60), |d| d["status"] == "RUNNING")
            .await;
    let resources = &running["resources"];
    assert_eq!(
        (&resources["cpu_milli"], &resources["memory_bytes"]),
        (&json!(250), &json!(128 << 20)),
        "the preset's shape: {running}"
    );
    s.h.delete(&s.h.admin_key, &format!("/v1/sessions/{id}?force=true"))
        .await;
}

/// The cookie, without a browser: handed out only to a form from the gateway's own origin,
/// HttpOnly and SameSite=Strict; it speaks for the JSON API only on a same-origin request,
/// and not at all once signed out.
#[tokio::test]
async fn the_console_cookie_speaks_for_the_api_only_from_the_same_origin() {
    let h = start().await;
    let key = h.user("dave@example.com").await;
    events::tls::use_ring();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let sign_in = |origin: String| {
        http.post(format!("{}/console/sign-in", h.base))
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("key={key}"))
            .send()
    };
    // The gateway's address in a browser lands on the console; a program keeps the JSON.
    let root = |accept: &'static str| {
        http.get(format!("{}/", h.base))
            .header("accept", accept)
            .send()
    };
    let browser = root("text/html,application/xhtml+xml,*/*;q=0.8")
        .await
        .unwrap();
    assert_eq!(browser.status(), StatusCode::SEE_OTHER);
    assert_eq!(browser.headers()["location"], "/console/sessions");
    let program = root("*/*").await.unwrap();
    assert_eq!(program.status(), StatusCode::OK);
    let hello: serde_json::Value = program.json().await.unwrap();
    assert!(
        hello["manager"].as_str().unwrap().starts_with("berth"),
        "{hello}"
    );

    let elsewhere = sign_in("http://127.0.0.1:1".into()).await.unwrap();
    assert_eq!(elsewhere.status(), StatusCode::FORBIDDEN);
    assert!(elsewhere.headers().get("set-cookie").is_none());

    let signed_in = sign_in(h.base.clone()).await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let set = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();

    let whoami = |site: Option<&'static str>| {
        let mut request = http
            .get(format!("{}/v1/whoami", h.base))
            .header("cookie", &cookie);
        if let Some(site) = site {
            request = request.header("sec-fetch-site", site);
        }
        request.send()
    };
    let mine = whoami(Some("same-origin")).await.unwrap();
    assert_eq!(mine.status(), StatusCode::OK);
    assert_eq!(
        mine.json::<Value>().await.unwrap()["email"],
        "dave@example.com"
    );
    // An app on a proxy port is the same site, another origin; a client off the web sends
    // no such header: neither is let in by the cookie.
    assert_eq!(
        whoami(Some("same-site")).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        whoami(None).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );

    let signed_out = http
        .post(format!("{}/console/sign-out", h.base))
        .header("origin", &h.base)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        whoami(Some("same-origin")).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(h.count_events("ConsoleSignedOut").await, 1);
}

#[tokio::test]
async fn the_data_page_makes_a_folder_uploads_by_the_picker_downloads_the_same_bytes_removes_and_shares(
) {
    const TEST: &str = "data_page";
    let Some(browser) = crate::chrome::browser().await else {
        return;
    };
    // One host: the gateway serves the agent's data directory (`host-local`).
    let dir = data_dir();
    let mut config = test_config();
    config.agent_data_dir = dir.clone();
    let h = start_with(config).await;
    let agent_id = fresh_agent_id();
    let agent = spawn_agent(&h, &agent_id, &dir, 2_000, None).await;
    let user = h.user("carol@example.com").await;
    let s = Scene {
        browser,
        user,
        _agent: (agent, Cleanup(agent_id)),
        h,
    };
    let key = s.user.clone();
    sign_in(&s, TEST, &key).await;
    let b = &s.browser;
    b.step(TEST, "a folder made", async {
        b.client
            .goto(&format!("{}/console/data", s.h.base))
            .await
            .unwrap();
        b.wait_for_text("No folder yet").await;
        assert!(b.unlabelled_controls().await.is_empty());
        b.fill("#folder-name", "data1").await;
        b.click("#create-folder").await;
        b.find("#dropzone").await;
        assert!(b.unlabelled_controls().await.is_empty());
    })
    .await;
    let local = dir.join("picked.txt");
    let bytes: String = (0..2000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(&local, &bytes).unwrap();
    b.step(TEST, "uploaded by the picker", async {
        b.find("#upload-input")
            .await
            .send_keys(local.to_str().unwrap())
            .await
            .unwrap();
        let row = b.find("tr[data-entry='picked.txt']").await;
        let text = row.text().await.unwrap();
        assert!(text.contains("file"), "{text}");
        b.document("data-explorer").await;
    })
    .await;
    b.step(TEST, "downloaded the same", async {
        let downloaded = b
            .eval(
                "const x = new XMLHttpRequest(); \
                 x.open('GET', document.querySelector(\"tr[data-entry='picked.txt'] a\").href, false); \
                 x.send(); return [x.status, x.responseText];",
            )
            .await;
        assert_eq!(downloaded[0], 200);
        assert_eq!(downloaded[1].as_str().unwrap(), bytes);
    })
    .await;
    b.step(TEST, "a directory made, the file removed", async {
        b.fill("#directory-name", "results").await;
        b.click("#make-directory").await;
        b.find("tr[data-entry='results']").await;
        b.click("tr[data-entry='picked.txt'] button.danger").await;
        // The page comes back after the removal: wait for it rather than read the one that
        // is going.
        let mut left = json!(null);
        for _ in 0..300 {
            left = b
                .eval(
                    "return [...document.querySelectorAll('tr[data-entry]')].map(r => r.dataset.entry)",
                )
                .await;
            if left == json!(["results"]) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(left, json!(["results"]));
    })
    .await;
    b.step(TEST, "an entry renamed", async {
        b.fill(
            "tr[data-entry='results'] form.rename input[name='to']",
            "outputs",
        )
        .await;
        b.click("#move-results").await;
        b.find("tr[data-entry='outputs']").await;
    })
    .await;
    // The launcher's folder step leads into the explorer.
    b.step(TEST, "the launcher links the explorer", async {
        b.client
            .goto(&format!("{}/console/launch?step=3", s.h.base))
            .await
            .unwrap();
        let link = b.find("a[data-browse='data1']").await;
        let href = link.attr("href").await.unwrap().unwrap();
        assert_eq!(href, "/console/data/data1");
    })
    .await;
    // Shared read-only by the page's form with dave, who then has it; taken back by the
    // share's button.
    let dave = s.h.user("dave@example.com").await;
    b.step(TEST, "shared and taken back", async {
        b.client
            .goto(&format!("{}/console/data", s.h.base))
            .await
            .unwrap();
        assert!(b.unlabelled_controls().await.is_empty());
        b.fill("#share-with", "dave@example.com").await;
        b.click("#share-submit").await;
        let share = b.find("tr[data-folder='data1'] form.share").await;
        let text = share.text().await.unwrap();
        assert!(text.contains("user dave@example.com (ro)"), "{text}");
        let (_, daves) = s.h.get(&dave, "/v1/folders").await;
        assert_eq!(daves["folders"][0]["name"], "data1", "{daves}");
        assert_eq!(daves["folders"][0]["permission"], "ro", "{daves}");
        b.document("data-shared").await;
        b.click("tr[data-folder='data1'] form.share button").await;
        let mut shares = json!(null);
        for _ in 0..300 {
            shares = b
                .eval("return document.querySelectorAll('form.share').length")
                .await;
            if shares == json!(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(shares, json!(0));
        let (_, daves) = s.h.get(&dave, "/v1/folders").await;
        assert_eq!(daves["folders"], json!([]), "{daves}");
    })
    .await;
    // Moved to the trash (listed there, its files reached by nobody) and restored.
    b.step(TEST, "trashed and restored", async {
        b.click("#trash-data1").await;
        b.find("#trash tr[data-folder='data1']").await;
        let (status, trashed) = s.h.get(&key, "/v1/folders/data1/files").await;
        assert_eq!(status, reqwest::StatusCode::CONFLICT, "{trashed}");
        b.document("data-trash").await;
        assert!(b.unlabelled_controls().await.is_empty());
        b.click("#restore-data1").await;
        b.find("#folders tr[data-folder='data1']").await;
    })
    .await;
    // An upload session started from the folder's row shows under Upload Sessions.
    b.step(TEST, "an upload session started", async {
        b.client
            .goto(&format!("{}/console/data", s.h.base))
            .await
            .unwrap();
        b.click("#sftp-data1").await;
        b.find("nav.filters a[data-type='system'][aria-current='true']")
            .await;
        b.find("tr[data-session]").await;
        let (_, system) = s.h.get(&key, "/v1/sessions?type=system").await;
        assert_eq!(
            system["sessions"][0]["image"], "berth/sftp:latest",
            "{system}"
        );
    })
    .await;
    // What the page showed is what the API holds.
    let (_, listed) = s.h.get(&key, "/v1/folders/data1/files").await;
    assert_eq!(listed["entries"][0]["name"], "outputs", "{listed}");
    assert_eq!(listed["total"], 1);
}

#[tokio::test]
async fn the_serving_page_shows_an_endpoints_replicas_and_scales_it() {
    const TEST: &str = "serving";
    let Some(browser) = crate::chrome::browser().await else {
        return;
    };
    // The gateway serves the folders of the agent beside it, where the model goes.
    let (h, agent) = crate::files::one_host().await;
    let user = h.user("carol@example.com").await;
    let s = Scene {
        h,
        user,
        browser,
        _agent: agent,
    };
    sign_in(&s, TEST, &s.user).await;
    let (h, b) = (&s.h, &s.browser);
    crate::serving::model_folder(h, &s.user).await;
    let (status, made) = h
        .post(
            &s.user,
            "/v1/services",
            json!({"name": "iris", "model_folder": "models", "image": "berth/python:latest",
                   "resources": {"cpu": 0.25, "memory": "128m"}, "replicas": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let user = s.user.clone();
    let healthy = |n: u64| {
        let (id, user) = (id.clone(), user.clone());
        async move {
            crate::serving::within(90, "healthy replicas", || async {
                let e = crate::serving::service(h, &user, &id).await;
                (e["healthy_replicas"] == n).then_some(())
            })
            .await
        }
    };
    healthy(1).await;
    let (status, _) = h
        .put(
            &s.user,
            &format!("/v1/services/{id}/autoscaling"),
            json!({"min_replicas": 1, "max_replicas": 3, "rules": [
                {"metric": "requests_per_second", "comparator": "gt", "threshold": 50.0,
                 "step": 1, "cooldown_secs": 60}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    b.step(TEST, "the list", async {
        b.client
            .goto(&format!("{}/console/serving", h.base))
            .await
            .unwrap();
        let row = b.text_of("#endpoints tr[data-endpoint=iris]").await;
        assert!(row.contains("healthy") && row.contains("1/1"), "{row}");
        assert!(b.unlabelled_controls().await.is_empty());
    })
    .await;
    b.step(TEST, "scaled from its page", async {
        b.click("#endpoints tr[data-endpoint=iris] a").await;
        let shown = b.text_of("#endpoint").await;
        assert!(shown.contains("requests_per_second gt 50"), "{shown}");
        let replicas = b.text_of("#replicas-table").await;
        assert!(replicas.contains("healthy"), "{replicas}");
        b.fill("#replicas", "2").await;
        b.click("#scale").await;
        b.wait_for_text("user carol@example.com").await;
        let history = b.text_of("#scaling-history").await;
        assert!(history.contains("1 → 2"), "{history}");
    })
    .await;
    healthy(2).await;
    b.step(TEST, "two replicas serving", async {
        b.client.refresh().await.unwrap();
        let row = b.text_of("#endpoints tr[data-endpoint=iris]").await;
        assert!(row.contains("2/2"), "{row}");
        b.document("serving").await;
    })
    .await;
}
