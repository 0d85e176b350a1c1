//! The lab's artifact server: the files under one root directory over
//! HTTP/1.1 (GET and HEAD, symlinks followed, no listings), every request
//! logged (method, path, status, bytes) to a file and kept for the tests.

use std::convert::Infallible;
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::TryStreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::io::ReaderStream;

use super::error::{LabError, io_err};

type Body = BoxBody<Bytes, std::io::Error>;

/// One request the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub status: u16,
    /// Body bytes announced (`Content-Length`) for a 200, else 0.
    pub bytes: u64,
    pub from: SocketAddr,
}

struct HttpState {
    log: Vec<HttpRequest>,
    log_file: Option<File>,
}

/// The handle tests use to read the artifact server's requests (cheap to clone).
#[derive(Clone)]
pub struct HttpControl {
    root: Arc<PathBuf>,
    state: Arc<Mutex<HttpState>>,
}

impl HttpControl {
    /// A server for the files under `root`, logging to `log_file` when given.
    pub fn new(root: PathBuf, log_file: Option<File>) -> HttpControl {
        HttpControl {
            root: Arc::new(root),
            state: Arc::new(Mutex::new(HttpState {
                log: Vec::new(),
                log_file,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HttpState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory served at `/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every request since the last reset, oldest first.
    pub fn requests(&self) -> Vec<HttpRequest> {
        self.lock().log.clone()
    }

    /// How many requests arrived since the last reset (offline tests expect 0).
    pub fn request_count(&self) -> usize {
        self.lock().log.len()
    }

    /// Forgets the requests seen so far (the log file keeps everything).
    pub fn reset(&self) {
        self.lock().log.clear();
    }

    /// Serves `file` (or a directory tree) at `url_path` (e.g. `/coredns/coredns.tgz`)
    /// through a symlink under the root; replaces what was published there before.
    pub fn publish(&self, url_path: &str, file: &Path) -> Result<(), LabError> {
        let relative = relative_path(url_path).ok_or_else(|| LabError::BadPublishPath {
            path: url_path.to_string(),
            reason: "must be an absolute URL path without `..`, e.g. /coredns/coredns.tgz".into(),
        })?;
        let target = std::path::absolute(file).map_err(io_err("resolving", file))?;
        if !target.exists() {
            return Err(io_err("publishing", &target)(std::io::ErrorKind::NotFound.into()));
        }
        let link = self.root.join(relative);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).map_err(io_err("linking", &link))
    }

    fn record(&self, request: HttpRequest) {
        let mut state = self.lock();
        if let Some(file) = &mut state.log_file {
            let _ = writeln!(
                file,
                "{} {} {} {} from {}",
                request.method, request.path, request.status, request.bytes, request.from
            );
        }
        state.log.push(request);
    }
}

/// `/a/b.tgz` -> `a/b.tgz`; `None` for relative paths and any `..`.
fn relative_path(url_path: &str) -> Option<PathBuf> {
    let rest = url_path.strip_prefix('/')?;
    let path = PathBuf::from(rest);
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then_some(path)
        .filter(|p| !p.as_os_str().is_empty())
}

/// Accepts connections and serves them until the task is dropped.
pub async fn serve(listener: TcpListener, http: HttpControl) {
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(got) => got,
            Err(err) => {
                tracing::warn!(%err, "HTTP accept failed");
                continue;
            }
        };
        let http = http.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(req, http.clone(), from));
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%err, %from, "HTTP connection ended with an error");
            }
        });
    }
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    response
}

async fn handle(
    req: Request<Incoming>,
    http: HttpControl,
    from: SocketAddr,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let (response, bytes) = respond(&method, &path, http.root()).await;
    http.record(HttpRequest {
        method: method.to_string(),
        path,
        status: response.status().as_u16(),
        bytes,
        from,
    });
    Ok(response)
}

async fn respond(method: &Method, path: &str, root: &Path) -> (Response<Body>, u64) {
    if method != Method::GET && method != Method::HEAD {
        let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert("allow", "GET, HEAD".parse().expect("static header"));
        return (response, 0);
    }
    let Some(file_path) = relative_path(path).map(|p| root.join(p)) else {
        return (empty(StatusCode::NOT_FOUND), 0);
    };
    let file = match tokio::fs::File::open(&file_path).await {
        Ok(file) => file,
        Err(_) => return (empty(StatusCode::NOT_FOUND), 0),
    };
    let len = match file.metadata().await {
        Ok(meta) if meta.is_file() => meta.len(),
        _ => return (empty(StatusCode::NOT_FOUND), 0),
    };
    let body = if method == Method::HEAD {
        Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
    } else {
        StreamBody::new(ReaderStream::new(file).map_ok(Frame::data)).boxed()
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert("content-length", len.into());
    headers.insert(
        "content-type",
        "application/octet-stream".parse().expect("static header"),
    );
    (response, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_paths_map_under_the_root_and_never_above_it() {
        assert_eq!(relative_path("/a/b.tgz"), Some(PathBuf::from("a/b.tgz")));
        assert_eq!(relative_path("/a/../../etc/passwd"), None);
        assert_eq!(relative_path("a"), None);
        assert_eq!(relative_path("/"), None);
    }

    #[test]
    fn publish_rejects_paths_escaping_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let http = HttpControl::new(dir.path().to_path_buf(), None);
        let err = http.publish("/../x", dir.path()).unwrap_err();
        assert!(err.to_string().contains("\"/../x\""), "{err}");
    }
}
