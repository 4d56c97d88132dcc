//! App services through berth's proxy, with real containers: the agent publishes a
//! session's ports on loopback only; opening an app gives a circuit on a port of the proxy's
//! pool (the preferred one when free, another when not, and it says which); a private
//! circuit lets in only a browser that redeemed its single-use ticket, and never forwards
//! berth's cookies; a public one lets in anyone; a full pool is a clear refusal; a preopen
//! port answers 502 until a server listens inside; circuits close when their session ends,
//! or when nobody used them for the proxy's idle time. A raw TCP app (the SSH server) is
//! reached through a private tunnel or straight from a public circuit's port, and the
//! terminal, served by the agent, runs in the caller's own terminal (`berth session shell`)
//! and in an image with nothing but busybox.

use std::time::Duration;

use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, spawn_agent, DockerAgent};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A server that answers every GET with what it was sent (path, cookies, forwarded-for),
/// started once `/tmp/go` exists, so the test sees the port before and after.
const ECHO_SERVER: &str = r#"while [ ! -f /tmp/go ]; do sleep 0.2; done
exec python3 - <<'PY'
import http.server, json
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "cookie": self.headers.get("Cookie"),
                           "forwarded_for": self.headers.get("X-Forwarded-For")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Echo).serve_forever()
PY"#;

/// A host address other than loopback, if this machine has one.
fn outside_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // A UDP "connect" sends nothing; it only picks the interface a packet would leave by.
    socket.connect("10.255.255.255:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Two neighbouring ports nothing listens on now, for a pool of two: below the kernel's
/// ephemeral range (32768 and up), where neither outgoing connections nor the engine's
/// published ports (both drawn from that range) take them while the test runs.
pub(crate) fn free_port_pair() -> u16 {
    loop {
        let first = 20_000 + rand_below(12_000);
        let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(first) && free(first + 1) {
            return first;
        }
    }
}

/// A number below `n`, different at each call (a `RandomState` is seeded afresh each time).
fn rand_below(n: u16) -> u16 {
    use std::hash::{BuildHasher, RandomState};
    (RandomState::new().hash_one(std::process::id()) % n as u64) as u16
}

pub(crate) fn browser() -> reqwest::Client {
    events::tls::use_ring();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

/// Follows a ticket link: the circuit's cookie (`name=value`) it sets.
async fn redeem(url: &str) -> Result<String, StatusCode> {
    let answer = browser().get(url).send().await.unwrap();
    if answer.status() != StatusCode::SEE_OTHER {
        return Err(answer.status());
    }
    assert_eq!(answer.headers()[LOCATION], "/");
    let cookie = answer.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    Ok(cookie.split(';').next().unwrap().to_owned())
}

async fn get(port: u16, cookie: Option<&str>) -> (StatusCode, String) {
    get_path(port, "/some/path?q=1", cookie).await
}

async fn get_path(port: u16, path: &str, cookie: Option<&str>) -> (StatusCode, String) {
    let mut request = browser().get(format!("http://127.0.0.1:{port}{path}"));
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    let answer = request.send().await.unwrap();
    (answer.status(), answer.text().await.unwrap())
}

/// The session's detail once it runs. A container's start gets longer than the harness's
/// usual 20 s: the app tests start theirs (JupyterLab's image among them) while the rest of
/// the suite starts its own, on two cores.
async fn running(h: &Harness, id: &str) -> Value {
    h.wait_session_within(id, Duration::from_secs(90), |s| s["status"] == "RUNNING")
        .await
}

/// Creates a session of `key`'s from `body` and waits for it to run: its id and detail.
pub(crate) async fn running_session(h: &Harness, key: &str, body: Value) -> (String, Value) {
    let (status, created) = h.create(key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let detail = running(h, &id).await;
    (id, detail)
}

/// `POST /v1/sessions/{id}/apps/{app}/{verb}` as `key`.
pub(crate) async fn app_call(
    h: &Harness,
    key: &str,
    id: &str,
    app: &str,
    verb: &str,
    body: Value,
) -> (StatusCode, Value) {
    h.post(key, &format!("/v1/sessions/{id}/apps/{app}/{verb}"), body)
        .await
}

/// A control plane whose proxy has a pool of two ports (from `first`), a Docker agent (with
/// its data directory), and two users.
pub(crate) struct Scene {
    pub(crate) h: Harness,
    pub(crate) first: u16,
    pub(crate) alice: String,
    pub(crate) bob: String,
    pub(crate) _agent: (DockerAgent, Cleanup, std::path::PathBuf),
}

/// The scene's containers go with it: its sessions run JupyterLab and SSH servers, which a
/// test need not end one by one.
pub(crate) struct Cleanup(pub(crate) String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        // Its containers, then their sessions' networks.
        crate::common::remove_containers_of(std::slice::from_ref(&self.0));
    }
}

async fn scene() -> Scene {
    scene_with_idle(None).await
}

/// A [`Scene`] whose proxy closes circuits unused for `idle` (its default, an hour, when
/// none).
async fn scene_with_idle(idle: Option<Duration>) -> Scene {
    let mut config = test_config();
    if idle.is_some() {
        config.proxy_idle = idle;
    }
    scene_with(config).await
}

/// A [`Scene`] on `config` (from [`test_config`]), with the pool of two ports.
pub(crate) async fn scene_with(mut config: berth::config::Config) -> Scene {
    let first = free_port_pair();
    config.proxy_ports = Some((first, first + 1));
    let h = start_with(config).await;
    let agent_id = fresh_agent_id();
    let data = data_dir();
    let _agent = (
        spawn_agent(&h, &agent_id, &data, 8_000, None).await,
        Cleanup(agent_id),
        data,
    );
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    Scene {
        h,
        first,
        alice,
        bob,
        _agent,
    }
}

#[tokio::test]
async fn a_preopen_port_is_served_through_the_proxy_to_its_owner_alone() {
    let Scene {
        h,
        first,
        alice,
        bob,
        _agent,
    } = scene().await;

    let (id, detail) = running_session(
        &h,
        &alice,
        json!({"image": "berth/python:latest", "preopen_ports": [8080],
                   "startup_command": ECHO_SERVER, "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    let apps: Vec<&str> = detail["request"]["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        apps,
        ["ttyd", "sshd", "8080"],
        "the terminal and the SSH server, then the preopen port"
    );

    // Published on loopback alone: the proxy is the only door.
    let container = &detail["containers"][0];
    assert_eq!(container["address"], "127.0.0.1");
    let published = container["ports"][0]["host"].as_u64().unwrap() as u16;
    assert!(std::net::TcpStream::connect(("127.0.0.1", published)).is_ok());
    match outside_address() {
        Some(ip) => assert!(
            std::net::TcpStream::connect_timeout(&(ip, published).into(), Duration::from_secs(2))
                .is_err(),
            "port {published} answers on {ip}"
        ),
        None => eprintln!("no address but loopback here: the outside check is skipped"),
    }

    // Bad input is refused by name; another user cannot see the session.
    let open = format!("/v1/sessions/{id}/apps/8080/open");
    let (status, bad) = h
        .post(&alice, &open, json!({"allowed_ips": ["not-an-address"]}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert_eq!(bad["error"]["field"], "allowed_ips[0]");
    let (status, _) = app_call(&h, &alice, &id, "nope", "open", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, bad) = h
        .post(
            &alice,
            &format!("/v1/sessions/{id}/apps/a.b/close"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, bad["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("app"))
    );
    let (status, _) = h.post(&bob, &open, json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not bob's session");

    // The owner's private circuit on the preferred port.
    let (status, private) = h
        .post(&alice, &open, json!({"preferred_port": first}))
        .await;
    assert_eq!(status, StatusCode::OK, "{private}");
    assert_eq!(private["port"], first);
    assert_eq!(private["preferred_port_honoured"], true);
    assert_eq!(private["public"], false);
    let url = private["url"].as_str().unwrap().to_owned();
    assert!(url.contains("/__berth/login?ticket="), "{url}");

    let (status, _) = get(first, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no cookie, no entry");
    let cookie = redeem(&url).await.expect("the ticket works once");
    assert_eq!(
        redeem(&url).await.unwrap_err(),
        StatusCode::UNAUTHORIZED,
        "and only once"
    );
    let (status, page) = get(first, Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{page}");
    assert!(page.contains("port 8080"), "{page}");
    let (status, _) = get(first, Some("berth_app_forged=123")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a forged cookie");

    // A server starts inside: the same door now answers, and berth's cookies stay outside.
    let container_id = container["container_id"].as_str().unwrap();
    let touched = std::process::Command::new("docker")
        .args(["exec", container_id, "touch", "/tmp/go"])
        .status()
        .unwrap();
    assert!(touched.success());
    let all_cookies = format!("{cookie}; berth_console=secret; theme=dark");
    let mut last = (StatusCode::OK, String::new());
    let mut echoed = None;
    for _ in 0..100 {
        last = get(first, Some(&all_cookies)).await;
        if last.0 == StatusCode::OK {
            echoed = Some(last.1.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let echoed = echoed.unwrap_or_else(|| panic!("the server never answered: {last:?}"));
    let echoed: Value = serde_json::from_str(&echoed).unwrap();
    assert_eq!(echoed["path"], "/some/path?q=1");
    assert_eq!(
        echoed["cookie"], "theme=dark",
        "berth's cookies never reach the app"
    );
    assert_eq!(echoed["forwarded_for"], "127.0.0.1");

    // The same request again reuses the circuit, with a new ticket.
    let (_, again) = h.post(&alice, &open, json!({})).await;
    assert_eq!(again["reused"], true, "{again}");
    assert_eq!(again["port"], first);
    assert!(redeem(again["url"].as_str().unwrap()).await.is_ok());

    // A public circuit: the preferred port is taken, so another, and it says so.
    let (status, public) = h
        .post(
            &alice,
            &open,
            json!({"public": true, "preferred_port": first}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{public}");
    assert_eq!(public["preferred_port_honoured"], false);
    let public_port = public["port"].as_u64().unwrap() as u16;
    assert_eq!(public_port, first + 1);
    let (status, _) = get(public_port, None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "anyone gets through a public circuit"
    );

    // Both ports of the pool are taken.
    let (status, full) = h
        .post(&alice, &open, json!({"allowed_ips": ["127.0.0.1"]}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{full}");
    assert_eq!(full["error"]["code"], "pool_exhausted");

    let (_, listed) = h.get(&alice, &format!("/v1/sessions/{id}/apps")).await;
    let circuits = listed["circuits"].as_array().unwrap();
    assert_eq!(circuits.len(), 2, "{listed}");
    assert!(circuits[0]["bytes_in"].as_u64().unwrap() > 0, "{listed}");
    assert!(circuits[0]["bytes_out"].as_u64().unwrap() > 0, "{listed}");

    // The session ends: its circuits close and their ports stop answering.
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The proxy hears of the end from the relay, which reads the log behind the PostgreSQL
    // cluster's horizon: under a full parallel test run, another test's open transaction can
    // hold it back for tens of seconds, so this waits longer than `wait_for` does.
    let mut closed = 0;
    for _ in 0..450 {
        closed = h.count_events("AppCircuitClosed").await;
        if closed == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(closed, 2, "both circuits close with their session");
    assert!(browser()
        .get(format!("http://127.0.0.1:{public_port}/"))
        .send()
        .await
        .is_err());
    assert_eq!(h.count_events("AppCircuitOpened").await, 2);
    // The ledger's circuits, folded again from the log, are the live ones.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// How long JupyterLab gets to come up in a small container, with the bus's round trips.
const JUPYTER_PATIENCE: Duration = Duration::from_secs(160);

#[tokio::test]
async fn jupyter_starts_on_demand_and_answers_its_owner_alone_through_the_proxy() {
    let Scene {
        h,
        first: _,
        alice,
        bob,
        _agent,
    } = scene().await;

    // The image's label declares the app; a preopen port may not take its port.
    let (status, refused) = h
        .create(
            &alice,
            json!({"image": "berth/jupyter:latest", "preopen_ports": [8888],
                   "resources": {"cpu": 1, "memory": "1g"}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["error"]["field"], "preopen_ports[0]");
    let (id, detail) = running_session(
        &h,
        &alice,
        json!({"image": "berth/jupyter:latest", "resources": {"cpu": 1, "memory": "1g"}}),
    )
    .await;
    assert_eq!(detail["request"]["apps"][2]["name"], "jupyter");

    let start = format!("/v1/sessions/{id}/apps/jupyter/start");
    let (status, _) = h.post(&bob, &start, json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not bob's session");
    let started = tokio::time::timeout(JUPYTER_PATIENCE, h.post(&alice, &start, json!({})))
        .await
        .expect("the start is answered");
    assert_eq!(started.0, StatusCode::OK, "{}", started.1);
    assert_eq!(started.1["spawned"], true);
    let (status, again) = h.post(&alice, &start, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        again["spawned"], false,
        "a listening app is not started twice"
    );

    // Its published port alone is useless: JupyterLab wants the secret berth started it with.
    let detail = running(&h, &id).await;
    let published = detail["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["container"] == 8888)
        .expect("the app's port is published")["host"]
        .as_u64()
        .unwrap();
    let direct = browser()
        .get(format!("http://127.0.0.1:{published}/api/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), StatusCode::FORBIDDEN);

    let (status, opened) = app_call(&h, &alice, &id, "jupyter", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let port = opened["port"].as_u64().unwrap();
    let api = format!("http://127.0.0.1:{port}/api/status");
    let anonymous = browser().get(&api).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED, "no cookie");
    let bobs = browser()
        .get(&api)
        .header("x-api-key", &bob)
        .send()
        .await
        .unwrap();
    assert_eq!(bobs.status(), StatusCode::UNAUTHORIZED, "another user");
    let cookie = redeem(opened["url"].as_str().unwrap()).await.unwrap();
    let owners = browser()
        .get(&api)
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(owners.status(), StatusCode::OK);
    let status: Value = owners.json().await.unwrap();
    assert!(
        status.get("kernels").is_some(),
        "JupyterLab's API: {status}"
    );
    let (_, listed) = h.get(&bob, &format!("/v1/sessions/{id}/apps")).await;
    assert_eq!(listed["error"]["code"], "not_found", "bob sees nothing");

    // The terminal: ttyd's protocol over a WebSocket through the same door, tmux inside.
    let (status, started) = app_call(&h, &alice, &id, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let (status, opened) = app_call(&h, &alice, &id, "ttyd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let cookie = redeem(opened["url"].as_str().unwrap()).await.unwrap();
    let terminal_port = opened["port"].as_u64().unwrap() as u16;
    let (status, page) = get_path(terminal_port, "/", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("/__berth/terminal.js") && page.contains("/__berth/xterm.min.js"),
        "the gateway's terminal page: {page}"
    );
    // Its script and xterm.js are the gateway's own, served on the circuit's port.
    let (status, script) = get_path(terminal_port, "/__berth/terminal.js", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(script.contains("[\"tty\"]"), "{script}");
    let (status, _) = get_path(terminal_port, "/__berth/xterm.min.js", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let mut terminal = terminal(opened["port"].as_u64().unwrap() as u16, &cookie).await;
    let files = terminal
        .run("ls /home/work; echo done-$((6*7))", "done-42")
        .await;
    assert!(
        files.contains("id_container"),
        "the session's SSH key: {files}"
    );
    let authorized = terminal
        .run(
            "cut -c1-11 /home/work/.ssh/authorized_keys; stat -c %a /home/work/id_container; echo end-$((1+1))",
            "end-2",
        )
        .await;
    assert!(authorized.contains("ssh-ed25519"), "{authorized}");
    assert!(
        authorized.contains("600"),
        "the private key is its owner's: {authorized}"
    );
    let windows = terminal
        .run(
            "tmux new-window -d; tmux list-windows -F 'window-#{window_index}' | tr '\\n' ' '; echo",
            "window-1",
        )
        .await;
    assert!(windows.contains("window-0"), "{windows}");
}

#[tokio::test]
async fn the_ssh_server_is_reached_through_a_tunnel_and_the_shell_runs_in_the_callers_terminal() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let Scene {
        h,
        first: _,
        alice,
        bob: _,
        _agent,
    } = scene().await;
    let (id, detail) = running_session(
        &h,
        &alice,
        json!({"image": "berth/jupyter:latest", "resources": {"cpu": 1, "memory": "512m"}}),
    )
    .await;
    let sshd = detail["request"]["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "sshd")
        .expect("an interactive session lists the SSH server")
        .clone();
    assert_eq!(
        (&sshd["protocol"], &sshd["ports"]),
        (&json!("tcp"), &json!([2200]))
    );
    let (status, started) = app_call(&h, &alice, &id, "sshd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");

    // A private circuit: its port opens a tunnel to the holder of its cookie, and only that.
    let (status, opened) = app_call(&h, &alice, &id, "sshd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    assert_eq!(opened["protocol"], "tcp");
    let port = opened["port"].as_u64().unwrap() as u16;
    let (status, _) = get_path(port, "/__berth/tunnel", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no cookie, no tunnel");
    let door = berth::console::redeem(opened["url"].as_str().unwrap())
        .await
        .unwrap();
    let (status, page) = get_path(port, "/", Some(&door.cookie)).await;
    assert_eq!(status, StatusCode::UPGRADE_REQUIRED, "{page}");
    assert!(page.contains("berth session app tunnel"), "{page}");
    let mut banner = String::new();
    let mut remote = berth::console::tunnel(&door).await.unwrap();
    remote.read_line(&mut banner).await.unwrap();
    assert!(banner.starts_with("SSH-2.0-dropbear"), "{banner}");
    let forged = berth::console::Door {
        authority: door.authority.clone(),
        cookie: "berth_app_forged=1".into(),
    };
    let refused = berth::console::tunnel(&forged).await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused:#}");

    // A real login with the session's own key, downloaded by its owner (the same bytes as
    // the session's /home/work/id_container), through a local port the tunnel serves.
    let key = std::env::temp_dir().join(format!("berth-test-key-{id}"));
    let ssh_key_of = |caller: &str| {
        h.http
            .get(format!("{}/v1/sessions/{id}/ssh-key", h.base))
            .header("x-api-key", caller)
            .send()
    };
    // The start waits for the key, so a running session has it from its first answer.
    let downloaded = ssh_key_of(&alice).await.unwrap();
    assert_eq!(downloaded.status(), StatusCode::OK);
    assert_eq!(
        downloaded.headers()["content-disposition"],
        "attachment; filename=\"id_container\""
    );
    let private_key = downloaded.text().await.unwrap();
    assert!(
        private_key.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{private_key}"
    );
    let inside = std::process::Command::new("docker")
        .args([
            "exec",
            detail["containers"][0]["container_id"].as_str().unwrap(),
            "cat",
            "/home/work/id_container",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&inside.stdout), private_key);
    let stranger = h.user("mallory@example.com").await;
    let hidden = ssh_key_of(&stranger).await.unwrap();
    assert_eq!(hidden.status(), StatusCode::NOT_FOUND, "another user's key");
    let no_event_holds_it = h
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM events WHERE strpos(payload::text, $1) > 0",
            &[&private_key.lines().nth(1).unwrap()],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(no_event_holds_it, 0, "the key is no event's");
    let private = private_key.into_bytes();
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key)
            .unwrap();
        file.write_all(&private).unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap();
    let tunnels = tokio::spawn(berth::console::serve_tunnels(door.clone(), listener));
    let login = tokio::process::Command::new("ssh")
        .arg("-i")
        .arg(&key)
        .args(["-p", &local.port().to_string()])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ])
        .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=30"])
        .args(["work@127.0.0.1", "echo ssh-$((6*7)) $HOME"])
        .output();
    let login = tokio::time::timeout(Duration::from_secs(60), login)
        .await
        .expect("ssh ends")
        .expect("an ssh client is installed (infra/test.sh installs openssh-client)");
    let _ = std::fs::remove_file(&key);
    tunnels.abort();
    let said = String::from_utf8_lossy(&login.stdout);
    assert!(
        login.status.success() && said.contains("ssh-42 /home/work"),
        "{said} {}",
        String::from_utf8_lossy(&login.stderr)
    );

    // A public circuit carries the bytes straight from its port.
    let (status, public) = app_call(&h, &alice, &id, "sshd", "open", json!({"public": true})).await;
    assert_eq!(status, StatusCode::OK, "{public}");
    let public_port = public["port"].as_u64().unwrap() as u16;
    assert_eq!(
        public["url"],
        format!("tcp://127.0.0.1:{public_port}"),
        "{public}"
    );
    let raw = tokio::net::TcpStream::connect(("127.0.0.1", public_port))
        .await
        .unwrap();
    let mut banner = String::new();
    BufReader::new(raw).read_line(&mut banner).await.unwrap();
    assert!(banner.starts_with("SSH-2.0-"), "{banner}");

    // `berth session shell`: the terminal on the caller's own input and output, until the
    // shell inside exits. (The pool's two ports are taken: the SSH circuits close first.)
    let (status, _) = app_call(&h, &alice, &id, "sshd", "close", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app_call(&h, &alice, &id, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, opened) = app_call(&h, &alice, &id, "ttyd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let door = berth::console::redeem(opened["url"].as_str().unwrap())
        .await
        .unwrap();
    let keys: &[u8] = b"echo shell-$((6*7))\rexit\r";
    let mut screen = Vec::new();
    let (_, resizes) = tokio::sync::mpsc::channel(1);
    let ran = berth::console::shell(&door, keys, &mut screen, (100, 30), resizes);
    tokio::time::timeout(Duration::from_secs(30), ran)
        .await
        .expect("the terminal ends when its shell exits")
        .unwrap();
    let screen = String::from_utf8_lossy(&screen);
    assert!(screen.contains("shell-42"), "{screen}");

    // Ended, its key is erased with its apps.
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    wait_for(|| async {
        let gone = ssh_key_of(&alice).await.unwrap().status() == StatusCode::CONFLICT;
        gone.then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_circuit_nobody_uses_closes_by_itself() {
    let Scene {
        h,
        first: _,
        alice,
        bob: _,
        _agent,
    } = scene_with_idle(Some(Duration::from_secs(2))).await;
    let (id, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/python:latest", "preopen_ports": [8080],
                   "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    let (status, opened) = app_call(&h, &alice, &id, "8080", "open", json!({"public": true})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let port = opened["port"].as_u64().unwrap() as u16;

    // A connection open through it keeps it, silent as it is, past the idle time.
    let held = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.count_events("AppCircuitClosed").await, 0, "in use");

    // Nobody connected and nothing moving: it closes, saying why, and its port goes quiet.
    drop(held);
    let reason: String = wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        let row = client
            .query_opt(
                "SELECT payload->>'reason' FROM events WHERE event_type = 'AppCircuitClosed'",
                &[],
            )
            .await
            .unwrap();
        row.map(|r| r.get(0))
    })
    .await;
    assert_eq!(reason, "idle");
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err());
    let (_, listed) = h.get(&alice, &format!("/v1/sessions/{id}/apps")).await;
    assert_eq!(listed["circuits"], json!([]), "{listed}");
}

#[tokio::test]
async fn the_terminal_page_runs_what_is_typed_in_a_browser() {
    let Some(browser) = crate::chrome::browser().await else {
        return;
    };
    let Scene {
        h,
        first: _,
        alice,
        bob: _,
        _agent,
    } = scene().await;
    let (id, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/python:latest", "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    let (status, started) = app_call(&h, &alice, &id, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let (status, opened) = app_call(&h, &alice, &id, "ttyd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");

    // The link leaves the circuit's cookie and lands on the gateway's terminal page, whose
    // WebSocket brings the shell's prompt.
    let client = &browser.client;
    client
        .goto(opened["url"].as_str().unwrap())
        .await
        .expect("the browser follows the link");
    let port = opened["port"].as_u64().unwrap();
    assert_eq!(
        client.current_url().await.unwrap().as_str(),
        format!("http://127.0.0.1:{port}/")
    );
    browser.wait_for_text("#").await;
    let emulator = client
        .execute("return typeof window.Terminal === 'function'", vec![])
        .await
        .unwrap();
    assert_eq!(
        emulator,
        json!(true),
        "the page draws with the embedded xterm.js"
    );

    // Keys typed into the page run in the session.
    let typing = client.active_element().await.unwrap();
    let enter = char::from(fantoccini::key::Key::Enter);
    typing
        .send_keys(&format!("echo browser-$((6*7)){enter}"))
        .await
        .unwrap();
    browser.wait_for_text("browser-42").await;
}

/// The seeds' network idleness: only a user's traffic counts. A session whose process moves
/// bytes steadily on its own network with nobody at it (its container's counters climbing,
/// which once kept it alive) is reaped at its network-idle timeout; one whose terminal is in
/// use is kept past it.
#[tokio::test]
async fn a_session_downloading_with_nobody_at_it_is_network_idle_while_one_in_use_is_kept() {
    let Scene {
        h,
        first: _,
        alice,
        bob: _,
        _agent,
    } = scene().await;
    const TIMEOUT: u64 = 12;
    h.set_group_idle_checks(
        "default",
        events::idleness::IdleChecks {
            max_lifetime_secs: Some(3600),
            network_idle_timeout_secs: Some(TIMEOUT),
            utilization: None,
        },
    )
    .await;
    // Its own connections, again and again, to the host its network's gateway leads to (which
    // refuses sessions each one: bytes both ways on the container's interface).
    // refuses sessions each one) and datagrams to an address beyond it: bytes out of, and
    // back into, the container's interface.
    let fetching = "host=$(ip route | awk '/default/ {print $3}'); \
                    while true; do nc -w 1 $host 80 < /dev/null; \
                    echo datagram | nc -u -w 1 198.51.100.1 9; sleep 0.2; done";
    let shape = json!({"cpu": 0.5, "memory": "64m"});
    let (downloader, detail) = running_session(
        &h,
        &alice,
        json!({"image": "berth/shell:latest", "startup_command": fetching, "resources": shape}),
    )
    .await;
    let container = detail["containers"][0]["container_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // What the container's interface has carried, read inside it while it runs.
    let carried = || {
        let out = std::process::Command::new("docker")
            .args([
                "exec",
                &container,
                "sh",
                "-c",
                "cat /sys/class/net/eth0/statistics/tx_bytes",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .ok()
    };
    let (in_use, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/shell:latest", "resources": shape}),
    )
    .await;
    let (status, started) = app_call(&h, &alice, &in_use, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let (status, opened) = app_call(&h, &alice, &in_use, "ttyd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let cookie = redeem(opened["url"].as_str().unwrap()).await.unwrap();
    let mut terminal = terminal(opened["port"].as_u64().unwrap() as u16, &cookie).await;

    // Someone types in the one terminal every two seconds while the other session downloads,
    // until the downloader is reaped and then past the in-use session's own timeout.
    let began = tokio::time::Instant::now();
    let mut reaped_at = None;
    let mut counters = Vec::new();
    let mut n = 0;
    loop {
        n += 1;
        let said = terminal
            .run(
                &format!("echo typed-$(({n}*2))"),
                &format!("typed-{}", n * 2),
            )
            .await;
        assert!(said.contains(&format!("typed-{}", n * 2)), "{said}");
        let (_, detail) = h.get(&alice, &format!("/v1/sessions/{downloader}")).await;
        if reaped_at.is_none() {
            counters.extend(carried());
        }
        if reaped_at.is_none() && detail["status"] == "TERMINATED" {
            reaped_at = Some(began.elapsed());
            let reason = detail["status_reason"].as_str().unwrap();
            assert!(reason.contains("network_idle checker"), "{reason}");
        }
        match reaped_at {
            Some(at) if began.elapsed() > at + Duration::from_secs(TIMEOUT + 2) => break,
            None if began.elapsed() > Duration::from_secs(120) => {
                panic!("the downloader was never reaped: {detail}")
            }
            _ => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
    assert!(
        counters.first() < counters.last(),
        "the container's own bytes climbed while it was watched: {counters:?}"
    );
    let (status, detail) = h.get(&alice, &format!("/v1/sessions/{in_use}")).await;
    assert_eq!(
        (status, detail["status"].as_str()),
        (StatusCode::OK, Some("RUNNING")),
        "the session in use is kept past its timeout: {detail}"
    );
    let (_, readings) = h.get(&alice, &format!("/v1/sessions/{in_use}/idle")).await;
    let network = readings["readings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["checker"] == "network_idle")
        .unwrap_or_else(|| panic!("no network reading: {readings}"));
    assert_eq!(network["fires"], false, "{readings}");
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{in_use}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&in_use, |s: &Value| s["status"] == "TERMINATED")
        .await;
}

#[tokio::test]
async fn the_terminal_runs_in_an_image_without_python_follows_its_window_and_ends_with_it() {
    let Scene {
        h,
        first: _,
        alice,
        bob: _,
        _agent,
    } = scene().await;
    let (id, detail) = running_session(
        &h,
        &alice,
        json!({"image": "berth/shell:latest", "resources": {"cpu": 0.5, "memory": "64m"}}),
    )
    .await;
    let container = &detail["containers"][0];
    let container_id = container["container_id"].as_str().unwrap().to_owned();
    let in_container = |line: &str| {
        let out = std::process::Command::new("docker")
            .args(["exec", &container_id, "sh", "-c", line])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(
        in_container("command -v python3 || echo none").trim(),
        "none",
        "busybox alone"
    );

    assert_eq!(
        in_container("command -v tmux || echo none").trim(),
        "none",
        "no tmux of its own either"
    );

    // The agent serves the terminal on its own address, and its port alone lets nobody in.
    let served = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["container"] == 7681)
        .expect("the terminal's port is reported")["host"]
        .as_u64()
        .unwrap() as u16;
    let (status, said) = get_path(served, "/ws", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{said}");

    let (status, started) = app_call(&h, &alice, &id, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let (status, opened) = app_call(&h, &alice, &id, "ttyd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let cookie = redeem(opened["url"].as_str().unwrap()).await.unwrap();
    let port = opened["port"].as_u64().unwrap() as u16;

    let mut terminal = terminal(port, &cookie).await;
    let said = terminal
        .run(
            "command -v python3 || echo no-python-$((6*7)); pwd",
            "no-python-42",
        )
        .await;
    assert!(said.contains("no-python-42"), "{said}");
    // The hello's size, then a resize message: the shell's window follows (tmux keeps a
    // row for its status line).
    let size = terminal
        .run("stty size; echo size-$((2+3))", "size-5")
        .await;
    assert!(size.contains("29 120"), "the hello's window: {size}");
    // tmux hears of the new size through its client, a moment after the shell could: asked
    // again until it has.
    terminal.resize(100, 40).await;
    let mut size = String::new();
    for n in 6..40 {
        size = terminal
            .run(
                &format!("stty size; echo size-$((3+{}))", n - 3),
                &format!("size-{n}"),
            )
            .await;
        if size.contains("39 100") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(size.contains("39 100"), "resized: {size}");

    // berth's own tmux, lent to an image that has none: Ctrl-B c opens a second window.
    let windows = || in_container("/opt/berth/bin/tmux list-windows -t main | wc -l");
    assert_eq!(windows().trim(), "1", "one window");
    terminal.keys("\u{2}c").await;
    let mut listed = windows();
    for _ in 0..50 {
        if listed.trim() == "2" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        listed = windows();
    }
    assert_eq!(listed.trim(), "2", "Ctrl-B c opened a window");
    let said = terminal
        .run("echo second-$((5*5)) $TMUX_PANE", "second-25")
        .await;
    assert!(
        said.contains("second-25 %1"),
        "typed into the new window: {said}"
    );

    // A terminal whose client leaves leaves no client behind; tmux keeps its shells for the
    // next tab, as the seeds' terminal does.
    let clients = || in_container("ps -o args | grep -c '^{tmux: client}'");
    assert_eq!(clients().trim(), "1", "one terminal's tmux client");
    drop(terminal);
    let mut left = clients();
    for _ in 0..100 {
        if left.trim() == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        left = clients();
    }
    assert_eq!(left.trim(), "0", "the client hung up with its terminal");
    assert_eq!(windows().trim(), "2", "the session stays for the next tab");

    // An open terminal ends with its session.
    let mut second = self::terminal(port, &cookie).await;
    second.run("echo again-$((4*4))", "again-16").await;
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(
        second.ends_within(Duration::from_secs(90)).await,
        "the terminal closes when its session ends"
    );
    // The agent stops listening for it once it has removed the session's container.
    let mut listening = true;
    for _ in 0..300 {
        listening = std::net::TcpStream::connect(("127.0.0.1", served)).is_ok();
        if !listening {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!listening, "the agent no longer listens for it");
}

#[tokio::test]
async fn the_terminal_outlives_a_restart_of_its_agent() {
    let Scene {
        h,
        first: _,
        alice,
        bob: _,
        _agent: (agent, cleanup, data),
    } = scene().await;
    let (id, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/shell:latest", "resources": {"cpu": 0.5, "memory": "64m"}}),
    )
    .await;
    let (status, started) = app_call(&h, &alice, &id, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let (status, opened) = app_call(&h, &alice, &id, "ttyd", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let cookie = redeem(opened["url"].as_str().unwrap()).await.unwrap();
    let port = opened["port"].as_u64().unwrap() as u16;
    let mut before = terminal(port, &cookie).await;
    before.run("echo before-$((6*7))", "before-42").await;

    // The agent dies and comes back: it adopts the session and serves its terminal again on
    // the same port, where the same circuit and token reach it.
    crate::containers::kill(agent).await;
    assert!(
        before.ends_within(Duration::from_secs(30)).await,
        "a terminal ends with its agent"
    );
    let _back = spawn_agent(&h, &cleanup.0, &data, 8_000, None).await;
    let mut after = None;
    for _ in 0..150 {
        if let Some(t) = try_terminal(port, &cookie).await {
            after = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut after = after.expect("the terminal answers again once its agent is back");
    after.run("echo after-$((6*7))", "after-42").await;
}

/// A ttyd client: the WebSocket (subprotocol `tty`), its hello, and keystrokes.
struct Terminal {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

async fn terminal(port: u16, cookie: &str) -> Terminal {
    try_terminal(port, cookie)
        .await
        .expect("the terminal answers through the proxy")
}

/// A terminal, if it answers through the proxy now.
async fn try_terminal(port: u16, cookie: &str) -> Option<Terminal> {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let mut request = format!("ws://127.0.0.1:{port}/ws")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("cookie", cookie.parse().unwrap());
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "tty".parse().unwrap());
    let (mut socket, answer) = tokio_tungstenite::connect_async(request).await.ok()?;
    assert_eq!(
        answer.headers()["sec-websocket-protocol"],
        "tty",
        "the subprotocol passes the proxy"
    );
    let hello = json!({"AuthToken": "", "columns": 120, "rows": 30}).to_string();
    socket.send(Message::text(hello)).await.unwrap();
    Some(Terminal { socket })
}

impl Terminal {
    /// Sends ttyd's resize message.
    async fn resize(&mut self, columns: u16, rows: u16) {
        use futures::SinkExt;
        use tokio_tungstenite::tungstenite::Message;
        let body = json!({"columns": columns, "rows": rows});
        self.socket
            .send(Message::binary(format!("1{body}").into_bytes()))
            .await
            .unwrap();
    }

    /// Whether the server closes the socket (or the connection ends) within `bound`.
    async fn ends_within(&mut self, bound: Duration) -> bool {
        use futures::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        let ended = async {
            loop {
                match self.socket.next().await {
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                    Some(Ok(_)) => {}
                }
            }
        };
        tokio::time::timeout(bound, ended).await.is_ok()
    }

    /// Types `keys` as they are (`\u{2}` is Ctrl-B), without Enter.
    async fn keys(&mut self, keys: &str) {
        use futures::SinkExt;
        use tokio_tungstenite::tungstenite::Message;
        self.socket
            .send(Message::binary(format!("0{keys}").into_bytes()))
            .await
            .unwrap();
    }

    /// Types `line` and Enter; what the terminal printed until `until` appears.
    async fn run(&mut self, line: &str, until: &str) -> String {
        use futures::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let keys = format!("0{line}\r");
        self.socket
            .send(Message::binary(keys.into_bytes()))
            .await
            .unwrap();
        let mut seen = String::new();
        let read = async {
            while let Some(Ok(message)) = self.socket.next().await {
                let data = message.into_data();
                if data.first() == Some(&b'0') {
                    seen.push_str(&String::from_utf8_lossy(&data[1..]));
                    if seen.contains(until) {
                        return;
                    }
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .is_err()
        {
            panic!("`{until}` never came; the terminal printed: {seen}");
        }
        seen
    }
}
