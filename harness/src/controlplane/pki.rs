//! The lab cluster's PKI, generated with `rcgen` into one directory (kubeadm's names).
//!
//! | file | what |
//! |------|------|
//! | `ca.crt`, `ca.key` | cluster CA (CN `kubernetes`): client CA of the API server, CSR signer of kube-controller-manager |
//! | `apiserver.crt`, `.key` | API server serving cert: the lab's addresses, `127.0.0.1`, `10.96.0.1`, `kubernetes.default.svc…` |
//! | `apiserver-kubelet-client.crt`, `.key` | the API server's client cert towards kubelets (O `system:masters`) |
//! | `front-proxy-ca.crt`, `.key`, `front-proxy-client.crt`, `.key` | aggregation layer (request-header auth) |
//! | `sa.key`, `sa.pub` | service-account token signing key pair |
//! | `admin.conf` | kubeconfig of `kubernetes-admin` (O `system:masters`) |
//! | `controller-manager.conf`, `scheduler.conf` | kubeconfigs of `system:kube-controller-manager`, `system:kube-scheduler` |
//! | `coredns.conf`, `manifests/coredns-rbac.yaml` | the cluster DNS's kubeconfig (`system:coredns`) and its RBAC (kubeadm's `system:coredns` role) |
//! | `bootstrap-kubelet.conf`, `bootstrap-token` | a kubelet's bootstrap kubeconfig, the token `<id>.<secret>` |
//! | `manifests/bootstrap-token-secret.yaml`, `manifests/bootstrap-rbac.yaml` | to apply once the API server is up |
//!
//! Keys are ECDSA P-256 (PKCS#8 PEM), accepted by every Kubernetes component.
//! Private keys and files embedding a key or a token are mode 0600, the directory 0700.

use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};

use super::bootstrap::{
    BootstrapToken, COREDNS_USER, NotAToken, coredns_rbac_manifests, rbac_manifests, secret_manifest,
    to_yaml_stream,
};
use super::kubeconfig::{self, Credentials, KubeconfigSpec};
use crate::lab::addr::{API_SERVER_PORT, LabAddrs};

/// The `kubernetes` Service's address: the first address of the service CIDR `10.96.0.0/12`.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
/// The cluster's DNS domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The CA certificates' lifetime.
const CA_VALIDITY: Duration = Duration::days(3650);
/// How far back certificates are valid from, for guests whose clock lags a little.
const BACKDATE: Duration = Duration::hours(1);

/// What the PKI is generated for.
#[derive(Clone, Debug)]
pub struct PkiSpec {
    /// The cluster's name in kubeconfigs (`lab`).
    pub cluster_name: String,
    /// The API server URL written into the kubeconfigs (`https://192.168.100.1:6443`).
    pub server_url: String,
    /// IP SANs of the API server's serving certificate.
    pub apiserver_ips: Vec<IpAddr>,
    /// DNS SANs of the API server's serving certificate.
    pub apiserver_names: Vec<String>,
    /// Lifetime of the leaf certificates.
    pub validity: Duration,
}

impl PkiSpec {
    /// The PKI of lab `n`: the API server at the bridge address, also reached as
    /// `127.0.0.1` (a host port forward) and as the `kubernetes` Service.
    pub fn for_lab(addrs: &LabAddrs) -> PkiSpec {
        let bridge = addrs.bridge_ip();
        PkiSpec {
            cluster_name: "lab".to_string(),
            server_url: format!("https://{bridge}:{API_SERVER_PORT}"),
            apiserver_ips: vec![
                bridge.into(),
                Ipv4Addr::LOCALHOST.into(),
                KUBERNETES_SERVICE_IP.into(),
            ],
            apiserver_names: [
                "kubernetes".to_string(),
                "kubernetes.default".to_string(),
                "kubernetes.default.svc".to_string(),
                format!("kubernetes.default.svc.{CLUSTER_DOMAIN}"),
                "localhost".to_string(),
            ]
            .into(),
            validity: Duration::days(365),
        }
    }
}

/// Why the PKI could not be generated or opened.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{0} is not empty: the PKI is written only into a new or empty directory")]
    NotEmpty(PathBuf),
    #[error("{0} is not a complete PKI directory: {1} is missing")]
    Missing(PathBuf, &'static str),
    #[error("generating {what}: {source}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("reading random bytes from the OS: {0}")]
    Random(#[from] getrandom::Error),
    #[error("rendering {what} as YAML: {source}")]
    Yaml {
        what: &'static str,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading kubeconfig {path}: {source}")]
    KubeconfigRead {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path}: {source}")]
    KubeconfigServer {
        path: PathBuf,
        #[source]
        source: kubeconfig::ServerError,
    },
    #[error("{path}: {source}")]
    Token {
        path: PathBuf,
        #[source]
        source: NotAToken,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A generated PKI directory and the paths the control plane's flags name.
#[derive(Clone, Debug)]
pub struct Pki {
    pub dir: PathBuf,
    pub server_url: String,
    pub bootstrap_token: BootstrapToken,
}

/// Every file of a complete PKI directory, and whether it holds a secret (mode 0600).
pub const FILES: [(&str, bool); 23] = [
    ("ca.crt", false),
    ("ca.key", true),
    ("apiserver.crt", false),
    ("apiserver.key", true),
    ("apiserver-kubelet-client.crt", false),
    ("apiserver-kubelet-client.key", true),
    ("front-proxy-ca.crt", false),
    ("front-proxy-ca.key", true),
    ("front-proxy-client.crt", false),
    ("front-proxy-client.key", true),
    ("sa.key", true),
    ("sa.pub", false),
    ("admin.conf", true),
    ("controller-manager.conf", true),
    ("scheduler.conf", true),
    ("coredns.conf", true),
    ("bootstrap-kubelet.conf", true),
    ("bootstrap-token", true),
    ("server-url", false),
    ("manifests/bootstrap-token-secret.yaml", true),
    ("manifests/bootstrap-rbac.yaml", false),
    ("manifests/coredns-rbac.yaml", false),
    ("README", false),
];

impl Pki {
    /// Generates the whole PKI for `spec` into `dir` (created, or existing and
    /// empty). Everything is written into a sibling temporary directory first
    /// and renamed into place, so `dir` is either complete or untouched.
    pub fn generate(spec: &PkiSpec, dir: &Path) -> Result<Pki, PkiError> {
        if dir.exists() && fs::read_dir(dir).map_err(io_err(dir))?.next().is_some() {
            return Err(PkiError::NotEmpty(dir.to_path_buf()));
        }
        let files = generate_files(spec)?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
        }
        let written = write_tree(&tmp, &files).and_then(|()| fs::rename(&tmp, dir).map_err(io_err(dir)));
        if let Err(err) = written {
            let _ = fs::remove_dir_all(&tmp);
            return Err(err);
        }
        Pki::open(dir)
    }

    /// A PKI directory [`Pki::generate`] wrote earlier; fails naming the first missing file.
    pub fn open(dir: &Path) -> Result<Pki, PkiError> {
        if let Some((name, _)) = FILES.iter().find(|(name, _)| !dir.join(name).is_file()) {
            return Err(PkiError::Missing(dir.to_path_buf(), name));
        }
        let read = |name: &str| {
            let path = dir.join(name);
            fs::read_to_string(&path).map_err(io_err(&path))
        };
        let token_path = dir.join("bootstrap-token");
        Ok(Pki {
            dir: dir.to_path_buf(),
            server_url: read("server-url")?.trim().to_string(),
            bootstrap_token: BootstrapToken::parse(read("bootstrap-token")?.trim()).map_err(|source| {
                PkiError::Token {
                    path: token_path,
                    source,
                }
            })?,
        })
    }

    /// `<dir>/<name>`, for a name of [`FILES`].
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.file("ca.crt")
    }

    pub fn ca_key(&self) -> PathBuf {
        self.file("ca.key")
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.file("admin.conf")
    }

    pub fn controller_manager_kubeconfig(&self) -> PathBuf {
        self.file("controller-manager.conf")
    }

    pub fn scheduler_kubeconfig(&self) -> PathBuf {
        self.file("scheduler.conf")
    }

    pub fn coredns_kubeconfig(&self) -> PathBuf {
        self.file("coredns.conf")
    }

    /// The cluster DNS's ClusterRole and its binding to `system:coredns`.
    pub fn coredns_rbac_manifest(&self) -> PathBuf {
        self.file("manifests/coredns-rbac.yaml")
    }

    pub fn bootstrap_kubeconfig(&self) -> PathBuf {
        self.file("bootstrap-kubelet.conf")
    }

    /// The bootstrap token Secret and the bootstrap RBAC, to apply once the API server is up.
    pub fn bootstrap_manifests(&self) -> [PathBuf; 2] {
        [
            self.file("manifests/bootstrap-token-secret.yaml"),
            self.file("manifests/bootstrap-rbac.yaml"),
        ]
    }

    /// Writes a copy of `admin.conf` naming another server URL (e.g.
    /// `https://127.0.0.1:<port>` forwarded from the host), mode 0600.
    pub fn write_admin_kubeconfig_for(&self, server_url: &str, path: &Path) -> Result<(), PkiError> {
        self.write_kubeconfig_for("admin.conf", server_url, path)
    }

    /// Writes a copy of kubeconfig `name` (`admin.conf`, `bootstrap-kubelet.conf`, ...)
    /// naming another server URL, mode 0600 (replacing an earlier copy).
    pub fn write_kubeconfig_for(
        &self,
        name: &'static str,
        server_url: &str,
        path: &Path,
    ) -> Result<(), PkiError> {
        let source = self.file(name);
        let config = kube::config::Kubeconfig::read_from(&source).map_err(|e| PkiError::KubeconfigRead {
            path: source.clone(),
            source: e,
        })?;
        let config = kubeconfig::with_server(config, server_url).map_err(|e| PkiError::KubeconfigServer {
            path: source.clone(),
            source: e,
        })?;
        let yaml = serde_yaml_ng::to_string(&config).map_err(|e| PkiError::Yaml {
            what: name,
            source: e,
        })?;
        if path.exists() {
            fs::remove_file(path).map_err(io_err(path))?;
        }
        write_file(path, &yaml, true)
    }
}

/// The PKI's files in memory: (name, contents, secret).
type Files = Vec<(&'static str, String, bool)>;

fn generate_files(spec: &PkiSpec) -> Result<Files, PkiError> {
    let now = OffsetDateTime::now_utc();
    let (not_before, ca_not_after, not_after) = (now - BACKDATE, now + CA_VALIDITY, now + spec.validity);

    let ca = new_ca("kubernetes", not_before, ca_not_after)?;
    let front_proxy_ca = new_ca("front-proxy-ca", not_before, ca_not_after)?;
    let leaf = |issuer: &Issuer<'_, KeyPair>, cn: &str, org: Option<&str>, usage| {
        let mut params = leaf_params(cn, org, usage, not_before, not_after)?;
        if let Usage::Server = usage {
            params.subject_alt_names = spec_sans(spec)?;
        }
        issue(&params, issuer, cn)
    };

    let apiserver = leaf(&ca, "kube-apiserver", None, Usage::Server)?;
    let kubelet_client = leaf(
        &ca,
        "kube-apiserver-kubelet-client",
        Some("system:masters"),
        Usage::Client,
    )?;
    let front_proxy_client = leaf(&front_proxy_ca, "front-proxy-client", None, Usage::Client)?;
    let admin = leaf(&ca, "kubernetes-admin", Some("system:masters"), Usage::Client)?;
    let controller_manager = leaf(&ca, "system:kube-controller-manager", None, Usage::Client)?;
    let scheduler = leaf(&ca, "system:kube-scheduler", None, Usage::Client)?;
    let coredns = leaf(&ca, COREDNS_USER, None, Usage::Client)?;
    let sa = new_key("the service-account key")?;
    let token = BootstrapToken::generate()?;

    let ca_pem = ca.pem();
    let kubeconfig = |user: &str, credentials: Credentials| {
        KubeconfigSpec {
            cluster: spec.cluster_name.clone(),
            server: spec.server_url.clone(),
            ca_pem: ca_pem.clone(),
            user: user.to_string(),
            credentials,
        }
        .to_yaml()
        .map_err(|source| PkiError::Yaml {
            what: "a kubeconfig",
            source,
        })
    };
    let yaml = |what, docs: &[serde_json::Value]| {
        to_yaml_stream(docs).map_err(|source| PkiError::Yaml { what, source })
    };

    Ok(vec![
        ("ca.crt", ca_pem.clone(), false),
        ("ca.key", ca.key().serialize_pem(), true),
        ("apiserver.crt", apiserver.cert_pem, false),
        ("apiserver.key", apiserver.key_pem, true),
        ("apiserver-kubelet-client.crt", kubelet_client.cert_pem, false),
        ("apiserver-kubelet-client.key", kubelet_client.key_pem, true),
        ("front-proxy-ca.crt", front_proxy_ca.pem(), false),
        ("front-proxy-ca.key", front_proxy_ca.key().serialize_pem(), true),
        ("front-proxy-client.crt", front_proxy_client.cert_pem, false),
        ("front-proxy-client.key", front_proxy_client.key_pem, true),
        ("sa.key", sa.serialize_pem(), true),
        ("sa.pub", sa.public_key_pem(), false),
        (
            "admin.conf",
            kubeconfig("kubernetes-admin", admin.credentials())?,
            true,
        ),
        (
            "controller-manager.conf",
            kubeconfig("system:kube-controller-manager", controller_manager.credentials())?,
            true,
        ),
        (
            "scheduler.conf",
            kubeconfig("system:kube-scheduler", scheduler.credentials())?,
            true,
        ),
        (
            "coredns.conf",
            kubeconfig(COREDNS_USER, coredns.credentials())?,
            true,
        ),
        (
            "bootstrap-kubelet.conf",
            kubeconfig("kubelet-bootstrap", Credentials::Token(token.to_string()))?,
            true,
        ),
        ("bootstrap-token", format!("{token}\n"), true),
        ("server-url", format!("{}\n", spec.server_url), false),
        (
            "manifests/bootstrap-token-secret.yaml",
            yaml("the bootstrap token Secret", &[secret_manifest(&token)])?,
            true,
        ),
        (
            "manifests/bootstrap-rbac.yaml",
            yaml("the bootstrap RBAC", &rbac_manifests())?,
            false,
        ),
        (
            "manifests/coredns-rbac.yaml",
            yaml("the cluster DNS's RBAC", &coredns_rbac_manifests())?,
            false,
        ),
        ("README", readme(spec), false),
    ])
}

fn readme(spec: &PkiSpec) -> String {
    format!(
        "The PKI of the lab cluster {:?} (API server {}), written by the harness\n\
         (harness/src/controlplane/pki.rs). Generated once per lab; keys are 0600.\n",
        spec.cluster_name, spec.server_url
    )
}

fn write_tree(root: &Path, files: &Files) -> Result<(), PkiError> {
    fs::create_dir_all(root.join("manifests")).map_err(io_err(root))?;
    for dir in [root.to_path_buf(), root.join("manifests")] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io_err(&dir))?;
    }
    for (name, contents, secret) in files {
        write_file(&root.join(name), contents, *secret)?;
    }
    Ok(())
}

/// Writes a new file, 0600 when it holds a secret, else 0644 (the mode is set at creation).
fn write_file(path: &Path, contents: &str, secret: bool) -> Result<(), PkiError> {
    let mode = if secret { 0o600 } else { 0o644 };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(io_err(path))?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err(path))?;
    file.write_all(contents.as_bytes()).map_err(io_err(path))?;
    file.sync_all().map_err(io_err(path))
}

/// What a leaf certificate is for.
#[derive(Clone, Copy)]
enum Usage {
    Server,
    Client,
}

/// A certificate and its key, both PEM.
struct Issued {
    cert_pem: String,
    key_pem: String,
}

impl Issued {
    fn credentials(self) -> Credentials {
        Credentials::ClientCert {
            cert_pem: self.cert_pem,
            key_pem: self.key_pem,
        }
    }
}

fn generate_err(what: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |source| PkiError::Generate {
        what: what.to_string(),
        source,
    }
}

fn new_key(what: &str) -> Result<KeyPair, PkiError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(generate_err(what))
}

/// A random positive 128-bit serial number.
fn serial() -> Result<SerialNumber, PkiError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

fn name(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(org) = org {
        dn.push(DnType::OrganizationName, org);
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn new_ca(
    cn: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertifiedIssuer<'static, KeyPair>, PkiError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(cn, None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.serial_number = Some(serial()?);
    (params.not_before, params.not_after) = (not_before, not_after);
    let what = format!("the {cn} CA");
    CertifiedIssuer::self_signed(params, new_key(&what)?).map_err(generate_err(&what))
}

fn leaf_params(
    cn: &str,
    org: Option<&str>,
    usage: Usage,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(cn, org);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![match usage {
        Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
        Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(serial()?);
    (params.not_before, params.not_after) = (not_before, not_after);
    Ok(params)
}

fn spec_sans(spec: &PkiSpec) -> Result<Vec<SanType>, PkiError> {
    let mut sans = Vec::new();
    for dns in &spec.apiserver_names {
        let ia5 = dns
            .clone()
            .try_into()
            .map_err(generate_err("the API server's DNS names"))?;
        sans.push(SanType::DnsName(ia5));
    }
    sans.extend(spec.apiserver_ips.iter().copied().map(SanType::IpAddress));
    Ok(sans)
}

fn issue(params: &CertificateParams, issuer: &Issuer<'_, KeyPair>, cn: &str) -> Result<Issued, PkiError> {
    let what = format!("the {cn} certificate");
    let key = new_key(&what)?;
    let cert = params.signed_by(&key, issuer).map_err(generate_err(&what))?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
#[path = "pki_tests.rs"]
mod tests;
