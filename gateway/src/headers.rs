//! Reading a request's headers where more than one floor needs it: the cookies it carries
//! (the console's sign-in, the app proxy's circuit cookies).

use axum::http::{header, HeaderMap};

/// Every cookie a request carries, as name and value.
pub(crate) fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}
