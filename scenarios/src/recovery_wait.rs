//! The guest script a fault scenario times a recovery with: from a fault until both LocalDNS
//! listeners answer DNS again, starting no process while it waits (docs/scenarios.md, "faults").

use agent::corefile::HEALTH_NAME;

use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER};

/// The guest bash script that waits, counting from `$t0` (ns, [`NOW_NS`]), until the CoreDNS with
/// pid `$old` is gone (no process, or a zombie), then until both listeners answer a DNS query for
/// [`HEALTH_NAME`] over TCP, and prints the milliseconds it took; the answers are then checked
/// to be NOERROR with `dig` (the time taken again if they were not); fails after
/// `limit_s` seconds. Until the answers, it starts no process: bash's builtins read
/// `/proc/<pid>/status`, connect through `/dev/tcp`, and pause with `read -t` on a pipe of its
/// own. The loop it replaces (`date`, `grep` and `sleep` every 20 ms, three processes each time,
/// then a `dig` per listener) competed with the takeover for the emulated CPU: it measured
/// 7.0–12.5 s where the supervisor logged takeovers of 0.9–7.1 s (a loaded host).
pub fn wait_both_answer(limit_s: u32) -> String {
    let query = tcp_dns_query(HEALTH_NAME);
    format!(
        r#"exec {{nap}}<> <(:)
late() {{
	if (( ({NOW_NS} - t0) / 1000000000 >= {limit_s} )); then
		echo "$1 within {limit_s} s" >&2; exit 1
	fi
	read -t 0.02 -u "$nap" _ || true
}}
gone() {{
	local key value
	[[ -e /proc/$1/status ]] || return 0
	while read -r key value _; do
		if [[ $key == State: ]]; then [[ $value == Z ]]; return; fi
	done </proc/$1/status 2>/dev/null
	return 0
}}
answers() {{
	local fd reply ok
	{{ exec {{fd}}<>"/dev/tcp/$1/53"; }} 2>/dev/null || return 1
	printf '{query}' >&"$fd" 2>/dev/null || {{ exec {{fd}}<&-; return 1; }}
	LC_ALL=C read -r -t 1 -N 2 -u "$fd" reply 2>/dev/null
	ok=$?
	exec {{fd}}<&-
	return $ok
}}
noerror() {{ dig +tcp +time=2 +tries=1 @"$1" {HEALTH_NAME} +noall +comments 2>/dev/null | grep -q 'status: NOERROR'; }}
until gone "$old"; do
	late "CoreDNS $old did not go away"
done
until answers {NODE_LISTENER} && answers {CLUSTER_LISTENER}; do
	late "the listeners did not answer"
done
took=$(( ({NOW_NS} - t0) / 1000000 ))
until noerror {NODE_LISTENER} && noerror {CLUSTER_LISTENER}; do
	late "the listeners did not answer NOERROR"
	took=$(( ({NOW_NS} - t0) / 1000000 ))
done
echo "$took""#
    )
}

/// Bash's clock in nanoseconds without starting a process (`$EPOCHREALTIME`: seconds.micros).
pub const NOW_NS: &str = "${EPOCHREALTIME/./}000";

/// A DNS query for `name` (type A, class IN, recursion desired, id 0x1234).
fn dns_query(name: &str) -> Vec<u8> {
    let mut message = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        message.push(u8::try_from(label.len()).expect("a DNS label is at most 63 bytes"));
        message.extend_from_slice(label.as_bytes());
    }
    message.extend_from_slice(&[0, 0, 1, 0, 1]);
    message
}

/// `bytes` as `\xHH` escapes for bash's `printf`.
fn escaped(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\x{b:02x}")).collect()
}

/// A DNS query for `name` framed for TCP (two length bytes first), as `\xHH` escapes for bash's
/// `printf`.
pub fn tcp_dns_query(name: &str) -> String {
    let message = dns_query(name);
    let length = u16::try_from(message.len()).expect("a short query");
    escaped(&[&length.to_be_bytes()[..], &message].concat())
}

/// The same query as one UDP datagram (no length bytes), as `\xHH` escapes.
pub fn udp_dns_query(name: &str) -> String {
    escaped(&dns_query(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, MessageType};
    use hickory_proto::rr::RecordType;

    fn bytes_of(escaped: &str) -> Vec<u8> {
        escaped
            .split("\\x")
            .skip(1)
            .map(|hex| u8::from_str_radix(hex, 16).unwrap())
            .collect()
    }

    #[test]
    fn the_udp_query_is_the_tcp_one_without_its_length() {
        let tcp = bytes_of(&tcp_dns_query(HEALTH_NAME));
        assert_eq!(bytes_of(&udp_dns_query(HEALTH_NAME)), tcp[2..]);
    }

    #[test]
    fn the_query_is_a_tcp_framed_a_query_for_the_health_name() {
        let bytes = bytes_of(&tcp_dns_query(HEALTH_NAME));
        let length = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
        assert_eq!(length, bytes.len() - 2, "the length prefix");
        let message = Message::from_vec(&bytes[2..]).unwrap();
        assert_eq!(message.metadata.message_type, MessageType::Query);
        assert!(message.metadata.recursion_desired);
        let [query] = message.queries.as_slice() else {
            panic!("one question expected: {message:?}")
        };
        assert_eq!(query.name().to_ascii(), format!("{HEALTH_NAME}."));
        assert_eq!(query.query_type(), RecordType::A);
    }

    #[test]
    fn the_script_is_valid_bash_and_names_both_listeners() {
        let script = format!("t0={NOW_NS}\nold=1\n{}", wait_both_answer(300));
        let out = std::process::Command::new("bash")
            .args(["-n", "-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for listener in [NODE_LISTENER, CLUSTER_LISTENER] {
            assert!(script.contains(&format!("answers {listener}")), "{script}");
        }
        assert!(script.contains("within 300 s"), "{script}");
    }
}
