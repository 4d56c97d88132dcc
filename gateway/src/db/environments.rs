//! The image catalogue: the images the live agents of some resource groups offer, grouped as
//! environments (repositories) and their versions (tags), with the caller's own customized
//! images among them and nobody else's. From the ledger (`ledger.agents`: the images each
//! agent reported when it registered, again whenever its host's images changed;
//! `ledger.custom_images`: who keeps which customized image; both written by
//! `events::ledger`). An image is listed exactly when the launcher would take it: a live
//! agent of the group offers it, and a customized one only to its owner while they keep it.

use std::collections::{BTreeMap, BTreeSet};

use deadpool_postgres::Pool;
use domain::images::{custom_image_owner, split_reference};
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{Environment, EnvironmentVersion};

/// The catalogue of the images the live agents of `groups` offer, as `user` may use them.
pub async fn environments(
    pool: &Pool,
    user: Uuid,
    groups: &[String],
) -> Result<Vec<Environment>, ApiError> {
    let client = pool.get().await?;
    let offered = client
        .query(
            "SELECT DISTINCT a.resource_group, i.image
             FROM ledger.agents a CROSS JOIN LATERAL unnest(a.images) AS i(image)
             WHERE a.lost IS NULL AND a.resource_group = ANY($1)",
            &[&groups],
        )
        .await?;
    let kept: BTreeSet<String> = client
        .query(
            "SELECT image FROM ledger.custom_images WHERE owner = $1",
            &[&user],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(catalogue(
        offered.iter().map(|r| (r.get(0), r.get(1))),
        user,
        &kept,
    ))
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
