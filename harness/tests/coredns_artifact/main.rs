//! The agent's artifact code against the real CoreDNS artifact built by
//! `harness images build` (`harness::images::coredns`), served by a real HTTP
//! server on 127.0.0.1: every accepted source, and every refusal leaving the
//! machine rootfs as it was.

mod fixtures;
mod server;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::artifact::ArtifactError;
use agent::artifact::coredns::Request;
use agent::artifact::plugins::required_plugins;
use agent::preflight::Severity;
use fixtures::{Rootfs, artifact, crafted_tarball, fetcher, offline, online, sidecar};
use server::{Reply, Server};
use tar::EntryType;

/// A server answering every path from files under `root`.
fn serve_dir(root: PathBuf) -> Server {
    Server::start(move |path| Reply::File(root.join(path.trim_start_matches('/'))))
}

fn tarball_path(version: &str) -> String {
    format!("/v{version}/coredns_{version}_linux_amd64.tgz")
}

// ---- the artifact itself ------------------------------------------------------------------

#[test]
fn built_artifact_is_coredns_of_the_pinned_version_with_the_dns_plugins() {
    let a = artifact();
    let version = agent::exec::run_stdout(Command::new(&a.binary).arg("-version")).unwrap();
    assert_eq!(
        version.lines().next(),
        Some(format!("CoreDNS-{}", a.version).as_str()),
        "{version}"
    );
    let plugins = agent::exec::run_stdout(Command::new(&a.binary).arg("-plugins")).unwrap();
    let listed = agent::artifact::plugins::parse_plugin_list(&plugins);
    for plugin in required_plugins(&["health".into(), "log".into()]) {
        assert!(
            listed.contains(&plugin),
            "`coredns -plugins` does not list {plugin}:\n{plugins}"
        );
    }
    // The node's build has the recipe's plugins, not the Kubernetes backend; the cluster DNS's has it.
    let recipe = harness::images::coredns::Recipe::pinned().unwrap();
    for plugin in &recipe.plugins {
        assert!(listed.contains(plugin.as_str()), "no {plugin} in:\n{plugins}");
    }
    assert!(!listed.contains("kubernetes"), "{plugins}");
    let cluster = agent::exec::run_stdout(Command::new(&a.cluster_binary).arg("-plugins")).unwrap();
    let cluster_listed = agent::artifact::plugins::parse_plugin_list(&cluster);
    assert!(cluster_listed.contains("kubernetes"), "{cluster}");
    assert!(listed.is_subset(&cluster_listed), "{plugins}\nagainst\n{cluster}");
    let manifest: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(a.offline_bundle.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["versions"]["coredns"], a.version.as_str());
    let sidecar_text = fs::read_to_string(&a.tarball_sidecar).unwrap();
    assert_eq!(
        sidecar_text,
        format!("{}  coredns_{}_linux_amd64.tgz\n", a.tarball_sha256, a.version)
    );
    assert!(
        a.release_root
            .join(tarball_path(&a.version).trim_start_matches('/'))
            .is_file()
    );
}

// ---- accepted sources ---------------------------------------------------------------------

#[test]
fn base_url_fetches_the_upstream_tarball_layout_and_replaces_an_old_binary() {
    let a = artifact();
    let server = serve_dir(a.release_root.clone());
    let rootfs = Rootfs::with_existing_binary();
    let installed = rootfs.install(&online(None, Some(server.url("/")))).unwrap();
    rootfs.assert_installed(&installed, &a);
    assert_eq!(installed.source, server.url(&tarball_path(&a.version)));
    assert_eq!(installed.source_sha256, a.tarball_sha256);
    assert_eq!(server.count(&tarball_path(&a.version)), 1);
    assert_eq!(server.count(&format!("{}.sha256", tarball_path(&a.version))), 1);
}

#[test]
fn url_override_replaces_version_and_arch_placeholders() {
    let a = artifact();
    let (tarball, version) = (a.tarball.clone(), a.version.clone());
    let server = Server::start(move |path| match path {
        p if p == format!("/mirror/{version}/coredns-amd64.tgz") => Reply::File(tarball.clone()),
        p if p == format!("/mirror/{version}/coredns-amd64.tgz.sha256") => Reply::File(sidecar(&tarball)),
        _ => Reply::Status(404),
    });
    let rootfs = Rootfs::empty();
    let url = server.url("/mirror/{version}/coredns-{arch}.tgz");
    let installed = rootfs.install(&online(Some(url), None)).unwrap();
    rootfs.assert_installed(&installed, &a);
    assert_eq!(
        installed.source,
        server.url(&format!("/mirror/{}/coredns-amd64.tgz", a.version))
    );
}

#[test]
fn tar_gz_suffix_is_an_archive_too() {
    let a = artifact();
    let tarball = a.tarball.clone();
    let server = Server::start(move |path| match path {
        "/dl/coredns.tar.gz" => Reply::File(tarball.clone()),
        "/dl/coredns.tar.gz.sha256" => Reply::File(sidecar(&tarball)),
        _ => Reply::Status(404),
    });
    let rootfs = Rootfs::empty();
    let installed = rootfs
        .install(&online(Some(server.url("/dl/coredns.tar.gz")), None))
        .unwrap();
    rootfs.assert_installed(&installed, &a);
}

#[test]
fn bare_binary_url_is_installed_as_is() {
    let a = artifact();
    let binary = a.binary.clone();
    let server = Server::start(move |path| match path {
        // A query mentioning `.tgz` does not make it an archive.
        "/bin/coredns" => Reply::File(binary.clone()),
        "/bin/coredns.sha256" => Reply::File(sidecar(&binary)),
        _ => Reply::Status(404),
    });
    let rootfs = Rootfs::with_existing_binary();
    let installed = rootfs
        .install(&online(Some(server.url("/bin/coredns?as=x.tgz")), None))
        .unwrap();
    rootfs.assert_installed(&installed, &a);
    assert_eq!(installed.source_sha256, a.binary_sha256);
}

#[test]
fn file_url_and_absolute_path_install_from_disk() {
    let a = artifact();
    let rootfs = Rootfs::empty();
    let file_url = format!("file://{}", a.tarball.display());
    let installed = rootfs.install(&online(Some(file_url), None)).unwrap();
    rootfs.assert_installed(&installed, &a);
    let rootfs = Rootfs::with_existing_binary();
    let installed = rootfs
        .install(&online(Some(a.binary.display().to_string()), None))
        .unwrap();
    rootfs.assert_installed(&installed, &a);
}

#[test]
fn offline_bundle_installs_and_never_touches_the_network() {
    let a = artifact();
    let server = serve_dir(a.release_root.clone());
    let rootfs = Rootfs::with_existing_binary();
    let request = Request {
        download: online(None, Some(server.url("/"))).download,
        ..offline(&a.offline_bundle)
    };
    let installed = rootfs.install(&request).unwrap();
    rootfs.assert_installed(&installed, &a);
    assert_eq!(installed.bundle.as_deref(), Some(a.offline_bundle.as_path()));
    assert_eq!(server.total(), 0, "an offline install made HTTP requests");
}

// ---- an install already there ------------------------------------------------------------

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().ino()
}

#[test]
fn the_same_source_again_keeps_the_binary_and_fetches_only_its_sidecar() {
    let a = artifact();
    let server = serve_dir(a.release_root.clone());
    let request = online(None, Some(server.url("/")));
    let rootfs = Rootfs::with_existing_binary();
    let first = rootfs.install_or_keep(&request).unwrap();
    assert!(first.changed);
    rootfs.assert_installed(&first.installed, &a);
    let record = rootfs.record().expect("an install leaves its record");
    assert_eq!(record.sha256, a.binary_sha256);
    assert_eq!(record.source_sha256, a.tarball_sha256);
    assert_eq!(record.version, a.version);
    for plugin in required_plugins(&["health".into(), "hosts".into()]) {
        assert!(
            record.plugins.contains(&plugin),
            "{plugin} not recorded: {record:?}"
        );
    }
    let written = inode(&rootfs.binary());

    let again = rootfs.install_or_keep(&request).unwrap();
    assert!(!again.changed, "the same install was done again");
    assert_eq!(again.installed, first.installed);
    assert_eq!(again.record, first.record);
    assert_eq!(inode(&rootfs.binary()), written, "the binary was replaced");
    assert_eq!(
        server.count(&tarball_path(&a.version)),
        1,
        "the tarball was fetched again"
    );
    assert_eq!(server.count(&format!("{}.sha256", tarball_path(&a.version))), 2);

    // More plugins required, all of them listed when it was installed: still kept.
    let mut more = request.clone();
    more.required_plugins = required_plugins(&["hosts".into()]);
    assert!(!rootfs.install_or_keep(&more).unwrap().changed);
    assert_eq!(server.count(&tarball_path(&a.version)), 1);
}

#[test]
fn the_binary_is_installed_again_when_it_was_changed_or_the_source_is_another() {
    let a = artifact();
    let server = serve_dir(a.release_root.clone());
    let request = online(None, Some(server.url("/")));
    let rootfs = Rootfs::empty();
    assert!(rootfs.install_or_keep(&request).unwrap().changed);

    // Someone changed the binary: the record no longer names it.
    fs::write(rootfs.binary(), fixtures::OLD_BINARY).unwrap();
    let done = rootfs.install_or_keep(&request).unwrap();
    assert!(done.changed);
    rootfs.assert_installed(&done.installed, &a);
    assert_eq!(server.count(&tarball_path(&a.version)), 2);

    // The same binary in another tarball (another digest): fetched and installed from it.
    let work = tempfile::tempdir().unwrap();
    let binary = fs::read(&a.binary).unwrap();
    let repacked = crafted_tarball(
        work.path(),
        "coredns.tgz",
        &[("coredns", EntryType::Regular, binary.as_slice())],
    );
    let repacked_sha256 = agent::artifact::checksum::sha256_file(&repacked).unwrap();
    assert_ne!(repacked_sha256, a.tarball_sha256);
    let done = rootfs
        .install_or_keep(&online(Some(repacked.display().to_string()), None))
        .unwrap();
    assert!(done.changed);
    rootfs.assert_installed(&done.installed, &a);
    assert_eq!(rootfs.record().unwrap().source_sha256, repacked_sha256);
}

#[test]
fn a_plugin_the_kept_binary_lacks_is_refused_and_changes_nothing() {
    let a = artifact();
    let rootfs = Rootfs::empty();
    let mut request = online(Some(a.tarball.display().to_string()), None);
    rootfs.install_or_keep(&request).unwrap();
    let record = fs::read(agent::artifact::coredns_record::record_path(rootfs.path())).unwrap();
    let written = inode(&rootfs.binary());
    request.required_plugins = required_plugins(&["alternate".into()]);
    let err = rootfs.install_or_keep(&request).unwrap_err();
    assert_eq!(
        err.to_string(),
        "CoreDNS binary is missing required plugin \"alternate\""
    );
    assert_eq!(inode(&rootfs.binary()), written, "the binary was replaced");
    assert_eq!(
        fs::read(agent::artifact::coredns_record::record_path(rootfs.path())).unwrap(),
        record
    );
    let names: Vec<_> = fs::read_dir(rootfs.binary().parent().unwrap()).unwrap().collect();
    assert_eq!(names.len(), 1, "temporary files left beside the binary");
}

// ---- refusals: message, and nothing changed ----------------------------------------------

/// Serves the real release directory, with `overrides` taking precedence.
fn release_server(overrides: impl Fn(&str) -> Option<Reply> + Send + Sync + 'static) -> Server {
    let root = artifact().release_root;
    Server::start(move |path| {
        overrides(path).unwrap_or_else(|| Reply::File(root.join(path.trim_start_matches('/'))))
    })
}

fn refused(rootfs: &Rootfs, request: &Request) -> String {
    let err = rootfs
        .install(request)
        .expect_err("the install should have been refused");
    rootfs.assert_untouched();
    err.to_string()
}

#[test]
fn checksum_mismatch_is_refused() {
    let version = artifact().version;
    let wrong = format!("{}  coredns_{version}_linux_amd64.tgz\n", "0".repeat(64));
    let server = release_server(move |p| {
        p.ends_with(".sha256")
            .then(|| Reply::Bytes(wrong.clone().into_bytes()))
    });
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(None, Some(server.url(""))));
    assert!(
        err.contains("checksum mismatch") && err.contains(&"0".repeat(64)),
        "{err}"
    );
}

/// `request` with `Downloads.CoreDNS.SHA256.coredns` pinned to `pin`.
fn pinned(mut request: Request, pin: &str) -> Request {
    request.download.sha256 = Some([("coredns".to_owned(), pin.to_owned())].into());
    request
}

/// The server's sidecar matches its tarball, as a hostile mirror's would: a pin that the tarball
/// does not match is refused all the same, and the sidecar is never asked for.
#[test]
fn a_pinned_digest_replaces_the_sidecar_and_a_mismatch_is_refused_though_the_sidecar_matches() {
    let a = artifact();
    let server = serve_dir(a.release_root.clone());
    let sidecar_path = format!("{}.sha256", tarball_path(&a.version));
    let rootfs = Rootfs::with_existing_binary();
    let wrong = "1".repeat(64);
    let err = refused(&rootfs, &pinned(online(None, Some(server.url("/"))), &wrong));
    assert!(err.contains("checksum mismatch") && err.contains(&wrong), "{err}");
    let installed = rootfs
        .install(&pinned(
            online(None, Some(server.url("/"))),
            &a.tarball_sha256.to_uppercase(),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    rootfs.assert_installed(&installed, &a);
    assert_eq!(installed.source_sha256, a.tarball_sha256);
    assert_eq!(
        server.count(&sidecar_path),
        0,
        "a pinned download fetched its sidecar"
    );
}

/// The bundle holds the bare binary: the pin is its digest.
#[test]
fn a_pinned_digest_is_checked_from_the_offline_bundle_too() {
    let a = artifact();
    let rootfs = Rootfs::with_existing_binary();
    let wrong = "2".repeat(64);
    let err = refused(&rootfs, &pinned(offline(&a.offline_bundle), &wrong));
    assert!(err.contains("checksum mismatch") && err.contains(&wrong), "{err}");
    let installed = rootfs
        .install(&pinned(offline(&a.offline_bundle), &a.binary_sha256))
        .unwrap_or_else(|e| panic!("{e}"));
    rootfs.assert_installed(&installed, &a);
}

#[test]
fn missing_sidecar_is_refused_before_the_download() {
    let server = release_server(|p| p.ends_with(".sha256").then_some(Reply::Status(404)));
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(None, Some(server.url(""))));
    assert!(
        err.contains("checksum sidecar") && err.contains("is missing") && err.contains("404"),
        "{err}"
    );
    assert_eq!(server.count(&tarball_path(&artifact().version)), 0);
}

#[test]
fn not_found_is_refused_without_retrying() {
    let server = release_server(|p| p.ends_with(".tgz").then_some(Reply::Status(404)));
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(None, Some(server.url(""))));
    assert!(err.contains("HTTP 404 (after 1 attempt)"), "{err}");
    assert_eq!(server.count(&tarball_path(&artifact().version)), 1);
}

#[test]
fn server_error_is_retried_a_bounded_number_of_times_then_refused() {
    let server = release_server(|p| p.ends_with(".tgz").then_some(Reply::Status(500)));
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(None, Some(server.url(""))));
    assert!(err.contains("HTTP 500 (after 3 attempts)"), "{err}");
    assert_eq!(server.count(&tarball_path(&artifact().version)), 3);
}

#[test]
fn truncated_body_is_retried_then_refused() {
    let tarball = artifact().tarball;
    let half = fs::metadata(&tarball).unwrap().len() / 2;
    let server = release_server(move |p| {
        p.ends_with(".tgz")
            .then(|| Reply::Truncated(tarball.clone(), half))
    });
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(None, Some(server.url(""))));
    assert!(
        err.contains("truncated download") && err.contains("(after 3 attempts)"),
        "{err}"
    );
    assert_eq!(server.count(&tarball_path(&artifact().version)), 3);
}

/// Serves a crafted tarball (with its correct sidecar) as the release tarball.
fn crafted_refusal(members: &[(&str, EntryType, &[u8])]) -> String {
    let work = tempfile::tempdir().unwrap();
    let name = format!("coredns_{}_linux_amd64.tgz", artifact().version);
    let tarball = crafted_tarball(work.path(), &name, members);
    let root = work.path().to_path_buf();
    let server = Server::start(move |p| Reply::File(root.join(Path::new(p).file_name().unwrap())));
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(None, Some(server.url(""))));
    assert!(tarball.exists());
    err
}

#[test]
fn tarball_member_climbing_out_is_refused() {
    let err = crafted_refusal(&[("../coredns", EntryType::Regular, b"#!/bin/sh\n")]);
    assert!(err.contains("\"../coredns\" climbs out"), "{err}");
}

#[test]
fn tarball_with_a_symlink_named_coredns_is_refused() {
    let err = crafted_refusal(&[("coredns", EntryType::Symlink, b"")]);
    assert!(err.contains("\"coredns\" is a symbolic link"), "{err}");
}

#[test]
fn tarball_with_two_members_is_refused() {
    let err = crafted_refusal(&[
        ("coredns", EntryType::Regular, b"#!/bin/sh\n"),
        ("README.md", EntryType::Regular, b"hi\n"),
    ]);
    assert!(
        err.contains("more than one member (\"coredns\" and \"README.md\")"),
        "{err}"
    );
}

#[test]
fn empty_tarball_is_refused() {
    let err = crafted_refusal(&[]);
    assert!(err.contains("holds no member"), "{err}");
}

#[test]
fn real_binary_lacking_a_configured_plugin_is_refused() {
    let a = artifact();
    let rootfs = Rootfs::with_existing_binary();
    let mut request = online(Some(a.tarball.display().to_string()), None);
    // `alternate` is an external plugin, not compiled into upstream CoreDNS.
    request.required_plugins = required_plugins(&["alternate".into()]);
    let err = refused(&rootfs, &request);
    assert_eq!(err, "CoreDNS binary is missing required plugin \"alternate\"");
}

#[test]
fn binary_missing_a_baseline_plugin_is_refused() {
    // STAND-IN: a shell script printing a plugin list without `whoami`. The real
    // CoreDNS build always has every baseline plugin, so it cannot produce this case.
    let work = tempfile::tempdir().unwrap();
    let stand_in = work.path().join("coredns");
    fs::write(
        &stand_in,
        "#!/bin/sh\ncase \"$1\" in\n-plugins) printf 'bind\\ncache\\nerrors\\nforward\\nloop\\nprometheus\\nready\\n' ;;\n\
         -version) echo CoreDNS-1.15.0 ;;\nesac\n",
    )
    .unwrap();
    harness::images::coredns::write_sidecar(&stand_in).unwrap();
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &online(Some(stand_in.display().to_string()), None));
    assert_eq!(err, "CoreDNS binary is missing required plugin \"whoami\"");
}

#[test]
fn offline_bundle_without_the_version_is_refused() {
    let a = artifact();
    let bundle = tempfile::tempdir().unwrap();
    fs::write(
        bundle.path().join("manifest.json"),
        r#"{"versions":{"kubernetes":"1.35.0"}}"#,
    )
    .unwrap();
    let rootfs = Rootfs::with_existing_binary();
    let err = refused(&rootfs, &offline(bundle.path()));
    assert!(err.contains("manifest.json has no versions.coredns"), "{err}");

    // The manifest names a version whose binary the bundle does not hold.
    fs::write(
        bundle.path().join("manifest.json"),
        r#"{"versions":{"coredns":"1.14.7"}}"#,
    )
    .unwrap();
    let err = refused(&rootfs, &offline(bundle.path()));
    assert!(
        err.contains("coredns/v1.14.7/bin/linux/amd64/coredns is not a file"),
        "{err}"
    );

    // The real bundle, asked for another version than it holds.
    let mut request = offline(&a.offline_bundle);
    request.download.version = Some("1.14.7".into());
    let err = refused(&rootfs, &request);
    assert!(err.contains("1.14.7 is configured"), "{err}");
}

#[test]
fn refused_install_into_a_fresh_rootfs_creates_nothing() {
    let server = release_server(|p| p.ends_with(".tgz").then_some(Reply::Status(404)));
    let rootfs = Rootfs::empty();
    assert!(matches!(
        rootfs.install(&online(None, Some(server.url("")))),
        Err(ArtifactError::HttpStatus { status: 404, .. })
    ));
    assert_eq!(
        fs::read_dir(rootfs.path()).unwrap().count(),
        0,
        "directories were left behind"
    );
}

// ---- preflight `localdns-artifact` ------------------------------------------------------

#[test]
fn preflight_finds_the_sidecar_online_and_the_bundle_offline() {
    let a = artifact();
    let server = serve_dir(a.release_root.clone());
    let finding = agent::preflight::artifact::check(&online(None, Some(server.url(""))), &fetcher());
    assert_eq!(finding.severity, Severity::Ok, "{finding:?}");
    assert_eq!(finding.target, server.url(&tarball_path(&a.version)));
    assert_eq!(
        server.count(&tarball_path(&a.version)),
        0,
        "preflight downloaded the binary"
    );
    let finding = agent::preflight::artifact::check(&offline(&a.offline_bundle), &fetcher());
    assert_eq!(finding.severity, Severity::Ok, "{finding:?}");
}

#[test]
fn preflight_reports_an_unreachable_or_absent_artifact() {
    let server = release_server(|p| p.ends_with(".sha256").then_some(Reply::Status(404)));
    let finding = agent::preflight::artifact::check(&online(None, Some(server.url(""))), &fetcher());
    assert_eq!(finding.severity, Severity::Error);
    assert!(
        finding.message.contains("checksum sidecar"),
        "{}",
        finding.message
    );
    let empty = tempfile::tempdir().unwrap();
    let finding = agent::preflight::artifact::check(&offline(empty.path()), &fetcher());
    assert_eq!(finding.severity, Severity::Error);
    assert!(finding.message.contains("manifest.json"), "{}", finding.message);
}
