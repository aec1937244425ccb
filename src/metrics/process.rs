//! The process as the kernel sees it, read from `/proc/self` at scrape
//! time (Linux; elsewhere every reading is `None`), and the store's size
//! on disk.

use std::path::Path;

/// One reading of the process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessReading {
    /// Resident memory in bytes.
    pub resident_bytes: Option<u64>,
    /// CPU time (user + system) in seconds.
    pub cpu_seconds: Option<f64>,
    /// Open file descriptors (sockets included).
    pub open_fds: Option<u64>,
    /// Threads.
    pub threads: Option<u64>,
}

/// Reads `/proc/self`.
pub fn read() -> ProcessReading {
    let page = 4096u64;
    let resident_bytes = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * page);
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the command name (which may hold spaces, in parens).
    let after = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect::<Vec<_>>());
    // utime and stime are fields 14 and 15 (1-based), in clock ticks of
    // 1/100 s on Linux; after the name they are at 11 and 12 (0-based).
    let cpu_seconds = after.as_ref().and_then(|f| {
        let user: u64 = f.get(11)?.parse().ok()?;
        let system: u64 = f.get(12)?.parse().ok()?;
        Some((user + system) as f64 / 100.0)
    });
    let threads = after.as_ref().and_then(|f| f.get(17)?.parse::<u64>().ok());
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    ProcessReading {
        resident_bytes,
        cpu_seconds,
        open_fds,
        threads,
    }
}

/// Bytes of the files under `dir` (the store's directory), not following
/// links; `None` if it cannot be read.
pub fn dir_bytes(dir: &Path) -> Option<u64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_owned()];
    // Bounded: the store's tree is shallow and small in file count.
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()? {
            let entry = entry.ok()?;
            seen += 1;
            if seen > 100_000 {
                return Some(total);
            }
            let meta = entry.metadata().ok()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn reads_this_process() {
        let r = read();
        assert!(r.resident_bytes.is_some_and(|b| b > 1 << 20), "{r:?}");
        assert!(r.cpu_seconds.is_some(), "{r:?}");
        assert!(r.open_fds.is_some_and(|n| n >= 3), "{r:?}");
        assert!(r.threads.is_some_and(|n| n >= 1), "{r:?}");
    }

    #[test]
    fn sums_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 100]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), [0u8; 23]).unwrap();
        assert_eq!(dir_bytes(dir.path()), Some(123));
    }
}
