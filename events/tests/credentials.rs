//! Passwords and web-console sign-ins in the ledger, against real PostgreSQL (started by
//! `infra/services.sh up`): who a password and a console token sign in, and the fold of their
//! events agreeing with a replay of the log. Each test gets a database of its own.

use chrono::{TimeDelta, Utc};
use deadpool_postgres::Pool;
use events::catalogue::{stream_id, Event, Metadata};
use events::ledger::credentials::{has_password, hash_password, new_console_token};
use events::ledger::{self, console_owner, key_digest, password_owner};
use events::payloads::*;
use events::store::ExpectedVersion;
use uuid::Uuid;

mod common;

async fn fresh_pool() -> Pool {
    common::fresh_database(4).await.0
}

async fn record(pool: &Pool, stream: &str, events: &[Event]) {
    ledger::record_now(
        pool,
        stream,
        ExpectedVersion::Any,
        events,
        &Metadata::default(),
    )
    .await
    .unwrap();
}

async fn user(pool: &Pool, email: &str) -> Uuid {
    let user_id = Uuid::now_v7();
    let event = Event::UserCreated(UserCreated {
        user_id,
        email: email.into(),
        role: Role::Admin,
        resource_policy: "default".into(),
    });
    record(pool, &stream_id("user", user_id), &[event]).await;
    user_id
}

/// Sets `user_id`'s password as the launcher does: its hash kept apart, the event saying so.
async fn set_password(pool: &Pool, user_id: Uuid, password: &str) {
    let client = pool.get().await.unwrap();
    events::ledger::credentials::keep_password_hash(&client, user_id, &hash_password(password))
        .await
        .unwrap();
    let event = Event::UserPasswordSet(UserPasswordSet { user_id });
    record(pool, &stream_id("user", user_id), &[event]).await;
}

/// Signs `user_id` in with a sign-in that expires `after` from now; its token.
async fn signed_in(pool: &Pool, user_id: Uuid, after: TimeDelta) -> String {
    let token = new_console_token();
    let event = Event::ConsoleSignedIn(ConsoleSignedIn {
        user_id,
        token_sha256: key_digest(&token),
        expires_at: Utc::now() + after,
        how: SignInMethod::Password,
    });
    record(pool, &stream_id("console", user_id), &[event]).await;
    token
}

#[tokio::test]
async fn a_password_signs_in_its_user_and_nothing_else_does() {
    let pool = fresh_pool().await;
    let ada = user(&pool, "ada@example.com").await;
    let bob = user(&pool, "bob@example.com").await;
    let client = pool.get().await.unwrap();
    assert!(!has_password(&client, ada).await.unwrap());
    assert_eq!(
        password_owner(&client, "ada@example.com", "first password")
            .await
            .unwrap(),
        None,
        "no password set: nothing signs Ada in"
    );

    set_password(&pool, ada, "first password").await;
    assert!(has_password(&client, ada).await.unwrap());
    let owner = password_owner(&client, "ada@example.com", "first password")
        .await
        .unwrap()
        .expect("her password signs her in");
    assert_eq!(
        (owner.user_id, owner.email.as_str(), owner.role),
        (ada, "ada@example.com", Role::Admin)
    );
    for (email, password) in [
        ("ada@example.com", "First password"),
        ("ada@example.com", ""),
        ("bob@example.com", "first password"),
        ("nobody@example.com", "first password"),
    ] {
        assert_eq!(
            password_owner(&client, email, password).await.unwrap(),
            None,
            "{email} / {password:?}"
        );
    }

    // The last password set is the password.
    set_password(&pool, ada, "second password").await;
    assert_eq!(
        password_owner(&client, "ada@example.com", "first password")
            .await
            .unwrap(),
        None
    );
    assert!(
        password_owner(&client, "ada@example.com", "second password")
            .await
            .unwrap()
            .is_some()
    );
    // The ledger keeps the hash, never the password.
    let stored: String = client
        .query_one(
            "SELECT password_hash FROM secrets.password_hashes WHERE user_id = $1",
            &[&ada],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stored.starts_with("$argon2id$"), "{stored}");
    assert!(!stored.contains("second password"));
    assert!(!has_password(&client, bob).await.unwrap());
}

#[tokio::test]
async fn a_console_token_signs_in_until_it_is_signed_out_or_expires() {
    let pool = fresh_pool().await;
    let ada = user(&pool, "ada@example.com").await;
    let live = signed_in(&pool, ada, TimeDelta::hours(12)).await;
    let other = signed_in(&pool, ada, TimeDelta::hours(12)).await;
    let expired = signed_in(&pool, ada, TimeDelta::seconds(-1)).await;
    let client = pool.get().await.unwrap();

    let owner = console_owner(&client, &live).await.unwrap().expect("live");
    assert_eq!(
        (owner.user_id, owner.email.as_str()),
        (ada, "ada@example.com")
    );
    assert_eq!(console_owner(&client, &expired).await.unwrap(), None);
    assert_eq!(
        console_owner(&client, &new_console_token()).await.unwrap(),
        None,
        "a token never handed out"
    );
    assert_eq!(
        console_owner(&client, &key_digest(&live)).await.unwrap(),
        None,
        "the digest the log shows is not itself a token"
    );

    let out = Event::ConsoleSignedOut(ConsoleSignedOut {
        user_id: ada,
        token_sha256: key_digest(&live),
    });
    record(&pool, &stream_id("console", ada), &[out]).await;
    assert_eq!(console_owner(&client, &live).await.unwrap(), None);
    assert!(
        console_owner(&client, &other).await.unwrap().is_some(),
        "signing out ends that sign-in only"
    );
}

/// The fold of passwords and sign-ins, live and replayed from the log, agree; a hash changed
/// behind the log's back is found.
#[tokio::test]
async fn passwords_and_sign_ins_replay_into_the_live_ledger() {
    let pool = fresh_pool().await;
    let ada = user(&pool, "ada@example.com").await;
    let bob = user(&pool, "bob@example.com").await;
    set_password(&pool, ada, "first password").await;
    set_password(&pool, ada, "second password").await;
    set_password(&pool, bob, "bob's password").await;
    let gone = signed_in(&pool, ada, TimeDelta::hours(12)).await;
    signed_in(&pool, ada, TimeDelta::hours(12)).await;
    signed_in(&pool, bob, TimeDelta::seconds(-1)).await;
    let out = Event::ConsoleSignedOut(ConsoleSignedOut {
        user_id: ada,
        token_sha256: key_digest(&gone),
    });
    record(&pool, &stream_id("console", ada), &[out]).await;

    let replay = ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    let client = pool.get().await.unwrap();
    let counts: (i64, i64) = {
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM ledger.user_passwords),
                        (SELECT count(*) FROM ledger.console_sign_ins)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        counts,
        (2, 2),
        "one password each; the signed-out sign-in gone"
    );

    // The ledger says who has a password (the hash itself is kept apart, out of the log): a
    // row taken away by hand shows.
    client
        .batch_execute(&format!(
            "DELETE FROM ledger.user_passwords WHERE user_id = '{bob}'"
        ))
        .await
        .unwrap();
    let replay = ledger::replay(&pool).await.unwrap();
    let tables: Vec<&str> = replay.differences.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(
        tables,
        ["user_passwords"],
        "a password row taken away shows"
    );
}
