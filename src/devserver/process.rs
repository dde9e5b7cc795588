//! What both private servers need of the operating system: finding a server program, a free
//! port, whether we run as root, and the watchdog that stops a server whose owner died.

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Finds a program in `PATH` or the usual sbin directories.
pub(super) fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"].map(PathBuf::from));
    for name in names {
        for dir in &dirs {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// The error for a program that is not installed, naming the Debian packages that bring it.
pub(super) fn missing(what: &str, packages: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{what} not found: install it with `apt-get install -y {packages}`"),
    )
}

pub(super) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

pub(super) fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A shell that waits for this process to end, then kills the process whose id the first
/// line of `pid_file` holds and removes `dir`.
pub(super) fn spawn_watchdog(dir: &Path, pid_file: &Path) -> io::Result<Child> {
    const SCRIPT: &str = r#"
owner=$1; dir=$2; pidfile=$3
while kill -0 "$owner" 2>/dev/null; do sleep 1; done
if [ -f "$pidfile" ]; then kill -9 "$(head -n 1 "$pidfile")" 2>/dev/null; fi
sleep 1
rm -rf "$dir"
"#;
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("cdcfusion-watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .arg(pid_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}
