//! Readiness: a thread holds the `org.unbounded.ready` port's socket and records every
//! `READY <boot_id>` line the guest's `lab-ready.service` writes, once per boot.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::process::Events;

/// The boot id in a `READY <boot_id>` line, if the line is one.
pub fn parse_ready(line: &str) -> Option<&str> {
    let id = line.trim().strip_prefix("READY ")?.trim();
    let ok = !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    ok.then_some(id)
}

/// Starts the reader: it connects to `socket` (retrying while QEMU creates it) and records
/// boot ids in `events` until QEMU closes the socket or exits.
pub fn watch(socket: PathBuf, events: Arc<Events>, vm: &str) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("ready-{vm}"))
        .spawn(move || {
            let stream = loop {
                if events.snapshot().exit.is_some() {
                    return;
                }
                match UnixStream::connect(&socket) {
                    Ok(stream) => break stream,
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                if let Some(id) = parse_ready(&line) {
                    tracing::debug!(boot_id = id, "guest is ready");
                    let id = id.to_string();
                    events.update(|s| s.ready.push(id));
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    use super::*;

    #[test]
    fn ready_lines_carry_a_boot_id_and_nothing_else_counts() {
        assert_eq!(
            parse_ready("READY 0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n"),
            Some("0f1e2d3c-aaaa-bbbb-cccc-0123456789ab")
        );
        assert_eq!(parse_ready("READY "), None);
        assert_eq!(parse_ready("READY x y"), None);
        assert_eq!(parse_ready("NOT READY abc"), None);
    }

    #[test]
    fn watcher_records_each_boot_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("ready.sock");
        let events = Arc::new(Events::default());
        watch(socket.clone(), Arc::clone(&events), "t").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let listener = UnixListener::bind(&socket).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(b"garbage\nREADY aa-01\nREADY bb-02\n").unwrap();
        let state = events.wait_for(Instant::now() + Duration::from_secs(5), |s| s.ready.len() == 2);
        assert_eq!(state.ready, ["aa-01", "bb-02"]);
    }
}
