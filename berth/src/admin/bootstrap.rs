//! The admin commands that reach the database (BERTH_DATABASE_URL) because no key can exist
//! yet: `init` (the first superadmin on a fresh install), `issue-key --email` without a key
//! (the way back in when no superadmin key is left) and `nats-authorization` without a key
//! (the NATS server's block, which a control plane may need before it can start). Each
//! change is recorded by the same `launcher::access` functions the gateway's endpoints call.

use std::process::ExitCode;

use launcher::access;

/// `berth admin init`: the defaults and the first superadmin, its key printed once.
pub async fn init(config: &berth::config::Config) -> anyhow::Result<ExitCode> {
    let store = crate::connect_store(config).await?;
    match access::bootstrap(store.pool()).await? {
        Some((email, key)) => {
            println!("created superadmin {email}");
            println!("API key (shown only now): {key}");
        }
        None => println!("already initialised"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `berth admin issue-key --email EMAIL` without a key: another API key for that user, for
/// ever or until its expiry.
pub async fn issue_key(
    config: &berth::config::Config,
    email: &str,
    expires_in: Option<i64>,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
) -> anyhow::Result<ExitCode> {
    let expires_at = events::credentials::key_expiry(chrono::Utc::now(), expires_in, expires_at)
        .map_err(|e| anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.message))?;
    let store = crate::connect_store(config).await?;
    println!(
        "API key (shown only now): {}",
        access::issue_key(store.pool(), email, expires_at).await?
    );
    if let Some(at) = expires_at {
        println!("refused from {}", at.to_rfc3339());
    }
    Ok(ExitCode::SUCCESS)
}

/// `berth admin nats-authorization` without a key: the block, from the admitted agents the
/// database holds.
pub async fn nats_authorization(config: &berth::config::Config) -> anyhow::Result<ExitCode> {
    let store = crate::connect_store(config).await?;
    let keys = recorder::admission::admitted_keys(store.pool()).await?;
    super::print_nats_authorization(config, &keys)?;
    Ok(ExitCode::SUCCESS)
}
