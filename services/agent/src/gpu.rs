//! Accelerators: where a host's GPUs come from, how a session's share of them is chosen, and
//! what the container is told of it.
//!
//! The source of devices is a plugin interface, [`Accelerators`]: it discovers the devices
//! (id, model, memory) and samples what each is doing (utilization, memory used). Two
//! implement it: [`NvmlGpus`], the real one (NVML, loaded at run time: nvml-wrapper opens
//! `libnvidia-ml.so` when asked, so a host without the library or without a GPU has none and
//! says why; nothing crashes), and [`MockGpus`], devices an agent declares in its settings
//! (as Backend.AI's mock accelerator), whose use a file says, so that the scheduler, the
//! container spec and the idle checker are exercised end to end without a GPU. An agent
//! offers only the devices its source finds (`host::start` refuses a larger offer).
//!
//! Each device is 1,000 thousandths (`gpu_milli`) to the scheduler, so a session may ask for
//! a whole device or a share of one. How finely a device is shared is the admin's setting on
//! the host ([`GpuConfig::shares_per_device`]): a fraction gets whole shares of the device's
//! compute (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`) and of its memory
//! (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`), both enforced by the host's CUDA MPS daemon where
//! the host names its pipe directory ([`GpuConfig::mps_pipe_dir`]). Whole devices go to a
//! container as a device request (devices the engine can attach only);
//! [`assign`] picks the devices on the host, from what its containers' labels say they hold.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What one device counts for in the scheduler's `gpu_milli`.
pub const MILLI_PER_DEVICE: u64 = 1000;

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
        self.gpus().len() as u64 * MILLI_PER_DEVICE
    }

    /// What was found, in words: `2 × Mock A100 (16384 MiB)`, or why nothing was.
    pub fn describe(&self) -> String {
        match self {
            Discovery::None(why) => format!("no GPU ({why})"),
            Discovery::Found(gpus) => gpus
                .iter()
                .map(|g| format!("{} ({} MiB)", g.name, g.memory_bytes >> 20))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// What a device is doing, as its source measured it just now.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceUse {
    /// Percent of the time its kernels ran, over the source's last period.
    pub utilization_percent: f64,
    pub memory_used_bytes: u64,
}

/// A source of accelerators: the plugin interface every kind of device implements.
pub trait Accelerators: Send + Sync + std::fmt::Debug {
    /// The devices on this host, or why there are none.
    fn discover(&self) -> Discovery;
    /// What device `uuid` is doing now; `None` when it cannot be measured.
    fn sample(&self, uuid: &str) -> Option<DeviceUse>;
    /// Whether the container engine attaches these devices to a container (a device
    /// request); a simulated device exists in berth's accounting and environment only.
    fn attachable(&self) -> bool;
}

/// NVIDIA GPUs through NVML, opened once (when the agent starts) and kept for sampling.
pub struct NvmlGpus {
    nvml: Result<nvml_wrapper::Nvml, String>,
}

impl std::fmt::Debug for NvmlGpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpus")
            .field("loaded", &self.nvml.is_ok())
            .finish()
    }
}

impl NvmlGpus {
    /// Loads NVML; a host without it keeps the reason, and has no GPUs.
    pub fn open() -> NvmlGpus {
        NvmlGpus {
            nvml: nvml_wrapper::Nvml::init().map_err(|e| format!("NVML is not available: {e}")),
        }
    }
}

impl Accelerators for NvmlGpus {
    fn discover(&self) -> Discovery {
        let nvml = match &self.nvml {
            Ok(n) => n,
            Err(why) => return Discovery::None(why.clone()),
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

    fn sample(&self, uuid: &str) -> Option<DeviceUse> {
        let device = self.nvml.as_ref().ok()?.device_by_uuid(uuid).ok()?;
        Some(DeviceUse {
            utilization_percent: f64::from(device.utilization_rates().ok()?.gpu),
            memory_used_bytes: device.memory_info().ok()?.used,
        })
    }

    fn attachable(&self) -> bool {
        true
    }
}

/// Simulated devices, declared by the agent's settings: `count` devices `mock-gpu-0`, ...,
/// each of `memory_bytes` and named `model`. What they do is read, at each sample, from
/// `usage_file`, a JSON object from device id to [`DeviceUse`]
/// (`{"mock-gpu-0": {"utilization_percent": 0, "memory_used_bytes": 0}}`), which a test or an
/// operator writes; a device it does not name, or no file, is not measured.
#[derive(Debug, Clone, PartialEq)]
pub struct MockGpus {
    pub count: u32,
    pub memory_bytes: u64,
    pub model: String,
    pub usage_file: Option<PathBuf>,
}

impl MockGpus {
    /// The id of mock device `index`.
    pub fn device_id(index: u32) -> String {
        format!("mock-gpu-{index}")
    }
}

impl Accelerators for MockGpus {
    fn discover(&self) -> Discovery {
        if self.count == 0 {
            return Discovery::None("no mock GPUs declared".into());
        }
        Discovery::Found(
            (0..self.count)
                .map(|index| Gpu {
                    index,
                    uuid: MockGpus::device_id(index),
                    name: self.model.clone(),
                    memory_bytes: self.memory_bytes,
                })
                .collect(),
        )
    }

    fn sample(&self, uuid: &str) -> Option<DeviceUse> {
        let text = std::fs::read(self.usage_file.as_ref()?).ok()?;
        let mut uses: HashMap<String, DeviceUse> = serde_json::from_slice(&text)
            .inspect_err(|e| tracing::warn!(error = %e, "the mock GPUs' usage file does not read"))
            .ok()?;
        uses.remove(uuid)
    }

    fn attachable(&self) -> bool {
        false
    }
}

/// The accelerators of an agent's host, and how finely it shares them.
#[derive(Debug, Clone)]
pub struct GpuConfig {
    pub source: Arc<dyn Accelerators>,
    /// How many shares make one device: a fraction of a device gets whole shares of its
    /// compute and memory (1,000, the default, is the scheduler's thousandths; 5 is
    /// Backend.AI's example, 1 FGPU = 0.2 GPU). 1 to 1,000.
    pub shares_per_device: u64,
    /// The pipe directory of the host's CUDA MPS daemon, mounted into a fraction's container
    /// (with the host's IPC namespace) so that its client reaches the daemon that enforces
    /// its limits; `None`: no daemon, the limits are passed only.
    pub mps_pipe_dir: Option<PathBuf>,
}

/// The most shares a device may be cut into: a share is at least the scheduler's thousandth.
pub const MOST_SHARES_PER_DEVICE: u64 = MILLI_PER_DEVICE;

impl GpuConfig {
    /// The host's NVIDIA GPUs through NVML, shared in thousandths.
    pub fn nvml() -> GpuConfig {
        GpuConfig {
            source: Arc::new(NvmlGpus::open()),
            shares_per_device: MOST_SHARES_PER_DEVICE,
            mps_pipe_dir: None,
        }
    }

    /// The mock devices `mock` declares, shared in thousandths.
    pub fn mock(mock: MockGpus) -> GpuConfig {
        GpuConfig {
            source: Arc::new(mock),
            shares_per_device: MOST_SHARES_PER_DEVICE,
            mps_pipe_dir: None,
        }
    }
}

/// A fraction of one device: whole shares of it, and the limits they come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction {
    /// Shares held, of `per_device`.
    pub shares: u64,
    pub per_device: u64,
    /// The part of the device's streaming multiprocessors (MPS active thread percentage).
    pub thread_percentage: u32,
    /// The part of the device's memory (MPS pinned device memory limit).
    pub memory_limit_bytes: u64,
}

/// The GPUs one kernel holds: each device's id with the thousandths it holds there, the
/// fraction when the share is part of one device, and whether the engine attaches them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuShare {
    pub devices: Vec<(String, u64)>,
    pub fraction: Option<Fraction>,
    pub attach: bool,
    /// Where the host's MPS daemon listens, for a fraction of a device the engine attaches.
    pub mps_pipe_dir: Option<PathBuf>,
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

    /// What the container is told of its share. CUDA numbers the devices a container sees
    /// from 0, in the order given, so `CUDA_VISIBLE_DEVICES` and the MPS memory limit name
    /// them by that ordinal; `BERTH_GPU_DEVICES` names the host's devices. Nothing when the
    /// kernel holds no GPU.
    pub fn environment(&self) -> Vec<String> {
        if self.devices.is_empty() {
            return Vec::new();
        }
        let ordinals = (0..self.devices.len())
            .map(|i| i.to_string())
            .collect::<Vec<_>>();
        let mut env = vec![
            format!("CUDA_VISIBLE_DEVICES={}", ordinals.join(",")),
            format!("BERTH_GPU_DEVICES={}", self.device_ids().join(",")),
        ];
        if let Some(f) = &self.fraction {
            env.push(format!(
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={}",
                f.thread_percentage
            ));
            env.push(format!(
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={}M",
                f.memory_limit_bytes >> 20
            ));
        }
        if let Some(dir) = &self.mps_pipe_dir {
            env.push(format!("CUDA_MPS_PIPE_DIRECTORY={}", dir.display()));
        }
        env
    }

    /// Gives a fraction of a device the engine attaches the host's MPS daemon at `pipe_dir`
    /// (none: no daemon); a whole device, or a mock one, never connects to it.
    pub fn through_mps(mut self, pipe_dir: Option<&std::path::Path>) -> GpuShare {
        self.mps_pipe_dir = pipe_dir
            .filter(|_| self.attach && self.fraction.is_some())
            .map(std::path::Path::to_owned);
        self
    }
}

/// Adds what a container's label says it holds to `held` (device UUID to thousandths).
/// Pure; a malformed entry counts as holding the whole device, the safe side.
pub fn add_held(label: &str, held: &mut HashMap<String, u64>) {
    for entry in label.split(',').filter(|e| !e.is_empty()) {
        let (uuid, milli) = match entry.rsplit_once('=') {
            Some((uuid, milli)) => (uuid, milli.parse().unwrap_or(MILLI_PER_DEVICE)),
            None => (entry, MILLI_PER_DEVICE),
        };
        *held.entry(uuid.to_owned()).or_default() += milli;
    }
}

/// The devices a container's label names, in order.
pub fn devices_of(label: &str) -> Vec<String> {
    label
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|e| e.rsplit_once('=').map_or(e, |(uuid, _)| uuid).to_owned())
        .collect()
}

/// The fraction of a device `memory_bytes` big that `gpu_milli` (under one device) comes to,
/// cut in `shares_per_device`. Pure. The share is rounded down to whole shares, never below
/// one: a session never gets more than it asked for, unless it asked for less than the
/// smallest share the admin allows.
pub fn fraction(gpu_milli: u64, memory_bytes: u64, shares_per_device: u64) -> Fraction {
    let per_device = shares_per_device.clamp(1, MOST_SHARES_PER_DEVICE);
    let shares = (gpu_milli * per_device / MILLI_PER_DEVICE).clamp(1, per_device);
    Fraction {
        shares,
        per_device,
        thread_percentage: ((shares * 100 / per_device) as u32).max(1),
        memory_limit_bytes: (u128::from(memory_bytes) * u128::from(shares) / u128::from(per_device))
            as u64,
    }
}

/// What the devices a kernel holds are doing, from one sample of each (`None` where it was
/// not measured): the mean utilization, and the memory used of theirs in all, in percent.
/// Pure. Devices are measured whole: a session sharing a device sees its neighbours' use.
pub fn usage_of(held: &[(&Gpu, Option<DeviceUse>)]) -> (Option<f64>, Option<f64>) {
    let measured: Vec<(&Gpu, DeviceUse)> = held
        .iter()
        .filter_map(|(gpu, used)| Some((*gpu, (*used)?)))
        .collect();
    if measured.is_empty() {
        return (None, None);
    }
    let utilization = measured
        .iter()
        .map(|(_, u)| u.utilization_percent)
        .sum::<f64>()
        / measured.len() as f64;
    let total: u64 = measured.iter().map(|(g, _)| g.memory_bytes).sum();
    let used: u64 = measured.iter().map(|(_, u)| u.memory_used_bytes).sum();
    let memory = (total > 0).then(|| used as f64 / total as f64 * 100.0);
    (Some(utilization), memory)
}

/// Picks the GPUs of a kernel asking for `gpu_milli`, given what the kernels already on this
/// host hold, the devices cut in `shares_per_device`. Pure.
///
/// The scheduler counts only the agent's total, so the agent chooses the devices: whole GPUs
/// go to the least-held devices, so two kernels never share a GPU while one is free; a fraction
/// goes where it fits most tightly (best fit keeps whole GPUs free for whole requests), or,
/// when no device has the room, to the least-held one.
pub fn assign(
    gpu_milli: u64,
    available: &[Gpu],
    held: &HashMap<String, u64>,
    shares_per_device: u64,
    attach: bool,
) -> GpuShare {
    if gpu_milli == 0 || available.is_empty() {
        return GpuShare::default();
    }
    let held_on = |g: &Gpu| held.get(&g.uuid).copied().unwrap_or(0);
    if gpu_milli < MILLI_PER_DEVICE {
        let tightest = available
            .iter()
            .filter(|g| held_on(g) + gpu_milli <= MILLI_PER_DEVICE)
            .max_by_key(|g| (held_on(g), std::cmp::Reverse(g.index)));
        let device = tightest.unwrap_or_else(|| {
            available
                .iter()
                .min_by_key(|g| (held_on(g), g.index))
                .expect("not empty")
        });
        return GpuShare {
            devices: vec![(device.uuid.clone(), gpu_milli)],
            fraction: Some(fraction(gpu_milli, device.memory_bytes, shares_per_device)),
            attach,
            mps_pipe_dir: None,
        };
    }
    let whole = (gpu_milli.div_ceil(MILLI_PER_DEVICE) as usize).min(available.len());
    let mut by_load: Vec<&Gpu> = available.iter().collect();
    by_load.sort_by_key(|g| (held_on(g), g.index));
    let mut left = gpu_milli;
    let devices = by_load
        .into_iter()
        .take(whole)
        .map(|g| {
            let milli = left.min(MILLI_PER_DEVICE);
            left -= milli;
            (g.uuid.clone(), milli)
        })
        .collect();
    GpuShare {
        devices,
        fraction: None,
        attach,
        mps_pipe_dir: None,
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

    fn pick(milli: u64, available: &[Gpu], held: &HashMap<String, u64>) -> GpuShare {
        assign(milli, available, held, MOST_SHARES_PER_DEVICE, true)
    }

    #[test]
    fn no_gpus_asked_or_none_here_means_no_share() {
        assert_eq!(pick(0, &gpus(2), &held(&[])), GpuShare::default());
        assert_eq!(pick(500, &[], &held(&[])), GpuShare::default());
        assert!(GpuShare::default().environment().is_empty());
    }

    #[test]
    fn whole_gpus_go_to_free_devices_never_one_already_given() {
        let one = pick(1000, &gpus(2), &held(&[]));
        assert_eq!(ids(&one), vec![("GPU-0", 1000)]);
        assert_eq!(one.fraction, None);
        // A second whole GPU on the same host gets the other device.
        let two = pick(1000, &gpus(2), &held(&[("GPU-0", 1000)]));
        assert_eq!(ids(&two), vec![("GPU-1", 1000)]);
        // A half already on GPU-0 sends a whole request to GPU-1.
        let three = pick(1000, &gpus(2), &held(&[("GPU-0", 500)]));
        assert_eq!(ids(&three), vec![("GPU-1", 1000)]);
        assert_eq!(
            ids(&pick(1500, &gpus(3), &held(&[("GPU-1", 250)]))),
            vec![("GPU-0", 1000), ("GPU-2", 500)]
        );
        // Never more devices than the host has.
        assert_eq!(pick(3000, &gpus(2), &held(&[])).devices.len(), 2);
    }

    #[test]
    fn fractions_fit_tightly_and_carry_their_part_of_compute_and_memory() {
        let quarter = pick(250, &gpus(2), &held(&[]));
        assert_eq!(ids(&quarter), vec![("GPU-0", 250)]);
        let part = quarter.fraction.unwrap();
        assert_eq!(part.thread_percentage, 25);
        assert_eq!(part.memory_limit_bytes, 4 << 30);
        // Best fit: the half-held device takes the next half, keeping GPU-1 whole.
        let half = pick(500, &gpus(2), &held(&[("GPU-0", 500)]));
        assert_eq!(ids(&half), vec![("GPU-0", 500)]);
        // No room for 0.6 on GPU-0 (0.5 held): it goes to GPU-1.
        let more = pick(600, &gpus(2), &held(&[("GPU-0", 500)]));
        assert_eq!(ids(&more), vec![("GPU-1", 600)]);
        // No device has the room: the least-held one.
        let over = pick(600, &gpus(2), &held(&[("GPU-0", 700), ("GPU-1", 500)]));
        assert_eq!(ids(&over), vec![("GPU-1", 600)]);
        let tiny = pick(5, &gpus(1), &held(&[])).fraction.unwrap();
        assert_eq!(tiny.thread_percentage, 1);
    }

    #[test]
    fn the_admins_shares_cut_a_fraction_to_whole_shares_never_above_the_ask_but_one() {
        let gib16 = 16 << 30;
        // Five shares a device (Backend.AI's example): 0.2 GPU is one share.
        let one = fraction(200, gib16, 5);
        assert_eq!((one.shares, one.thread_percentage), (1, 20));
        assert_eq!(one.memory_limit_bytes, gib16 / 5);
        // 0.5 is two whole shares (0.4), not more than was asked.
        let half = fraction(500, gib16, 5);
        assert_eq!((half.shares, half.thread_percentage), (2, 40));
        // Below one share: the smallest share there is.
        assert_eq!(fraction(50, gib16, 5).shares, 1);
        // Out-of-range settings are held to 1..=1000.
        assert_eq!(fraction(500, gib16, 0).per_device, 1);
        assert_eq!(fraction(500, gib16, 5000).per_device, 1000);
        let share = assign(500, &gpus(1), &held(&[]), 5, false);
        assert_eq!(share.fraction, Some(half));
        assert_eq!(ids(&share), vec![("GPU-0", 500)], "the label keeps the ask");
    }

    #[test]
    fn a_share_tells_the_container_its_devices_threads_and_memory() {
        let mut whole = pick(2000, &gpus(3), &held(&[("GPU-0", 1000)]));
        assert_eq!(
            whole.environment(),
            ["CUDA_VISIBLE_DEVICES=0,1", "BERTH_GPU_DEVICES=GPU-1,GPU-2"]
        );
        whole.attach = false;
        assert_eq!(whole.environment().len(), 2, "mock or real, the same env");
        let half = pick(500, &gpus(2), &held(&[]));
        assert_eq!(
            half.environment(),
            [
                "CUDA_VISIBLE_DEVICES=0",
                "BERTH_GPU_DEVICES=GPU-0",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M",
            ]
        );
    }

    #[test]
    fn only_a_fraction_of_a_real_device_connects_to_the_hosts_mps_daemon() {
        let pipe = Some(std::path::Path::new("/tmp/nvidia-mps"));
        let half = pick(500, &gpus(1), &held(&[])).through_mps(pipe);
        assert_eq!(half.mps_pipe_dir, pipe.map(Into::into));
        assert!(half
            .environment()
            .contains(&"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps".to_string()));
        let whole = pick(1000, &gpus(1), &held(&[])).through_mps(pipe);
        assert_eq!(whole.mps_pipe_dir, None);
        let mock = assign(500, &gpus(1), &held(&[]), 1000, false).through_mps(pipe);
        assert_eq!(mock.mps_pipe_dir, None);
        assert_eq!(
            pick(500, &gpus(1), &held(&[]))
                .through_mps(None)
                .mps_pipe_dir,
            None
        );
    }

    #[test]
    fn labels_round_trip_and_malformed_ones_count_as_whole() {
        let share = pick(1500, &gpus(2), &held(&[]));
        assert_eq!(share.to_label(), "GPU-0=1000,GPU-1=500");
        assert_eq!(devices_of(&share.to_label()), ["GPU-0", "GPU-1"]);
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

    #[test]
    fn usage_averages_what_was_measured_of_the_devices_held() {
        let devices = gpus(2);
        let busy = DeviceUse {
            utilization_percent: 80.0,
            memory_used_bytes: 1 << 33,
        };
        let idle = DeviceUse {
            utilization_percent: 0.0,
            memory_used_bytes: 0,
        };
        assert_eq!(
            usage_of(&[(&devices[0], Some(busy)), (&devices[1], Some(idle))]),
            (Some(40.0), Some(25.0))
        );
        // A device not measured counts for nothing either way.
        assert_eq!(
            usage_of(&[(&devices[0], Some(busy)), (&devices[1], None)]),
            (Some(80.0), Some(50.0))
        );
        assert_eq!(usage_of(&[(&devices[0], None)]), (None, None));
        assert_eq!(usage_of(&[]), (None, None));
    }

    #[test]
    fn mock_gpus_are_discovered_as_declared_and_read_their_use_from_a_file() {
        let file = std::env::temp_dir().join(format!("mock-gpus-{}.json", uuid::Uuid::new_v4()));
        let mock = MockGpus {
            count: 2,
            memory_bytes: 16 << 30,
            model: "Mock A100".into(),
            usage_file: Some(file.clone()),
        };
        let found = mock.discover();
        assert_eq!(found.gpu_milli(), 2000);
        assert_eq!(found.gpus()[1].uuid, "mock-gpu-1");
        assert_eq!(found.gpus()[1].memory_bytes, 16 << 30);
        assert_eq!(
            found.describe(),
            "Mock A100 (16384 MiB), Mock A100 (16384 MiB)"
        );
        assert!(!mock.attachable());
        // No file yet: nothing measured.
        assert_eq!(mock.sample("mock-gpu-0"), None);
        std::fs::write(
            &file,
            r#"{"mock-gpu-0": {"utilization_percent": 75, "memory_used_bytes": 1024}}"#,
        )
        .unwrap();
        assert_eq!(
            mock.sample("mock-gpu-0"),
            Some(DeviceUse {
                utilization_percent: 75.0,
                memory_used_bytes: 1024
            })
        );
        assert_eq!(
            mock.sample("mock-gpu-1"),
            None,
            "a device the file does not name"
        );
        std::fs::write(&file, "not json").unwrap();
        assert_eq!(mock.sample("mock-gpu-0"), None);
        std::fs::remove_file(&file).unwrap();
        let none = MockGpus { count: 0, ..mock }.discover();
        assert_eq!(none.gpu_milli(), 0);
        assert!(
            none.describe().contains("no mock GPUs"),
            "{}",
            none.describe()
        );
    }

    /// Runs everywhere: on a host without NVML or GPUs it must say so, not fail; where there
    /// are GPUs, each is read and can be sampled.
    #[test]
    fn discovery_finds_gpus_or_says_why_not() {
        let nvml = NvmlGpus::open();
        assert!(nvml.attachable());
        match nvml.discover() {
            Discovery::Found(gpus) => {
                for g in &gpus {
                    let used = nvml.sample(&g.uuid);
                    eprintln!(
                        "GPU {}: {} {} ({} MiB), now {used:?}",
                        g.index,
                        g.name,
                        g.uuid,
                        g.memory_bytes >> 20
                    );
                    assert!(used.is_some(), "GPU {} is not sampled", g.uuid);
                }
                assert!(gpus
                    .iter()
                    .all(|g| !g.uuid.is_empty() && g.memory_bytes > 0));
            }
            Discovery::None(why) => {
                eprintln!("skipping the GPU checks: {why}");
                assert!(!why.is_empty());
                assert_eq!(nvml.sample("GPU-0"), None);
            }
        }
    }
}
