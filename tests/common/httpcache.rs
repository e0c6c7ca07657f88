//! A binary cache served over HTTP/1.1 on 127.0.0.1 for the coverage tests
//! and benchmarks: the files of a `nix copy --to file://` folder, with
//! connections kept alive, an added latency per request, and faults chosen
//! per file (5xx a number of times, a truncated body, a disconnect, a
//! stalled body, a slow body, garbage) and for the whole server (it vanishes after a
//! number of requests). It counts requests and connections.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do instead of serving a file.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer this status the first `times` requests, then serve.
    Status(u16, usize),
    /// Promise the whole length, send half, close.
    Truncate,
    /// Close the connection without an answer.
    Disconnect,
    /// Send the head, then nothing for this long.
    Stall(Duration),
    /// Serve these bytes instead.
    Body(Vec<u8>),
    /// Send the head at once and the body after this long (a slow
    /// download that has started).
    SlowBody(Duration),
}

#[derive(Default)]
struct State {
    faults: Mutex<HashMap<String, Fault>>,
    asked: Mutex<HashMap<String, usize>>,
    requests: AtomicUsize,
    connections: AtomicUsize,
    vanish_after: AtomicUsize,
    gone: AtomicBool,
}

/// A running server; it ends with the test process.
#[derive(Clone)]
pub struct HttpCache {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
}

impl HttpCache {
    /// Serves `dir` with `latency` added before each answer.
    pub fn start(dir: PathBuf, latency: Duration) -> HttpCache {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let state =
            Arc::new(State { vanish_after: AtomicUsize::new(usize::MAX), ..State::default() });
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if shared.gone.load(Ordering::SeqCst) {
                    drop(stream);
                    continue;
                }
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let (state, dir) = (shared.clone(), dir.clone());
                std::thread::spawn(move || connection(stream, &state, &dir, latency));
            }
        });
        HttpCache { url, state }
    }

    /// Sets the fault of the file `rel` (`<hash>.narinfo`, `nix-cache-info`).
    pub fn fault(&self, rel: &str, fault: Fault) {
        self.state.faults.lock().unwrap().insert(rel.to_string(), fault);
    }

    /// After `n` more requests every connection is closed unanswered.
    pub fn vanish_after(&self, n: usize) {
        let now = self.state.requests.load(Ordering::SeqCst);
        self.state.vanish_after.store(now + n, Ordering::SeqCst);
    }

    /// Requests answered (or refused) so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests for the file `rel` so far.
    pub fn asked(&self, rel: &str) -> usize {
        self.state.asked.lock().unwrap().get(rel).copied().unwrap_or(0)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
}

fn connection(stream: TcpStream, state: &State, dir: &std::path::Path, latency: Duration) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut close = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                break;
            }
            close |= header.to_ascii_lowercase().starts_with("connection: close");
        }
        let n = state.requests.fetch_add(1, Ordering::SeqCst);
        if n >= state.vanish_after.load(Ordering::SeqCst) {
            state.gone.store(true, Ordering::SeqCst);
            return;
        }
        let rel = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
        std::thread::sleep(latency);
        let head_only = line.starts_with("HEAD ");
        let seen = {
            let mut asked = state.asked.lock().unwrap();
            let count = asked.entry(rel.clone()).or_insert(0);
            *count += 1;
            *count
        };
        let fault = state.faults.lock().unwrap().get(&rel).cloned();
        let body = std::fs::read(dir.join(&rel)).ok();
        let ok = match (fault, body) {
            (Some(Fault::Status(code, times)), _) if seen <= times => {
                respond(&mut out, code, b"server trouble\n", head_only)
            }
            (Some(Fault::Truncate), Some(body)) => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(&body[..body.len() / 2]);
                false
            }
            (Some(Fault::Disconnect), _) => false,
            (Some(Fault::Stall(d)), Some(body)) => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                let _ = out.write_all(head.as_bytes());
                std::thread::sleep(d);
                false
            }
            (Some(Fault::Body(bytes)), _) => respond(&mut out, 200, &bytes, head_only),
            (Some(Fault::SlowBody(d)), Some(body)) => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                let sent = out.write_all(head.as_bytes()).and_then(|_| out.flush()).is_ok();
                std::thread::sleep(d);
                sent && (head_only || out.write_all(&body).is_ok())
            }
            (_, Some(body)) => respond(&mut out, 200, &body, head_only),
            (_, None) => respond(&mut out, 404, b"", head_only),
        };
        if !ok || close {
            return;
        }
    }
}

fn respond(out: &mut TcpStream, code: u16, body: &[u8], head_only: bool) -> bool {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        _ => "Error",
    };
    let head = format!("HTTP/1.1 {code} {reason}\r\nContent-Length: {}\r\n\r\n", body.len());
    out.write_all(head.as_bytes()).is_ok() && (head_only || out.write_all(body).is_ok())
}
