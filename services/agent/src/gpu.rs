//! GPUs through NVML, loaded at run time (nvml-wrapper opens `libnvidia-ml.so` when asked):
//! a host without the library or without a GPU has no GPUs, and says why; nothing crashes.
//!
//! Each GPU offers 1,000 thousandths (`gpu_milli`), so a session may ask for a whole GPU or a
//! share of one. Whole GPUs go to a container as a device request; a fractional share is
//! recorded and passed to the container as `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (enforced only
//! where the host runs the CUDA MPS daemon; memory is not partitioned).

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

/// How a session's GPU share reaches its container: the whole GPUs it gets, and the
/// MPS thread percentage for a fractional share. Pure.
pub fn placement(gpu_milli: u64, available: &[Gpu]) -> (Vec<String>, Option<u32>) {
    if gpu_milli == 0 || available.is_empty() {
        return (Vec::new(), None);
    }
    let whole = gpu_milli.div_ceil(1000) as usize;
    let devices = available
        .iter()
        .take(whole)
        .map(|g| g.uuid.clone())
        .collect();
    let share = (gpu_milli < 1000).then(|| (gpu_milli / 10).max(1) as u32);
    (devices, share)
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

    #[test]
    fn whole_and_fractional_shares_reach_the_container() {
        assert_eq!(placement(0, &gpus(2)), (vec![], None));
        assert_eq!(placement(1000, &gpus(2)), (vec!["GPU-0".to_string()], None));
        assert_eq!(
            placement(2000, &gpus(2)),
            (vec!["GPU-0".to_string(), "GPU-1".to_string()], None)
        );
        assert_eq!(
            placement(250, &gpus(2)),
            (vec!["GPU-0".to_string()], Some(25))
        );
        assert_eq!(placement(500, &[]), (vec![], None));
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
