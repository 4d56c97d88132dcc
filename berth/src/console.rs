//! The client side of berth's app proxy, for the CLI and the tests: trading a circuit's
//! single-use link for its cookie ([`redeem`]), entering a private raw TCP circuit through a
//! tunnel ([`tunnel`], [`serve_tunnels`]), and a terminal in the user's own terminal
//! ([`shell`], ttyd's protocol over the terminal's circuit).

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// A circuit its owner may pass: where it listens and the cookie its link gave.
#[derive(Debug, Clone)]
pub struct Door {
    /// `host:port` of the circuit.
    pub authority: String,
    /// `name=value`, as a `Cookie` header carries it.
    pub cookie: String,
}

/// Follows a private circuit's single-use link (from `POST .../apps/{app}/open`) for the
/// cookie it sets.
pub async fn redeem(url: &str) -> anyhow::Result<Door> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        bail!("`{url}` names no host and port");
    };
    events::tls::use_ring();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let answer = client
        .get(parsed.clone())
        .send()
        .await
        .with_context(|| format!("reach the app proxy at {host}:{port}"))?;
    if answer.status() != StatusCode::SEE_OTHER || !answer.headers().contains_key(LOCATION) {
        bail!(
            "the app proxy did not take the link ({}): it works once, within a minute",
            answer.status()
        );
    }
    let cookie = answer
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("the app proxy set no cookie")?
        .to_owned();
    Ok(Door {
        authority: format!("{host}:{port}"),
        cookie,
    })
}

/// A connection to a private raw TCP app through its circuit: the upgrade to a tunnel, then
/// the app's bytes (any it sent already are kept in the buffer).
pub async fn tunnel(door: &Door) -> anyhow::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect(&door.authority)
        .await
        .with_context(|| format!("reach the circuit at {} (did it close?)", door.authority))?;
    stream.set_nodelay(true)?;
    let mut stream = BufReader::new(stream);
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: {}\r\nCookie: {}\r\n\r\n",
        gateway::proxy::TUNNEL_PATH,
        door.authority,
        gateway::proxy::TUNNEL_PROTOCOL,
        door.cookie
    );
    stream.get_mut().write_all(request.as_bytes()).await?;
    let mut status = String::new();
    stream.read_line(&mut status).await?;
    let mut header = String::new();
    loop {
        header.clear();
        if stream.read_line(&mut header).await? == 0 || header == "\r\n" {
            break;
        }
    }
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if code != "101" {
        let mut page = String::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            stream.read_to_string(&mut page),
        )
        .await;
        bail!(
            "the circuit refused the tunnel: {}",
            text_of(status.trim(), &page)
        );
    }
    Ok(stream)
}

/// The title and text of one of the proxy's pages, for a person.
fn text_of(status: &str, page: &str) -> String {
    let mut text = String::new();
    let mut inside_tag = false;
    for c in page.chars() {
        match c {
            '<' => inside_tag = true,
            '>' => {
                inside_tag = false;
                text.push(' ');
            }
            c if !inside_tag => text.push(c),
            _ => {}
        }
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    format!("{status}: {}", words.join(" "))
}

/// Carries every connection `listener` accepts through its own tunnel to the app, until
/// the task is dropped.
pub async fn serve_tunnels(door: Door, listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (mut local, _) = listener.accept().await?;
        let door = door.clone();
        tokio::spawn(async move {
            match tunnel(&door).await {
                Ok(mut remote) => {
                    let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
                }
                Err(e) => eprintln!("{e:#}"),
            }
        });
    }
}

/// Runs the session's terminal (ttyd's protocol) on `input` and `output` until it ends:
/// keystrokes from `input`, the screen to `output`, the window's size first from `size` and
/// then from `resizes`. An `input` that ends leaves the terminal running until the shell
/// inside exits.
pub async fn shell(
    door: &Door,
    mut input: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    size: (u16, u16),
    mut resizes: mpsc::Receiver<(u16, u16)>,
) -> anyhow::Result<()> {
    let mut request = format!("ws://{}/ws", door.authority).into_client_request()?;
    request
        .headers_mut()
        .insert("cookie", door.cookie.parse().context("the cookie")?);
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "tty".parse()?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .with_context(|| format!("open the terminal at {}", door.authority))?;
    let (columns, rows) = size;
    let hello = serde_json::json!({"AuthToken": "", "columns": columns, "rows": rows});
    socket.send(Message::text(hello.to_string())).await?;
    let mut keys = vec![0u8; 4096];
    let mut typing = true;
    let mut resizing = true;
    loop {
        tokio::select! {
            read = input.read(&mut keys[1..]), if typing => {
                let n = read?;
                if n == 0 {
                    typing = false;
                    continue;
                }
                keys[0] = b'0';
                socket.send(Message::binary(keys[..=n].to_vec())).await?;
            }
            resized = resizes.recv(), if resizing => match resized {
                Some((columns, rows)) => {
                    let body = serde_json::json!({"columns": columns, "rows": rows});
                    socket.send(Message::binary(format!("1{body}").into_bytes())).await?;
                }
                None => resizing = false,
            },
            message = socket.next() => match message {
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(message)) => {
                    let data = message.into_data();
                    if data.first() == Some(&b'0') {
                        output.write_all(&data[1..]).await?;
                        output.flush().await?;
                    }
                }
                Some(Err(e)) => {
                    use tokio_tungstenite::tungstenite::Error;
                    if matches!(e, Error::ConnectionClosed | Error::AlreadyClosed | Error::Protocol(_)) {
                        break;
                    }
                    return Err(e.into());
                }
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_page_reads_as_one_line() {
        let page = "<!doctype html><html><head><title>Nothing answers yet</title></head>\
                    <body><h1>Nothing answers yet</h1><p>No server listens on port 2200.</p></body></html>";
        assert_eq!(
            text_of("HTTP/1.1 502 Bad Gateway", page),
            "HTTP/1.1 502 Bad Gateway: Nothing answers yet Nothing answers yet No server listens on port 2200."
        );
    }
}
