//! Who is looking at the console. Signing in (with an API key, or an email and password)
//! records a sign-in and hands the browser a random token in the `berth_console` cookie:
//! HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), for 12
//! hours; with TLS it is `__Host-berth_console` and `Secure` (never sent in the clear, and no
//! plain page of the host can set it). Every form is checked against the gateway's own origin before it acts, and the
//! cookie speaks for the JSON API only on a same-origin request (`Sec-Fetch-Site`), so an
//! app served on one of the proxy's ports (same site, another origin) cannot use it. The
//! cookie is read where every caller is identified ([`crate::caller`]).

use askama::Template;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use cookie::SameSite;
use events::ledger::KeyOwner;
use events::payloads::SignInMethod;
use serde::Deserialize;

use super::{render, PageError};
use crate::caller::{console_owner, fetched_from_same_origin, lookup_key, token_in, COOKIE};
use crate::error::ApiError;
use crate::state::AppState;

/// How long a sign-in lasts.
pub const SIGN_IN_LASTS: std::time::Duration =
    std::time::Duration::from_secs(events::credentials::CONSOLE_SIGN_IN_HOURS as u64 * 3600);

/// The signed-in user of a console page; without a valid cookie the page answers with a
/// redirect to the sign-in form, which comes back to the page.
pub struct Viewer(pub KeyOwner);

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let owner = match token_in(state, &parts.headers) {
            Some(token) => console_owner(state, token)
                .await
                .map_err(|e| PageError(e).into_response())?,
            None => None,
        };
        match owner {
            Some(owner) => Ok(Viewer(owner)),
            None => {
                let here = parts
                    .uri
                    .path_and_query()
                    .map_or("/console/sessions", |p| p.as_str());
                let next: String = form_urlencoded::byte_serialize(here.as_bytes()).collect();
                Err(Redirect::to(&format!("/console/sign-in?next={next}")).into_response())
            }
        }
    }
}

/// A request from a page of this gateway: its `Origin` (or, without one, its
/// `Sec-Fetch-Site`) says the gateway's own origin sent it. Every console form asks for this
/// before it acts, so no other origin's page can act for the signed-in user.
pub struct SameOrigin;

impl<S: Sync> FromRequestParts<S> for SameOrigin {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, PageError> {
        if same_origin(&parts.headers) {
            Ok(SameOrigin)
        } else {
            Err(PageError(
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    "cross_origin",
                    "this form was not sent from berth's console; reload the page and try again",
                )
                .field("Origin"),
            ))
        }
    }
}

/// Whether `headers` say the request came from a page of the origin it is addressed to.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    match (text("origin"), text("host")) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
        (None, _) => fetched_from_same_origin(headers),
        (Some(_), None) => false,
    }
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage<'a> {
    next: &'a str,
    error: Option<String>,
    email: &'a str,
}

#[derive(Debug, Default, Deserialize)]
pub struct SignInQuery {
    #[serde(default)]
    next: String,
}

/// Where a sign-in may return to: a console page, nothing else (no open redirect).
fn return_to(next: &str) -> &str {
    if next.starts_with("/console") && !next.starts_with("//") {
        next
    } else {
        "/console/sessions"
    }
}

/// `GET /console/sign-in`.
pub async fn form(axum::extract::Query(q): axum::extract::Query<SignInQuery>) -> Response {
    render(&SignInPage {
        next: return_to(&q.next),
        error: None,
        email: "",
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    key: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    next: String,
}

/// `POST /console/sign-in`: an API key, or an email and password; the cookie and back to
/// the page asked for, or the form again saying what was wrong.
pub async fn sign_in(
    State(state): State<AppState>,
    _: SameOrigin,
    extensions: axum::http::Extensions,
    Form(form): Form<SignInForm>,
) -> Result<Response, PageError> {
    let next = return_to(&form.next);
    // Each try costs a hash or a lookup: counted per address (and email) before it is made.
    let from = crate::throttle::source(&extensions);
    let counted = if form.key.trim().is_empty() {
        state.throttle.sign_in(from, form.email.trim())
    } else {
        state.throttle.key_lookup(from)
    };
    if let Err(wait) = counted {
        let mut page = render(&SignInPage {
            next,
            error: Some(format!(
                "too many tries from here; try again in {} s",
                wait.retry_after_secs()
            )),
            email: form.email.trim(),
        });
        *page.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        page.headers_mut()
            .insert(header::RETRY_AFTER, wait.retry_after_secs().into());
        return Ok(page);
    }
    let (owner, how, refusal) = if !form.key.trim().is_empty() {
        (
            lookup_key(&state, form.key.trim()).await?,
            SignInMethod::Key,
            "no user holds that API key",
        )
    } else if !form.email.trim().is_empty() {
        let client = state.pool.get().await?;
        (
            events::ledger::password_owner(&client, form.email.trim(), &form.password).await?,
            SignInMethod::Password,
            "the email or the password is wrong",
        )
    } else {
        (
            None,
            SignInMethod::Key,
            "give an API key, or an email and a password",
        )
    };
    let Some(owner) = owner else {
        let mut page = render(&SignInPage {
            next,
            error: Some(refusal.to_owned()),
            email: form.email.trim(),
        });
        *page.status_mut() = StatusCode::UNAUTHORIZED;
        return Ok(page);
    };
    let token = launcher::credentials::sign_in(&state.pool, owner.user_id, how).await?;
    let cookie = state
        .cookies()
        .set(COOKIE, &token, SameSite::Strict, Some(SIGN_IN_LASTS));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(next)).into_response())
}

/// `POST /console/sign-out`: the sign-in ends and the cookie is dropped.
pub async fn sign_out(
    State(state): State<AppState>,
    _: SameOrigin,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    if let Some(token) = token_in(&state, &headers) {
        launcher::credentials::sign_out(&state.pool, token).await?;
    }
    let cookie = state.cookies().set(
        COOKIE,
        "",
        SameSite::Strict,
        Some(std::time::Duration::ZERO),
    );
    Ok((
        [(header::SET_COOKIE, cookie)],
        Redirect::to("/console/sign-in"),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn a_form_is_same_origin_only_when_its_origin_names_the_host_it_was_sent_to() {
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8080")
        ])));
        // An app on a proxy port is the same site but another origin.
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:10200")
        ])));
        assert!(!same_origin(&headers(&[host, ("origin", "null")])));
        assert!(same_origin(&headers(&[
            host,
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("sec-fetch-site", "same-site")
        ])));
        assert!(!same_origin(&headers(&[host])));
    }

    #[test]
    fn a_sign_in_returns_only_to_a_console_page() {
        assert_eq!(
            return_to("/console/launch?step=2"),
            "/console/launch?step=2"
        );
        assert_eq!(return_to("https://evil.example/"), "/console/sessions");
        assert_eq!(return_to("//evil.example/console"), "/console/sessions");
        assert_eq!(return_to(""), "/console/sessions");
    }
}
