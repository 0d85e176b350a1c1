//! `harness::artifacts::publish` on a real lab: every artifact a node needs is fetched from the
//! lab's artifact server by the agent's own artifact code (inside the lab's namespace, as a VM
//! would) and verifies against what the cache built; the offline bundle alone resolves every
//! one of them; a missing build fails at once naming `harness images build`.
//!
//! Needs root (network namespaces) and the builds of `harness images build` in the lab cache;
//! no VM.

use std::fs;
use std::path::{Path, PathBuf};

use agent::artifact::pinned::{self, PinnedRequest};
use agent::artifact::source::{ArtifactSpec, COREDNS, KUBECTL, KUBELET, resolve_online};
use agent::artifact::{FetchOptions, Fetcher, Resolved, checksum, offline};
use harness::artifacts::{LabArtifacts, publish};
use harness::cache::Cache;
use harness::images::{coredns, kind_node, kubernetes, oci, rootfs};
use harness::lab::{Lab, LabSpec};
use harness::netns;

fn start(test: &str) -> Lab {
    Lab::start(LabSpec::for_test(test)).unwrap_or_else(|e| panic!("starting a lab for {test}: {e}"))
}

fn cache() -> Cache {
    Cache::open().expect("the lab cache directory")
}

fn published(lab: &Lab) -> LabArtifacts {
    publish(lab, &cache()).unwrap_or_else(|e| panic!("{e}"))
}

/// What one fetch gave: the source address, its sha256 and the installed file's sha256.
#[derive(Debug)]
struct Fetched {
    source: String,
    source_sha256: String,
    sha256: String,
}

/// A binary artifact through the agent's whole pipeline (sidecar, download, digest, extract, install).
fn install(spec: &ArtifactSpec, resolved: &Resolved, dest: &Path) -> Result<Fetched, String> {
    let fetcher = Fetcher::new(FetchOptions::default());
    let installed = agent::artifact::fetch_verify_install(spec, resolved, dest, &fetcher, &|_| Ok(()))
        .map_err(|e| format!("{}: {e}", spec.name))?;
    Ok(Fetched {
        source: installed.source,
        source_sha256: installed.source_sha256,
        sha256: installed.sha256,
    })
}

/// A file artifact pinned by digest (rootfs, OCI archive) through the agent's `pinned` code,
/// online (`bundle` `None`) or from the offline bundle; its `.sha256` sidecar must agree.
fn download(request: &PinnedRequest, bundle: Option<&Path>, dest: &Path) -> Result<Fetched, String> {
    let fetcher = Fetcher::new(FetchOptions::default());
    let what = |e: agent::artifact::ArtifactError| format!("{}: {e}", request.field);
    let resolved = request.resolve(bundle, "amd64").map_err(what)?;
    let unpinned = PinnedRequest {
        sha256: None,
        ..request.clone()
    };
    let sidecar =
        agent::artifact::expected_sha256(&unpinned.resolve(bundle, "amd64").map_err(what)?, &fetcher)
            .map_err(what)?;
    if Some(&sidecar) != request.sha256.as_ref() {
        return Err(format!(
            "{}: pinned {:?} but its .sha256 says {sidecar}",
            request.field, request.sha256
        ));
    }
    let installed =
        pinned::install_data_file(&request.name, &resolved, dest, 0o644, &fetcher).map_err(what)?;
    let actual = checksum::sha256_file(dest).map_err(|e| e.to_string())?;
    Ok(Fetched {
        source: installed.source,
        source_sha256: installed.source_sha256,
        sha256: actual,
    })
}

/// The pinned requests the node config's `MachineImage` and `ContainerImages` give.
fn pinned_requests(artifacts: &LabArtifacts) -> Vec<PinnedRequest> {
    let machine = &artifacts.machine_image;
    let mut requests = vec![PinnedRequest::machine_image(
        machine.url.as_deref().unwrap_or_default(),
        machine.sha256.as_deref().unwrap_or_default(),
    )];
    for (i, image) in artifacts.container_images.iter().enumerate() {
        requests.push(PinnedRequest::container_image(
            i,
            image.reference.as_deref().unwrap_or_default(),
            image.url.as_deref(),
            image.sha256.as_deref(),
            "amd64",
        ));
    }
    requests
}

/// Everything the agent would fetch online, fetched from inside the lab's namespace.
fn fetch_all(artifacts: &LabArtifacts, dir: &Path) -> Result<Vec<(String, Fetched)>, String> {
    let downloads = &artifacts.downloads;
    let mut out = Vec::new();
    let coredns =
        resolve_online(&COREDNS, downloads.core_dns.as_ref(), None, "amd64").map_err(|e| e.to_string())?;
    out.push((
        "coredns".into(),
        install(&COREDNS, &coredns, &dir.join("coredns"))?,
    ));
    for spec in [KUBELET, KUBECTL] {
        let resolved =
            resolve_online(&spec, downloads.kubernetes.as_ref(), None, "amd64").map_err(|e| e.to_string())?;
        out.push((spec.name.into(), install(&spec, &resolved, &dir.join(spec.name))?));
    }
    for (i, request) in pinned_requests(artifacts).iter().enumerate() {
        let fetched = download(request, None, &dir.join(format!("pinned-{i}")))?;
        out.push((request.name.clone(), fetched));
    }
    Ok(out)
}

/// The sha256 of a cache file, as its `.sha256` sidecar says.
fn sidecar_hex(path: &Path) -> String {
    let mut os = path.as_os_str().to_owned();
    os.push(".sha256");
    let text = fs::read_to_string(PathBuf::from(os)).unwrap();
    text.split_whitespace().next().unwrap().to_string()
}

#[test]
fn every_published_artifact_is_fetched_by_the_agent_over_the_lab_server_and_verifies() {
    let lab = start("every_published_artifact_is_fetched_by_the_agent_over_the_lab_server_and_verifies");
    let artifacts = published(&lab);
    let cache = cache();
    let (c, k, r, images, kind_node) = (
        coredns::require(&cache).unwrap(),
        kubernetes::require(&cache).unwrap(),
        rootfs::require(&cache).unwrap(),
        oci::require(&cache).unwrap(),
        kind_node::require(&cache).unwrap(),
    );
    let base = lab.addrs().http_url();
    assert_eq!(artifacts.base_url, base);
    assert_eq!(
        artifacts
            .container_images
            .iter()
            .map(|i| i.reference.clone().unwrap())
            .collect::<Vec<_>>(),
        [
            oci::PAUSE_REF,
            oci::TEST_IMAGE_REF,
            &format!("registry.k8s.io/kube-proxy:v{}", k.version)
        ]
    );
    assert_eq!(artifacts.pause_ref, oci::PAUSE_REF);

    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_path_buf();
    let for_thread = artifacts.clone();
    let fetched = netns::in_netns(&lab.name(), move || Ok(fetch_all(&for_thread, &dir)))
        .unwrap()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let fetched: std::collections::BTreeMap<String, Fetched> = fetched.into_iter().collect();

    let cd = &fetched["coredns"];
    let v = &c.version;
    assert_eq!(
        cd.source,
        format!("{base}/coredns/v{v}/coredns_{v}_linux_amd64.tgz")
    );
    assert_eq!(
        (cd.source_sha256.as_str(), cd.sha256.as_str()),
        (c.tarball_sha256.as_str(), c.binary_sha256.as_str())
    );
    for spec in kubernetes::NODE_BINARIES {
        let got = &fetched[spec.name];
        assert_eq!(
            got.source,
            format!("{base}/kubernetes/v{}/bin/linux/amd64/{}", k.version, spec.name)
        );
        assert_eq!(got.sha256, sidecar_hex(&k.offline_binary(&spec)), "{}", spec.name);
    }
    assert_eq!(fetched["rootfs"].sha256, r.sha256);
    assert_eq!(fetched["rootfs"].source, format!("{base}/rootfs/rootfs.tar.gz"));
    for image in images.manifest.images.iter().chain([&kind_node.kube_proxy]) {
        let got = &fetched[&image.reference];
        assert_eq!(got.sha256, image.sha256, "{}", image.reference);
        assert_eq!(got.source, format!("{base}/{}", image.file));
    }
    let requests = lab.http().requests();
    assert!(!requests.is_empty());
    let failed: Vec<_> = requests.iter().filter(|r| r.status != 200).collect();
    assert!(failed.is_empty(), "requests that did not get 200: {failed:?}");
    lab.shutdown().unwrap();
}

#[test]
fn offline_bundle_alone_holds_every_artifact_the_node_config_names() {
    let lab = start("offline_bundle_alone_holds_every_artifact_the_node_config_names");
    let artifacts = published(&lab);
    lab.shutdown().unwrap();
    let bundle = artifacts.offline_bundle_dir();
    let k8s_version = artifacts.kubernetes_version.clone();
    let work = tempfile::tempdir().unwrap();
    for (spec, wanted) in [
        (COREDNS, artifacts.coredns_version.clone()),
        (KUBELET, k8s_version.clone()),
        (KUBECTL, k8s_version.clone()),
    ] {
        let resolved = offline::resolve_offline(&spec, bundle, Some(&wanted), "amd64").unwrap();
        let got = install(&spec, &resolved, &work.path().join(spec.name)).unwrap();
        assert_eq!(
            got.sha256, got.source_sha256,
            "{}: a bare binary in the bundle",
            spec.name
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(bundle.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["versions"]["pause"], "3.10.1");
    assert_eq!(
        manifest["versions"]["kube-proxy"],
        format!("v{}", artifacts.kubernetes_version)
    );
    // The files the online config names resolve in the bundle alone (docs/design.md §4 paths).
    for (i, request) in pinned_requests(&artifacts).iter().enumerate() {
        let got = download(request, Some(bundle), &work.path().join(format!("pinned-{i}"))).unwrap();
        assert_eq!(Some(&got.sha256), request.sha256.as_ref(), "{}", request.field);
        assert!(
            got.source.starts_with(&bundle.display().to_string()),
            "{}",
            got.source
        );
    }
    let machine = &artifacts.machine_image;
    let name = machine.url.as_deref().unwrap().rsplit('/').next().unwrap();
    assert_eq!(manifest["machineImage"]["File"], format!("rootfs/{name}"));
    assert_eq!(
        manifest["machineImage"]["SHA256"],
        machine.sha256.clone().unwrap()
    );
    for (i, image) in artifacts.container_images.iter().enumerate() {
        assert_eq!(
            manifest["containerImages"][i]["Ref"],
            image.reference.clone().unwrap()
        );
        assert_eq!(
            manifest["containerImages"][i]["SHA256"],
            image.sha256.clone().unwrap()
        );
    }
    // Shareable as it is: no symlink anywhere in it.
    let mut stack = vec![bundle.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            assert!(!kind.is_symlink(), "{} is a symlink", entry.path().display());
            if kind.is_dir() {
                stack.push(entry.path());
            }
        }
    }
}

#[test]
fn publishing_from_a_cache_without_the_builds_names_harness_images_build() {
    let lab = start("publishing_from_a_cache_without_the_builds_names_harness_images_build");
    let empty = tempfile::tempdir().unwrap();
    let err = publish(&lab, &Cache::at(empty.path().to_path_buf()).unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("harness images build"), "{text}");
    assert!(text.contains("OCI images"), "{text}");
    assert_eq!(
        fs::read_dir(lab.http().root()).unwrap().count(),
        0,
        "nothing is published when a build is missing"
    );
    lab.shutdown().unwrap();
}
