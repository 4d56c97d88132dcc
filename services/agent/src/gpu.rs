//! GPUs through NVML, loaded at run time (nvml-wrapper opens `libnvidia-ml.so` when asked):
//! a host without the library or without a GPU has no GPUs, and says why; nothing crashes.
//!
//! Each GPU offers 1,000 thousandths (`gpu_milli`), so a session may ask for a whole GPU or a
//! share of one. Whole GPUs go to a container as a device request; a fractional share is
//! recorded and passed to the container as `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (enforced only
//! where the host runs the CUDA MPS daemon; memory is not partitioned). The scheduler counts
//! an agent's total; [`assign`] picks the devices on the host, from what its containers'
//! labels say they hold.

use std::collections::HashMap;

use nvml_wrapper::Nvml;

/// One GPU found on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_bytes: u64,
}

/// What discovery found: the GPUs, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    Found(Vec<Gpu>),
    None(String),
}

impl Discovery {
    pub fn gpus(&self) -> &[Gpu] {
        match self {
            Discovery::Found(g) => g,
            Discovery::None(_) => &[],
        }
    }

    /// The capacity the GPUs add, in thousandths of a GPU.
    pub fn gpu_milli(&self) -> u64 {
        self.gpus().len() as u64 * 1000
    }
}

/// Looks for GPUs through NVML.
pub fn discover() -> Discovery {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => return Discovery::None(format!("NVML is not available: {e}")),
    };
    let count = match nvml.device_count() {
        Ok(0) => return Discovery::None("NVML found no GPU".into()),
        Ok(n) => n,
        Err(e) => return Discovery::None(format!("NVML could not count GPUs: {e}")),
    };
    let mut gpus = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        gpus.push(Gpu {
            index,
            uuid: device.uuid().unwrap_or_default(),
            name: device.name().unwrap_or_default(),
            memory_bytes: device.memory_info().map(|m| m.total).unwrap_or(0),
        });
    }
    if gpus.is_empty() {
        Discovery::None(format!("NVML listed {count} GPUs but none could be read"))
    } else {
        Discovery::Found(gpus)
    }
}

/// The GPUs one kernel holds: each device's UUID with the thousandths it holds there, and the
/// MPS thread percentage when the share is a fraction of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuShare {
    pub devices: Vec<(String, u64)>,
    pub mps_percentage: Option<u32>,
}

impl GpuShare {
    pub fn device_ids(&self) -> Vec<String> {
        self.devices.iter().map(|(uuid, _)| uuid.clone()).collect()
    }

    /// The container label that records the share (`GPU-a=1000,GPU-b=500`), so what the
    /// containers on a host hold can be read back from the engine, after a restart too.
    pub fn to_label(&self) -> String {
        self.devices
            .iter()
            .map(|(uuid, milli)| format!("{uuid}={milli}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Adds what a container's label says it holds to `held` (device UUID to thousandths).
/// Pure; a malformed entry counts as holding the whole device, the safe side.
pub fn add_held(label: &str, held: &mut HashMap<String, u64>) {
    for entry in label.split(',').filter(|e| !e.is_empty()) {
        let (uuid, milli) = match entry.rsplit_once('=') {
            Some((uuid, milli)) => (uuid, milli.parse().unwrap_or(1000)),
            None => (entry, 1000),
        };
        *held.entry(uuid.to_owned()).or_default() += milli;
    }
}

/// Picks the GPUs of a kernel asking for `gpu_milli`, given what the kernels already on this
/// host hold. Pure.
///
/// The scheduler counts only the agent's total, so the agent chooses the devices: whole GPUs
/// go to the least-held devices, so two kernels never share a GPU while one is free; a fraction
/// goes where it fits most tightly (best fit keeps whole GPUs free for whole requests), or,
/// when no device has the room, to the least-held one.
pub fn assign(gpu_milli: u64, available: &[Gpu], held: &HashMap<String, u64>) -> GpuShare {
    if gpu_milli == 0 || available.is_empty() {
        return GpuShare::default();
    }
    let held_on = |g: &Gpu| held.get(&g.uuid).copied().unwrap_or(0);
    if gpu_milli < 1000 {
        let tightest = available
            .iter()
            .filter(|g| held_on(g) + gpu_milli <= 1000)
            .max_by_key(|g| (held_on(g), std::cmp::Reverse(g.index)));
        let device = tightest.unwrap_or_else(|| {
            available
                .iter()
                .min_by_key(|g| (held_on(g), g.index))
                .expect("not empty")
        });
        return GpuShare {
            devices: vec![(device.uuid.clone(), gpu_milli)],
            mps_percentage: Some((gpu_milli / 10).max(1) as u32),
        };
    }
    let whole = (gpu_milli.div_ceil(1000) as usize).min(available.len());
    let mut by_load: Vec<&Gpu> = available.iter().collect();
    by_load.sort_by_key(|g| (held_on(g), g.index));
    let mut left = gpu_milli;
    let devices = by_load
        .into_iter()
        .take(whole)
        .map(|g| {
            let milli = left.min(1000);
            left -= milli;
            (g.uuid.clone(), milli)
        })
        .collect();
    GpuShare {
        devices,
        mps_percentage: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32) -> Vec<Gpu> {
        (0..n)
            .map(|i| Gpu {
                index: i,
                uuid: format!("GPU-{i}"),
                name: "test".into(),
                memory_bytes: 1 << 34,
            })
            .collect()
    }

    fn held(entries: &[(&str, u64)]) -> HashMap<String, u64> {
        entries.iter().map(|(u, m)| (u.to_string(), *m)).collect()
    }

    fn ids(share: &GpuShare) -> Vec<(&str, u64)> {
        share
            .devices
            .iter()
            .map(|(u, m)| (u.as_str(), *m))
            .collect()
    }

    #[test]
    fn no_gpus_asked_or_none_here_means_no_share() {
        assert_eq!(assign(0, &gpus(2), &held(&[])), GpuShare::default());
        assert_eq!(assign(500, &[], &held(&[])), GpuShare::default());
    }

    #[test]
    fn whole_gpus_go_to_free_devices_never_one_already_given() {
        let one = assign(1000, &gpus(2), &held(&[]));
        assert_eq!(ids(&one), vec![("GPU-0", 1000)]);
        assert_eq!(one.mps_percentage, None);
        // A second whole GPU on the same host gets the other device.
        let two = assign(1000, &gpus(2), &held(&[("GPU-0", 1000)]));
        assert_eq!(ids(&two), vec![("GPU-1", 1000)]);
        // A half already on GPU-0 sends a whole request to GPU-1.
        let three = assign(1000, &gpus(2), &held(&[("GPU-0", 500)]));
        assert_eq!(ids(&three), vec![("GPU-1", 1000)]);
        assert_eq!(
            ids(&assign(1500, &gpus(3), &held(&[("GPU-1", 250)]))),
            vec![("GPU-0", 1000), ("GPU-2", 500)]
        );
        // Never more devices than the host has.
        assert_eq!(assign(3000, &gpus(2), &held(&[])).devices.len(), 2);
    }

    #[test]
    fn fractions_fit_tightly_and_carry_their_mps_percentage() {
        let quarter = assign(250, &gpus(2), &held(&[]));
        assert_eq!(ids(&quarter), vec![("GPU-0", 250)]);
        assert_eq!(quarter.mps_percentage, Some(25));
        // Best fit: the half-held device takes the next half, keeping GPU-1 whole.
        let half = assign(500, &gpus(2), &held(&[("GPU-0", 500)]));
        assert_eq!(ids(&half), vec![("GPU-0", 500)]);
        // No room for 0.6 on GPU-0 (0.5 held): it goes to GPU-1.
        let more = assign(600, &gpus(2), &held(&[("GPU-0", 500)]));
        assert_eq!(ids(&more), vec![("GPU-1", 600)]);
        // No device has the room: the least-held one.
        let over = assign(600, &gpus(2), &held(&[("GPU-0", 700), ("GPU-1", 500)]));
        assert_eq!(ids(&over), vec![("GPU-1", 600)]);
        assert_eq!(assign(5, &gpus(1), &held(&[])).mps_percentage, Some(1));
    }

    #[test]
    fn labels_round_trip_and_malformed_ones_count_as_whole() {
        let share = assign(1500, &gpus(2), &held(&[]));
        assert_eq!(share.to_label(), "GPU-0=1000,GPU-1=500");
        let mut seen = HashMap::new();
        add_held(&share.to_label(), &mut seen);
        add_held("GPU-1=250", &mut seen);
        add_held("GPU-2,GPU-3=x,", &mut seen);
        assert_eq!(
            seen,
            held(&[
                ("GPU-0", 1000),
                ("GPU-1", 750),
                ("GPU-2", 1000),
                ("GPU-3", 1000)
            ])
        );
    }

    /// Runs everywhere: on a host without NVML or GPUs it must say so, not fail.
    #[test]
    fn discovery_finds_gpus_or_says_why_not() {
        match discover() {
            Discovery::Found(gpus) => {
                for g in &gpus {
                    eprintln!(
                        "GPU {}: {} {} ({} MiB)",
                        g.index,
                        g.name,
                        g.uuid,
                        g.memory_bytes >> 20
                    );
                }
                assert!(gpus.iter().all(|g| !g.uuid.is_empty()));
            }
            Discovery::None(why) => {
                eprintln!("skipping the GPU checks: {why}");
                assert!(!why.is_empty());
            }
        }
    }
}
