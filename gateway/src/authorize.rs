//! The gateway's door to the one authorization rule (`domain::authorization`): every surface
//! (the REST API, the console, Backend.AI's REST and GraphQL) asks [`may`] whether a caller
//! may see, act on or create as the owner of something, and answers the refusal in its own
//! dialect (404 for what is hidden, 403 with the reason for what is forbidden).

use events::authorization::{self, Action, Refusal};
use events::ledger::{self, KeyOwner, LedgerError};
use uuid::Uuid;

use crate::state::AppState;

/// Whether `caller` may do `action` with what user `owner` owns. The ledger is read only when
/// the roles alone do not settle it (an admin reaching someone else: their projects decide).
pub async fn may(
    state: &AppState,
    caller: &KeyOwner,
    action: Action,
    owner: Uuid,
) -> Result<Result<(), Refusal>, LedgerError> {
    if let Some(settled) =
        authorization::settled_by_roles(caller.role, caller.user_id == owner, action)
    {
        return Ok(settled);
    }
    let client = state.pool.get().await?;
    let (Some(actor), Some(subject)) = (
        ledger::principal(&client, caller.user_id).await?,
        ledger::principal(&client, owner).await?,
    ) else {
        // Either is gone (a user removed in between): nothing of theirs is in reach.
        return Ok(Err(Refusal::Hidden));
    };
    Ok(authorization::may(&actor, action, &subject))
}
