//! DNS from the node's point of view: pods that look names up with a given `dnsPolicy`
//! ([`lookup_pod`], a framed shell script whose log splits back into its steps with
//! [`parse_framed`]), busybox `nslookup` output ([`Nslookup`]: the `Server:` it asked and the
//! answers) and resolv.conf files ([`ResolvConf`], the machine's read from inside it with
//! [`machine_resolv_conf`]).
//!
//! The listener addresses and the LocalDNS resolv.conf path come from docs/design.md §1 and §5, written
//! here rather than taken from the agent, so a scenario comparing against them can catch the
//! agent drifting from the design.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, bail, ensure};
use harness::vm::Vm;
use k8s_openapi::api::core::v1::Pod;

use crate::cluster::test_pod;

/// The node listener (docs/design.md §1): the machine's resolver and `dnsPolicy: Default` pods.
pub const NODE_LISTENER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
/// The cluster listener (docs/design.md §1): kubelet's `clusterDNS`, so every `ClusterFirst` pod.
pub const CLUSTER_LISTENER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);
/// The resolv.conf kubelet hands to `Default` pods (docs/design.md §5), inside the machine.
pub use agent::paths::LOCALDNS_RESOLV_CONF;

/// A pod's `dnsPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsPolicy {
    /// Cluster names first, through kubelet's `clusterDNS`.
    ClusterFirst,
    /// The node's resolver: kubelet's `resolvConf`.
    Default,
}

impl DnsPolicy {
    /// The value in the pod spec.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsPolicy::ClusterFirst => "ClusterFirst",
            DnsPolicy::Default => "Default",
        }
    }
}

/// One step of a pod's script: a label (`[a-z0-9.-]+`) and a shell command.
#[derive(Clone, Debug)]
pub struct Step {
    pub label: String,
    pub command: String,
}

impl Step {
    pub fn new(label: &str, command: impl Into<String>) -> Step {
        Step {
            label: label.into(),
            command: command.into(),
        }
    }

    /// `nslookup -type=<qtype> -retry=1 -timeout=10 <name>` (busybox; a trailing dot on `name`
    /// skips the search list). One try with a long wait: busybox otherwise sends the query again
    /// after 2.5 s without an answer, and a slow first forward under TCG would then reach the
    /// upstream twice, which scenarios counting upstream queries must not mistake for a cache miss.
    pub fn nslookup(label: &str, qtype: &str, name: &str) -> Step {
        Step::new(
            label,
            format!("nslookup -type={qtype} -retry=1 -timeout=10 {name}"),
        )
    }

    /// `cat /etc/resolv.conf`: what the pod's resolver was given.
    pub fn resolv_conf(label: &str) -> Step {
        Step::new(label, "cat /etc/resolv.conf")
    }
}

/// A shell script running `steps` in order whatever their exit status, each framed by
/// `=== begin <label>` and `=== end <label> exit=<status>` (stderr folded into stdout).
pub fn framed_script(steps: &[Step]) -> anyhow::Result<String> {
    let mut script = String::new();
    for step in steps {
        ensure!(
            !step.label.is_empty()
                && step
                    .label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'),
            "step label {:?} is not [a-z0-9.-]+",
            step.label
        );
        script += &format!(
            "echo '=== begin {l}'; {{ {c}; }} 2>&1; echo \"=== end {l} exit=$?\"\n",
            l = step.label,
            c = step.command
        );
    }
    Ok(script)
}

/// What one framed step printed and its exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Framed {
    pub label: String,
    pub exit: i32,
    pub output: String,
}

impl Framed {
    /// Fails naming the step and quoting its output unless it exited 0.
    pub fn ensure_success(&self) -> anyhow::Result<&str> {
        ensure!(
            self.exit == 0,
            "step {} exited {}:\n{}",
            self.label,
            self.exit,
            self.output
        );
        Ok(&self.output)
    }
}

/// Splits a log written by [`framed_script`] back into its steps, in order. Text outside the
/// frames is ignored; an unclosed or mismatched frame is an error quoting the log.
pub fn parse_framed(log: &str) -> anyhow::Result<Vec<Framed>> {
    let mut steps = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in log.lines() {
        if let Some(label) = line.strip_prefix("=== begin ") {
            if let Some((other, _)) = &open {
                bail!("step {other} has no end before step {label} begins:\n{log}");
            }
            open = Some((label.to_string(), String::new()));
        } else if let Some(rest) = line.strip_prefix("=== end ") {
            let (label, exit) = rest
                .rsplit_once(" exit=")
                .with_context(|| format!("end line {line:?} has no exit status"))?;
            let Some((begun, output)) = open.take() else {
                bail!("step {label} ends without a begin:\n{log}");
            };
            ensure!(begun == label, "step {begun} is ended as {label}:\n{log}");
            let exit = exit.parse().with_context(|| format!("exit status in {line:?}"))?;
            steps.push(Framed {
                label: begun,
                exit,
                output,
            });
        } else if let Some((_, output)) = &mut open {
            output.push_str(line);
            output.push('\n');
        }
    }
    if let Some((label, _)) = open {
        bail!("step {label} never ended (the script was cut short?):\n{log}");
    }
    Ok(steps)
}

/// The step labelled `label` of `steps`, or an error listing the labels seen.
pub fn step<'a>(steps: &'a [Framed], label: &str) -> anyhow::Result<&'a Framed> {
    steps.iter().find(|s| s.label == label).with_context(|| {
        let seen: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
        format!("no step {label} in the pod's log; steps seen: {seen:?}")
    })
}

/// A scenario pod ([`test_pod`]) with `dnsPolicy: <policy>` running `steps` framed
/// ([`framed_script`]) with `/bin/sh -c`.
pub fn lookup_pod(
    name: &str,
    node: &str,
    image: &str,
    policy: DnsPolicy,
    steps: &[Step],
) -> anyhow::Result<Pod> {
    let script = framed_script(steps)?;
    let mut pod = test_pod(name, node, image, &["/bin/sh", "-c", &script]);
    if let Some(spec) = pod.spec.as_mut() {
        spec.dns_policy = Some(policy.as_str().into());
    }
    Ok(pod)
}

/// One answer of an `nslookup`: a name and an address it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub name: String,
    pub address: IpAddr,
}

/// What busybox `nslookup` printed: the server it asked (`Server:` line), the answers
/// (`Name:` followed by `Address:` lines) and its complaints (lines starting with `*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nslookup {
    pub server: Option<IpAddr>,
    pub answers: Vec<Answer>,
    pub errors: Vec<String>,
}

impl Nslookup {
    /// Parses busybox 1.35's output (tabs after `Server:`, `Address:` of the server, `Name:`):
    ///
    /// ```text
    /// Server:  169.254.10.10
    /// Address: 169.254.10.10:53
    ///
    /// Non-authoritative answer:
    /// Name:    web.lab.test
    /// Address: 10.1.2.3
    /// ```
    pub fn parse(text: &str) -> anyhow::Result<Nslookup> {
        let mut server = None;
        let mut answers = Vec::new();
        let mut errors = Vec::new();
        let mut name: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(value) = line.strip_prefix("Server:") {
                let value = value.trim();
                server = Some(
                    value
                        .parse()
                        .with_context(|| format!("the Server: line names {value:?}, not an address"))?,
                );
            } else if let Some(value) = line.strip_prefix("Name:") {
                name = Some(value.trim().to_string());
            } else if let Some(value) = line.strip_prefix("Address:") {
                // Before any `Name:` the address is the server's (`ip:53`).
                if let Some(name) = &name {
                    let value = value.trim();
                    let address = value
                        .parse()
                        .with_context(|| format!("answer address {value:?} of {name}"))?;
                    answers.push(Answer {
                        name: name.clone(),
                        address,
                    });
                }
            } else if line.starts_with('*') {
                errors.push(line.to_string());
            }
        }
        Ok(Nslookup {
            server,
            answers,
            errors,
        })
    }

    /// The addresses answered for `name` (with or without the final dot).
    pub fn addresses_of(&self, name: &str) -> Vec<IpAddr> {
        let want = name.trim_end_matches('.');
        self.answers
            .iter()
            .filter(|a| a.name.trim_end_matches('.').eq_ignore_ascii_case(want))
            .map(|a| a.address)
            .collect()
    }
}

/// A resolv.conf as a resolver reads it: each line that is neither blank nor a comment
/// (`#`, `;`), split into words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvConf {
    pub directives: Vec<Vec<String>>,
}

impl ResolvConf {
    pub fn parse(text: &str) -> ResolvConf {
        let directives = text
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
            .filter(|w| w.first().is_some_and(|k| !k.starts_with(['#', ';'])))
            .collect();
        ResolvConf { directives }
    }

    /// Every directive as one line, its words joined by one space.
    pub fn lines(&self) -> Vec<String> {
        self.directives.iter().map(|w| w.join(" ")).collect()
    }

    /// The values of the `nameserver` lines, in order.
    pub fn nameservers(&self) -> Vec<String> {
        self.values("nameserver")
    }

    /// The words of the `search` lines, in order.
    pub fn search(&self) -> Vec<String> {
        self.values("search")
    }

    /// The words of the `options` lines, in order.
    pub fn options(&self) -> Vec<String> {
        self.values("options")
    }

    fn values(&self, keyword: &str) -> Vec<String> {
        self.directives
            .iter()
            .filter(|w| w[0] == keyword)
            .flat_map(|w| w[1..].iter().cloned())
            .collect()
    }

    /// What docs/design.md §5 derives from a host resolv.conf for a LocalDNS machine: the host's lines
    /// without its `nameserver`s, then `nameserver <listener>`.
    pub fn localdns_lines_for(&self, listener: Ipv4Addr) -> Vec<String> {
        self.directives
            .iter()
            .filter(|w| w[0] != "nameserver")
            .map(|w| w.join(" "))
            .chain([format!("nameserver {listener}")])
            .collect()
    }
}

/// A command line running `argv` inside `machine` from its host, as the agent does
/// (`systemd-run --machine=<m> --pipe --wait`), so the command sees the machine's own mounts.
pub fn in_machine(machine: &str, argv: &str) -> String {
    format!("systemd-run --machine={machine} --pipe --wait --quiet --collect --service-type=exec -- {argv}")
}

/// The machine's `/etc/resolv.conf` as processes inside it read it (not the rootfs file seen
/// from the host: a bind mount would hide the difference).
pub fn machine_resolv_conf(vm: &Vm, machine: &str) -> anyhow::Result<String> {
    vm.run(&in_machine(machine, "cat /etc/resolv.conf"))
        .with_context(|| format!("reading /etc/resolv.conf inside machine {machine}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOUND: &str = "Server:\t\t169.254.10.11\nAddress:\t169.254.10.11:53\n\n\
                         Name:\tkubernetes.default.svc.cluster.local\nAddress: 10.96.0.1\n\n";
    const NOT_FOUND: &str = "Server:\t\t169.254.10.10\nAddress:\t169.254.10.10:53\n\n\
                             ** server can't find nope.lab.test: NXDOMAIN\n\n";

    #[test]
    fn nslookup_output_gives_the_server_and_the_answers_not_the_servers_address() {
        let out = Nslookup::parse(FOUND).unwrap();
        assert_eq!(out.server, Some(IpAddr::V4(CLUSTER_LISTENER)));
        assert_eq!(
            out.addresses_of("kubernetes.default.svc.cluster.local."),
            [IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1))]
        );
        assert_eq!(out.answers.len(), 1);
        assert!(out.errors.is_empty());
    }

    #[test]
    fn nslookup_failures_are_errors_without_answers() {
        let out = Nslookup::parse(&format!("Non-authoritative answer:\n{NOT_FOUND}")).unwrap();
        assert_eq!(out.server, Some(IpAddr::V4(NODE_LISTENER)));
        assert!(out.answers.is_empty());
        assert_eq!(out.errors, ["** server can't find nope.lab.test: NXDOMAIN"]);
    }

    #[test]
    fn a_server_line_that_is_no_address_is_an_error() {
        let err = Nslookup::parse("Server:\tnope\n").unwrap_err();
        assert!(format!("{err:#}").contains("\"nope\""), "{err:#}");
    }

    #[test]
    fn framed_steps_split_back_with_their_exit_status_and_outside_text_ignored() {
        let log =
            "noise\n=== begin one\nServer: x\n=== end one exit=0\n=== begin two\n\n=== end two exit=1\n";
        let steps = parse_framed(log).unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(step(&steps, "one").unwrap().output, "Server: x\n");
        assert_eq!(step(&steps, "two").unwrap().exit, 1);
        assert!(step(&steps, "two").unwrap().ensure_success().is_err());
        let err = step(&steps, "three").unwrap_err();
        assert!(format!("{err}").contains("[\"one\", \"two\"]"), "{err}");
    }

    #[rstest::rstest]
    #[case::unclosed("=== begin one\nx\n")]
    #[case::end_without_begin("=== end one exit=0\n")]
    #[case::mismatched("=== begin one\n=== end two exit=0\n")]
    #[case::nested("=== begin one\n=== begin two\n")]
    #[case::bad_status("=== begin one\n=== end one exit=x\n")]
    fn broken_frames_are_errors(#[case] log: &str) {
        assert!(parse_framed(log).is_err(), "{log:?}");
    }

    #[test]
    fn the_script_frames_each_step_and_refuses_labels_that_need_quoting() {
        let script = framed_script(&[Step::nslookup("first", "a", "web.lab.test.")]).unwrap();
        assert_eq!(
            script,
            "echo '=== begin first'; { nslookup -type=a -retry=1 -timeout=10 web.lab.test.; } 2>&1; \
             echo \"=== end first exit=$?\"\n"
        );
        assert!(framed_script(&[Step::new("it's", "true")]).is_err());
        assert!(framed_script(&[Step::new("", "true")]).is_err());
    }

    #[test]
    fn the_lookup_pod_carries_its_dns_policy_and_script() {
        let pod = lookup_pod("p", "n", "img", DnsPolicy::Default, &[Step::resolv_conf("rc")]).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.dns_policy.as_deref(), Some("Default"));
        let command = spec.containers[0].command.clone().unwrap();
        assert_eq!(command[..2], ["/bin/sh", "-c"]);
        assert!(command[2].contains("cat /etc/resolv.conf"), "{command:?}");
    }

    #[test]
    fn resolv_conf_ignores_comments_and_blanks_and_normalises_whitespace() {
        let conf = ResolvConf::parse(
            "# gen\n\tnameserver 10.0.0.2\n\nsearch\tlab.test  x.test\n; c\noptions ndots:2\n",
        );
        assert_eq!(conf.nameservers(), ["10.0.0.2"]);
        assert_eq!(conf.search(), ["lab.test", "x.test"]);
        assert_eq!(conf.options(), ["ndots:2"]);
        assert_eq!(
            conf.localdns_lines_for(NODE_LISTENER),
            [
                "search lab.test x.test",
                "options ndots:2",
                "nameserver 169.254.10.10"
            ]
        );
    }
}
