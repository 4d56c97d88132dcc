//! How the console writes figures for people: sizes in binary units, durations as hours,
//! minutes and seconds, cores with no trailing zeros, and a bar as a `<meter>` reads it. Pure.

/// `bytes` as people read a size: `512 B`, `256 MiB`, `1.5 GiB`.
pub fn size(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes.max(0) as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{} {}", number(value, 1), UNITS[unit])
    }
}

/// `value` with at most `places` decimals and no trailing zeros: `2`, `0.5`, `1.25`.
pub fn number(value: f64, places: usize) -> String {
    let text = format!("{value:.places$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A duration as the session list shows it: `45s`, `3m 05s`, `2h 03m 05s`, `3d 4h 05m`.
pub fn duration(secs: f64) -> String {
    let total = secs.max(0.0).round() as u64;
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    if days > 0 {
        format!("{days}d {hours}h {minutes:02}m")
    } else if hours > 0 {
        format!("{hours}h {minutes:02}m {seconds:02}s")
    } else if minutes > 0 {
        format!("{minutes}m {seconds:02}s")
    } else {
        format!("{seconds}s")
    }
}

/// Resources as the pickers and the admin pages write them: `2 cores, 256 MiB`, and the
/// GPUs when there are any.
pub fn amounts(a: &crate::model::Amounts) -> String {
    let mut text = format!("{} cores, {}", number(a.cpu, 3), size(a.memory_bytes));
    if a.gpu > 0.0 {
        text.push_str(&format!(", {} GPU", number(a.gpu, 3)));
    }
    text
}

/// One bar of a resource panel: what is used of what may be, drawn by a `<meter>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: &'static str,
    pub used: f64,
    pub max: f64,
    /// `used / max` as people read it (`1.5 / 4 cores`).
    pub text: String,
}

impl Bar {
    pub fn cores(label: &'static str, used: f64, max: f64) -> Bar {
        Bar {
            label,
            used,
            max,
            text: format!("{} / {} cores", number(used, 2), number(max, 2)),
        }
    }

    pub fn memory(label: &'static str, used: i64, max: i64) -> Bar {
        Bar {
            label,
            used: used as f64,
            max: max as f64,
            text: format!("{} / {}", size(used), size(max)),
        }
    }

    pub fn gpus(label: &'static str, used: f64, max: f64) -> Bar {
        Bar {
            label,
            used,
            max,
            text: format!("{} / {} GPUs", number(used, 3), number(max, 3)),
        }
    }

    /// The meter's maximum: a bar of nothing is drawn empty, not full.
    pub fn meter_max(&self) -> f64 {
        if self.max > 0.0 {
            self.max
        } else {
            1.0
        }
    }

    /// Whether more than 80% is used (the meter's high mark).
    pub fn high(&self) -> f64 {
        self.meter_max() * 0.8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_written_in_binary_units() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(256 * 1024 * 1024), "256 MiB");
        assert_eq!(size(3 * 512 * 1024 * 1024), "1.5 GiB");
        assert_eq!(size(-1), "0 B");
    }

    #[test]
    fn numbers_lose_their_trailing_zeros() {
        assert_eq!(number(2.0, 2), "2");
        assert_eq!(number(0.5, 3), "0.5");
        assert_eq!(number(1.254, 2), "1.25");
    }

    #[test]
    fn durations_read_as_the_list_shows_them() {
        assert_eq!(duration(44.6), "45s");
        assert_eq!(duration(185.0), "3m 05s");
        assert_eq!(duration(7385.0), "2h 03m 05s");
        assert_eq!(duration(3.0 * 86_400.0 + 4.0 * 3600.0 + 300.0), "3d 4h 05m");
        assert_eq!(duration(-5.0), "0s");
    }

    #[test]
    fn amounts_name_gpus_only_when_there_are_some() {
        let mut a = crate::model::Amounts {
            cpu: 2.0,
            memory_bytes: 256 << 20,
            gpu: 0.0,
        };
        assert_eq!(amounts(&a), "2 cores, 256 MiB");
        a.gpu = 0.5;
        assert_eq!(amounts(&a), "2 cores, 256 MiB, 0.5 GPU");
    }

    #[test]
    fn a_bar_of_nothing_is_drawn_empty() {
        let bar = Bar::gpus("GPU", 0.0, 0.0);
        assert_eq!((bar.meter_max(), bar.text.as_str()), (1.0, "0 / 0 GPUs"));
        assert_eq!(Bar::cores("CPU", 1.5, 4.0).text, "1.5 / 4 cores");
    }
}
