//! Which cache serves each path, asked as Nix asks: caches by their
//! `Priority`, then in the order given, the first whose narinfo names the
//! path and is signed by a trusted key serves it (Nix skips a narinfo no
//! trusted key signed and tries the next cache). Only narinfo files are
//! read, `jobs` at a time, over kept-alive HTTP/1.1 connections.
//!
//! Every bad answer stays with its path: a 404 is remembered for the run
//! (a closure asks for the same references again and again), a 5xx or a
//! timeout is retried with a growing pause, garbage or another path's
//! narinfo is `bad-narinfo`, and a cache that fails several paths in a row
//! after their retries is taken as gone and answers `error` from then on
//! without being waited on. Ctrl-C stops taking new paths; the paths not
//! asked yet are `not-done`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::input::Item;
use super::model::{Answer, CacheAnswer, CacheInfo, Closure, PathResult, Status};
use crate::fs::interrupt::Interrupt;
use crate::store::budget::Limits;
use crate::store::cache::{Cache, CacheError};
use crate::store::narinfo::{NarInfo, PublicKey};

/// Failed paths in a row (after their retries) that make a cache gone.
const GONE_AFTER: usize = 4;
/// The first pause before a retry; each next one doubles.
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// One cache being asked.
pub struct Asked {
    cache: Cache,
    /// As reports show it.
    pub info: CacheInfo,
    /// The time `nix-cache-info` took to come (zero for `file://`).
    pub latency: Duration,
    failed_in_a_row: AtomicUsize,
    gone: Mutex<Option<String>>,
}

/// Connects to each of `urls` and reads its `nix-cache-info` (retried like
/// a narinfo), then orders them as Nix does. A bad URL is an error; a cache
/// that does not answer is kept, gone from the start.
pub fn open(
    urls: &[String],
    limits: Limits,
    pool: usize,
    retries: u32,
) -> Result<Vec<Asked>, CacheError> {
    let mut caches = Vec::new();
    for url in urls {
        let mut cache = Cache::connect(url, Vec::new(), limits, pool)?;
        let start = Instant::now();
        let mut read = cache.read_info(url);
        for attempt in 0..retries {
            if !matches!(read, Err(CacheError::Fetch { .. })) {
                break;
            }
            std::thread::sleep(FIRST_PAUSE * 2u32.pow(attempt));
            read = cache.read_info(url);
        }
        let latency = if url.starts_with("file://") { Duration::ZERO } else { start.elapsed() };
        let gone = read.err().map(|e| e.to_string());
        let info = CacheInfo {
            url: url.clone(),
            priority: cache.priority(),
            store_dir: cache.store_dir().to_string(),
            unreachable: gone.clone(),
        };
        caches.push(Asked {
            cache,
            info,
            latency,
            failed_in_a_row: AtomicUsize::new(0),
            gone: Mutex::new(gone),
        });
    }
    // Stable: equal priorities keep the command line's order.
    caches.sort_by_key(|c| c.info.priority);
    Ok(caches)
}

/// Transfers at a time when `--jobs` is not given: narinfo lookups wait on
/// the network, not the CPU, so more than the cores, and more the slower
/// the caches answer (a connection is busy one round trip per lookup).
pub fn default_jobs(caches: &[Asked]) -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let latency = caches.iter().map(|c| c.latency).max().unwrap_or_default();
    if latency.is_zero() {
        return cores.max(1);
    }
    (4 * cores + latency.as_millis() as usize / 2).clamp(4, 64)
}

/// A cache's answer for one path, remembered for the run.
#[derive(Clone)]
enum Looked {
    Served { info: Arc<NarInfo>, signer: Option<String> },
    Not { answer: Answer, reason: String },
}

/// What the presence pass needs besides the caches.
pub struct Options<'a> {
    /// Trusted keys (none: signatures unchecked).
    pub keys: &'a [PublicKey],
    /// Follow References.
    pub closure: bool,
    /// Transfers at a time.
    pub jobs: usize,
    /// Retries of a failed transfer.
    pub retries: u32,
}

/// The presence pass over `items` (`indices`: each item's place in the
/// whole input); `progress` gets done and total after each path. Once
/// `interrupt` says Ctrl-C came, no path is taken.
pub fn ask_all(
    caches: &[Asked],
    items: &[(usize, Item)],
    options: &Options,
    interrupt: &Interrupt,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<PathResult> {
    let asker = Asker { caches, options, memo: Mutex::new(HashMap::new()) };
    let slots: Vec<Mutex<Option<PathResult>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..options.jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                if interrupt.requested() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some((index, item)) = items.get(i) else { break };
                let result = asker.answer(*index, item);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                progress(done.fetch_add(1, Ordering::SeqCst) + 1, items.len());
            });
        }
    });
    slots
        .into_iter()
        .zip(items)
        .map(|(slot, (index, item))| {
            let taken = slot.into_inner().unwrap_or_else(|e| e.into_inner());
            taken.unwrap_or_else(|| unanswered(*index, item, Status::NotDone))
        })
        .collect()
}

/// A path with no answer (yet).
fn unanswered(index: usize, item: &Item, status: Status) -> PathResult {
    PathResult {
        index,
        path: item.path.clone(),
        attr: item.attr.clone(),
        output: item.output.clone(),
        status,
        served_by: None,
        signed_by: None,
        signature: None,
        nar_size: None,
        file_size: None,
        compression: None,
        caches: Vec::new(),
        closure: None,
        gpu: None,
        not_examined: None,
    }
}

struct Asker<'a> {
    caches: &'a [Asked],
    options: &'a Options<'a>,
    memo: Mutex<HashMap<(usize, String), Looked>>,
}

impl Asker<'_> {
    /// One path: every cache asked (the report shows each one's answer);
    /// the first in order that serves it is the one Nix would use. Then
    /// its closure.
    fn answer(&self, index: usize, item: &Item) -> PathResult {
        let mut result = unanswered(index, item, Status::NotServed);
        let mut served = None;
        for (i, c) in self.caches.iter().enumerate() {
            let url = c.info.url.clone();
            match self.look(i, &item.path) {
                Looked::Served { info, signer } => {
                    let answer =
                        CacheAnswer { cache: url.clone(), answer: Answer::Served, reason: None };
                    result.caches.push(answer);
                    if served.is_some() {
                        continue;
                    }
                    result.signature =
                        Some(if signer.is_some() { "trusted" } else { "unchecked" }.to_string());
                    result.signed_by = signer;
                    result.served_by = Some(url);
                    result.nar_size = Some(info.nar_size);
                    result.file_size = info.file_size;
                    result.compression = Some(info.compression.name().to_string());
                    served = Some((i, info));
                }
                Looked::Not { answer, reason } => {
                    result.caches.push(CacheAnswer { cache: url, answer, reason: Some(reason) })
                }
            }
        }
        let Some((i, info)) = served else { return result };
        result.status = Status::Served;
        if self.options.closure {
            let closure = self.closure(&self.caches[i].info.store_dir, &info);
            if !closure.missing.is_empty() {
                result.status = Status::Partial;
            }
            result.closure = Some(closure);
        }
        result
    }

    /// The closure of a served path: each reference asked of every cache
    /// in order (remembered), its own references followed when served.
    fn closure(&self, store_dir: &str, root: &NarInfo) -> Closure {
        let mut seen: BTreeSet<String> = BTreeSet::from([root.store_path.clone()]);
        let mut todo: Vec<String> = Vec::new();
        let mut closure = Closure { paths: 1, nar_size: root.nar_size, missing: Vec::new() };
        let push = |info: &NarInfo, seen: &mut BTreeSet<String>, todo: &mut Vec<String>| {
            for r in &info.references {
                let path = format!("{store_dir}/{r}");
                if seen.insert(path.clone()) {
                    todo.push(path);
                }
            }
        };
        push(root, &mut seen, &mut todo);
        while let Some(path) = todo.pop() {
            let served = (0..self.caches.len()).find_map(|i| match self.look(i, &path) {
                Looked::Served { info, .. } => Some(info),
                Looked::Not { .. } => None,
            });
            match served {
                Some(info) => {
                    closure.paths += 1;
                    closure.nar_size += info.nar_size;
                    push(&info, &mut seen, &mut todo);
                }
                None => closure.missing.push(path),
            }
        }
        closure.missing.sort();
        closure
    }

    /// Cache `i`'s answer for `path`, asked once per run.
    fn look(&self, i: usize, path: &str) -> Looked {
        let key = (i, path.to_string());
        if let Some(known) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return known.clone();
        }
        let looked = self.ask(&self.caches[i], path);
        self.memo.lock().unwrap_or_else(|e| e.into_inner()).insert(key, looked.clone());
        looked
    }

    /// Asks one cache, retrying failed transfers.
    fn ask(&self, c: &Asked, path: &str) -> Looked {
        let gone = |reason: &str| Looked::Not {
            answer: Answer::Error,
            reason: format!("the cache stopped answering: {reason}"),
        };
        if let Some(reason) = c.gone.lock().unwrap_or_else(|e| e.into_inner()).as_deref() {
            return gone(reason);
        }
        let mut attempt = 0;
        loop {
            let result = c.cache.narinfo(path);
            if matches!(result, Err(CacheError::Fetch { .. })) && attempt < self.options.retries {
                std::thread::sleep(FIRST_PAUSE * 2u32.pow(attempt));
                attempt += 1;
                if let Some(reason) = c.gone.lock().unwrap_or_else(|e| e.into_inner()).as_deref() {
                    return gone(reason);
                }
                continue;
            }
            return self.judge(c, path, result);
        }
    }

    /// A narinfo's verdict: served (signature checked with keys given), or
    /// why not; a failed transfer counts towards the cache being gone.
    fn judge(&self, c: &Asked, path: &str, result: Result<NarInfo, CacheError>) -> Looked {
        let not = |answer, reason: String| Looked::Not { answer, reason };
        if !matches!(result, Err(CacheError::Fetch { .. })) {
            c.failed_in_a_row.store(0, Ordering::SeqCst);
        }
        match result {
            Ok(info) if self.options.keys.is_empty() => {
                Looked::Served { info: Arc::new(info), signer: None }
            }
            Ok(info) => match info.verify(&c.info.store_dir, self.options.keys) {
                Ok(name) => Looked::Served { info: Arc::new(info), signer: Some(name.to_string()) },
                Err(e) => not(Answer::Untrusted, e.to_string()),
            },
            Err(CacheError::NotFound { .. }) => not(Answer::NotFound, "no narinfo".to_string()),
            Err(CacheError::NotStorePath { reason, .. }) => not(Answer::NotFound, reason),
            Err(CacheError::NarInfo { source, .. }) => not(Answer::BadNarinfo, source.to_string()),
            Err(e @ CacheError::Fetch { .. }) => {
                let reason = e.to_string();
                let reason =
                    reason.strip_prefix(&format!("{path}: ")).unwrap_or(&reason).to_string();
                if c.failed_in_a_row.fetch_add(1, Ordering::SeqCst) + 1 >= GONE_AFTER {
                    let mut gone = c.gone.lock().unwrap_or_else(|e| e.into_inner());
                    gone.get_or_insert_with(|| reason.clone());
                }
                not(Answer::Error, reason)
            }
            Err(e) => not(Answer::Error, e.to_string()),
        }
    }
}

/// Why each cache that stopped answering did, for the report's caches.
pub fn gone_reasons(caches: &[Asked]) -> Vec<Option<String>> {
    caches.iter().map(|c| c.gone.lock().unwrap_or_else(|e| e.into_inner()).clone()).collect()
}
