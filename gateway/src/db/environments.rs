//! The image catalogue: the images the live agents of some resource groups offer, grouped as
//! environments (repositories) and their versions (tags), with the caller's own customized
//! images among them and nobody else's. From the ledger (`ledger.agents`: the images each
//! agent reported when it registered, again whenever its host's images changed;
//! `ledger.custom_images`: who keeps which customized image; both written by
//! `events::ledger`). Only session images are listed: those whose labels say so
//! (`domain::images::is_session_image`, as the agent read them) or an admin showed, never one
//! an admin hid (`ledger.image_listings`); a customized one only to its owner while they keep
//! it. The launcher takes what is listed, and refuses what is hidden; an API client may still
//! name an image the labels leave out (one the agent holds), as Backend.AI's may name any.

use std::collections::{BTreeMap, BTreeSet};

use deadpool_postgres::Pool;
use domain::images::{custom_image_owner, split_reference, ImageListing};
use events::ledger::listing_of_column;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{Environment, EnvironmentVersion, HeldImage};

/// The catalogue of the images the live agents of `groups` offer, as `user` may use them.
pub async fn environments(
    pool: &Pool,
    user: Uuid,
    groups: &[String],
) -> Result<Vec<Environment>, ApiError> {
    let client = pool.get().await?;
    let held = client
        .query(
            "SELECT DISTINCT a.resource_group, i.image, i.image <> ALL(a.unlabelled_images),
                    l.listing
             FROM ledger.agents a CROSS JOIN LATERAL unnest(a.images) AS i(image)
             LEFT JOIN ledger.image_listings l ON l.image = i.image
             WHERE a.lost IS NULL AND a.resource_group = ANY($1)",
            &[&groups],
        )
        .await?;
    let offered = held.iter().filter_map(|r| {
        let image: String = r.get(1);
        let listing = listing_of_column(r.get(3));
        listed(&image, r.get(2), listing).then(|| (r.get(0), image))
    });
    let kept: BTreeSet<String> = client
        .query(
            "SELECT image FROM ledger.custom_images WHERE owner = $1",
            &[&user],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(catalogue(offered, user, &kept))
}

/// Every image the live agents hold, with how the catalogue treats it (customized images,
/// offered to their owners alone, left out).
pub async fn held_images(pool: &Pool) -> Result<Vec<HeldImage>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT i.image, array_agg(DISTINCT a.resource_group ORDER BY a.resource_group),
                    bool_or(i.image <> ALL(a.unlabelled_images)), l.listing
             FROM ledger.agents a CROSS JOIN LATERAL unnest(a.images) AS i(image)
             LEFT JOIN ledger.image_listings l ON l.image = i.image
             WHERE a.lost IS NULL
             GROUP BY i.image, l.listing ORDER BY i.image",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter(|r| custom_image_owner(r.get(0)).is_none())
        .map(|r| {
            let image: String = r.get(0);
            let session_image: bool = r.get(2);
            let listing = listing_of_column(r.get(3));
            HeldImage {
                offered: listed(&image, session_image, listing),
                image,
                resource_groups: r.get(1),
                session_image,
                listing,
            }
        })
        .collect())
}

/// Whether the catalogue lists `image`, whose labels make it a session image or not, listed by
/// an admin as `listing`: a customized image (offered to its owner alone, by [`catalogue`])
/// whatever labels it inherited, unless hidden; any other as its listing says over its labels.
pub fn listed(image: &str, session_image: bool, listing: ImageListing) -> bool {
    if custom_image_owner(image).is_some() {
        listing != ImageListing::Hidden
    } else {
        listing.offers(session_image)
    }
}

/// The catalogue of the `(group, image)` pairs offered, for `user`, who keeps the customized
/// images `kept`: environments by repository (the user's customized ones last), versions by
/// tag, each naming the groups that offer it. Another user's customized image, or one its
/// owner removed, is left out.
pub fn catalogue(
    offered: impl IntoIterator<Item = (String, String)>,
    user: Uuid,
    kept: &BTreeSet<String>,
) -> Vec<Environment> {
    // (customized, repository) -> (tag, image) -> groups
    type Versions = BTreeMap<(String, String), BTreeSet<String>>;
    let mut found: BTreeMap<(bool, String), Versions> = BTreeMap::new();
    for (group, image) in offered {
        let customized = match custom_image_owner(&image) {
            Some(owner) if owner == user && kept.contains(&image) => true,
            Some(_) => continue,
            None => false,
        };
        let (repository, tag) = split_reference(&image);
        found
            .entry((customized, repository.to_owned()))
            .or_default()
            .entry((tag.to_owned(), image.clone()))
            .or_default()
            .insert(group);
    }
    found
        .into_iter()
        .map(|((customized, name), versions)| Environment {
            name,
            customized,
            versions: versions
                .into_iter()
                .map(|((tag, image), groups)| EnvironmentVersion {
                    tag,
                    image,
                    resource_groups: groups.into_iter().collect(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::images::custom_image;

    fn offered(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(g, i)| (g.to_string(), i.to_string()))
            .collect()
    }

    #[test]
    fn images_are_grouped_by_repository_and_tag_with_the_groups_that_offer_them() {
        let user = Uuid::now_v7();
        let found = catalogue(
            offered(&[
                ("default", "berth/python:3.12"),
                ("gpu", "berth/python:3.12"),
                ("default", "berth/python:latest"),
                ("default", "berth/shell:latest"),
            ]),
            user,
            &BTreeSet::new(),
        );
        let names: Vec<&str> = found.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["berth/python", "berth/shell"]);
        let python = &found[0];
        assert!(!python.customized);
        let tags: Vec<(&str, &str, Vec<&str>)> = python
            .versions
            .iter()
            .map(|v| {
                (
                    v.tag.as_str(),
                    v.image.as_str(),
                    v.resource_groups.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            tags,
            [
                ("3.12", "berth/python:3.12", vec!["default", "gpu"]),
                ("latest", "berth/python:latest", vec!["default"]),
            ]
        );
    }

    #[test]
    fn a_server_image_is_listed_only_when_shown_and_a_hidden_one_never() {
        assert!(listed("berth/python:latest", true, ImageListing::Labels));
        assert!(!listed("berth/postgres:15", false, ImageListing::Labels));
        assert!(listed("berth/postgres:15", false, ImageListing::Shown));
        assert!(!listed("berth/python:latest", true, ImageListing::Hidden));
        let mine = custom_image(Uuid::now_v7(), "plain");
        assert!(listed(&mine, false, ImageListing::Labels), "customized");
        assert!(!listed(&mine, true, ImageListing::Hidden));
    }

    /// The launcher offers a customized image to its owner alone, while they keep it; so
    /// does the catalogue, marking it and listing it last.
    #[test]
    fn only_the_callers_own_customized_images_are_listed_and_marked() {
        let user = Uuid::now_v7();
        let mine = custom_image(user, "My_env");
        let removed = custom_image(user, "gone1");
        let theirs = custom_image(Uuid::now_v7(), "My_env");
        let kept = BTreeSet::from([mine.clone()]);
        let found = catalogue(
            offered(&[
                ("default", &mine),
                ("default", &removed),
                ("default", &theirs),
                ("default", "zeta/last:1"),
            ]),
            user,
            &kept,
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            (found[0].name.as_str(), found[0].customized),
            ("zeta/last", false)
        );
        let custom = &found[1];
        assert!(custom.customized);
        assert_eq!(custom.versions.len(), 1);
        assert_eq!(
            (custom.versions[0].tag.as_str(), &custom.versions[0].image),
            ("My_env", &mine)
        );
    }
}
