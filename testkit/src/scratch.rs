//! Dependencies of one's own, to take away and give back: a PostgreSQL cluster in a new
//! data directory on a free port (with TLS when asked), a nats-server on its own store, a
//! door to the Docker engine's socket that can be shut, and a certificate authority of
//! one's own ([`Authority`], rcgen) for the TLS tests and `berth bench tls`. The fault-injection tests and `berth bench recovery`
//! stop and start them under a running berth, which never touches them itself.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

/// A free TCP port on loopback, now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("loopback has a free port")
}

fn scratch_dir(what: &str) -> PathBuf {
    let id = uuid::Uuid::new_v4().simple().to_string();
    std::env::temp_dir().join(format!("berth-{what}-{id}"))
}

/// `program` run as the cluster's owner: PostgreSQL refuses to run as root, so as `postgres`
/// there (as infra/services.sh does).
fn as_owner(program: &Path) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command.current_dir("/");
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let output = command.output().with_context(|| format!("run {what}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// A PostgreSQL cluster of one's own (user `berth`, trusted on loopback); stopped and
/// removed when dropped.
pub struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    pub port: u16,
    /// Whether it serves TLS (`ssl=on`, with the certificate and key in its data directory).
    tls: bool,
}

impl Postgres {
    /// Makes a cluster (`initdb`, PostgreSQL's newest install or `BERTH_PG_BIN`) and starts it.
    pub fn start() -> anyhow::Result<Postgres> {
        Postgres::make(None)
    }

    /// [`Postgres::start`], serving TLS (`ssl=on`) with the certificate chain in `cert` and
    /// the key in `key` (PEM); plain connections are still taken.
    pub fn start_with_tls(cert: &Path, key: &Path) -> anyhow::Result<Postgres> {
        Postgres::make(Some((cert, key)))
    }

    fn make(tls: Option<(&Path, &Path)>) -> anyhow::Result<Postgres> {
        let initdb = berth::backup::pg_tool("initdb");
        let bin = initdb
            .parent()
            .context(
                "PostgreSQL's server programs are installed (infra/services.sh installs them)",
            )?
            .to_path_buf();
        let data = scratch_dir("cluster");
        std::fs::create_dir_all(&data)?;
        // The owner must reach the directory; a non-root process owns it already.
        let _ = Command::new("chown").arg("postgres").arg(&data).output();
        run(
            as_owner(&bin.join("initdb")).arg("-D").arg(&data).args([
                "-U",
                "berth",
                "--auth=trust",
                "-E",
                "UTF8",
            ]),
            "initdb",
        )?;
        if let Some((cert, key)) = tls {
            // The server reads them as their owner, the key readable by it alone.
            for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
                let to = data.join(to);
                std::fs::copy(from, &to).with_context(|| format!("copy {}", from.display()))?;
                let _ = Command::new("chown").arg("postgres").arg(&to).output();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))?;
            }
        }
        let cluster = Postgres {
            bin,
            data,
            port: free_port(),
            tls: tls.is_some(),
        };
        cluster.start_again()?;
        Ok(cluster)
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://berth@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server as an operator's fast restart does (`pg_ctl stop -m fast`: every
    /// connection is ended, open transactions are rolled back).
    pub fn stop(&self) -> anyhow::Result<()> {
        run(
            as_owner(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )
    }

    /// Starts the server (again) on its port and data, waiting until it takes connections.
    pub fn start_again(&self) -> anyhow::Result<()> {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.data.display()
        );
        if self.tls {
            options.push_str(" -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key");
        }
        run(
            as_owner(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(self.data.join("server.log"))
                .args(["-o", &options, "-w", "-t", "60", "start"]),
            "pg_ctl start",
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_owner(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.data);
        }
    }
}

/// A nats-server of one's own with JetStream (`BERTH_NATS_SERVER`, or `nats-server` on the
/// path), killed and removed when dropped.
pub struct Nats {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Nats {
    pub fn start() -> anyhow::Result<Nats> {
        let mut nats = Nats {
            port: free_port(),
            dir: scratch_dir("nats"),
            child: None,
        };
        std::fs::create_dir_all(&nats.dir)?;
        nats.start_again()?;
        Ok(nats)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL), keeping what it stored.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again) on its port and store, waiting until it takes connections.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        let binary =
            std::env::var("BERTH_NATS_SERVER").unwrap_or_else(|_| "nats-server".to_owned());
        let log = std::fs::File::create(self.dir.join("nats.log"))?;
        let child = Command::new(&binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.join("js"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {binary} (BERTH_NATS_SERVER)"))?;
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        anyhow::bail!("nats-server did not listen on {}", self.port)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A Unix socket relayed to the Docker engine's (`/var/run/docker.sock`), for an agent
/// given `DOCKER_HOST=unix://<path>`. Shutting it cuts every relayed connection and
/// removes the socket, as the engine restarting does; opening it again relays anew. The
/// engine and its containers run on untouched.
pub struct EngineDoor {
    pub path: PathBuf,
    upstream: PathBuf,
    open: Mutex<Option<CancellationToken>>,
}

impl EngineDoor {
    /// A door at a new path, open.
    pub fn open() -> io::Result<Arc<EngineDoor>> {
        let dir = scratch_dir("engine");
        std::fs::create_dir_all(&dir)?;
        let door = Arc::new(EngineDoor {
            path: dir.join("docker.sock"),
            upstream: PathBuf::from("/var/run/docker.sock"),
            open: Mutex::new(None),
        });
        door.reopen()?;
        Ok(door)
    }

    /// `unix://<path>`, for `DOCKER_HOST`.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Cuts every connection through the door and removes its socket.
    pub fn shut(&self) {
        if let Some(open) = self.open.lock().unwrap_or_else(|e| e.into_inner()).take() {
            open.cancel();
        }
        let _ = std::fs::remove_file(&self.path);
    }

    /// Opens the door again (a new socket at the same path).
    pub fn reopen(&self) -> io::Result<()> {
        let _ = std::fs::remove_file(&self.path);
        let listener = tokio::net::UnixListener::bind(&self.path)?;
        let open = CancellationToken::new();
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = Some(open.clone());
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            loop {
                let client = tokio::select! {
                    _ = open.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(_) => return,
                    },
                };
                let (open, upstream) = (open.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(mut engine) = tokio::net::UnixStream::connect(&upstream).await else {
                        return;
                    };
                    let mut client = client;
                    tokio::select! {
                        _ = open.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut engine) => {}
                    }
                });
            }
        });
        Ok(())
    }
}

impl Drop for EngineDoor {
    fn drop(&mut self) {
        self.shut();
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A certificate authority of one's own: its certificate in `ca.pem` under a new directory,
/// and the certificates it signs beside it. Removed when dropped.
pub struct Authority {
    pub dir: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Authority {
    /// A new CA named `name`.
    pub fn new(name: &str) -> anyhow::Result<Authority> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
        let dir = scratch_dir("pki");
        std::fs::create_dir_all(&dir)?;
        let key = rcgen::KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        std::fs::write(dir.join("ca.pem"), cert.pem())?;
        Ok(Authority {
            dir,
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// The CA's certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Signs a certificate for `names` (host names or IP addresses), for servers and clients
    /// alike: its files `<file>.pem` and `<file>.key` (PEM), as (certificate, key).
    pub fn issue(&self, file: &str, names: &[&str]) -> anyhow::Result<(PathBuf, PathBuf)> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose};
        let key = rcgen::KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or(file));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer)?;
        let (cert_file, key_file) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_file, cert.pem())?;
        std::fs::write(&key_file, key.serialize_pem())?;
        Ok((cert_file, key_file))
    }
}

impl Drop for Authority {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
