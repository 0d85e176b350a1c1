//! Reading an artifact's bytes: HTTP(S) with bounded retries, backoff and
//! timeouts (rustls only), or a local file; always bounded in size.
//!
//! Blocking by design (installs run from the CLI and from reconcile steps);
//! async callers use `tokio::task::spawn_blocking`.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::blocking::Client;

use super::ArtifactError;
use super::error::io_err;
use super::source::Location;

/// The most a checksum sidecar may hold.
pub const SIDECAR_LIMIT: u64 = 64 * 1024;

/// Retry, timeout and size limits of a [`Fetcher`].
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Tries per address, including the first (at least 1).
    pub attempts: u32,
    /// Wait before the second try; doubled each time, capped by `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub connect_timeout: Duration,
    /// Whole-request deadline of one attempt, body included.
    pub timeout: Duration,
    /// Largest payload accepted (download and extracted member).
    pub max_bytes: u64,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(600),
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// A sink that can be emptied before a retry.
pub trait Restart: Write {
    fn restart(&mut self) -> io::Result<()>;
}

impl Restart for File {
    fn restart(&mut self) -> io::Result<()> {
        self.set_len(0)?;
        self.rewind()
    }
}

impl Restart for Vec<u8> {
    fn restart(&mut self) -> io::Result<()> {
        self.clear();
        Ok(())
    }
}

/// Reads locations; one HTTP client, built on first use.
pub struct Fetcher {
    options: FetchOptions,
    client: OnceLock<Result<Client, String>>,
}

enum Attempt {
    Done(u64),
    Retry(ArtifactError),
    Fail(ArtifactError),
}

impl Fetcher {
    pub fn new(options: FetchOptions) -> Fetcher {
        Fetcher {
            options,
            client: OnceLock::new(),
        }
    }

    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// Copies `location` into `sink` (emptied first), at most `limit` bytes.
    pub fn fetch_into(
        &self,
        location: &Location,
        sink: &mut dyn Restart,
        limit: u64,
    ) -> Result<u64, ArtifactError> {
        match location {
            Location::File(path) => {
                let mut file = File::open(path).map_err(io_err("read", path))?;
                let len = file.metadata().map_err(io_err("read", path))?.len();
                if len > limit {
                    return Err(too_large(location, limit));
                }
                sink.restart().map_err(io_err("write download of", path))?;
                let copied =
                    io::copy(&mut (&mut file).take(limit + 1), sink).map_err(io_err("read", path))?;
                if copied > limit {
                    return Err(too_large(location, limit));
                }
                Ok(copied)
            }
            Location::Http(url) => self.fetch_http(url.as_str(), sink, limit),
        }
    }

    /// The whole (small) content of `location`.
    pub fn fetch_small(&self, location: &Location, limit: u64) -> Result<Vec<u8>, ArtifactError> {
        let mut buf = Vec::new();
        self.fetch_into(location, &mut buf, limit)?;
        Ok(buf)
    }

    fn client(&self, url: &str) -> Result<&Client, ArtifactError> {
        let client = self.client.get_or_init(|| {
            // rustls with ring; reqwest is built without a default provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
            Client::builder()
                .connect_timeout(self.options.connect_timeout)
                .timeout(self.options.timeout)
                .user_agent(concat!("unbounded-agent/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::custom(
                    |attempt| match redirect_refusal(attempt.previous(), attempt.url()) {
                        Some(reason) => attempt.error(reason),
                        None => attempt.follow(),
                    },
                ))
                .build()
                .map_err(|e| crate::error_chain::chain(&e))
        });
        client.as_ref().map_err(|reason| ArtifactError::Transport {
            url: url.to_string(),
            reason: format!("cannot build the HTTP client: {reason}"),
            attempts: 0,
        })
    }

    fn fetch_http(&self, url: &str, sink: &mut dyn Restart, limit: u64) -> Result<u64, ArtifactError> {
        let client = self.client(url)?;
        let attempts = self.options.attempts.max(1);
        let mut backoff = self.options.initial_backoff;
        let mut attempt = 1;
        loop {
            let outcome = self.attempt(client, url, sink, limit, attempt);
            match outcome {
                Attempt::Done(n) => return Ok(n),
                Attempt::Fail(err) => return Err(err),
                Attempt::Retry(err) if attempt >= attempts => return Err(err),
                Attempt::Retry(err) => {
                    tracing::warn!(%url, attempt, error = %err, "download failed; retrying in {backoff:?}");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(self.options.max_backoff);
                    attempt += 1;
                }
            }
        }
    }

    fn attempt(
        &self,
        client: &Client,
        url: &str,
        sink: &mut dyn Restart,
        limit: u64,
        attempts: u32,
    ) -> Attempt {
        let transport = |reason: String| ArtifactError::Transport {
            url: url.to_string(),
            reason,
            attempts,
        };
        let mut response = match client.get(url).send() {
            Ok(response) => response,
            // A refused redirect is the same on every try.
            Err(e) if e.is_redirect() => return Attempt::Fail(transport(crate::error_chain::chain(&e))),
            Err(e) => return Attempt::Retry(transport(crate::error_chain::chain(&e))),
        };
        let status = response.status();
        if !status.is_success() {
            let err = ArtifactError::HttpStatus {
                url: url.to_string(),
                status: status.as_u16(),
                attempts,
            };
            let transient = status.is_server_error() || matches!(status.as_u16(), 408 | 429);
            return if transient {
                Attempt::Retry(err)
            } else {
                Attempt::Fail(err)
            };
        }
        let expected = response.content_length();
        if expected.is_some_and(|n| n > limit) {
            return Attempt::Fail(too_large_url(url, limit));
        }
        if let Err(e) = sink.restart() {
            return Attempt::Fail(transport(format!("cannot reset the download file: {e}")));
        }
        let mut got = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match response.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    return Attempt::Retry(match expected {
                        Some(expected) if got < expected => ArtifactError::Truncated {
                            url: url.to_string(),
                            got,
                            expected,
                            attempts,
                        },
                        _ => transport(crate::error_chain::chain(&e)),
                    });
                }
            };
            got += n as u64;
            if got > limit {
                return Attempt::Fail(too_large_url(url, limit));
            }
            if let Err(e) = sink.write_all(&buf[..n]) {
                return Attempt::Fail(transport(format!("cannot write the download: {e}")));
            }
        }
        match expected {
            Some(expected) if got != expected => Attempt::Retry(ArtifactError::Truncated {
                url: url.to_string(),
                got,
                expected,
                attempts,
            }),
            _ => Attempt::Done(got),
        }
    }
}

fn too_large(location: &Location, limit: u64) -> ArtifactError {
    ArtifactError::TooLarge {
        what: location.to_string(),
        limit,
    }
}

fn too_large_url(url: &str, limit: u64) -> ArtifactError {
    ArtifactError::TooLarge {
        what: url.to_string(),
        limit,
    }
}

/// Most redirects one download follows.
const MAX_REDIRECTS: usize = 10;

/// Why the redirect to `next` is not followed, after the addresses `previous` (the first is the
/// one asked for): past [`MAX_REDIRECTS`], or from https to plain http at any hop — a source that
/// says https is fetched over TLS all the way (only an `http://` source, which says `AllowHTTP`,
/// travels in the clear).
fn redirect_refusal(previous: &[url::Url], next: &url::Url) -> Option<String> {
    if previous.len() > MAX_REDIRECTS {
        return Some(format!("more than {MAX_REDIRECTS} redirects"));
    }
    let was_tls = previous.iter().any(|u| u.scheme() == "https");
    (was_tls && next.scheme() != "https").then(|| {
        format!(
            "redirected from https to {next} ({}:// is not followed after https)",
            next.scheme()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_file_is_copied_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        std::fs::write(&path, b"0123456789").unwrap();
        let fetcher = Fetcher::new(FetchOptions::default());
        let location = Location::File(path.clone());
        assert_eq!(fetcher.fetch_small(&location, 10).unwrap(), b"0123456789");
        let err = fetcher.fetch_small(&location, 9).unwrap_err();
        assert!(matches!(err, ArtifactError::TooLarge { limit: 9, .. }), "{err}");
    }

    #[test]
    fn a_redirect_from_https_to_http_is_refused_at_any_hop_and_the_count_is_bounded() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        let secure = u("https://mirror.example/coredns.tgz");
        let plain = u("http://cache.example/coredns.tgz");
        let err = redirect_refusal(std::slice::from_ref(&secure), &plain).unwrap();
        assert!(
            err.contains("redirected from https to http://cache.example/coredns.tgz"),
            "{err}"
        );
        // Through another https hop first, still refused.
        let hop = u("https://cdn.example/x");
        assert!(redirect_refusal(&[secure.clone(), hop], &plain).is_some());
        // https → https, and an http source (which said AllowHTTP) to either, are followed.
        assert_eq!(
            redirect_refusal(std::slice::from_ref(&secure), &u("https://cdn.example/y")),
            None
        );
        assert_eq!(redirect_refusal(std::slice::from_ref(&plain), &secure), None);
        assert_eq!(
            redirect_refusal(std::slice::from_ref(&plain), &u("http://other/z")),
            None
        );
        let many = vec![secure.clone(); MAX_REDIRECTS + 1];
        assert_eq!(
            redirect_refusal(&many, &secure).as_deref(),
            Some("more than 10 redirects")
        );
        assert_eq!(redirect_refusal(&many[..MAX_REDIRECTS], &secure), None);
    }

    #[test]
    fn missing_local_file_names_the_path() {
        let fetcher = Fetcher::new(FetchOptions::default());
        let err = fetcher
            .fetch_small(&Location::File("/nonexistent/coredns".into()), 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/coredns"), "{err}");
    }
}
