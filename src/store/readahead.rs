//! Reading a stream ahead on its own thread.
//!
//! A cache audit's time is spent decompressing (xz, zstd, bzip2) and, after
//! that, hashing the NAR and writing its objects out: two halves of about
//! the same cost, one after the other on one core. [`read_ahead`] moves the
//! first half (the transfer and the decompression) to a thread of its own,
//! handing blocks over a bounded channel, so the two overlap: memory grows by
//! at most [`DEPTH`] + 2 blocks of [`BLOCK`] bytes whatever the stream.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fs::interrupt;

/// Bytes per block handed over.
pub const BLOCK: usize = 256 * 1024;
/// Blocks waiting in the channel at most.
pub const DEPTH: usize = 4;

/// A reader whose bytes are read from the inner one by a thread ahead of
/// the caller. An error of the inner reader is returned once it is reached
/// (and on every read after it); dropping the reader stops the thread at its
/// next block.
pub struct ReadAhead {
    rx: Receiver<io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
    failed: Option<(io::ErrorKind, String)>,
    stall: Option<Stall>,
}

/// The stall watch: when the thread last got a byte, and how long it may
/// go without one.
struct Stall {
    limit: Duration,
    start: Instant,
    /// Milliseconds after `start` of the last byte the thread read.
    last: Arc<AtomicU64>,
}

/// Starts reading `inner` on a new thread; when no thread can be had, the
/// stream is read in the caller's thread as before.
pub fn read_ahead(inner: Box<dyn Read + Send>) -> Box<dyn Read + Send> {
    read_ahead_watched(inner, None)
}

/// [`read_ahead`], failing with `TimedOut` once `stall` passes without a
/// byte from `inner` (however slowly bytes come, the stream goes on while
/// they do; a total time limit would fail a large download on a slow link).
/// A thread stuck in a read that never returns is left behind, blocked; it
/// ends with the process.
pub fn read_ahead_watched(
    inner: Box<dyn Read + Send>,
    stall: Option<Duration>,
) -> Box<dyn Read + Send> {
    let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(DEPTH);
    let inner = Arc::new(std::sync::Mutex::new(Some(inner)));
    let for_thread = inner.clone();
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let seen = last.clone();
    let spawned = std::thread::Builder::new().name("read-ahead".into()).spawn(move || {
        let Some(mut inner) = for_thread.lock().ok().and_then(|mut i| i.take()) else { return };
        loop {
            let mut block = vec![0u8; BLOCK];
            let mut len = 0;
            let end = loop {
                match inner.read(&mut block[len..]) {
                    Ok(0) => break true,
                    Ok(n) => {
                        seen.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
                        len += n;
                        if len == BLOCK {
                            break false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        if len > 0 {
                            block.truncate(len);
                            let _ = tx.send(Ok(block));
                        }
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            };
            block.truncate(len);
            if (len > 0 && tx.send(Ok(block)).is_err()) || end {
                return;
            }
        }
    });
    match spawned {
        Ok(_) => Box::new(ReadAhead {
            rx,
            block: Vec::new(),
            pos: 0,
            failed: None,
            stall: stall.map(|limit| Stall { limit, start, last }),
        }),
        Err(_) => match inner.lock().ok().and_then(|mut i| i.take()) {
            Some(inner) => inner,
            None => Box::new(io::empty()),
        },
    }
}

impl ReadAhead {
    /// The next block, or `Timeout` once the thread has read nothing for
    /// the stall limit (a full channel is no stall: the thread waits on us).
    /// Ctrl-C while a coverage run catches it ([`interrupt::requested`])
    /// ends the stream with an error at the next block or tick: a transfer
    /// of minutes is not waited for (its thread, if blocked in a read, is
    /// left behind as a stalled one is).
    fn recv_watched(&self, stall: &Stall) -> Result<io::Result<Vec<u8>>, RecvTimeoutError> {
        let tick = stall.limit.min(Duration::from_millis(250));
        loop {
            if interrupt::requested() {
                return Ok(Err(io::Error::other("interrupted (Ctrl-C)")));
            }
            match self.rx.recv_timeout(tick) {
                Err(RecvTimeoutError::Timeout) => {
                    let last = Duration::from_millis(stall.last.load(Ordering::Relaxed));
                    if stall.start.elapsed().saturating_sub(last) >= stall.limit {
                        return Err(RecvTimeoutError::Timeout);
                    }
                }
                other => return other,
            }
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.pos == self.block.len() {
            if let Some((kind, text)) = &self.failed {
                return Err(io::Error::new(*kind, text.clone()));
            }
            let received = match &self.stall {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(stall) => self.recv_watched(stall),
            };
            match received {
                Ok(Ok(block)) => {
                    self.block = block;
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.failed = Some((e.kind(), e.to_string()));
                    return Err(e);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let limit = self.stall.as_ref().map_or(0, |s| s.limit.as_secs());
                    let text = format!("no data for {limit} s (--stall-timeout)");
                    self.failed = Some((io::ErrorKind::TimedOut, text.clone()));
                    return Err(io::Error::new(io::ErrorKind::TimedOut, text));
                }
                // The thread is done: the stream ended.
                Err(RecvTimeoutError::Disconnected) => return Ok(0),
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields `data` in odd-sized pieces, then an error when asked.
    struct Pieces {
        data: Vec<u8>,
        at: usize,
        fail: bool,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                return if self.fail { Err(io::Error::other("cut")) } else { Ok(0) };
            }
            let n = buf.len().min(7919).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn bytes_and_errors_arrive_in_order() {
        let data: Vec<u8> = (0..3 * BLOCK + 12345).map(|i| (i * 31 % 251) as u8).collect();
        for (fail, size) in [(false, data.len()), (true, data.len()), (false, 0), (true, 10)] {
            let pieces = Pieces { data: data[..size].to_vec(), at: 0, fail };
            let mut got = Vec::new();
            let result = read_ahead(Box::new(pieces)).read_to_end(&mut got);
            assert_eq!(got, data[..size], "fail={fail} size={size}");
            assert_eq!(result.is_err(), fail, "fail={fail} size={size}");
        }
        // Dropped early: the thread stops, nothing hangs.
        let pieces = Pieces { data: data.clone(), at: 0, fail: false };
        let mut r = read_ahead(Box::new(pieces));
        let mut one = [0u8; 10];
        r.read_exact(&mut one).unwrap();
        assert_eq!(one, data[..10]);
    }

    /// One byte every `gap`, `count` times, then the end (or a hang).
    struct Dribble {
        gap: Duration,
        count: usize,
        hang: bool,
    }

    impl Read for Dribble {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.count == 0 {
                if self.hang {
                    std::thread::sleep(Duration::from_secs(3600));
                }
                return Ok(0);
            }
            std::thread::sleep(self.gap);
            self.count -= 1;
            buf[0] = b'x';
            Ok(1)
        }
    }

    #[test]
    fn a_slow_stream_goes_on_and_a_stalled_one_times_out() {
        let stall = Some(Duration::from_millis(300));
        // 12 bytes over 1.2 s, each within the stall limit: all read.
        let slow = Dribble { gap: Duration::from_millis(100), count: 12, hang: false };
        let mut got = Vec::new();
        read_ahead_watched(Box::new(slow), stall).read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 12);
        let stuck = Dribble { gap: Duration::from_millis(10), count: 3, hang: true };
        let t = Instant::now();
        let err = read_ahead_watched(Box::new(stuck), stall).read_to_end(&mut got).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert!(err.to_string().contains("--stall-timeout"), "{err}");
    }
}
