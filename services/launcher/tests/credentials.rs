//! Passwords and web-console sign-ins as the admin command and the gateway make them, against
//! real PostgreSQL (started by `infra/services.sh up`), on a fresh install of their own.

use deadpool_postgres::Pool;
use events::ledger::{self, console_owner, password_owner};
use events::payloads::{Role, SignInMethod};
use events::store;
use launcher::access::{self, AccessError};
use launcher::credentials::{change_password, set_password, sign_in, sign_out};
use uuid::Uuid;

async fn fresh_install() -> Pool {
    let base = std::env::var("BERTH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into());
    let (prefix, _) = base.rsplit_once('/').expect("url has a database");
    let url = format!("{prefix}/test_{}", Uuid::new_v4().simple());
    store::ensure_database(&url)
        .await
        .expect("create test database");
    let pool = store::pool(&url, 4).expect("pool");
    store::migrate(&pool, &[]).await.expect("migrate");
    access::bootstrap(&pool)
        .await
        .unwrap()
        .expect("a fresh install");
    pool
}

async fn signs_in(pool: &Pool, email: &str, password: &str) -> bool {
    let client = pool.get().await.unwrap();
    password_owner(&client, email, password)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn an_admin_sets_a_password_and_its_user_changes_it_knowing_it() {
    let pool = fresh_install().await;
    let (ada, _) = access::create_user(
        &pool,
        "ada@example.com",
        Role::User,
        "default",
        &["default".into()],
    )
    .await
    .unwrap();

    let err = set_password(&pool, "ada@example.com", "short")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            AccessError::Invalid {
                field: "password",
                ..
            }
        ),
        "{err}"
    );
    let err = set_password(&pool, "nobody@example.com", "long enough")
        .await
        .unwrap_err();
    assert!(matches!(err, AccessError::NoSuchUser(_)), "{err}");
    assert!(!signs_in(&pool, "ada@example.com", "short").await);

    assert_eq!(
        set_password(&pool, "ada@example.com", "set by an admin")
            .await
            .unwrap(),
        ada
    );
    assert!(signs_in(&pool, "ada@example.com", "set by an admin").await);

    // Ada has a password now: changing it asks for it, and a wrong or missing one is refused
    // naming `current`, with nothing recorded.
    for current in [None, Some("set by an admin?")] {
        let err = change_password(&pool, ada, current, "chosen by ada")
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                AccessError::Forbidden {
                    field: "current",
                    ..
                }
            ),
            "{current:?}: {err}"
        );
    }
    let err = change_password(&pool, ada, Some("set by an admin"), "7 chars")
        .await
        .unwrap_err();
    assert!(
        matches!(err, AccessError::Invalid { field: "new", .. }),
        "{err}"
    );
    assert!(signs_in(&pool, "ada@example.com", "set by an admin").await);

    change_password(&pool, ada, Some("set by an admin"), "chosen by ada")
        .await
        .unwrap();
    assert!(signs_in(&pool, "ada@example.com", "chosen by ada").await);
    assert!(!signs_in(&pool, "ada@example.com", "set by an admin").await);

    // A user with no password sets one without a current one (any given is not looked at).
    let (bob, _) = access::create_user(
        &pool,
        "bob@example.com",
        Role::User,
        "default",
        &["default".into()],
    )
    .await
    .unwrap();
    change_password(&pool, bob, Some("whatever"), "bob's first")
        .await
        .unwrap();
    assert!(signs_in(&pool, "bob@example.com", "bob's first").await);

    let client = pool.get().await.unwrap();
    let actors: Vec<String> = client
        .query(
            "SELECT metadata->>'actor' FROM events WHERE event_type = 'UserPasswordSet'
             ORDER BY tx_id, seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        actors,
        ["admin".to_owned(), ada.to_string(), bob.to_string()],
        "three passwords set, each by whom"
    );
    let replay = ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

#[tokio::test]
async fn a_console_sign_in_holds_until_signed_out_once() {
    let pool = fresh_install().await;
    let (ada, _) = access::create_user(
        &pool,
        "ada@example.com",
        Role::Admin,
        "default",
        &["default".into()],
    )
    .await
    .unwrap();
    let token = sign_in(&pool, ada, SignInMethod::Key).await.unwrap();
    let elsewhere = sign_in(&pool, ada, SignInMethod::Password).await.unwrap();
    assert_eq!(token.len(), 64);
    assert_ne!(token, elsewhere);
    let client = pool.get().await.unwrap();
    let owner = console_owner(&client, &token)
        .await
        .unwrap()
        .expect("signed in");
    assert_eq!((owner.user_id, owner.role), (ada, Role::Admin));
    // The log and the ledger hold its digest, never the token.
    let row = client
        .query_one(
            "SELECT payload::text,
                    extract(epoch FROM (payload->>'expires_at')::timestamptz - recorded_at)::float8
             FROM events WHERE event_type = 'ConsoleSignedIn' ORDER BY tx_id, seq LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let payload: String = row.get(0);
    assert!(!payload.contains(&token), "{payload}");
    assert!(payload.contains(r#""how": "key""#), "{payload}");
    let lasts: f64 = row.get(1);
    assert!(
        (11.0 * 3600.0..=12.0 * 3600.0).contains(&lasts),
        "it expires 12 hours after it was made: {lasts} s"
    );

    assert!(sign_out(&pool, &token).await.unwrap());
    assert_eq!(console_owner(&client, &token).await.unwrap(), None);
    assert!(
        !sign_out(&pool, &token).await.unwrap(),
        "signed out already: nothing more is recorded"
    );
    assert!(!sign_out(&pool, "not a token").await.unwrap());
    assert!(console_owner(&client, &elsewhere).await.unwrap().is_some());
    let recorded: Vec<String> = client
        .query(
            "SELECT event_type FROM events WHERE category = 'console' ORDER BY tx_id, seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        recorded,
        ["ConsoleSignedIn", "ConsoleSignedIn", "ConsoleSignedOut"]
    );
    let replay = ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}
