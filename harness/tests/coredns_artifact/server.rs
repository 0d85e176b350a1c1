//! A real HTTP/1.1 server on 127.0.0.1 for the artifact tests: serves files,
//! answers with error statuses, cuts bodies short, and counts requests per path.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// What the server answers for one path.
pub enum Reply {
    /// 200 with the file's contents.
    File(PathBuf),
    /// 200 with these bytes.
    Bytes(Vec<u8>),
    /// This status with a short body.
    Status(u16),
    /// 200 announcing the whole file's length, then only `send` bytes, then close.
    Truncated(PathBuf, u64),
}

type Routes = dyn Fn(&str) -> Reply + Send + Sync;

pub struct Server {
    addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, usize>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts serving `routes` (path without query → reply) on a free loopback port.
    pub fn start(routes: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let routes: Arc<Routes> = Arc::new(routes);
        let thread = {
            let (counts, stop) = (Arc::clone(&counts), Arc::clone(&stop));
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (routes, counts) = (Arc::clone(&routes), Arc::clone(&counts));
                    std::thread::spawn(move || {
                        let _ = serve(stream, &*routes, &counts);
                    });
                }
            })
        };
        Server {
            addr,
            counts,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many requests reached `path`.
    pub fn count(&self, path: &str) -> usize {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// Requests to any path.
    pub fn total(&self) -> usize {
        self.counts.lock().unwrap().values().sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(stream: TcpStream, routes: &Routes, counts: &Mutex<HashMap<String, usize>>) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/").to_string();
    *counts.lock().unwrap().entry(path.clone()).or_default() += 1;
    let mut out = stream;
    let head = |status: u16, len: u64| {
        format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: {len}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
            reason(status)
        )
    };
    let send_body = method != "HEAD";
    match routes(&path) {
        Reply::File(file) => match File::open(&file) {
            Ok(mut f) => {
                let len = f.metadata()?.len();
                out.write_all(head(200, len).as_bytes())?;
                if send_body {
                    io::copy(&mut f, &mut out)?;
                }
            }
            Err(_) => out.write_all(head(404, 0).as_bytes())?,
        },
        Reply::Bytes(bytes) => {
            out.write_all(head(200, bytes.len() as u64).as_bytes())?;
            if send_body {
                out.write_all(&bytes)?;
            }
        }
        Reply::Status(status) => {
            let body = format!("{status} {}\n", reason(status));
            out.write_all(head(status, body.len() as u64).as_bytes())?;
            out.write_all(body.as_bytes())?;
        }
        Reply::Truncated(file, send) => {
            let mut f = File::open(&file)?;
            let len = f.metadata()?.len();
            out.write_all(head(200, len).as_bytes())?;
            io::copy(&mut (&mut f).take(send), &mut out)?;
        }
    }
    out.flush()?;
    out.shutdown(Shutdown::Both)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
