//! The CLI against an `https://` gateway: `berth up` listening with a certificate the test
//! makes (rcgen), `berth session` trusting its CA through `BERTH_GATEWAY_CA`, and refusing a
//! gateway whose certificate it cannot check.

mod common;

use common::*;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_talks_to_an_https_gateway_and_checks_its_certificate() {
    let (_pool, url) = fresh_database().await;
    let key = init_install(&url);
    let ca = testkit::scratch::Authority::new("berth test CA").unwrap();
    let (cert, cert_key) = ca.issue("gateway", &["localhost"]).unwrap();
    let id = Uuid::new_v4().simple().to_string();
    let port = testkit::scratch::free_port();
    let mut env = bus_env("tls", &id);
    let more: Vec<(String, String)> = [
        ("BERTH_DATABASE_URL", url.clone()),
        ("BERTH_GATEWAY_LISTEN", format!("127.0.0.1:{port}")),
        ("BERTH_GATEWAY_TLS_CERT", cert.display().to_string()),
        ("BERTH_GATEWAY_TLS_KEY", cert_key.display().to_string()),
        ("BERTH_PROXY_PORTS", "off".into()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into();
    env.extend(more);
    let logs = tempdir("berth-tls");
    let mut up = BerthProcess::start(&["up"], &env, &logs.join("up.log"));

    let cli_env = |ca: Option<&std::path::Path>| {
        let mut env = vec![
            (
                "BERTH_GATEWAY_URL".to_owned(),
                format!("https://localhost:{port}"),
            ),
            ("BERTH_API_KEY".to_owned(), key.clone()),
        ];
        if let Some(ca) = ca {
            env.push(("BERTH_GATEWAY_CA".to_owned(), ca.display().to_string()));
        }
        env
    };
    // The gateway answers once `berth up` has started it.
    let mut listed = None;
    for _ in 0..150 {
        assert!(
            up.still_running(),
            "berth up exited: {}",
            std::fs::read_to_string(logs.join("up.log")).unwrap_or_default()
        );
        let (ok, text) = berth_with(&["session", "ls"], &cli_env(Some(&ca.ca())));
        if ok {
            listed = Some(text);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let listed = listed.unwrap_or_else(|| {
        panic!(
            "berth session ls never reached the https gateway; berth up said: {}",
            std::fs::read_to_string(logs.join("up.log")).unwrap_or_default()
        )
    });
    assert!(listed.contains("STATUS"), "{listed}");

    // Without the CA, the gateway's certificate cannot be checked: refused, not sent.
    let (ok, text) = berth_with(&["session", "ls"], &cli_env(None));
    assert!(!ok, "{text}");
    assert!(text.contains("reach the gateway"), "{text}");

    // Plain HTTP to the HTTPS port gets no answer.
    let (ok, text) = berth_with(
        &["session", "ls"],
        &[
            (
                "BERTH_GATEWAY_URL".to_owned(),
                format!("http://127.0.0.1:{port}"),
            ),
            ("BERTH_API_KEY".to_owned(), key.clone()),
        ],
    );
    assert!(!ok, "{text}");
    up.terminate();
    delete_streams(&env).await;
}
