//! Reading and writing the headers more than one floor needs: the cookies a request carries
//! (the console's sign-in, the app proxy's circuit cookies), the cookies berth hands out
//! ([`CookiePolicy`]: `Secure` and `__Host-` with TLS), and which cookies are berth's, so
//! the proxy keeps them from apps both ways; and the `Host` a request names, split from its
//! port and read for the id it names under a domain (the proxy's circuits and the model
//! endpoints each have a host of their own).

use axum::http::{header, HeaderMap, HeaderValue};
use cookie::{Cookie, SameSite};
use uuid::Uuid;

/// Every cookie a request carries, as name and value.
pub(crate) fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Whether a cookie named `name` is berth's (`berth_*`, with or without a `__Host-` or
/// `__Secure-` prefix): browsers compare the prefixes without regard to case, so this does.
pub(crate) fn is_berths(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower
        .strip_prefix("__host-")
        .or_else(|| lower.strip_prefix("__secure-"))
        .unwrap_or(&lower);
    bare.starts_with("berth_")
}

/// Removes every cookie of berth's from a request's `Cookie` headers, keeping the others in
/// one header (an app never reads the console's or another circuit's cookie).
pub(crate) fn strip_berth_cookies(headers: &mut HeaderMap) {
    let kept: Vec<String> = cookies(headers)
        .filter(|(k, _)| !is_berths(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(header::COOKIE, value);
        }
    }
}

/// Removes from an answer every `Set-Cookie` that names a cookie of berth's, and any it
/// cannot read: an app may not set (or overwrite) the console's or a circuit's cookie.
pub(crate) fn drop_berth_set_cookies(headers: &mut HeaderMap) {
    let kept: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter(|value| {
            value
                .to_str()
                .ok()
                .and_then(|text| Cookie::parse(text).ok())
                .is_some_and(|cookie| !is_berths(cookie.name()))
        })
        .cloned()
        .collect();
    headers.remove(header::SET_COOKIE);
    for value in kept {
        headers.append(header::SET_COOKIE, value);
    }
}

/// How berth's cookies are named and marked. Served over TLS, each is `Secure` and named
/// with the `__Host-` prefix, which a browser accepts only from a secure origin, with
/// `Path=/` and without `Domain`: no plain-HTTP page of the host, and no other host of the
/// domain, can set or overwrite it, and it never travels in the clear.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CookiePolicy {
    /// Served over TLS.
    pub secure: bool,
}

impl CookiePolicy {
    /// The name the cookie called `base` (`berth_console`) has under this policy.
    pub fn name(self, base: &str) -> String {
        if self.secure {
            format!("__Host-{base}")
        } else {
            base.to_owned()
        }
    }

    /// The value of a `Set-Cookie` header handing out `base` with `value`: host-only,
    /// `Path=/`, HttpOnly, with `same_site`, for `max_age` (a session cookie without one;
    /// zero drops it).
    pub fn set(
        self,
        base: &str,
        value: &str,
        same_site: SameSite,
        max_age: Option<std::time::Duration>,
    ) -> HeaderValue {
        let mut cookie = Cookie::build((self.name(base), value.to_owned()))
            .path("/")
            .http_only(true)
            .same_site(same_site)
            .secure(self.secure)
            .build();
        if let Some(age) = max_age {
            cookie.set_max_age(cookie::time::Duration::seconds(
                i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
            ));
        }
        HeaderValue::from_str(&cookie.to_string())
            .expect("a cookie of berth's names and values is a header value")
    }

    /// The value of the cookie called `base` in a request, under this policy's name only (a
    /// plain `berth_console` is not read when berth serves TLS), when not empty.
    pub fn read<'h>(self, headers: &'h HeaderMap, base: &str) -> Option<&'h str> {
        let name = self.name(base);
        cookies(headers).find_map(|(k, v)| (k == name && !v.is_empty()).then_some(v))
    }
}

/// A `Host` split into its name and its port, if it names one (`[::1]:8080` does).
pub(crate) fn split_host(host: &str) -> (&str, Option<&str>) {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()) && !name.is_empty() =>
        {
            (name, Some(port))
        }
        _ => (host, None),
    }
}

/// The id a `Host` names as its one label under `domain` (lower case), as `<32 hex>.<domain>`:
/// `None` for a host outside the domain, `Some(None)` for one inside that names no id. Any
/// port and a trailing dot are allowed; case does not matter.
pub(crate) fn id_under_domain(host: &str, domain: &str) -> Option<Option<Uuid>> {
    let (name, _) = split_host(host.trim());
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let label = name.strip_suffix(domain)?.strip_suffix('.')?;
    let id = (label.len() == 32 && label.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| Uuid::try_parse(label).ok())
        .flatten();
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn berths_cookies_are_told_by_name_whatever_the_prefix_and_case() {
        for name in [
            "berth_console",
            "berth_app_0123",
            "__Host-berth_console",
            "__host-BERTH_console",
            "__Secure-berth_app_x",
        ] {
            assert!(is_berths(name), "{name}");
        }
        for name in ["_xsrf", "theme", "xberth_console", "__Host-session"] {
            assert!(!is_berths(name), "{name}");
        }
    }

    #[test]
    fn berth_cookies_never_reach_the_app() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static(
                "berth_app_x=1; _xsrf=abc; __Host-berth_console=k; berth_console=k; theme=dark",
            ),
        );
        strip_berth_cookies(&mut headers);
        assert_eq!(headers[header::COOKIE], "_xsrf=abc; theme=dark");
        let mut only_ours = HeaderMap::new();
        only_ours.insert(header::COOKIE, HeaderValue::from_static("berth_app_x=1"));
        strip_berth_cookies(&mut only_ours);
        assert!(!only_ours.contains_key(header::COOKIE));
    }

    #[test]
    fn an_app_may_set_its_own_cookies_but_never_berths() {
        let mut headers = HeaderMap::new();
        for value in [
            "_xsrf=abc; Path=/",
            "berth_console=stolen; Path=/; Domain=example.com",
            "__Host-berth_console=x; Path=/; Secure",
            " Berth_app_0123=x",
            "theme=dark",
        ] {
            headers.append(header::SET_COOKIE, HeaderValue::from_static(value));
        }
        drop_berth_set_cookies(&mut headers);
        let left: Vec<&str> = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(left, ["_xsrf=abc; Path=/", "theme=dark"]);
    }

    #[test]
    fn with_tls_berths_cookies_are_secure_and_host_prefixed() {
        let plain = CookiePolicy::default();
        let secure = CookiePolicy { secure: true };
        let hour = Some(std::time::Duration::from_secs(3600));
        let set = plain.set("berth_console", "t", SameSite::Strict, hour);
        let set = set.to_str().unwrap();
        assert!(set.starts_with("berth_console=t;"), "{set}");
        assert!(!set.contains("Secure"), "{set}");
        let set = secure.set("berth_console", "t", SameSite::Strict, hour);
        let parsed = Cookie::parse(set.to_str().unwrap()).unwrap();
        assert_eq!(parsed.name(), "__Host-berth_console");
        assert_eq!(parsed.secure(), Some(true));
        assert_eq!(parsed.http_only(), Some(true));
        assert_eq!(parsed.path(), Some("/"));
        assert_eq!(parsed.domain(), None);
        assert_eq!(parsed.same_site(), Some(SameSite::Strict));
        assert_eq!(
            parsed.max_age(),
            Some(cookie::time::Duration::seconds(3600))
        );

        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("berth_console=plain; __Host-berth_console=safe"),
        );
        assert_eq!(secure.read(&headers, "berth_console"), Some("safe"));
        assert_eq!(plain.read(&headers, "berth_console"), Some("plain"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("berth_console=plain"),
        );
        assert_eq!(
            secure.read(&headers, "berth_console"),
            None,
            "a cookie any plain page could have set is not read under TLS"
        );
    }
}
