//! The gateway's reads, as typed functions, one module per resource: the only place in this
//! crate, with `projection/`, that writes SQL (the workspace's tidy test checks it). Handlers
//! say what they want ([`sessions::SessionFilter`], [`history::HistoryFilter`]); these modules
//! say how to fetch it. Views come from the gateway's own `proj_sessions` projection; what
//! must be exact right after a write (who owns a session, its status) comes from the ledger
//! (`ledger.*`, written by `events::ledger`). Each module's doc names the tables it reads and
//! who writes them.
//!
//! - [`sessions`]: the session list, detail and owner.
//! - [`backendai`]: a session by its owner's name for it (Backend.AI's paths).
//! - [`backendai_gql`]: sessions and keypair owners as Backend.AI's GraphQL subset shows them.
//! - [`history`]: a session's scheduling history.
//! - [`resources`]: resource groups (those open to a caller, what each holds), limits, usage
//!   and presets.
//! - [`admin`]: what a superadmin lists: users, keys, projects, groups, policies, idle
//!   checks, admitted agents.
//! - [`agents`]: the agents of some groups, what each holds and has free.
//! - [`environments`]: the image catalogue the agents offer.
//! - [`launches`]: a user's recent launches.
//! - [`queue`]: each group's PENDING sessions in the scheduler's order, and why they wait.
//! - [`logs`]: the kept output of a session's kernels.
//! - [`folders`]: a user's folders.
//! - [`notifications`]: a user's notifications.
//! - [`images`]: a user's customized images and how many they may keep.
//! - [`circuits`]: the app proxy's open circuits and the apps' secrets.
//! - [`ready`]: how far behind the log's readers are (`/readyz`).
//! - [`usage`]: a session's usage series, bounded.
//! - [`estimates`]: the start estimates recorded for waiting sessions, with the starts that
//!   followed.
//! - [`subscriptions`]: how far each durable subscription was acknowledged.
//! - [`serving`]: model endpoints' tokens (by digest), and which gateway runs their replicas.

pub mod admin;
pub mod agents;
pub mod backendai;
pub mod backendai_gql;
pub mod circuits;
pub mod environments;
pub mod estimates;
pub mod folders;
pub mod history;
pub mod images;
pub mod launches;
pub mod logs;
pub mod notifications;
pub mod queue;
pub mod ready;
pub mod resources;
pub mod serving;
pub mod sessions;
pub mod subscriptions;
pub mod usage;

use tokio_postgres::types::ToSql;

/// WHERE clauses with their parameters, numbered as they are added.
#[derive(Default)]
struct Where {
    clauses: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Where {
    fn add<T: ToSql + Sync + Send + 'static>(&mut self, clause: &str, value: T) {
        self.params.push(Box::new(value));
        self.clauses
            .push(clause.replace('?', &format!("${}", self.params.len())));
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            "true".into()
        } else {
            self.clauses.join(" AND ")
        }
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}
