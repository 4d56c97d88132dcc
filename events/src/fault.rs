//! Which database failures are an outage, and which are a mistake. An outage (PostgreSQL
//! restarting, unreachable, out of connections, a connection cut) passes: the caller waits
//! and tries again, and the gateway answers 503 with `Retry-After`. A mistake (a wrong
//! password, a database that is not there, a statement PostgreSQL refuses) does not pass by
//! waiting: a process stops on it with its message.

use deadpool_postgres::{HookError, PoolError};
use tokio_postgres::error::SqlState;

/// Whether `e` says PostgreSQL is unavailable for now rather than that something is wrong:
/// the connection could not be made, was closed or timed out, or the server answered with a
/// connection exception (class 08), an operator intervention (57P01 shutting down, 57P02
/// crash shutdown, 57P03 cannot connect now) or too many connections (53300).
pub fn postgres_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let code = code.code();
            code.starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN.code(),
                    SqlState::CRASH_SHUTDOWN.code(),
                    SqlState::CANNOT_CONNECT_NOW.code(),
                    SqlState::TOO_MANY_CONNECTIONS.code(),
                ]
                .contains(&code)
        }
        // No SQLSTATE: the server never answered. A failed connect or a broken socket
        // carries the I/O error; a connect that timed out carries nothing.
        None => match std::error::Error::source(e) {
            Some(source) => source.is::<std::io::Error>(),
            None => e.to_string().contains("timed out"),
        },
    }
}

/// [`postgres_unavailable`] for an error of the pool: a connection that could not be made
/// (or made in time) is an outage; a closed pool or a missing runtime is a mistake.
pub fn pool_unavailable(e: &PoolError) -> bool {
    match e {
        PoolError::Backend(e) | PoolError::PostCreateHook(HookError::Backend(e)) => {
            postgres_unavailable(e)
        }
        PoolError::Timeout(_) => true,
        _ => false,
    }
}

/// Whether PostgreSQL refused on grounds that waiting does not change: the login (class 28:
/// a wrong password, a role that may not log in) or the database named (3D000).
pub fn postgres_refused(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        code.code().starts_with("28") || code == &SqlState::INVALID_CATALOG_NAME
    })
}

/// What PostgreSQL said about `e`, for a person: the server's severity and message with its
/// detail, hint and constraint when it answered, else the client's words with their cause.
/// tokio-postgres's own `Display` says only "db error", which names nothing.
pub fn described(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        };
    };
    let mut said = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    if let Some(detail) = db.detail() {
        said.push_str(&format!(" ({detail})"));
    }
    if let Some(constraint) = db.constraint() {
        said.push_str(&format!(" [constraint {constraint}]"));
    }
    if let Some(hint) = db.hint() {
        said.push_str(&format!("; hint: {hint}"));
    }
    said
}

/// An outage logged once when it starts and once when it ends (shared with the agent).
pub use bus::patience::Outage;

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to a port nobody listens on fails with the I/O error: an outage.
    #[tokio::test]
    async fn a_refused_connection_is_an_outage() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("postgres://nobody@127.0.0.1:{port}/none");
        let e = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .err()
            .expect("nothing listens there");
        assert!(postgres_unavailable(&e), "{e}");
        assert!(!postgres_refused(&e), "{e}");
    }
}
