//! What the reaper knows, folded from events and usage: the live sessions it watches, the
//! idle checks of each resource group and policy, and each owner's policy. Pure; `run` feeds
//! it and `db` keeps it across restarts.

use std::collections::HashMap;

use bus::protocol::UsageSample;
use chrono::{DateTime, Utc};
use events::catalogue::Event;
use events::idleness::{IdleChecks, IdleScope, IdleVerdict, SessionReadings, UsagePoint, Watched};
use events::payloads::SessionStatus;
use uuid::Uuid;

/// What one event changed, so the caller keeps just that.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Nothing,
    /// The session is watched as it is now.
    Watching(Box<Watched>),
    /// The session ended or is being terminated: no longer watched.
    Unwatched(Uuid),
    Checks(IdleScope, IdleChecks),
    Owner(Uuid, String),
}

/// The reaper's whole state.
#[derive(Debug, Default)]
pub struct Watchlist {
    pub sessions: HashMap<Uuid, Watched>,
    pub checks: HashMap<IdleScope, IdleChecks>,
    /// Each user's resource policy.
    pub policies: HashMap<Uuid, String>,
}

impl Watchlist {
    /// Takes in one event recorded at `at`; idempotent, so an event applied again changes
    /// nothing more.
    pub fn apply(&mut self, event: &Event, at: DateTime<Utc>) -> Change {
        match event {
            Event::SessionRequested(r) => {
                if self.sessions.contains_key(&r.session_id) {
                    return Change::Nothing;
                }
                let watched = Watched {
                    session_id: r.session_id,
                    owner: r.owner.user_id,
                    session_type: r.session_type,
                    resource_group: r.resource_group.clone(),
                    resources: r.resources,
                    created_at: at,
                    lifetime_cap_secs: r.max_lifetime_secs,
                    network_idle_cap_secs: r.network_idle_timeout_secs,
                    agent_id: None,
                    running_since: None,
                    exempt: false,
                    usage: Default::default(),
                    last_traffic_at: None,
                    observed_since: None,
                };
                self.sessions.insert(r.session_id, watched.clone());
                Change::Watching(Box::new(watched))
            }
            Event::SessionScheduled(e) => self.update(e.session_id, |w| {
                w.agent_id = Some(e.agent_id.clone());
                // A session placed again starts its observation again.
                w.running_since = None;
                w.usage.clear();
                w.last_traffic_at = None;
                w.observed_since = None;
            }),
            Event::SessionStatusChanged(e) if e.to.is_terminal() => self.unwatch(e.session_id),
            Event::SessionStatusChanged(e) if e.to == SessionStatus::Running => {
                // It runs from its container's start where its agent reported it (a late
                // report, after an agent came back), not from the report.
                self.update(e.session_id, |w| {
                    w.running_since.get_or_insert(e.occurred_at.unwrap_or(at));
                })
            }
            Event::SessionTerminationRequested(e) => self.unwatch(e.session_id),
            Event::SessionIdleExempted(e) => self.update(e.session_id, |w| w.exempt = true),
            Event::UserCreated(e) => {
                self.policies.insert(e.user_id, e.resource_policy.clone());
                Change::Owner(e.user_id, e.resource_policy.clone())
            }
            Event::IdleChecksSet(e) => {
                self.checks.insert(e.scope.clone(), e.checks);
                Change::Checks(e.scope.clone(), e.checks)
            }
            _ => Change::Nothing,
        }
    }

    fn update(&mut self, session_id: Uuid, change: impl FnOnce(&mut Watched)) -> Change {
        match self.sessions.get_mut(&session_id) {
            Some(w) => {
                change(w);
                Change::Watching(Box::new(w.clone()))
            }
            None => Change::Nothing,
        }
    }

    fn unwatch(&mut self, session_id: Uuid) -> Change {
        match self.sessions.remove(&session_id) {
            Some(_) => Change::Unwatched(session_id),
            None => Change::Nothing,
        }
    }

    /// The checks that apply to a session: its group's, with those its owner's policy sets
    /// instead, the lifetime bounded by the policy's maximum and the network idle timeout by
    /// the request's own (an upload session's), as the request carried them.
    pub fn checks_for(&self, w: &Watched) -> IdleChecks {
        let group = self
            .checks
            .get(&IdleScope::ResourceGroup(w.resource_group.clone()))
            .copied()
            .unwrap_or_default();
        let policy = self
            .policies
            .get(&w.owner)
            .and_then(|p| self.checks.get(&IdleScope::ResourcePolicy(p.clone())))
            .copied()
            .unwrap_or_default();
        group
            .overridden_by(&policy)
            .with_lifetime_cap(w.lifetime_cap_secs)
            .with_network_idle_cap(w.network_idle_cap_secs)
    }

    /// How far back usage matters: the longest utilization window or network timeout of any
    /// checks or session (a reaper started again reads that much again).
    pub fn keep_secs(&self) -> u64 {
        self.checks
            .values()
            .flat_map(|c| {
                [
                    c.utilization.map(|u| u.window_secs),
                    c.network_idle_timeout_secs,
                ]
            })
            .chain(self.sessions.values().map(|w| w.network_idle_cap_secs))
            .flatten()
            .max()
            .unwrap_or(0)
    }

    /// Takes in a usage sample `agent` sent; only the main kernel's agent speaks for a
    /// session. Returns whether it was taken.
    pub fn observe(&mut self, agent: &str, sample: &UsageSample) -> bool {
        let keep = self.keep_secs();
        let Some(w) = self.sessions.get_mut(&sample.session_id) else {
            return false;
        };
        if w.agent_id.as_deref() != Some(agent) || w.running_since.is_none() {
            return false;
        }
        let point = UsagePoint {
            at: sample.sampled_at,
            cpu_percent: sample.cpu_percent,
            memory_bytes: u64::try_from(sample.memory_bytes).ok(),
            gpu_percent: sample.gpu_percent,
            gpu_memory_percent: sample.gpu_memory_percent,
            network_bytes: u64::try_from(sample.rx_bytes.saturating_add(sample.tx_bytes)).ok(),
        };
        w.observe(point, keep);
        true
    }

    /// Takes in traffic berth's proxy carried for a running session; false for a session
    /// this reaper does not watch running.
    pub fn app_activity(&mut self, session_id: Uuid, at: DateTime<Utc>) -> bool {
        match self.sessions.get_mut(&session_id) {
            Some(w) if w.running_since.is_some() => {
                w.saw_traffic(at);
                true
            }
            _ => false,
        }
    }

    /// What every checker says of `session_id` now.
    pub fn readings(&self, session_id: Uuid, now: DateTime<Utc>) -> Option<SessionReadings> {
        let w = self.sessions.get(&session_id)?;
        Some(SessionReadings {
            session_id,
            exempt: w.exempt,
            readings: w.readings(&self.checks_for(w), now),
        })
    }

    /// The sessions to reap now, each with the reading that decided it, oldest first.
    pub fn due(&self, now: DateTime<Utc>) -> Vec<IdleVerdict> {
        let mut due: Vec<(DateTime<Utc>, IdleVerdict)> = self
            .sessions
            .values()
            .filter_map(|w| {
                let reading = w.verdict(&self.checks_for(w), now)?;
                let verdict = IdleVerdict {
                    session_id: w.session_id,
                    reading,
                };
                Some((w.created_at, verdict))
            })
            .collect();
        due.sort_by_key(|(created, v)| (*created, v.session_id));
        due.into_iter().map(|(_, v)| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::idleness::{IdleChecker, Thresholds, UtilizationCheck};
    use events::payloads::*;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn requested(id: Uuid, owner: Uuid, lifetime_cap: Option<u64>) -> Event {
        Event::SessionRequested(Box::new(SessionRequested {
            session_id: id,
            name: "s1".into(),
            owner: Owner {
                user_id: owner,
                email: "u@example.com".into(),
                project: None,
            },
            max_lifetime_secs: lifetime_cap,
            ..domain::fixtures::session_requested()
        }))
    }

    fn moved(id: Uuid, from: SessionStatus, to: SessionStatus) -> Event {
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id: id,
            from,
            to,
            reason: Some("x".into()),
            exit_code: None,
            occurred_at: None,
        })
    }

    fn scheduled(id: Uuid, agent: &str) -> Event {
        Event::SessionScheduled(SessionScheduled {
            session_id: id,
            agent_id: agent.into(),
            resources: ResourceSlots::default(),
            kernels: Vec::new(),
        })
    }

    fn checks(scope: IdleScope, checks: IdleChecks) -> Event {
        Event::IdleChecksSet(IdleChecksSet { scope, checks })
    }

    fn sample(id: Uuid, at: i64, cpu: f64) -> UsageSample {
        UsageSample {
            session_id: id,
            sampled_at: t(at),
            cpu_seconds: 0.0,
            cpu_percent: Some(cpu),
            memory_bytes: 1 << 20,
            rx_bytes: 0,
            tx_bytes: 0,
            gpu_percent: None,
            gpu_memory_percent: None,
        }
    }

    #[test]
    fn a_session_is_watched_from_its_request_until_it_is_being_terminated() {
        let (id, owner) = (Uuid::now_v7(), Uuid::now_v7());
        let mut list = Watchlist::default();
        assert!(matches!(
            list.apply(&requested(id, owner, None), t(0)),
            Change::Watching(_)
        ));
        assert_eq!(
            list.apply(&requested(id, owner, None), t(5)),
            Change::Nothing,
            "again"
        );
        list.apply(&scheduled(id, "a1"), t(1));
        list.apply(
            &moved(id, SessionStatus::Creating, SessionStatus::Running),
            t(2),
        );
        assert_eq!(list.sessions[&id].running_since, Some(t(2)));
        let stop = Event::SessionTerminationRequested(SessionTerminationRequested {
            session_id: id,
            forced: false,
            reason: "by user".into(),
        });
        assert_eq!(list.apply(&stop, t(3)), Change::Unwatched(id));
        assert!(list.sessions.is_empty());
        assert_eq!(list.apply(&stop, t(3)), Change::Nothing);
    }

    #[test]
    fn the_owners_policy_overrides_its_groups_checks_and_the_request_caps_the_lifetime() {
        let (id, owner) = (Uuid::now_v7(), Uuid::now_v7());
        let mut list = Watchlist::default();
        list.apply(
            &checks(
                IdleScope::ResourceGroup("default".into()),
                IdleChecks {
                    max_lifetime_secs: Some(100),
                    network_idle_timeout_secs: Some(50),
                    utilization: None,
                },
            ),
            t(0),
        );
        list.apply(
            &Event::UserCreated(UserCreated {
                user_id: owner,
                email: "u@example.com".into(),
                role: Role::User,
                resource_policy: "long".into(),
            }),
            t(0),
        );
        list.apply(
            &checks(
                IdleScope::ResourcePolicy("long".into()),
                IdleChecks {
                    max_lifetime_secs: Some(1000),
                    ..Default::default()
                },
            ),
            t(0),
        );
        list.apply(&requested(id, owner, Some(400)), t(0));
        let applied = list.checks_for(&list.sessions[&id]);
        assert_eq!(applied.max_lifetime_secs, Some(400));
        assert_eq!(applied.network_idle_timeout_secs, Some(50));
        assert_eq!(list.due(t(399)), Vec::new());
        let due = list.due(t(400));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].reading.checker, IdleChecker::Lifetime);
    }

    #[test]
    fn only_the_main_agents_usage_of_a_running_session_counts() {
        let (id, owner) = (Uuid::now_v7(), Uuid::now_v7());
        let mut list = Watchlist::default();
        list.apply(
            &checks(
                IdleScope::ResourceGroup("default".into()),
                IdleChecks {
                    utilization: Some(UtilizationCheck {
                        grace_period_secs: 0,
                        window_secs: 10,
                        thresholds: Thresholds {
                            cpu_percent: Some(5.0),
                            ..Default::default()
                        },
                        combine: Default::default(),
                    }),
                    ..Default::default()
                },
            ),
            t(0),
        );
        list.apply(&requested(id, owner, None), t(0));
        list.apply(&scheduled(id, "a1"), t(0));
        assert!(!list.observe("a1", &sample(id, 1, 0.0)), "not running yet");
        list.apply(
            &moved(id, SessionStatus::Creating, SessionStatus::Running),
            t(2),
        );
        assert!(!list.observe("a2", &sample(id, 3, 0.0)), "another agent");
        for at in [3, 6, 9, 12] {
            assert!(list.observe("a1", &sample(id, at, 1.0)));
        }
        let readings = list.readings(id, t(12)).unwrap();
        assert!(readings.readings[0].fires, "{readings:?}");
        assert_eq!(list.due(t(12)).len(), 1);
        list.apply(
            &Event::SessionIdleExempted(SessionIdleExempted {
                session_id: id,
                by: owner,
                reason: "keep".into(),
            }),
            t(12),
        );
        assert!(list.due(t(12)).is_empty(), "exempt");
        assert!(list.readings(id, t(12)).unwrap().exempt);
    }

    #[test]
    fn the_gpus_use_an_agent_samples_decides_the_gpu_thresholds() {
        let mut list = Watchlist::default();
        let gpu_only = IdleChecks {
            utilization: Some(UtilizationCheck {
                grace_period_secs: 0,
                window_secs: 10,
                thresholds: Thresholds {
                    gpu_percent: Some(10.0),
                    gpu_memory_percent: Some(10.0),
                    ..Default::default()
                },
                combine: Default::default(),
            }),
            ..Default::default()
        };
        list.apply(
            &checks(IdleScope::ResourceGroup("default".into()), gpu_only),
            t(0),
        );
        let (idle, busy) = (Uuid::now_v7(), Uuid::now_v7());
        for id in [idle, busy] {
            let Event::SessionRequested(mut asked) = requested(id, Uuid::now_v7(), None) else {
                unreachable!()
            };
            asked.resources.gpu_milli = 1000;
            list.apply(&Event::SessionRequested(asked), t(0));
            list.apply(&scheduled(id, "a1"), t(0));
            list.apply(
                &moved(id, SessionStatus::Creating, SessionStatus::Running),
                t(0),
            );
        }
        let with_gpu = |id, at, gpu: f64| UsageSample {
            gpu_percent: Some(gpu),
            gpu_memory_percent: Some(gpu / 2.0),
            ..sample(id, at, 0.0)
        };
        for at in [2, 5, 8, 11] {
            assert!(list.observe("a1", &with_gpu(idle, at, 1.0)));
            assert!(list.observe("a1", &with_gpu(busy, at, 90.0)));
        }
        let due = list.due(t(11));
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(due[0].session_id, idle);
        let names: Vec<&str> = due[0]
            .reading
            .measures
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, ["gpu_percent", "gpu_memory_percent"]);
        let kept = list.readings(busy, t(11)).unwrap();
        assert!(!kept.readings[0].fires, "{kept:?}");
        assert_eq!(kept.readings[0].measures[0].value, 90.0);
    }
}
