//! Apps on their own site (S1, S11, S12): a public raw circuit relays nothing of an HTTP
//! request, apps set and read none of berth's cookies, circuits have origins of their own,
//! and with TLS berth's cookies are `__Host-` and Secure.

use std::time::Duration;

use crate::apps::{app_call, running_session, scene_with, Scene};
use crate::common::*;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE, STRICT_TRANSPORT_SECURITY};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// Apps on their own site (S1, S11, S12)

/// What runs on the SSH server's port of the attacker's session: a listener that records
/// each connection's bytes (`/tmp/got`) and each connection's end (`/tmp/ended`).
const RECORDER: &str = r#"exec python3 - <<'PY'
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 2200))
s.listen(8)
while True:
    c, _ = s.accept()
    try:
        while True:
            data = c.recv(4096)
            if not data:
                break
            with open("/tmp/got", "ab") as f:
                f.write(data)
    except OSError:
        pass
    c.close()
    with open("/tmp/ended", "a") as f:
        f.write("1\n")
PY"#;

/// A web app that tries to plant cookies of berth's (the console's, with and without its
/// `__Host-` prefix, and a circuit's for the whole apps domain) beside one of its own, and
/// answers with the path and the cookies it was sent.
const COOKIE_PLANTER: &str = r#"exec python3 - <<'PY'
import http.server, json
class Planter(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "cookie": self.headers.get("Cookie")}).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "berth_console=planted; Path=/")
        self.send_header("Set-Cookie", "__Host-berth_console=planted; Path=/; Secure")
        self.send_header("Set-Cookie", "berth_app_0=planted; Domain=apps.localhost; Path=/")
        self.send_header("Set-Cookie", "app_own=1; Path=/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Planter).serve_forever()
PY"#;

/// What `line` prints in the container `id`.
fn in_container(id: &str, line: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["exec", id, "sh", "-c", line])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A browser-like client (no redirects followed) trusting `ca` when given.
fn client_trusting(ca: Option<&std::path::Path>) -> reqwest::ClientBuilder {
    events::tls::use_ring();
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15));
    match ca {
        Some(ca) => builder.tls_certs_merge(
            reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).unwrap()).unwrap(),
        ),
        None => builder,
    }
}

/// Signs in to the console with `key` as a browser on the console's page does: the answer
/// (its `Set-Cookie` holds the console's cookie).
async fn console_sign_in(h: &Harness, client: &reqwest::Client, key: &str) -> reqwest::Response {
    let answer = client
        .post(format!("{}/console/sign-in", h.base))
        .header("origin", &h.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("key={key}&next=%2Fconsole%2Fsessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SEE_OTHER, "signed in");
    answer
}

/// The `name=value` of a `Set-Cookie` answer's first cookie, and the whole header.
fn set_cookie(answer: &reqwest::Response) -> (String, String) {
    let whole = answer.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    (whole.split(';').next().unwrap().to_owned(), whole)
}

/// The attacker's set-up: a session of `alice` listening on the SSH server's port (with the
/// image's own Python, [`RECORDER`]) behind a public raw circuit. Answers the container, the
/// circuit's port and how many connections the listener has seen end, once a raw client that
/// speaks first, as SSH's does, has got through.
async fn attackers_public_raw_circuit(h: &Harness, alice: &str) -> (String, u16, u32) {
    let (id, detail) = running_session(
        h,
        alice,
        json!({"image": "berth/python:latest", "startup_command": RECORDER,
               "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    let container = detail["containers"][0]["container_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, public) = app_call(h, alice, &id, "sshd", "open", json!({"public": true})).await;
    assert_eq!(status, StatusCode::OK, "{public}");
    let port = public["port"].as_u64().unwrap() as u16;

    let mut relayed = String::new();
    for _ in 0..150 {
        let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        raw.write_all(b"SSH-2.0-probe\r\n").await.unwrap();
        raw.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut rest)).await;
        relayed = in_container(&container, "cat /tmp/got 2>/dev/null");
        if !relayed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        relayed, "SSH-2.0-probe\r\n",
        "a raw circuit carries raw bytes"
    );
    let ends_before = wait_for(|| async {
        let n = connections_ended(&container);
        (n >= 1).then_some(n)
    })
    .await;
    (container, port, ends_before)
}

/// How many connections the [`RECORDER`] in `container` has seen end.
fn connections_ended(container: &str) -> u32 {
    in_container(container, "cat /tmp/ended 2>/dev/null | wc -l")
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Waits until the [`RECORDER`] in `container` has seen more than `before` connections end,
/// then says that it received no byte but the first raw client's.
async fn the_listener_received_nothing_more(container: &str, before: u32) {
    wait_for(|| async { (connections_ended(container) > before).then_some(()) }).await;
    assert_eq!(
        in_container(container, "cat /tmp/got"),
        "SSH-2.0-probe\r\n",
        "the listener received no byte of HTTP"
    );
}

#[tokio::test]
async fn a_public_raw_circuit_relays_nothing_of_an_http_request_carrying_the_console_cookie() {
    let Scene {
        h, alice, _agent, ..
    } = scene_with(test_config()).await;
    let (container, port, ends_before) = attackers_public_raw_circuit(&h, &alice).await;

    // A superadmin signed in to the console; the attacker's page sends their browser to the
    // circuit, and the browser hands it every cookie of the host (cookies ignore ports).
    let console = client_trusting(None).build().unwrap();
    let (console_cookie, _) = set_cookie(&console_sign_in(&h, &console, &h.admin_key).await);
    assert!(
        console_cookie.starts_with("berth_console="),
        "{console_cookie}"
    );
    let mut browser = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: Mozilla/5.0\r\n\
         Accept: image/avif,image/webp,*/*\r\nSec-Fetch-Site: same-site\r\n\
         Cookie: theme=dark; {console_cookie}\r\n\r\n"
    );
    browser.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), browser.read_to_end(&mut answer))
        .await
        .expect("the circuit closes the connection")
        .unwrap_or_default();
    assert!(
        answer.is_empty(),
        "a raw circuit answers HTTP with nothing: {}",
        String::from_utf8_lossy(&answer)
    );

    // The session's listener saw that connection come and go without a byte of it.
    the_listener_received_nothing_more(&container, ends_before).await;
}

/// The attack as the review ran it, in Chromium: a superadmin signed in to the console opens
/// a page of the same host (another port) holding two images, one pointing at a listener of
/// the test's own and one at the attacker's public raw circuit. The browser sends the
/// console's cookie with both (cookies ignore ports): the first listener shows that it does,
/// and the circuit passes none of it on.
#[tokio::test]
async fn a_browser_holding_the_console_cookie_sends_none_of_it_through_a_public_raw_circuit() {
    let Some(browser) = crate::chrome::browser().await else {
        return;
    };
    let Scene {
        h, alice, _agent, ..
    } = scene_with(test_config()).await;
    let (container, circuit, ends_before) = attackers_public_raw_circuit(&h, &alice).await;
    let host = reqwest::Url::parse(&h.base).unwrap();
    let host = host.host_str().unwrap().to_owned();

    // The superadmin signs in through the console's form.
    let b = &browser;
    b.client
        .goto(&format!("{}/console/sessions", h.base))
        .await
        .unwrap();
    b.fill("#key", &h.admin_key).await;
    b.click("#sign-in").await;
    b.find("#sessions").await;

    // The attacker's page and the test's own listener, on the same host's other ports.
    let listener = tokio::net::TcpListener::bind((host.as_str(), 0))
        .await
        .unwrap();
    let listener_port = listener.local_addr().unwrap().port();
    let (heard, mut hears) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let request = read_request(&mut conn).await;
            let _ = conn
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await;
            let _ = heard.send(request);
        }
    });
    let page = format!(
        "<!doctype html><title>cats</title>\
         <img src=\"http://{host}:{listener_port}/cat.png\">\
         <img src=\"http://{host}:{circuit}/cat.png\">"
    );
    let site = tokio::net::TcpListener::bind((host.as_str(), 0))
        .await
        .unwrap();
    let site_port = site.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = site.accept().await else {
                return;
            };
            let _ = read_request(&mut conn).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    b.client
        .goto(&format!("http://{host}:{site_port}/"))
        .await
        .unwrap();

    // The browser did send the console's cookie to the host's other ports ...
    let request = tokio::time::timeout(Duration::from_secs(30), hears.recv())
        .await
        .expect("the browser fetched the first image")
        .unwrap();
    assert!(
        request.contains("berth_console="),
        "the browser sends the console's cookie to every port of its host: {request}"
    );
    // ... and the circuit relayed none of it into the attacker's container.
    the_listener_received_nothing_more(&container, ends_before).await;
}

/// A request's head as a test's listener reads it (up to its blank line, within 10 s).
async fn read_request(conn: &mut tokio::net::TcpStream) -> String {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn in_the_subdomain_mode_circuits_and_the_console_have_origins_of_their_own_and_apps_set_none_of_berths_cookies(
) {
    let mut config = test_config();
    config.apps_domain = Some("apps.localhost".into());
    let Scene {
        h, alice, _agent, ..
    } = scene_with(config).await;
    let gateway = reqwest::Url::parse(&h.base).unwrap();
    let gateway_port = gateway.port().unwrap();
    let (id, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/python:latest", "preopen_ports": [8080],
               "startup_command": COOKIE_PLANTER, "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;

    // Two circuits (one private, one public), each on a host of its own under the apps
    // domain, on the gateway's port; none on a port of the pool.
    let (status, private) = app_call(&h, &alice, &id, "8080", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{private}");
    let (status, public) = app_call(&h, &alice, &id, "8080", "open", json!({"public": true})).await;
    assert_eq!(status, StatusCode::OK, "{public}");
    let private_url = reqwest::Url::parse(private["url"].as_str().unwrap()).unwrap();
    let public_url = reqwest::Url::parse(public["url"].as_str().unwrap()).unwrap();
    let origin = |u: &reqwest::Url| u.origin().ascii_serialization();
    let private_host = private_url.host_str().unwrap().to_owned();
    let public_host = public_url.host_str().unwrap().to_owned();
    for (opened, host) in [(&private, &private_host), (&public, &public_host)] {
        let circuit = opened["circuit_id"].as_str().unwrap().replace('-', "");
        assert_eq!(host, &format!("{circuit}.apps.localhost"), "{opened}");
        let port = opened["port"].as_u64().unwrap() as u16;
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "no port of the pool serves it"
        );
    }
    assert_eq!(private_url.port(), Some(gateway_port));
    let origins = [origin(&private_url), origin(&public_url), origin(&gateway)];
    assert!(
        origins[0] != origins[1] && origins[0] != origins[2] && origins[1] != origins[2],
        "{origins:?}"
    );

    // No DNS: every name is the gateway's loopback address.
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], gateway_port));
    let browser = client_trusting(None)
        .resolve(&private_host, at)
        .resolve(&public_host, at)
        .resolve("0123456789abcdef0123456789abcdef.apps.localhost", at)
        .build()
        .unwrap();

    // The private circuit's cookie is its host's alone: host-only, no Domain.
    let redeemed = browser.get(private_url.clone()).send().await.unwrap();
    assert_eq!(redeemed.status(), StatusCode::SEE_OTHER);
    assert_eq!(redeemed.headers()[LOCATION], "/");
    let (cookie, whole) = set_cookie(&redeemed);
    let circuit = private["circuit_id"].as_str().unwrap().replace('-', "");
    assert!(
        cookie.starts_with(&format!("berth_app_{circuit}=")),
        "{whole}"
    );
    assert!(!whole.to_ascii_lowercase().contains("domain"), "{whole}");
    assert!(
        whole.contains("Path=/") && whole.contains("HttpOnly"),
        "{whole}"
    );

    // Through it, with the console's cookie beside its own: the app reads neither, and
    // cannot set any of berth's (only its own cookie comes back).
    let console = client_trusting(None).build().unwrap();
    let (console_cookie, _) = set_cookie(&console_sign_in(&h, &console, &alice).await);
    let root = private_url.join("/a/path").unwrap();
    let mut answer = None;
    for _ in 0..150 {
        let tried = browser
            .get(root.clone())
            .header(COOKIE, format!("{cookie}; {console_cookie}; theme=dark"))
            .send()
            .await
            .unwrap();
        if tried.status() == StatusCode::OK {
            answer = Some(tried);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = answer.expect("the app answers through its circuit");
    let set: Vec<&str> = answer
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        set,
        ["app_own=1; Path=/"],
        "no berth cookie is set by an app"
    );
    let echoed: Value = answer.json().await.unwrap();
    assert_eq!(echoed["path"], "/a/path");
    assert_eq!(echoed["cookie"], "theme=dark", "nor read by it");

    // Another circuit's host is another app, whatever the path: never the console.
    let on_public = browser
        .get(public_url.join("/console/sign-in").unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(on_public.status(), StatusCode::OK);
    let echoed: Value = on_public.json().await.unwrap();
    assert_eq!(echoed["path"], "/console/sign-in", "the app's own page");
    // A name under the apps domain that names no open circuit is no app, and not berth's
    // API either.
    let unknown = browser
        .get(format!(
            "http://0123456789abcdef0123456789abcdef.apps.localhost:{gateway_port}/v1/whoami"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert!(unknown.text().await.unwrap().contains("No such app"));
    // The gateway's own host still serves the console and the API.
    let (status, me) = h.get(&alice, "/v1/whoami").await;
    assert_eq!(status, StatusCode::OK, "{me}");
}

#[tokio::test]
async fn with_tls_cookies_are_secure_and_host_prefixed_hsts_is_sent_and_circuits_serve_https() {
    let ca = testkit::scratch::Authority::new("berth apps CA").unwrap();
    let (cert, key) = ca.issue("gateway", &["localhost", "127.0.0.1"]).unwrap();
    let mut config = test_config();
    config.gateway_tls_cert = Some(cert);
    config.gateway_tls_key = Some(key);
    config.gateway_ca = Some(ca.ca());
    let Scene {
        h, alice, _agent, ..
    } = scene_with(config).await;
    assert!(h.base.starts_with("https://localhost:"), "{}", h.base);
    let browser = client_trusting(Some(&ca.ca())).build().unwrap();

    // The console's cookie: `__Host-`, Secure, HttpOnly, Strict; HSTS on the answer.
    let signed_in = console_sign_in(&h, &browser, &alice).await;
    assert_eq!(
        signed_in.headers()[STRICT_TRANSPORT_SECURITY],
        gateway::STRICT_TRANSPORT
    );
    let (cookie, whole) = set_cookie(&signed_in);
    assert!(cookie.starts_with("__Host-berth_console="), "{whole}");
    for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(whole.contains(attribute), "{attribute}: {whole}");
    }
    assert!(!whole.to_ascii_lowercase().contains("domain"), "{whole}");
    // Only that name is read: a plain cookie any page of the host could set is not.
    let token = cookie.split_once('=').unwrap().1;
    let whoami = |cookie: String| {
        browser
            .get(format!("{}/v1/whoami", h.base))
            .header(COOKIE, cookie)
            .header("sec-fetch-site", "same-origin")
            .send()
    };
    assert_eq!(
        whoami(cookie.clone()).await.unwrap().status(),
        StatusCode::OK
    );
    let plain = whoami(format!("berth_console={token}")).await.unwrap();
    assert_eq!(plain.status(), StatusCode::UNAUTHORIZED);
    assert!(plain.headers().contains_key(STRICT_TRANSPORT_SECURITY));

    // An app's circuit serves HTTPS on its port, with the gateway's certificate.
    let (id, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/python:latest", "preopen_ports": [8080],
               "startup_command": "exec python3 -m http.server 8080",
               "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    let (status, opened) = app_call(&h, &alice, &id, "8080", "open", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    let url = opened["url"].as_str().unwrap();
    let port = opened["port"].as_u64().unwrap();
    assert!(
        url.starts_with(&format!("https://localhost:{port}/__berth/login?ticket=")),
        "{url}"
    );
    let redeemed = browser.get(url).send().await.unwrap();
    assert_eq!(redeemed.status(), StatusCode::SEE_OTHER);
    let (circuit_cookie, whole) = set_cookie(&redeemed);
    assert!(
        circuit_cookie.starts_with("__Host-berth_app_") && whole.contains("Secure"),
        "{whole}"
    );
    let mut listing = None;
    for _ in 0..150 {
        let tried = browser
            .get(format!("https://localhost:{port}/"))
            .header(COOKIE, &circuit_cookie)
            .send()
            .await
            .unwrap();
        if tried.status() == StatusCode::OK {
            listing = Some(tried.text().await.unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listing = listing.expect("the app answers over https");
    assert!(listing.contains("Directory listing"), "{listing}");
    // The same port in the clear serves nothing.
    let in_clear = client_trusting(None)
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{port}/"))
        .header(COOKIE, &circuit_cookie)
        .send()
        .await;
    assert!(
        !in_clear.is_ok_and(|r| r.status().is_success()),
        "no plain HTTP on a circuit's port"
    );
}
