//! The catalogue's listings: an admin shows an image whose labels do not offer it, hides one
//! (never offered, and refused to a launch that names it), or gives it back to its labels
//! (`ImageListingSet`, in the image's stream).

use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::images::ImageListing;
use events::ledger;
use events::payloads::ImageListingSet;

use crate::access::{record, AccessError};

/// The most characters of an image reference, as a launch takes one.
const MOST_IMAGE_CHARS: usize = 512;

/// An image's stream: its reference hashed, since `/` and `:` are no stream id's.
fn stream_of(image: &str) -> String {
    format!("image-{}", &ledger::key_digest(image)[..32])
}

/// Checks an image reference an admin lists: 1 to 512 printable ASCII characters, no space
/// (what an engine's references are made of). Pure.
pub fn check_image(image: &str) -> Result<(), AccessError> {
    let fits = (1..=MOST_IMAGE_CHARS).contains(&image.len())
        && image.bytes().all(|b| (b'!'..=b'~').contains(&b));
    if fits {
        Ok(())
    } else {
        Err(AccessError::Invalid {
            field: "image",
            message: "an image reference (`repository:tag`): 1 to 512 printable ASCII \
                      characters, no space"
                .to_owned(),
        })
    }
}

/// Lists `image` in the catalogue as `listing` says.
pub async fn set_listing(
    pool: &Pool,
    image: &str,
    listing: ImageListing,
) -> Result<(), AccessError> {
    check_image(image)?;
    let set = Event::ImageListingSet(ImageListingSet {
        image: image.to_owned(),
        listing,
    });
    record(pool, stream_of(image), &[set]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_reference_has_no_space_and_at_most_512_characters() {
        assert!(check_image("berth/base:latest").is_ok());
        assert!(check_image("cr.example.com:5000/team/x@sha256:abc").is_ok());
        for bad in ["", "a b", "x\n", "\u{13}x", "é/x", &"x".repeat(513)] {
            assert!(check_image(bad).is_err(), "{bad:?}");
        }
    }
}
