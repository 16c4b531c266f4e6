//! What the kernel says about this process and the machine: `/proc/self/io`, peak RSS,
//! the load average, and the bytes a directory takes on disk.
//!
//! Invariant: read-only; nothing here writes or syncs, so reading a counter never changes
//! the figure it reports.

use std::path::Path;

/// The I/O counters of `/proc/self/io` (all cumulative since the process started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcIo {
    /// Bytes passed to read-like syscalls (page-cache hits included).
    pub rchar: u64,
    /// Bytes passed to write-like syscalls.
    pub wchar: u64,
    /// Read-like syscalls.
    pub syscr: u64,
    /// Write-like syscalls.
    pub syscw: u64,
    /// Bytes fetched from the storage layer.
    pub read_bytes: u64,
    /// Bytes sent (or dirtied for sending) to the storage layer.
    pub write_bytes: u64,
}

impl ProcIo {
    /// Reads `/proc/self/io`; all zeros where it cannot be read (not Linux).
    pub fn now() -> ProcIo {
        Self::parse(&std::fs::read_to_string("/proc/self/io").unwrap_or_default())
    }

    /// Parses the text of a `/proc/<pid>/io` file.
    pub fn parse(text: &str) -> ProcIo {
        let mut io = ProcIo::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v: u64 = v.trim().parse().unwrap_or(0);
            match k.trim() {
                "rchar" => io.rchar = v,
                "wchar" => io.wchar = v,
                "syscr" => io.syscr = v,
                "syscw" => io.syscw = v,
                "read_bytes" => io.read_bytes = v,
                "write_bytes" => io.write_bytes = v,
                _ => {}
            }
        }
        io
    }

    /// The counters accumulated since `earlier`.
    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

/// Peak resident set size of this process (`VmHWM`), in bytes; 0 where unknown.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Where a virtual machine's free page reporting is set: while it is on, memory the guest
/// frees goes back to the host, and the next touch of it (a fresh allocation, a new page
/// of the page cache) costs a fault in the host. Seen on this project's machines: the same
/// heavy save took 0.5 or 2.3 ms of CPU from one run to the next, and a 20 GiB touch ran
/// at 13 µs per page.
pub const PAGE_REPORTING_ORDER: &str = "/sys/module/page_reporting/parameters/page_reporting_order";

/// The largest page order Linux's buddy allocator keeps (`MAX_PAGE_ORDER`, 4 MiB blocks):
/// a reporting order above it reports nothing.
const MAX_PAGE_ORDER: u32 = 10;

/// What the compare header says of free page reporting, from the contents of
/// [`PAGE_REPORTING_ORDER`] (`None`: no such file, no reporting).
pub fn page_reporting_line(order: Option<&str>) -> String {
    match order.map(|o| o.trim().parse::<u32>()) {
        None => "free page reporting: none".to_string(),
        Some(Ok(n)) if n > MAX_PAGE_ORDER => format!("free page reporting: off (order {n})"),
        Some(Ok(n)) => format!(
            "free page reporting: ON (order {n}): freed memory goes back to the host and costs \
             a host fault when touched again; runs are noisier (as root, `echo 11 > {PAGE_REPORTING_ORDER}` \
             stops it until reboot)"
        ),
        Some(Err(_)) => "free page reporting: unknown (unreadable order)".to_string(),
    }
}

/// The 1-minute load average; 0 where unknown.
pub fn load_avg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Bytes allocated on disk (`st_blocks` × 512) under `path`, recursively.
pub fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|rd| rd.flatten().map(|e| disk_bytes(&e.path())).sum())
            .unwrap_or(0)
    } else {
        meta.blocks() * 512
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On at the orders a machine reports at (9, 2 MiB blocks, here), off above the
    /// buddy allocator's largest order; the line never says off for an order that reports.
    #[test]
    fn page_reporting_is_on_up_to_the_largest_order_and_off_above_it() {
        assert!(page_reporting_line(Some("9\n")).contains("ON (order 9)"));
        assert!(page_reporting_line(Some("10")).contains("ON (order 10)"));
        assert_eq!(
            page_reporting_line(Some("11\n")),
            "free page reporting: off (order 11)"
        );
        assert_eq!(page_reporting_line(None), "free page reporting: none");
        assert!(page_reporting_line(Some("x")).contains("unknown"));
    }

    #[test]
    fn parse_reads_every_counter_and_ignores_other_lines() {
        let t = "rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 7\n";
        let io = ProcIo::parse(t);
        assert_eq!(
            io,
            ProcIo {
                rchar: 10,
                wchar: 20,
                syscr: 3,
                syscw: 4,
                read_bytes: 4096,
                write_bytes: 8192
            }
        );
        assert_eq!(
            io.since(&ProcIo {
                wchar: 5,
                ..ProcIo::default()
            })
            .wchar,
            15
        );
    }

    #[test]
    fn disk_bytes_counts_a_written_file() {
        let dir = std::env::temp_dir().join(format!("fp-bench-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), vec![1u8; 64 * 1024]).unwrap();
        let n = disk_bytes(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(n >= 64 * 1024, "64 KiB written, {n} B allocated");
    }
}
