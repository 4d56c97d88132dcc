//! Who may do what as whom: the one authorization rule every surface asks (berth's REST API,
//! the console, Backend.AI's REST and GraphQL). A surface loads the two people involved
//! (their roles and projects) and asks [`may`]; it never compares roles itself.
//!
//! The rule:
//! - anyone may do anything to what is their own;
//! - a superadmin may do anything to anyone's;
//! - an admin may see, act on and create for the people who share a project with them, and
//!   never for a superadmin (an admin must not borrow more power than they hold);
//! - a user may do nothing to another's.
//!
//! A refusal says how the surface answers: what the caller may not even see is answered as if
//! it did not exist (so ids of others' sessions cannot be probed); what they may see but not
//! do is answered as forbidden, with the reason.

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::payloads::Role;

/// A person as the rule weighs them: who, their role, and the projects they belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub user_id: Uuid,
    pub role: Role,
    pub projects: BTreeSet<String>,
}

/// What an actor asks to do with what belongs to a subject (another person, or themselves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read their sessions: details, logs, history, events, apps.
    See,
    /// Change their sessions: terminate, open apps, exempt from idle checks, commit, rename.
    Act,
    /// Create sessions owned by them (mounting their folders).
    CreateAs,
}

/// Why the rule refused, and so how a surface answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The actor may not even see what the subject owns: answered as "not found".
    #[error("not visible to the caller")]
    Hidden,
    /// The actor may see it but not do this: answered as "forbidden", with the reason.
    #[error("{0}")]
    Forbidden(&'static str),
}

/// Why a user may not create sessions for someone else.
pub const ONLY_ADMINS: &str = "only admins create sessions for other users";

/// Whether `actor` may do `action` with what `subject` owns.
pub fn may(actor: &Principal, action: Action, subject: &Principal) -> Result<(), Refusal> {
    if let Some(settled) = settled_by_roles(actor.role, actor.user_id == subject.user_id, action) {
        return settled;
    }
    // An admin reaching someone else: within their projects, never a superadmin.
    if subject.role != Role::Superadmin && !actor.projects.is_disjoint(&subject.projects) {
        return Ok(());
    }
    refused(
        action,
        if subject.role == Role::Superadmin {
            "an admin never creates sessions for a superadmin"
        } else {
            "an admin creates sessions only for members of their own projects"
        },
    )
}

/// The rule's answer when the actor's role (and whether the subject is the actor) settles it
/// without the subject's role or anyone's projects: `None` only for an admin reaching someone
/// else. Surfaces ask this first, so they read the two people from the ledger only then.
pub fn settled_by_roles(
    actor: Role,
    same_person: bool,
    action: Action,
) -> Option<Result<(), Refusal>> {
    if same_person || actor == Role::Superadmin {
        Some(Ok(()))
    } else if !may_name_others(actor) {
        Some(refused(action, ONLY_ADMINS))
    } else {
        None
    }
}

/// A refusal of `action`: creating as someone is forbidden for `why`; what may not be seen or
/// acted on is hidden, since whether another's session exists is not the caller's to know.
fn refused(action: Action, why: &'static str) -> Result<(), Refusal> {
    match action {
        Action::CreateAs => Err(Refusal::Forbidden(why)),
        Action::See | Action::Act => Err(Refusal::Hidden),
    }
}

/// Whether someone of `role` may name another person at all (as the owner of a session they
/// create, or the person whose sessions they read): a user may not, and is refused before
/// anyone is looked up, so a user never learns whether an email or a key belongs to someone.
pub fn may_name_others(role: Role) -> bool {
    role != Role::User
}

/// Whose sessions a list shows `actor` when it names nobody: everyone's for a superadmin,
/// otherwise their own (an admin names another person to see theirs, and [`may`] decides).
pub fn lists_everyone(actor: Role) -> bool {
    actor == Role::Superadmin
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(role: Role, projects: &[&str]) -> Principal {
        Principal {
            user_id: Uuid::new_v4(),
            role,
            projects: projects.iter().map(|p| p.to_string()).collect(),
        }
    }

    const ACTIONS: [Action; 3] = [Action::See, Action::Act, Action::CreateAs];

    /// Every role against every kind of subject and every action: the whole table.
    #[test]
    fn the_table_of_who_may_do_what_as_whom() {
        let user_a = person(Role::User, &["research"]);
        let user_b = person(Role::User, &["research"]);
        let outsider = person(Role::User, &["sales"]);
        let admin = person(Role::Admin, &["research"]);
        let other_admin = person(Role::Admin, &["research"]);
        let boss = person(Role::Superadmin, &["research"]);
        let boss2 = person(Role::Superadmin, &[]);

        // (actor, subject, allowed for every action?)
        let table: [(&Principal, &Principal, bool); 14] = [
            (&user_a, &user_a, true),
            (&user_a, &user_b, false),
            (&user_a, &admin, false),
            (&user_a, &boss, false),
            (&admin, &admin, true),
            (&admin, &user_a, true),
            (&admin, &other_admin, true),
            (&admin, &outsider, false),
            (&admin, &boss, false),
            (&boss, &user_a, true),
            (&boss, &outsider, true),
            (&boss, &admin, true),
            (&boss, &boss2, true),
            (&other_admin, &user_b, true),
        ];
        for (actor, subject, allowed) in table {
            for action in ACTIONS {
                assert_eq!(
                    may(actor, action, subject).is_ok(),
                    allowed,
                    "{:?} {action:?} {:?}",
                    actor.role,
                    subject.role
                );
            }
        }
    }

    #[test]
    fn what_may_not_be_seen_is_hidden_and_a_create_as_another_is_forbidden_with_why() {
        let user = person(Role::User, &["research"]);
        let other = person(Role::User, &["research"]);
        assert_eq!(may(&user, Action::See, &other), Err(Refusal::Hidden));
        assert_eq!(may(&user, Action::Act, &other), Err(Refusal::Hidden));
        assert_eq!(
            may(&user, Action::CreateAs, &other),
            Err(Refusal::Forbidden(
                "only admins create sessions for other users"
            ))
        );
        let admin = person(Role::Admin, &["research"]);
        let boss = person(Role::Superadmin, &["research"]);
        assert_eq!(
            may(&admin, Action::CreateAs, &boss),
            Err(Refusal::Forbidden(
                "an admin never creates sessions for a superadmin"
            ))
        );
        assert_eq!(may(&admin, Action::See, &boss), Err(Refusal::Hidden));
        let outsider = person(Role::User, &["sales"]);
        assert_eq!(
            may(&admin, Action::CreateAs, &outsider),
            Err(Refusal::Forbidden(
                "an admin creates sessions only for members of their own projects"
            ))
        );
    }

    #[test]
    fn an_admin_without_projects_reaches_nobody_but_themselves() {
        let admin = person(Role::Admin, &[]);
        let user = person(Role::User, &[]);
        assert!(may(&admin, Action::See, &user).is_err());
        assert!(may(&admin, Action::See, &admin).is_ok());
    }

    #[test]
    fn roles_settle_everything_but_an_admin_reaching_someone_else() {
        for action in ACTIONS {
            assert_eq!(settled_by_roles(Role::User, true, action), Some(Ok(())));
            assert_eq!(
                settled_by_roles(Role::Superadmin, false, action),
                Some(Ok(()))
            );
            assert!(matches!(
                settled_by_roles(Role::User, false, action),
                Some(Err(_))
            ));
            assert_eq!(settled_by_roles(Role::Admin, false, action), None);
            assert_eq!(settled_by_roles(Role::Admin, true, action), Some(Ok(())));
        }
    }

    #[test]
    fn only_admins_and_superadmins_may_name_another_person() {
        assert!(!may_name_others(Role::User));
        assert!(may_name_others(Role::Admin));
        assert!(may_name_others(Role::Superadmin));
    }

    #[test]
    fn only_a_superadmin_lists_everyone() {
        assert!(lists_everyone(Role::Superadmin));
        assert!(!lists_everyone(Role::Admin));
        assert!(!lists_everyone(Role::User));
    }
}
