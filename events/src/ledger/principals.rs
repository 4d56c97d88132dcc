//! People as the authorization rule weighs them (`domain::authorization`): a user's role and
//! the projects they belong to, read from the ledger at the moment a surface asks.

use std::collections::BTreeSet;

use crate::authorization::Principal;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::LedgerError;
use crate::payloads::Role;

/// User `user_id` with their role and projects; `None` when no such user exists.
pub async fn principal<C: GenericClient>(
    client: &C,
    user_id: Uuid,
) -> Result<Option<Principal>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT u.role,
                    COALESCE(array_agg(m.project) FILTER (WHERE m.project IS NOT NULL), '{}')
             FROM ledger.users u LEFT JOIN ledger.project_members m USING (user_id)
             WHERE u.user_id = $1 GROUP BY u.role",
            &[&user_id],
        )
        .await?;
    Ok(row.map(|r| Principal {
        user_id,
        role: Role::parse(r.get(0)).unwrap_or(Role::User),
        projects: r
            .get::<_, Vec<String>>(1)
            .into_iter()
            .collect::<BTreeSet<_>>(),
    }))
}
