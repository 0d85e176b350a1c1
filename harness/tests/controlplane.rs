//! The lab's Kubernetes cluster (a Kind cluster wired to the lab's bridge) as a lab holds it: it
//! comes up at the addresses the VMs use, the host's kubectl reaches it, the Machina CRDs are
//! Established, a CSR made with only the lab's bootstrap token is approved and signed, the
//! cluster DNS answers from the lab namespace (cluster names and, forwarded, the lab's upstream
//! names), and the lab's teardown leaves nothing; `harness lab up` refuses at once without the
//! images, prints a kubeconfig the host's kubectl uses, and `harness lab down` removes a lab (its
//! Kind cluster included) whose owner was killed. Needs root, Podman or Docker, and the cached
//! images (`harness images build`).

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::controlplane::ClusterAccess;
use harness::lab::{Lab, LabSpec};
use harness::netns;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, PostParams};

static HARNESS: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("harness"));

fn start(test: &str) -> Lab {
    let started = Instant::now();
    let lab = Lab::start(LabSpec {
        control_plane: true,
        ..LabSpec::for_test(test)
    })
    .unwrap_or_else(|e| panic!("starting a lab with its Kind cluster for {test}: {e}"));
    eprintln!(
        "lab {} with its control plane up in {:.1?}",
        lab.name(),
        started.elapsed()
    );
    lab
}

/// Runs `argv` inside the lab's namespace; its stdout (fails on a non-zero exit).
fn run_in(lab: &Lab, argv: &[&str]) -> String {
    let mut cmd = lab.command(argv[0]);
    cmd.args(&argv[1..]);
    agent::exec::run_stdout(&mut cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// `dig @10.96.0.10 <name> +short` from inside the lab namespace.
fn cluster_dig(lab: &Lab, cluster: &ClusterAccess, name: &str) -> String {
    let server = format!("@{}", cluster.cluster_dns);
    run_in(lab, &["dig", &server, name, "A", "+short", "+tries=2", "+time=3"])
        .trim()
        .to_string()
}

/// The CRD names in `deploy/crd/*.yaml`.
fn crd_names() -> Vec<String> {
    let dir = harness::lab::cluster::crd_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let doc: serde_yaml_ng::Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            doc["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no CRDs in {}", dir.display());
    names
}

/// A CSR for `system:node:<node>` (O `system:nodes`), PEM, with a new P-256 key.
fn node_csr_pem(node: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn scaled(secs: u64) -> Duration {
    let scale = std::env::var("LAB_TIMEOUT_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(secs as f64 * scale)
}

#[tokio::test(flavor = "current_thread")]
async fn the_cluster_serves_the_host_approves_bootstrap_csrs_answers_cluster_dns_and_leaves_nothing() {
    let lab =
        start("the_cluster_serves_the_host_approves_bootstrap_csrs_answers_cluster_dns_and_leaves_nothing");
    let cluster = lab
        .cluster()
        .expect("LabSpec.control_plane gives a cluster")
        .clone();
    let n = lab.number();
    assert_eq!(cluster.api_server, "https://192.168.100.3:6443".to_string());
    assert_eq!(cluster.cluster_dns, Ipv4Addr::new(10, 96, 0, 10));
    assert_eq!(cluster.kubernetes_version, "v1.35.4");
    assert!(
        cluster.host_api_server.starts_with("https://127.0.0.1:"),
        "{}",
        cluster.host_api_server
    );

    // The real kubectl on the host, with the admin kubeconfig as it is.
    let readyz = agent::exec::run_stdout(
        Command::new(&cluster.kubectl)
            .arg("--kubeconfig")
            .arg(&cluster.admin_kubeconfig)
            .args(["get", "--raw", "/readyz"]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(readyz.trim(), "ok");
    let version = agent::exec::run_stdout(cluster.kubectl().args(["version", "-o", "json"])).unwrap();
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["serverVersion"]["gitVersion"], "v1.35.4", "{version}");

    // The Machina CRDs are Established.
    let admin = cluster.client().await.unwrap_or_else(|e| panic!("{e}"));
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for name in crd_names() {
        let crd = crds
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "CRD {name} is not Established");
    }

    // With only the bootstrap token: no admin rights, but a node client CSR gets approved and signed.
    let bootstrap = cluster.bootstrap_client().await.unwrap_or_else(|e| panic!("{e}"));
    let secrets: Api<Secret> = Api::namespaced(bootstrap.clone(), "kube-system");
    let denied = secrets.list(&Default::default()).await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(status)) if status.code == 403),
        "the bootstrap token must not list Secrets: {denied:?}"
    );
    let node = format!("lab{n}-csr-node");
    let csrs: Api<CertificateSigningRequest> = Api::all(bootstrap);
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("node-csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(node_csr_pem(&node).into_bytes()),
            signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        status: None,
    };
    let created = csrs
        .create(&PostParams::default(), &csr)
        .await
        .unwrap_or_else(|e| panic!("creating a CSR with the bootstrap token: {e}"));
    let csr_name = created.metadata.name.clone().unwrap();
    let deadline = Instant::now() + scaled(90);
    let (conditions, certificate) = loop {
        let got = csrs.get(&csr_name).await.unwrap();
        let status = got.status.unwrap_or_default();
        let conditions = status.conditions.unwrap_or_default();
        if let Some(certificate) = status.certificate {
            break (conditions, certificate);
        }
        assert!(
            Instant::now() < deadline,
            "CSR {csr_name} was not signed in time; conditions: {conditions:?}; `harness lab logs` \
             exports the cluster's logs"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let approved = conditions
        .iter()
        .find(|c| c.type_ == "Approved")
        .unwrap_or_else(|| panic!("no Approved condition: {conditions:?}"));
    assert_eq!(approved.status, "True");
    assert_eq!(approved.reason.as_deref(), Some("AutoApproved"), "{approved:?}");
    let pem = String::from_utf8(certificate.0).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    assert_eq!(
        cert.subject().to_string(),
        format!("O=system:nodes, CN=system:node:{node}")
    );
    assert_eq!(cert.issuer().to_string(), "CN=kubernetes");

    // Cluster DNS at 10.96.0.10 from the lab namespace: the cluster's CoreDNS pods behind the
    // `kube-dns` ClusterIP answer cluster names and forward every other name to the lab's
    // upstream DNS server.
    assert_eq!(
        cluster_dig(&lab, &cluster, "kubernetes.default.svc.cluster.local"),
        "10.96.0.1"
    );
    assert_eq!(
        cluster_dig(&lab, &cluster, "kube-dns.kube-system.svc.cluster.local"),
        "10.96.0.10"
    );
    lab.dns()
        .set_a("web.lab.test", &[Ipv4Addr::new(10, 9, 8, 7)], 5)
        .unwrap();
    assert_eq!(cluster_dig(&lab, &cluster, "web.lab.test"), "10.9.8.7");
    assert!(lab.dns().query_count("web.lab.test").unwrap() >= 1);

    // Each VM's pod CIDR is routed to the VM.
    let nic = lab.attach_vm().unwrap();
    let route = run_in(&lab, &["ip", "-4", "route", "show", "10.244.0.0/24"]);
    assert!(route.contains(&format!("via {}", nic.ip)), "{route}");

    // Kind's output is evidence.
    let log = cluster.log_dir.join("kind-create.log");
    let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    assert!(len > 0, "{} is empty or missing", log.display());

    // Teardown: no namespace, no API server on the host's port, no kubeconfig, no Kind cluster.
    let name = lab.name();
    let port = cluster
        .host_api_server
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u16>()
        .unwrap();
    lab.shutdown().unwrap_or_else(|e| panic!("{e}"));
    assert!(!netns::exists(&name), "namespace {name} survived");
    assert!(
        std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(),
        "the API server on the host's port {port} survived"
    );
    assert!(
        !kind_clusters().contains(&name),
        "Kind cluster {name} survived its lab"
    );
    assert!(!cluster.admin_kubeconfig.exists());
}

/// The Kind clusters `kind get clusters` lists.
fn kind_clusters() -> Vec<String> {
    let cache = harness::cache::Cache::open().unwrap();
    let tool = harness::images::kind_tool::require(&cache).unwrap_or_else(|e| panic!("{e}"));
    let conf = tempfile::tempdir().unwrap();
    let engine = harness::kind::Engine::detect(conf.path()).unwrap_or_else(|e| panic!("{e}"));
    harness::kind::cluster::list(&engine, &tool).unwrap_or_else(|e| panic!("{e}"))
}

/// The `skip`-th lab number nobody uses now (between the tests' slots and `lab_cli`'s range).
/// Each test of this binary skips a different count: two of them run at once, and one must not
/// take the number the other's lab holds (nor see that lab as its own).
fn unused_number(skip: usize) -> u8 {
    let _lock = harness::lab::owner::lock().unwrap();
    (60..100)
        .filter(|n| {
            let name = format!("lab-{n}");
            !netns::exists(&name) && !harness::lab::owner::run_dir(&name).exists()
        })
        .nth(skip)
        .expect("a free lab number between 60 and 99")
}

#[test]
fn lab_up_without_the_clusters_images_fails_at_once_naming_harness_images_build() {
    let empty_cache = tempfile::tempdir().unwrap();
    let n = unused_number(0).to_string();
    let started = Instant::now();
    let out = agent::exec::run_unchecked(
        Command::new(&*HARNESS)
            .args(["lab", "up", "--no-vm", "--control-plane", "--lab", &n])
            .env("LAB_CACHE_DIR", empty_cache.path()),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("harness images build"), "{stderr}");
    assert!(stderr.contains("cluster cannot start"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        !netns::exists(&format!("lab-{n}")),
        "a lab was made although the image is missing"
    );
}

#[test]
fn lab_up_prints_a_kubeconfig_for_the_hosts_kubectl_and_lab_kubectl_and_lab_down_removes_it_after_a_sigkill()
{
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let n = unused_number(1);
    let name = format!("lab-{n}");
    let mut child = Command::new(&*HARNESS)
        .args(["lab", "up", "--no-vm", "--control-plane", "--lab", &n.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("is running") {
                let _ = tx.send(Ok(seen.clone()));
            }
        }
        let _ = tx.send(Err(seen));
    });
    match rx.recv_timeout(scaled(180)) {
        Ok(Ok(_)) => {}
        Ok(Err(output)) => panic!("`harness lab up` ended before the lab ran:\n{output}"),
        Err(_) => panic!("`harness lab up` did not report a running lab in time"),
    }
    // `lab up` prints the admin kubeconfig on stdout, `lab kubeconfig` prints the same path,
    // and the real kubectl on the host uses it as it is.
    let printed = BufReader::new(stdout)
        .lines()
        .next()
        .expect("a line on stdout")
        .unwrap();
    let asked =
        agent::exec::run_stdout(Command::new(&*HARNESS).args(["lab", "kubeconfig", "--lab", &n.to_string()]))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(asked.trim(), printed);
    let cache = harness::cache::Cache::open().unwrap();
    let kubectl = harness::images::kubernetes::require(&cache)
        .unwrap()
        .binary("kubectl");
    let readyz = agent::exec::run_stdout(Command::new(kubectl).args([
        "--kubeconfig",
        &printed,
        "get",
        "--raw",
        "/readyz",
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(readyz.trim(), "ok");
    // `harness lab kubectl` runs that kubectl with that kubeconfig, and passes its exit status on.
    let through = agent::exec::run_stdout(Command::new(&*HARNESS).args([
        "lab",
        "kubectl",
        "--lab",
        &n.to_string(),
        "--",
        "get",
        "--raw",
        "/readyz",
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(through.trim(), "ok");
    let wrong = agent::exec::run_unchecked(Command::new(&*HARNESS).args([
        "lab",
        "kubectl",
        "--lab",
        &n.to_string(),
        "--",
        "get",
        "no-such-resource-kind",
    ]))
    .unwrap();
    assert!(
        !wrong.status.success(),
        "kubectl's failure must be harness lab kubectl's"
    );
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("no-such-resource-kind"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );

    assert!(
        kind_clusters().contains(&name),
        "kind get clusters does not list {name}"
    );

    // `lab up` returned once the lab ran; the lab's owner holds it. SIGKILL cannot be caught:
    // the lab and its Kind cluster stay for `harness lab down`.
    assert!(child.wait().unwrap().success(), "`harness lab up` failed");
    let owner = harness::lab::owner::read_owner(&name).expect("the running lab has an owner");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(owner.pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed = Instant::now();
    while owner.is_alive() && killed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        netns::exists(&name),
        "SIGKILL cannot clean up; the namespace stays for the sweep"
    );
    agent::exec::run(Command::new(&*HARNESS).args(["lab", "down", "--lab", &n.to_string()])).unwrap();
    assert!(!netns::exists(&name));
    assert!(!harness::lab::owner::run_dir(&name).exists());
    assert!(
        !kind_clusters().contains(&name),
        "`harness lab down` left Kind cluster {name}"
    );
}
