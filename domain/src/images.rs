//! Customized images: what a session committed to an image is called, and whose it is. Pure.
//!
//! A committed image is `berth-custom/u<owner>:<name>`: the repository names its owner (an
//! image reference's repository is lower case, so the owner's id goes there and the name a
//! user chose, which may hold capitals, is the tag). Only its owner is offered it.
//!
//! The catalogue offers session images only: an image is one when its labels say so
//! ([`is_session_image`]), unless an admin listed it otherwise ([`ImageListing`]).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The label berth's own session images carry (`ai.berth.image="python"`).
pub const LABEL_SESSION_IMAGE: &str = "ai.berth.image";
/// The label of the stack's own servers (PostgreSQL, NATS, the registry, berth itself): an
/// image carrying it is never a session image by its labels, whatever it inherits.
pub const LABEL_SERVER: &str = "ai.berth.server";
/// The prefix of Backend.AI's image labels (`ai.backend.kernelspec`, `ai.backend.runtime-type`).
pub const BACKENDAI_LABEL_PREFIX: &str = "ai.backend.";

/// Whether an image's labels make it a session image: berth's own label, or any of
/// Backend.AI's, on an image that is not one of the stack's servers.
pub fn is_session_image<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    let mut session = false;
    for (key, value) in labels {
        if key == LABEL_SERVER {
            return false;
        }
        session |= (key == LABEL_SESSION_IMAGE && !value.is_empty())
            || key.starts_with(BACKENDAI_LABEL_PREFIX);
    }
    session
}

/// How an admin listed an image in the catalogue.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ImageListing {
    /// As its labels say (the listing an image has until an admin sets one).
    Labels,
    /// Offered whatever its labels say.
    Shown,
    /// Never offered, and refused to a launch that names it.
    Hidden,
}

impl ImageListing {
    /// Whether the catalogue offers an image so listed, whose labels make it a session image
    /// or not.
    pub fn offers(self, session_image: bool) -> bool {
        match self {
            ImageListing::Labels => session_image,
            ImageListing::Shown => true,
            ImageListing::Hidden => false,
        }
    }
}

/// The repository every customized image lives under.
pub const CUSTOM_PREFIX: &str = "berth-custom/u";

/// A name that cannot name a customized image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not 4 to 32 letters, digits, `-` and `_`")]
pub struct BadImageName(pub String);

/// Whether `name` can name a customized image: 4 to 32 letters, digits, `-` and `_`.
pub fn check_image_name(name: &str) -> Result<(), BadImageName> {
    let fits = (4..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if fits {
        Ok(())
    } else {
        Err(BadImageName(name.to_owned()))
    }
}

/// The image `owner`'s customized image `name` is.
pub fn custom_image(owner: Uuid, name: &str) -> String {
    format!("{CUSTOM_PREFIX}{}:{name}", owner.simple())
}

/// The owner of a customized image; `None` for any other image.
pub fn custom_image_owner(image: &str) -> Option<Uuid> {
    let rest = image.strip_prefix(CUSTOM_PREFIX)?;
    let (owner, _) = rest.split_once(':')?;
    Uuid::try_parse(owner).ok()
}

/// An image reference split into its repository and its tag (`berth/python:3.12` into
/// `berth/python` and `3.12`; `localhost:5000/x` into itself and `latest`, the tag an engine
/// takes for a reference without one). A digest (`@sha256:...`) stays in the tag.
pub fn split_reference(image: &str) -> (&str, &str) {
    let (name, digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    let slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[slash..].rfind(':') {
        Some(colon) => (&image[..slash + colon], &image[slash + colon + 1..]),
        None if digest => (name, &image[name.len() + 1..]),
        None => (image, "latest"),
    }
}

/// The registry of an image reference, as Docker reads one: its first component when that
/// names a host (a dot, a port or `localhost`), else Docker Hub's `docker.io`.
pub fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Whether `registry` can name a registry: a host name or address, with a port maybe, as an
/// image reference begins (at most 253 characters of letters, digits, `.`, `-`, `:`, `[`, `]`).
pub fn is_registry_name(registry: &str) -> bool {
    !registry.is_empty()
        && registry.len() <= 253
        && registry
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        && registry_of(&format!("{registry}/x")) == registry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_image_carries_berths_label_or_backendais_and_a_server_never_is() {
        assert!(is_session_image([(LABEL_SESSION_IMAGE, "python")]));
        assert!(is_session_image([("ai.backend.kernelspec", "1")]));
        assert!(
            !is_session_image([(LABEL_SESSION_IMAGE, "")]),
            "an empty label"
        );
        assert!(!is_session_image([("maintainer", "someone")]));
        assert!(!is_session_image(std::iter::empty()));
        // A server built on a session image inherits its labels, and is still no session's.
        assert!(!is_session_image([
            (LABEL_SESSION_IMAGE, "python"),
            ("ai.backend.runtime-type", "python"),
            (LABEL_SERVER, "postgres"),
        ]));
    }

    #[test]
    fn an_admins_listing_overrides_the_labels_either_way() {
        for labelled in [true, false] {
            assert_eq!(ImageListing::Labels.offers(labelled), labelled);
            assert!(ImageListing::Shown.offers(labelled));
            assert!(!ImageListing::Hidden.offers(labelled));
        }
    }

    #[test]
    fn the_registry_is_the_first_component_when_it_names_a_host() {
        assert_eq!(registry_of("berth/shell:latest"), "docker.io");
        assert_eq!(registry_of("python:3.12"), "docker.io");
        assert_eq!(
            registry_of("cr.backend.ai/stable/python:3.9"),
            "cr.backend.ai"
        );
        assert_eq!(registry_of("localhost:5000/x/y"), "localhost:5000");
        assert_eq!(registry_of("localhost/x"), "localhost");
    }

    #[test]
    fn a_registry_name_is_what_an_image_reference_begins_with() {
        for good in [
            "cr.example.com",
            "192.0.2.2:55000",
            "localhost",
            "[::1]:5000",
        ] {
            assert!(is_registry_name(good), "{good}");
        }
        for bad in ["", "berth", "cr.example.com/team", "a b.c", "x;y.z"] {
            assert!(!is_registry_name(bad), "{bad}");
        }
    }

    #[test]
    fn names_are_4_to_32_letters_digits_dashes_and_underscores() {
        for good in ["mine", "My_env-2", &"x".repeat(32)] {
            assert!(check_image_name(good).is_ok(), "{good}");
        }
        for bad in [
            "abc",
            &"x".repeat(33),
            "a b c",
            "a/bcd",
            "ab:cd",
            "émoi",
            "",
        ] {
            assert!(check_image_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reference_splits_into_its_repository_and_tag() {
        for (image, repository, tag) in [
            ("berth/python:3.12", "berth/python", "3.12"),
            ("berth/shell", "berth/shell", "latest"),
            ("localhost:5000/team/x:v1", "localhost:5000/team/x", "v1"),
            ("localhost:5000/team/x", "localhost:5000/team/x", "latest"),
            ("ubuntu@sha256:abc", "ubuntu", "sha256:abc"),
            ("ubuntu:22.04@sha256:abc", "ubuntu", "22.04@sha256:abc"),
            ("berth-custom/u00ff:Env_1", "berth-custom/u00ff", "Env_1"),
        ] {
            assert_eq!(split_reference(image), (repository, tag), "{image}");
        }
    }

    #[test]
    fn a_customized_image_names_its_owner() {
        let owner = Uuid::now_v7();
        let image = custom_image(owner, "Env_1");
        assert!(image.starts_with("berth-custom/u"), "{image}");
        assert!(image.ends_with(":Env_1"));
        assert_eq!(image, image.to_string());
        assert_eq!(custom_image_owner(&image), Some(owner));
        assert_eq!(custom_image_owner("berth/shell:latest"), None);
        assert_eq!(custom_image_owner("berth-custom/unot-an-id:x"), None);
    }
}
