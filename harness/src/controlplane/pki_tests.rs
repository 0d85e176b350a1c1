//! Tests of the generated PKI: parsed with `x509-parser`, signatures checked against the issuer.

use std::collections::BTreeSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

use super::*;

struct Parsed {
    der: Vec<u8>,
}

impl Parsed {
    fn from_pem(pem: &[u8]) -> Parsed {
        let (rest, pem) = parse_x509_pem(pem).expect("a PEM certificate");
        assert!(
            rest.iter().all(u8::is_ascii_whitespace),
            "trailing data after the certificate"
        );
        assert_eq!(pem.label, "CERTIFICATE");
        Parsed { der: pem.contents }
    }

    fn read(pki: &Pki, name: &str) -> Parsed {
        Parsed::from_pem(&fs::read(pki.file(name)).unwrap())
    }

    fn cert(&self) -> x509_parser::certificate::X509Certificate<'_> {
        x509_parser::parse_x509_certificate(&self.der)
            .expect("DER certificate")
            .1
    }

    fn cn(&self) -> String {
        let cert = self.cert();
        let cn = cert.subject().iter_common_name().next().expect("a CN");
        cn.as_str().unwrap().to_string()
    }

    fn orgs(&self) -> Vec<String> {
        let cert = self.cert();
        cert.subject()
            .iter_organization()
            .map(|o| o.as_str().unwrap().to_string())
            .collect()
    }

    /// Asserts `self` was issued (name and signature) by `ca`.
    fn assert_issued_by(&self, ca: &Parsed) {
        let (cert, ca_cert) = (self.cert(), ca.cert());
        assert_eq!(cert.issuer(), ca_cert.subject(), "issuer of {}", self.cn());
        cert.verify_signature(Some(ca_cert.public_key()))
            .unwrap_or_else(|e| panic!("{} is not signed by {}: {e}", self.cn(), ca.cn()));
    }

    /// (server_auth, client_auth)
    fn eku(&self) -> (bool, bool) {
        let cert = self.cert();
        let eku = cert
            .extended_key_usage()
            .unwrap()
            .expect("an extended key usage")
            .value;
        (eku.server_auth, eku.client_auth)
    }
}

fn lab_pki() -> (tempfile::TempDir, Pki) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = PkiSpec::for_lab(&LabAddrs::new(3).unwrap());
    let pki = Pki::generate(&spec, &tmp.path().join("pki")).unwrap();
    (tmp, pki)
}

#[test]
fn cas_are_self_signed_certificate_authorities() {
    let (_tmp, pki) = lab_pki();
    for (file, cn) in [("ca.crt", "kubernetes"), ("front-proxy-ca.crt", "front-proxy-ca")] {
        let ca = Parsed::read(&pki, file);
        assert_eq!(ca.cn(), cn);
        assert!(ca.cert().is_ca(), "{file} is not a CA");
        assert!(ca.cert().key_usage().unwrap().unwrap().value.key_cert_sign());
        assert!(ca.cert().validity().is_valid(), "{file} is not valid now");
        ca.assert_issued_by(&ca);
    }
}

#[test]
fn apiserver_serving_cert_names_every_lab_address() {
    let (_tmp, pki) = lab_pki();
    let cert = Parsed::read(&pki, "apiserver.crt");
    cert.assert_issued_by(&Parsed::read(&pki, "ca.crt"));
    assert_eq!(cert.eku(), (true, false));
    assert!(!cert.cert().is_ca());
    let parsed = cert.cert();
    let san = parsed.subject_alternative_name().unwrap().expect("SANs").value;
    let mut names = BTreeSet::new();
    let mut ips = BTreeSet::new();
    for name in &san.general_names {
        match name {
            GeneralName::DNSName(dns) => names.insert(dns.to_string()),
            GeneralName::IPAddress(ip) => ips.insert(<[u8; 4]>::try_from(*ip).map(IpAddr::from).unwrap()),
            other => panic!("unexpected SAN {other:?}"),
        };
    }
    let expected_names: BTreeSet<String> = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
    ]
    .map(String::from)
    .into();
    assert_eq!(names, expected_names);
    let expected_ips: BTreeSet<IpAddr> = ["192.168.100.1", "127.0.0.1", "10.96.0.1"]
        .map(|ip| ip.parse().unwrap())
        .into();
    assert_eq!(ips, expected_ips);
}

#[test]
fn client_certs_carry_their_identity_and_issuer() {
    let (_tmp, pki) = lab_pki();
    let ca = Parsed::read(&pki, "ca.crt");
    let kubelet_client = Parsed::read(&pki, "apiserver-kubelet-client.crt");
    kubelet_client.assert_issued_by(&ca);
    assert_eq!(kubelet_client.cn(), "kube-apiserver-kubelet-client");
    assert_eq!(kubelet_client.orgs(), ["system:masters"]);
    assert_eq!(kubelet_client.eku(), (false, true));

    let front_proxy_client = Parsed::read(&pki, "front-proxy-client.crt");
    front_proxy_client.assert_issued_by(&Parsed::read(&pki, "front-proxy-ca.crt"));
    assert_eq!(front_proxy_client.cn(), "front-proxy-client");
    assert_eq!(front_proxy_client.eku(), (false, true));
    let wrong = front_proxy_client
        .cert()
        .verify_signature(Some(ca.cert().public_key()));
    assert!(
        wrong.is_err(),
        "the front-proxy client verifies against the cluster CA"
    );
}

#[test]
fn keys_parse_and_match_their_certificates() {
    let (_tmp, pki) = lab_pki();
    for stem in [
        "ca",
        "apiserver",
        "apiserver-kubelet-client",
        "front-proxy-ca",
        "front-proxy-client",
    ] {
        let key = KeyPair::from_pem(&fs::read_to_string(pki.file(&format!("{stem}.key"))).unwrap()).unwrap();
        let cert = Parsed::read(&pki, &format!("{stem}.crt"));
        assert_eq!(
            key.public_key_raw(),
            cert.cert().public_key().subject_public_key.data.as_ref(),
            "{stem}.key does not match {stem}.crt"
        );
    }
    let sa = KeyPair::from_pem(&fs::read_to_string(pki.file("sa.key")).unwrap()).unwrap();
    assert_eq!(
        sa.public_key_pem(),
        fs::read_to_string(pki.file("sa.pub")).unwrap()
    );
}

#[test]
fn secrets_are_private_and_everything_is_written() {
    let (_tmp, pki) = lab_pki();
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&pki.dir), 0o700);
    for (name, secret) in FILES {
        let want = if secret { 0o600 } else { 0o644 };
        assert_eq!(mode(&pki.file(name)), want, "{name}");
    }
    for name in [
        "ca.key",
        "apiserver.key",
        "sa.key",
        "admin.conf",
        "bootstrap-token",
    ] {
        assert!(FILES.contains(&(name, true)), "{name} is not marked secret");
    }
    let reopened = Pki::open(&pki.dir).unwrap();
    assert_eq!(reopened.bootstrap_token, pki.bootstrap_token);
    assert_eq!(reopened.server_url, "https://192.168.100.1:6443");
}

#[test]
fn kubeconfigs_are_yaml_naming_the_ca_server_and_identity() {
    let (_tmp, pki) = lab_pki();
    let ca = fs::read_to_string(pki.ca_cert()).unwrap();
    for (path, user, org) in [
        (pki.admin_kubeconfig(), "kubernetes-admin", Some("system:masters")),
        (
            pki.controller_manager_kubeconfig(),
            "system:kube-controller-manager",
            None,
        ),
        (pki.scheduler_kubeconfig(), "system:kube-scheduler", None),
        (pki.coredns_kubeconfig(), "system:coredns", None),
    ] {
        let config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
        let cluster = &config["clusters"][0]["cluster"];
        assert_eq!(cluster["server"].as_str(), Some("https://192.168.100.1:6443"));
        let ca_data = STANDARD
            .decode(cluster["certificate-authority-data"].as_str().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(ca_data).unwrap(), ca, "{}", path.display());
        assert_eq!(
            config["current-context"].as_str(),
            Some(format!("{user}@lab").as_str())
        );
        assert_eq!(config["contexts"][0]["context"]["user"].as_str(), Some(user));
        let cert = STANDARD
            .decode(
                config["users"][0]["user"]["client-certificate-data"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
        let cert = Parsed::from_pem(&cert);
        cert.assert_issued_by(&Parsed::from_pem(ca.as_bytes()));
        assert_eq!(cert.cn(), user);
        assert_eq!(cert.orgs(), org.into_iter().collect::<Vec<_>>());
        assert_eq!(cert.eku(), (false, true));
        let key = STANDARD
            .decode(config["users"][0]["user"]["client-key-data"].as_str().unwrap())
            .unwrap();
        KeyPair::from_pem(std::str::from_utf8(&key).unwrap()).unwrap();
    }
}

#[test]
fn bootstrap_kubeconfig_and_manifests_hold_the_token() {
    let (_tmp, pki) = lab_pki();
    let token = pki.bootstrap_token.to_string();
    assert_eq!(BootstrapToken::parse(&token).as_ref(), Ok(&pki.bootstrap_token));
    let config: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&fs::read_to_string(pki.bootstrap_kubeconfig()).unwrap()).unwrap();
    assert_eq!(config["users"][0]["user"]["token"].as_str(), Some(token.as_str()));
    assert!(config["users"][0]["user"]["client-key-data"].is_null());
    let [secret, rbac] = pki.bootstrap_manifests();
    let secret: serde_yaml_ng::Value = serde_yaml_ng::from_str(&fs::read_to_string(secret).unwrap()).unwrap();
    assert_eq!(
        secret["metadata"]["name"].as_str().map(String::from),
        Some(format!("bootstrap-token-{}", pki.bootstrap_token.id()))
    );
    assert_eq!(
        secret["stringData"]["token-secret"].as_str(),
        Some(pki.bootstrap_token.secret())
    );
    assert!(
        fs::read_to_string(rbac)
            .unwrap()
            .contains("system:node-bootstrapper")
    );
}

#[test]
fn each_generation_has_its_own_keys_and_token() {
    let (_a, a) = lab_pki();
    let (_b, b) = lab_pki();
    assert_ne!(a.bootstrap_token, b.bootstrap_token);
    let key = |pki: &Pki| fs::read(pki.ca_key()).unwrap();
    assert_ne!(key(&a), key(&b));
}

#[test]
fn generate_refuses_a_directory_with_files_and_leaves_it_alone() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("ca.crt"), "mine").unwrap();
    let spec = PkiSpec::for_lab(&LabAddrs::new(3).unwrap());
    let err = Pki::generate(&spec, tmp.path()).unwrap_err();
    assert!(matches!(err, PkiError::NotEmpty(_)), "{err}");
    assert!(
        err.to_string().contains(&tmp.path().display().to_string()),
        "{err}"
    );
    assert_eq!(fs::read_to_string(tmp.path().join("ca.crt")).unwrap(), "mine");
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    let err = Pki::open(tmp.path()).unwrap_err();
    assert!(err.to_string().contains("ca.key is missing"), "{err}");
}

#[test]
fn generate_fills_an_existing_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = PkiSpec::for_lab(&LabAddrs::new(3).unwrap());
    let pki = Pki::generate(&spec, tmp.path()).unwrap();
    assert_eq!(pki.dir, tmp.path());
    assert!(pki.ca_cert().is_file());
    let leftovers: Vec<_> = fs::read_dir(tmp.path().parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .contains(&*tmp.path().file_name().unwrap().to_string_lossy())
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn admin_kubeconfig_for_another_server_keeps_the_credentials() {
    let (tmp, pki) = lab_pki();
    let path = tmp.path().join("host.conf");
    pki.write_admin_kubeconfig_for("https://127.0.0.1:16443", &path)
        .unwrap();
    let host: serde_json::Value = serde_yaml_ng::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let mut admin: serde_json::Value =
        serde_yaml_ng::from_str(&fs::read_to_string(pki.admin_kubeconfig()).unwrap()).unwrap();
    assert_eq!(
        host["clusters"][0]["cluster"]["server"].as_str(),
        Some("https://127.0.0.1:16443")
    );
    // Everything else, credentials included, is the admin kubeconfig's.
    admin["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:16443".into();
    assert_eq!(host, admin);
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_kubeconfig_that_does_not_parse_is_named_and_the_earlier_copy_is_kept() {
    let (tmp, pki) = lab_pki();
    let path = tmp.path().join("host.conf");
    pki.write_admin_kubeconfig_for("https://127.0.0.1:16443", &path)
        .unwrap();
    let earlier = fs::read_to_string(&path).unwrap();
    fs::write(pki.admin_kubeconfig(), "clusters: [oops\n").unwrap();
    let err = pki
        .write_admin_kubeconfig_for("https://127.0.0.1:26443", &path)
        .unwrap_err();
    assert!(matches!(err, PkiError::KubeconfigRead { .. }), "{err}");
    assert!(err.to_string().contains("admin.conf"), "{err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), earlier);
}
