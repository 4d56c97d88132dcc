//! The registry customized images live in, so that every host can run them: a commit pushes
//! there (`commit`), and an agent that lacks a customized image pulls it from there and names
//! it as the session asked. Which reference a pull asks the engine for, and with which
//! credential, is decided here ([`pull_source`], pure). An image of any other registry is
//! pulled with the credential an admin stored for it, which the recorder hands this agent for
//! a session placed here ([`stored_login`]), or anonymously.

use bollard::auth::DockerCredentials;
use bus::protocol::{Answer, Request};
use uuid::Uuid;

use super::ctx::Ctx;

/// A registry and the credential agents push and pull with (`BERTH_REGISTRY`,
/// `BERTH_REGISTRY_CREDENTIAL`).
#[derive(Clone)]
pub struct Registry {
    /// `host[:port][/path]`, as an image reference begins.
    pub address: String,
    login: Option<(String, String)>,
}

impl std::fmt::Debug for Registry {
    /// Never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("address", &self.address)
            .field("user", &self.login.as_ref().map(|(user, _)| user))
            .finish()
    }
}

/// Why a registry's credential could not be read.
#[derive(Debug, thiserror::Error)]
#[error("a registry credential is `user:password` on one line")]
pub struct CredentialUnreadable;

impl Registry {
    /// A registry at `address` that takes no credential.
    pub fn open(address: impl Into<String>) -> Registry {
        Registry {
            address: address.into(),
            login: None,
        }
    }

    /// A registry at `address` with the credential `user:password` (a file's text, its
    /// line end allowed).
    pub fn with_credential(
        address: impl Into<String>,
        credential: &str,
    ) -> Result<Registry, CredentialUnreadable> {
        let (user, password) = credential
            .trim_end_matches(['\r', '\n'])
            .split_once(':')
            .filter(|(user, password)| !user.is_empty() && !password.is_empty())
            .ok_or(CredentialUnreadable)?;
        Ok(Registry {
            address: address.into(),
            login: Some((user.to_owned(), password.to_owned())),
        })
    }

    /// What the engine is handed to push to or pull from this registry.
    pub fn credentials(&self) -> Option<DockerCredentials> {
        let (user, password) = self.login.as_ref()?;
        Some(DockerCredentials {
            username: Some(user.clone()),
            password: Some(password.clone()),
            serveraddress: Some(self.host().to_owned()),
            ..Default::default()
        })
    }

    /// Its host and port: where an image reference's registry part ends.
    fn host(&self) -> &str {
        self.address.split('/').next().unwrap_or(&self.address)
    }
}

/// The credential an admin stored for the registry of `reference`, which the session's pull
/// asks for; `None` when none is stored (or the agent is stopping).
pub(super) async fn stored_login(
    ctx: &Ctx,
    session_id: Uuid,
    reference: &str,
) -> Option<DockerCredentials> {
    match ctx
        .link
        .ask(&Request::PullCredential { session_id }, &ctx.stop)
        .await
    {
        Ok(Answer::PullCredential { login: Some(login) }) => Some(DockerCredentials {
            username: Some(login.username),
            password: Some(login.password),
            serveraddress: Some(domain::images::registry_of(reference).to_owned()),
            ..Default::default()
        }),
        Ok(Answer::PullCredential { login: None }) => None,
        Ok(other) => {
            tracing::warn!(session = %session_id, answer = ?other, "no registry credential for the pull");
            None
        }
        Err(_) => None,
    }
}

/// How an image the host lacks is pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSource {
    /// The reference the engine pulls.
    pub reference: String,
    /// Whether the registry's credential goes with it.
    pub with_credential: bool,
    /// The name it is tagged with once pulled, when that is not `reference`.
    pub tag_as: Option<String>,
}

/// Where `image` is pulled from, given the stack's `registry`: a customized image from the
/// registry (under the name the session asked for), an image naming the registry itself with
/// its credential, any other as it is named (its registry's own, anonymously). Pure.
pub fn pull_source(image: &str, registry: Option<&Registry>) -> PullSource {
    let as_named = PullSource {
        reference: image.to_owned(),
        with_credential: false,
        tag_as: None,
    };
    let Some(registry) = registry else {
        return as_named;
    };
    if image.starts_with(domain::images::CUSTOM_PREFIX) {
        return PullSource {
            reference: format!("{}/{image}", registry.address),
            with_credential: true,
            tag_as: Some(image.to_owned()),
        };
    }
    if image.starts_with(&format!("{}/", registry.host())) {
        return PullSource {
            with_credential: true,
            ..as_named
        };
    }
    as_named
}

/// A reference's repository and tag (`latest` when it names none; a port's colon is not a
/// tag's).
pub fn repository_and_tag(reference: &str) -> (&str, &str) {
    match reference.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => (repository, tag),
        _ => (reference, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack() -> Registry {
        Registry::with_credential("192.0.2.2:55000", "berth:s3cret\n").unwrap()
    }

    #[test]
    fn a_customized_image_comes_from_the_stacks_registry_with_its_credential_under_its_own_name() {
        let image = "berth-custom/u00ff:Env_1";
        assert_eq!(
            pull_source(image, Some(&stack())),
            PullSource {
                reference: "192.0.2.2:55000/berth-custom/u00ff:Env_1".into(),
                with_credential: true,
                tag_as: Some(image.into()),
            }
        );
    }

    #[test]
    fn an_image_naming_the_registry_gets_its_credential_and_others_go_to_their_own() {
        let named = "192.0.2.2:55000/team/tool:2";
        let source = pull_source(named, Some(&stack()));
        assert_eq!(
            (source.reference.as_str(), source.with_credential),
            (named, true)
        );
        assert_eq!(source.tag_as, None);
        for elsewhere in ["python:3.12", "ghcr.io/team/tool:1", "192.0.2.2:5/x:1"] {
            let source = pull_source(elsewhere, Some(&stack()));
            assert_eq!(source.reference, elsewhere);
            assert!(!source.with_credential, "{elsewhere}");
        }
        // Without a registry a customized image is pulled as named (and fails where it was
        // never pushed, saying so).
        let source = pull_source("berth-custom/u00ff:Env_1", None);
        assert_eq!(source.reference, "berth-custom/u00ff:Env_1");
    }

    #[test]
    fn a_credential_is_user_and_password_and_never_shown() {
        let registry = stack();
        let credentials = registry.credentials().unwrap();
        assert_eq!(credentials.username.as_deref(), Some("berth"));
        assert_eq!(credentials.password.as_deref(), Some("s3cret"));
        assert_eq!(
            credentials.serveraddress.as_deref(),
            Some("192.0.2.2:55000")
        );
        assert!(!format!("{registry:?}").contains("s3cret"));
        for bad in ["", "berth", "berth:", ":pw"] {
            assert!(Registry::with_credential("r", bad).is_err(), "{bad:?}");
        }
        assert!(Registry::open("r").credentials().is_none());
    }

    #[test]
    fn a_references_tag_is_after_its_last_colon_unless_that_is_a_ports() {
        assert_eq!(repository_and_tag("a/b:1"), ("a/b", "1"));
        assert_eq!(
            repository_and_tag("host:5000/a/b"),
            ("host:5000/a/b", "latest")
        );
        assert_eq!(
            repository_and_tag("host:5000/a/b:x"),
            ("host:5000/a/b", "x")
        );
    }
}
