//! End-to-end tests of the whole platform against real PostgreSQL, NATS and Docker, one
//! binary (one link on a 2-core machine). Each test starts berth through the same
//! composition `berth up` uses (`berth::app::start`), on a database and a JetStream stream of
//! its own.
//!
//! - [`attacks`]: the security review's findings as attacks that now fail: a revoked key, a
//!   disabled user and an expired key refused at once on a second gateway on every surface, a
//!   role change and a password change holding at once, the eleventh wrong password refused.
//! - [`accelerators`]: GPUs without a GPU: mock devices through the whole path (devices,
//!   environment and MPS limits in the container, a request that waits, the GPU idle check),
//!   and an agent that refuses GPUs its discovery does not find.
//! - [`backendai_client`]: Backend.AI's own client from PyPI, unchanged (its `backend.ai` CLI
//!   and its SDK), creating, listing, following, renaming and destroying sessions, and
//!   refused by key, by owner and where berth has no such call.
//! - [`attacks`]: the security review's attacks (`../shared/notes/security-review-1.md`),
//!   each a test that it now fails.
//! - [`authorization`]: the one authorization rule's table (every role, action and kind of
//!   owner) asked on every surface: `/v1`, the console, Backend.AI's REST and GraphQL.
//! - [`apps`]: the way into a running session: the app proxy, JupyterLab, the terminal (also
//!   in a browser, through [`chrome`]), SSH through a tunnel, idle circuits.
//! - [`agents_gone`]: agents that fall silent or are lost: passed over, and what never ran
//!   (and inference) placed again elsewhere.
//! - [`backendai_events`]: Backend.AI's event stream as its client reads it: a failing batch
//!   session's lifecycle with its exit code on a Docker agent, one session's stream ending
//!   (also replayed once it ended), the caller's own sessions only.
//! - [`backendai_gql`]: Backend.AI's GraphQL subset as its client queries it (`ps`,
//!   `session info`, the keypair check): fields in the order selected, JSON text, who sees
//!   what.
//! - [`backendai_sessions`]: Backend.AI's `/session` calls, signed as its client signs them:
//!   get-or-create and its wait, info, logs of a real container, rename, destroy, commit, each
//!   seen by berth's `/v1`, and the refusals in Backend.AI's problem JSON.
//! - [`admission`]: admitted agents on a NATS server with authorization, each confined to
//!   its own subjects.
//! - [`clusters`]: multi-node clusters kept to one cluster network, refused at once when
//!   none could hold them.
//! - [`commit`]: sessions committed to customized images, their owners' alone.
//! - [`event_stream`]: consumers resume with `Last-Event-ID` through cuts and a gateway
//!   stopping, every event once in log order; filters, and each user's own events.
//! - [`subscriptions`]: durable subscriptions: a consumer killed twice goes on from its
//!   acknowledgement with nothing lost and nothing handled redelivered; a NATS reader confined
//!   to its own consumer.
//! - [`serving`]: model serving on a Docker agent: an endpoint's two replicas balanced, one
//!   killed under load (only what was in flight there lost) and replaced, tokens, a streamed
//!   answer chunk by chunk, destroyed.
//! - [`files`]: a folder's files uploaded, listed, downloaded (also by range), made and
//!   removed through the API, a session seeing the same; paths and links out refused.
//! - [`bus`]: agents that speak only NATS, and the recorder and dispatcher that meet them.
//! - [`metrics`]: `/metrics` scraped before and after a session's life, and an agent's own
//!   metrics listener.
//! - [`migrations`]: the backbone's and the services' schemas, on a fresh database and on one
//!   migrated before the services owned theirs.
//! - [`notifications`]: each owner told, in order and live, what became of their sessions.
//! - [`passwords`]: a user's password set and changed through the API, refused by name.
//! - [`policies`]: queue policies (fifo, drf, fair share over the log's past use) and
//!   priorities with a starvation bound, agents driven by the test.
//! - [`pulls`]: an image pull's progress, recorded while the session pulls and delivered on
//!   its owner's event stream.
//! - [`outage`]: NATS killed and started again under a running agent.
//! - [`reads`]: what a console's pages read: list rows with resources and elapsed time,
//!   the groups, agents and images a launch chooses from, recent launches, the queue.
//! - [`restore`]: a backup restored into a fresh PostgreSQL cluster, the log's order kept.
//! - [`sessions`]: sessions through the HTTP API, agents driven by the test.
//! - [`containers`]: real containers run by the agent's Docker runtime.
//! - [`hosts`]: two Docker engines, each on a host of its own (`infra/host.sh`) and joined
//!   in a swarm: a cluster with a kernel on each over an overlay network.
//! - [`history`]: a session's history of every phase (schedule, prepare, pull, create,
//!   start, terminate, cleanup) with a Docker agent, and a failed pull in the engine's words.
//! - [`idle`]: the idle-reaper's checkers on real containers, exemptions, its preview and
//!   its restart.
//! - [`console`]: the web console in headless Chromium, against a Docker agent.
//! - [`gateways`]: two gateways on one database and bus: the same reads, an app link made on
//!   one redeemed on the other, a circuit that outlives a gateway's restart.
//! - [`contract`]: the API against its own OpenAPI document (schemathesis).
//! - [`tls`]: PostgreSQL, NATS, the gateway and webhooks over TLS, with certificates the
//!   tests make.
//! - [`traces`]: one session's journey shares the trace of the request that created it.
//! - [`wake`]: the scheduler woken by the bus and its own deadlines.
//! - [`whatif`]: a recorded workload replayed through the policy that ran (its placements
//!   exactly; through departures, a loss and a bus outage, its waits and give-ups) and
//!   through DRF.

mod accelerators;
mod admission;
mod agents_gone;
mod apps;
mod attacks;
mod authorization;
mod backendai_client;
mod backendai_events;
mod backendai_gql;
mod backendai_sessions;
mod bus;
mod chrome;
mod clusters;
mod commit;
mod common;
mod console;
mod containers;
mod contract;
mod event_stream;
mod files;
mod gateways;
mod history;
mod hosts;
mod idle;
mod metrics;
mod migrations;
mod notifications;
mod outage;
mod passwords;
mod policies;
mod pulls;
mod reads;
mod restore;
mod serving;
mod sessions;
mod subscriptions;
mod tls;
mod traces;
mod wake;
mod whatif;
