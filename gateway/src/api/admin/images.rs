//! The catalogue as an admin sees it: every image the live agents hold, whether its labels
//! make it a session image, and how it is listed; an admin shows an image the labels leave
//! out, hides one (never offered, refused to a launch), or gives it back to its labels
//! (`ImageListingSet`, recorded by `launcher::listings`).

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use domain::images::ImageListing;
use launcher::listings;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::superadmin_only;
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::HeldImages;
use crate::state::AppState;

/// `PUT /v1/admin/images/listing`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageListingIn {
    /// `repository:tag`: 1 to 512 printable ASCII characters, no space.
    #[schema(min_length = 1, max_length = 512, pattern = r"^[!-~]+$")]
    pub image: String,
    /// `labels` (offered as its labels say), `shown` (whatever they say) or `hidden` (never
    /// offered, and refused to a launch that names it).
    pub listing: ImageListing,
}

/// Every image the live agents hold, with whether the catalogue offers it and why.
#[utoipa::path(get, path = "/v1/admin/images", tag = "admin",
    responses((status = 200, description = "the images, by reference", body = HeldImages)))]
pub async fn admin_list_images(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<HeldImages>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(HeldImages {
        images: db::environments::held_images(&state.pool).await?,
    }))
}

/// List an image in the catalogue (`ImageListingSet`): `shown`, `hidden` or as its `labels`
/// say. An image no agent holds yet may be listed: the listing waits for it.
#[utoipa::path(put, path = "/v1/admin/images/listing", tag = "admin",
    request_body = ImageListingIn,
    responses((status = 204, description = "listed")))]
pub async fn admin_set_image_listing(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let listing = parse_body::<ImageListingIn>(body)?;
    listings::set_listing(&state.pool, &listing.image, listing.listing).await?;
    Ok(StatusCode::NO_CONTENT)
}
